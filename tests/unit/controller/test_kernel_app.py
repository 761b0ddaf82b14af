"""controller/kernel_app.py as a shell around the routing plane: port events in, the events
file, the status file and the route jobs out, with the routers' I/O replaced (no root)."""

from __future__ import annotations

import json

from controller import kernel_app
from controller.kernel_app import KernelController
from topologies.model import build

FABRIC = build(planes=2, leaves=3, spines=2, hosts_per_leaf=1)


def _controller(tmp_path, monkeypatch):
    ctl = KernelController({"fabric": FABRIC.params.as_dict(), "status": str(tmp_path / "status"),
                            "events": str(tmp_path / "events"), "notify": str(tmp_path / "notify"),
                            "routers": str(tmp_path / "routers"), "detect_ms": 600})
    jobs: list[list[tuple[str, list[str]]]] = []
    monkeypatch.setattr(ctl, "_install", lambda batch: jobs.append(batch) or [])
    for sw in FABRIC.switches:  # what `run` records once every router's routes are in
        ctl.installed[sw.name] = {r.dst: r for r in kernel_app.kt.kernel_routes(FABRIC, sw)
                                  if r.baseline}
    return ctl, jobs


def _events(tmp_path):
    return [json.loads(line) for line in (tmp_path / "events").read_text().splitlines()]


def test_a_cut_is_logged_at_once_and_withdrawn_after_the_delay(tmp_path, monkeypatch):
    ctl, jobs = _controller(tmp_path, monkeypatch)
    before = kernel_app.time.monotonic()
    ifname = FABRIC.port_ifname("p0l0", 2)
    ctl._port_event("p0l0", ifname, usable=False)
    ctl._port_event("p0l0", ifname, usable=False)  # the same state again: nothing
    ctl._port_event("p0l1", ifname, usable=False)  # not that router's port: nothing
    (down,) = _events(tmp_path)
    assert (down["event"], down["switch"], down["port"], down["link"]) == \
        ("port_down", "p0l0", 2, "p0l0-p0s0")
    status = json.loads((tmp_path / "status").read_text())
    assert status["ports_down"] == [ifname] and status["withdrawn_links"] == []
    deadline = ctl.routing.next_deadline()
    assert deadline is not None and deadline >= before + 0.6
    assert ctl.routing.due(deadline - 0.1) == []
    for decision in ctl.routing.due(deadline):
        ctl._converge(decision)
    converged = _events(tmp_path)[-1]
    assert converged["event"] == "baseline_converged"
    assert converged["withdrawn"] == converged["changed"] == ["p0l0-p0s0"]
    assert converged["routers"] == len(jobs[-1]) and converged["routers"] > 0
    assert {name for name, _ in jobs[-1]} <= {sw.name for sw in FABRIC.switches if sw.plane == 0}
    assert json.loads((tmp_path / "status").read_text())["withdrawn_links"] == ["p0l0-p0s0"]


def test_a_switch_notification_and_bad_ones(tmp_path, monkeypatch):
    ctl, _ = _controller(tmp_path, monkeypatch)

    class Sock:
        def __init__(self, datagrams):
            self.datagrams = list(datagrams)

        def recv(self, _size):
            if not self.datagrams:
                raise BlockingIOError
            return self.datagrams.pop(0)

    ctl._notifications(Sock([b"junk", b'{"cmd": "switch_down", "switch": "p9s0"}',
                             b'{"cmd": "switch_down", "switch": "p1s0"}',
                             b'{"cmd": "switch_down", "switch": "p1s0"}']))
    assert [(e["event"], e["switch"]) for e in _events(tmp_path)] == [("switch_down", "p1s0")]
    assert ctl.routing.generation == 1 and ctl.routing.next_deadline() is not None
