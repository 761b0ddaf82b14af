"""Live agents against what a local client or a dead NIC does to them (issue 11, items 7 and 8),
on one shared emulation: the control channel cannot crash or freeze an agent, and one
unroutable path does not stall its transfers."""

from __future__ import annotations

import json
import socket
import time

import pytest

from endpoints.host.control import AgentClient, ControlError
from endpoints.protocol.config import TransportConfig
from experiments.api import testbed
from experiments.api.flows import AgentFlow
from tests.integration.helpers import assert_nothing_left
from topologies import netns
from topologies.model import build

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0)


@pytest.fixture(scope="module")
def bed(emulation_ready, tmp_path_factory):
    with testbed.Testbed(FABRIC, tmp_path_factory.mktemp("hostile"), seed=5) as tb:
        tb.prepare(["mrc"])
        yield tb
    assert_nothing_left()


def _raw(path: str, data: bytes) -> dict | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(data)
        line = s.makefile("rb").readline()
    return json.loads(line) if line else None


def test_the_control_channel_cannot_crash_or_freeze_an_agent(bed):
    path = bed.agents["h3"].path
    hostile = [
        b"[" * 30_000 + b"]" * 30_000,  # nested beyond the recursion limit
        b'{"cmd": "open", "qpn": 9, "peer": "h0", "peer_qpn": 9, "role": "recv", "plane": Infinity}',
        b'{"cmd": "open", "qpn": 9, "peer": "h0", "peer_qpn": 9, "role": "recv", "plane": 1e400}',
        b'{"cmd": "open", "qpn": 9, "peer": "h0", "peer_qpn": 9, "role": "recv", "data_seed": NaN}',
        b'{"cmd": "open", "qpn": 9, "peer": "h0", "peer_qpn": 9, "role": "recv", "data_seed": 1e400}',
        b'{"cmd": "open", "qpn": 1e400, "peer": "h0", "peer_qpn": 9, "role": "send"}',
    ]
    for line in hostile:
        reply = _raw(path, line + b"\n")
        assert reply is not None and reply["ok"] is False, (line[:60], reply)
        assert bed.agents["h3"].call("ping")["host"] == "h3", f"agent died on {line[:60]!r}"
    # A stream or write above max_message (the sender would refuse it later, or never finish).
    bed.agents["h3"].call("open", qpn=77, peer="h0", peer_qpn=77, transport="mrc", role="send")
    for cmd, fields in (("stream", {"msg_bytes": 1 << 30, "seconds": 1}),
                        ("write", {"bytes": 1 << 30}),
                        ("stream", {"msg_bytes": 4096, "seconds": float("inf")})):
        with pytest.raises(ControlError, match="must be|strict JSON"):
            bed.agents["h3"].call(cmd, qpn=77, **fields)
    bed.agents["h3"].call("close", qpn=77)
    # A client that asks and never reads, and a flood of connections: the agent keeps
    # serving the runner, promptly.
    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.connect(path)
    hog.settimeout(3)
    flood = []
    try:
        try:
            for _ in range(3000):
                hog.sendall(b'{"cmd": "agent_stats"}\n')
        except OSError:
            pass  # dropped by the agent: fine
        for _ in range(500):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(path)
            except OSError:
                s.close()
                continue
            flood.append(s)
        t0 = time.monotonic()
        fresh = AgentClient(path, timeout=5).connect(wait=5)
        assert fresh.call("ping")["host"] == "h3"
        assert time.monotonic() - t0 < 3, "the agent was frozen by a client that does not read"
        fresh.close()
    finally:
        hog.close()
        for s in flood:
            s.close()
    assert bed.agent_procs["h3"].poll() is None


def _set_nic(bed, host: str, ifname: str, up: bool) -> None:
    from pyroute2 import IPRoute

    with netns.inside(bed.em.pid(host)), IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up" if up else "down")


def test_one_unroutable_path_does_not_stall_the_agent(bed):
    # Port status off for this QP: with it, the agent learns that its NIC went down and stops
    # using the plane before any send fails (tests/integration/test_port_status.py); without it
    # the sends fail, which is what this test is about.
    flow = bed.flow("mrc", "h0", "h2", config=TransportConfig(port_status=False))
    assert isinstance(flow, AgentFlow)
    flow.start(6.0)
    time.sleep(1.0)
    before = flow.completed()
    # h0's plane-1 NIC goes down, in h0 (a link cut leaves the host's NIC up): its routes go
    # with it, and every send on a plane-1 path now fails (no route).
    nic = FABRIC.host("h0").nics[1].ifname
    _set_nic(bed, "h0", nic, up=False)
    try:
        time.sleep(1.0)
        mid = flow.completed()
        stats = bed.agents["h0"].call("agent_stats")
        time.sleep(1.5)
        after = flow.completed()
        later = bed.agents["h0"].call("agent_stats")
    finally:
        _set_nic(bed, "h0", nic, up=True)  # its routes stay gone: the last use of this fabric
    result = flow.result()
    flow.stop()
    flow.close()
    # Plane 0 carries on: messages keep completing (half the paths, about half the rate).
    assert after - mid >= 3, f"the agent stalled: {before} -> {mid} -> {after} messages"
    assert later["backlog"] <= 64 and later["backlog"] <= stats["backlog"] + 64, \
        f"backlog grows without bound: {stats['backlog']} -> {later['backlog']}"
    errors = later["send_errors"]
    assert sum(errors.values()) > 0 and later["send_dropped"] > 0, errors
    assert result.data_ok
