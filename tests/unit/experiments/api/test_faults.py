"""What the fault injector does to a switch, with the emulation replaced by a recorder: the
switch's forwarding set, the timeline, what is faulted now and what the baseline's controller
is told."""

from __future__ import annotations

import pytest

from experiments.api.faults import FaultError, FaultInjector


class Recorder:
    """The two calls of Emulation a switch fault makes."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[tuple] = []
        self.refuse = refuse
        self.now = 100.0

    def set_switch(self, name: str, forwarding: bool) -> float:
        if self.refuse:
            raise RuntimeError(f"ovs-ofctl: {name} is not connected")
        self.now += 1
        self.calls.append(("set_switch", name, forwarding))
        return self.now

    def notify_controller(self, message: dict) -> None:
        self.calls.append(("notify", message))


def test_a_switch_fails_and_is_restored():
    em = Recorder()
    faults = FaultInjector(em)  # type: ignore[arg-type]
    assert faults.fail_switch("p0s1") == 101.0
    assert faults.active()["failed_switches"] == ["p0s1"]
    assert faults.restore_switch("p0s1") == 102.0
    assert faults.active()["failed_switches"] == []
    assert em.calls == [("set_switch", "p0s1", False), ("notify", {"cmd": "switch_down", "switch": "p0s1"}),
                        ("set_switch", "p0s1", True), ("notify", {"cmd": "switch_up", "switch": "p0s1"})]
    assert faults.timeline == [{"t": 101.0, "action": "fail_switch", "target": "p0s1"},
                               {"t": 102.0, "action": "restore_switch", "target": "p0s1"}]


@pytest.mark.parametrize("action", ["fail_switch", "restore_switch"])
def test_a_switch_the_backend_cannot_reach_is_a_fault_error_and_nothing_is_recorded(action):
    em = Recorder(refuse=True)
    faults = FaultInjector(em)  # type: ignore[arg-type]
    with pytest.raises(FaultError, match="p0s1 is not connected"):
        getattr(faults, action)("p0s1")
    assert faults.timeline == [] and em.calls == [] and faults.active()["failed_switches"] == []


def test_loss_one_way_drops_only_what_the_named_end_sends():
    from experiments.api.faults import loss_ends
    from topologies.model import FabricError

    assert loss_ends("p0l0", "p0l0-eth2", "p0s1", "p0s1-eth1", None) == ("p0l0-eth2", "p0s1-eth1")
    assert loss_ends("p0l0", "p0l0-eth2", "p0s1", "p0s1-eth1", "p0s1") == ("p0s1-eth1",)
    with pytest.raises(FabricError, match="p0l1 is not an end of link p0l0-p0s1"):
        loss_ends("p0l0", "p0l0-eth2", "p0s1", "p0s1-eth1", "p0l1")
