"""controller/routing.py: the baseline routing plane both control planes run, driven with
made-up times (no clock, no sleep)."""

from __future__ import annotations

import json

import pytest

from controller.routing import Convergence, RoutingPlane, Timer, parse_notification
from topologies.model import build

FABRIC = build(planes=2, leaves=3, spines=2, hosts_per_leaf=1)
DETECT = 0.9
UPLINK = 2  # p0l0's port 2 is its uplink to p0s0 (1 host per leaf)
LINK = "p0l0-p0s0"


def _plane() -> RoutingPlane:
    return RoutingPlane(FABRIC, DETECT)


def _event(plane: RoutingPlane, now: float, switch: str = "p0l0", port: int = UPLINK,
           down: bool = True) -> Timer:
    change = plane.port(switch, port, down)
    assert change is not None
    return plane.schedule(change, now)


def test_a_link_down_is_withdrawn_only_after_the_delay():
    plane = _plane()
    change = plane.port("p0l0", UPLINK, down=True)
    assert change is not None
    assert (change.event, change.switch, change.port, change.link) == ("port_down", "p0l0", UPLINK, LINK)
    assert change.record() == {"switch": "p0l0", "port": UPLINK, "link": LINK}
    assert change.down and change.generation == 1
    timer = plane.schedule(change, 100.0)
    assert timer == Timer(100.0 + DETECT, 1) and plane.next_deadline() == timer.at
    assert plane.due(100.0 + DETECT / 2) == [] and plane.withdrawn == frozenset()
    decisions = plane.due(timer.at)
    assert decisions == [Convergence(frozenset({LINK}), frozenset({LINK}), frozenset({0}))]
    assert decisions[0].record() == {"withdrawn": [LINK], "changed": [LINK]}
    assert plane.withdrawn == {LINK} and plane.next_deadline() is None


def test_restored_before_the_delay_nothing_is_withdrawn():
    plane = _plane()
    _event(plane, 100.0)
    _event(plane, 100.5, down=False)
    assert plane.due(100.0 + DETECT) == []  # superseded by the restore
    assert plane.due(100.5 + DETECT) == []  # the state is what it was: nothing to do
    assert plane.withdrawn == frozenset() and plane.generation == 2


def test_restore_puts_the_link_back_after_the_delay():
    plane = _plane()
    _event(plane, 0.0)
    plane.due(DETECT)
    timer = _event(plane, 5.0, down=False)
    assert plane.due(5.0 + DETECT / 2) == [] and plane.withdrawn == {LINK}
    assert plane.due(timer.at) == [Convergence(frozenset(), frozenset({LINK}), frozenset({0}))]
    assert plane.withdrawn == frozenset()


def test_both_ends_of_a_cut_are_one_link():
    plane = _plane()
    _event(plane, 0.0)
    _event(plane, 0.01, switch="p0s0", port=1)  # the spine's end, port 1 to leaf 0
    assert plane.due(DETECT) == []  # the leaf's timer is stale: the spine's came later
    assert plane.due(0.01 + DETECT) == [Convergence(frozenset({LINK}), frozenset({LINK}),
                                                    frozenset({0}))]


def test_a_repeated_report_is_no_change():
    plane = _plane()
    _event(plane, 0.0)
    assert plane.port("p0l0", UPLINK, down=True) is None
    assert plane.port("p0l1", UPLINK, down=False) is None  # up, and never reported down
    assert plane.generation == 1


def test_a_flapping_link_converges_once_on_the_state_at_the_end():
    plane = _plane()
    now = 0.0
    for i in range(10):  # down and up every 0.2 s: never still for the detection delay
        _event(plane, now, down=(i % 2 == 0))
        now += 0.2
        assert plane.due(now) == []
    assert plane.generation == 10 and plane.withdrawn == frozenset()
    _event(plane, now)  # it stays down this time
    assert plane.due(now + DETECT) == [Convergence(frozenset({LINK}), frozenset({LINK}),
                                                   frozenset({0}))]
    assert plane.next_deadline() is None


def test_a_switch_down_withdraws_every_link_of_it():
    plane = _plane()
    change = plane.switch("p1s1", down=True)
    assert change is not None and change.event == "switch_down" and change.port is None
    assert change.record() == {"switch": "p1s1"}
    assert plane.switch("p1s1", down=True) is None
    timer = plane.schedule(change, 3.0)
    (decision,) = plane.due(timer.at)
    assert decision.withdrawn == {"p1l0-p1s1", "p1l1-p1s1", "p1l2-p1s1"}
    assert decision.planes == {1}
    up = plane.switch("p1s1", down=False)
    assert up is not None and up.event == "switch_up"
    (back,) = plane.due(plane.schedule(up, 10.0).at)
    assert back.withdrawn == frozenset() and back.changed == decision.withdrawn


def test_a_switch_and_a_port_down_together():
    plane = _plane()
    switch = plane.switch("p1s0", down=True)
    assert switch is not None
    plane.schedule(switch, 0.0)
    _event(plane, 0.1)
    (decision,) = plane.due(10.0)  # both timers due: only the later generation acts
    assert decision.withdrawn == {LINK, "p1l0-p1s0", "p1l1-p1s0", "p1l2-p1s0"}
    assert decision.planes == {0, 1}
    assert plane.down_links() == decision.withdrawn


def test_the_generation_counts_every_change_and_only_changes():
    plane = _plane()
    changes = [plane.port("p0l0", UPLINK, True), plane.port("p0l0", UPLINK, True),
               plane.switch("p0s1", True), plane.port("p0l0", UPLINK, False),
               plane.switch("p0s1", True), plane.switch("p0s1", False)]
    assert [c.generation if c else None for c in changes] == [1, None, 2, 3, None, 4]
    assert plane.generation == 4


def test_converge_on_a_stale_generation_does_nothing():
    plane = _plane()
    plane.port("p0l0", UPLINK, True)
    plane.port("p0l1", UPLINK, True)
    assert plane.converge(1) is None and plane.withdrawn == frozenset()
    decision = plane.converge(2)
    assert decision is not None and decision.withdrawn == {LINK, "p0l1-p0s0"}
    assert plane.converge(2) is None  # already converged


def test_a_host_port_is_a_link_too():
    plane = _plane()
    _event(plane, 0.0, port=1)  # p0l0's port 1 goes to h0
    (decision,) = plane.due(DETECT)
    assert decision.withdrawn == {"h0-p0l0"}


def test_a_port_with_no_link_changes_state_but_withdraws_nothing():
    plane = _plane()
    change = plane.port("p0l0", 99, down=True)
    assert change is not None and change.link is None
    assert plane.due(plane.schedule(change, 0.0).at) == []


def test_timers_fire_in_order_of_their_time_and_the_latest_generation_acts():
    """Two threads may schedule out of generation order (os-ken's notify thread): the timer
    that comes due first acts if it carries the latest generation, the other is stale."""
    plane = _plane()
    first = plane.port("p0l0", UPLINK, True)
    second = plane.port("p0l1", UPLINK, True)
    assert first is not None and second is not None
    late = plane.schedule(first, 5.0)
    plane.schedule(second, 1.0)
    assert plane.next_deadline() == 1.0 + DETECT
    (decision,) = plane.due(1.0 + DETECT)
    assert decision.withdrawn == {LINK, "p0l1-p0s0"}
    assert plane.due(late.at) == [] and plane.next_deadline() is None


@pytest.mark.parametrize(("raw", "expected"), [
    (json.dumps({"cmd": "switch_down", "switch": "p0s1"}), ("p0s1", True)),
    (json.dumps({"cmd": "switch_up", "switch": "p1l2"}).encode(), ("p1l2", False)),
])
def test_notifications(raw, expected):
    assert parse_notification(raw, FABRIC) == expected


@pytest.mark.parametrize("raw", [
    b"not json", b"[1, 2]", b"3", json.dumps({"cmd": "switch_down"}),
    json.dumps({"switch": "p0s0"}), json.dumps({"cmd": "reboot", "switch": "p0s0"}),
    json.dumps({"cmd": "switch_down", "switch": "p9s9"}), b"\xff\xfe",
])
def test_bad_notifications_are_value_errors(raw):
    with pytest.raises(ValueError):
        parse_notification(raw, FABRIC)
