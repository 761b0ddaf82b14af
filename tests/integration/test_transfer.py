"""MRC agents on the real fabric: a transfer through a T0-T1 link cut completes with the right
bytes, the EVs through the cut link go ASSUMED_BAD and come back after the restore; malformed
datagrams and bad control requests are counted or refused, never fatal."""

import json
import struct
import time

import pytest

from endpoints.host import netio
from endpoints.host.control import ControlError
from endpoints.protocol import wire
from experiments.api.testbed import start_agents
from tests.integration.helpers import assert_nothing_left
from topologies import netns
from topologies.emulation import Emulation
from topologies.model import build, ev_value

pytestmark = pytest.mark.usefixtures("emulation_ready")

CUT = "p0l0-p0s0"


def _trace(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_transfer_through_a_cut_is_exact_and_the_cut_paths_go_bad_and_come_back(tmp_path, switch_backend):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
    paths = fabric.routes("h0", "h1")
    # The EVs whose forward path crosses the cut link, named the way the agent names them.
    cut_evs = {ev_value(p.plane, i) for i, p in enumerate(paths) if CUT in p.links}
    assert len(cut_evs) == 1
    with Emulation(fabric, tmp_path, switch=switch_backend) as em:
        # Every EV active (no backups): the cut path is certainly in use when it fails.
        agents = start_agents(em, ["h0", "h1"], tmp_path, seed=3,
                              transport={"active_fraction": 1.0})
        agents["h1"].call("open", qpn=7, peer="h0", peer_qpn=7, transport="mrc", role="recv")
        opened = agents["h0"].call("open", qpn=7, peer="h1", peer_qpn=7, transport="mrc", role="send")
        assert opened["paths"] == len(paths) == 4
        # The hosts' path map holds the fabric's paths, made at that size (bpf.SizedMap).
        assert em.encap.max_entries() == em.encap.entries == sum(
            len(fabric.routes(a, b)) for a, b in fabric.host_pairs())
        t0 = time.monotonic()
        agents["h0"].call("stream", qpn=7, msg_bytes=256 * 1024, seconds=3.0)
        time.sleep(1.0)
        cut_at = em.set_link(CUT, up=False)
        time.sleep(1.0)
        restore_at = em.set_link(CUT, up=True)
        time.sleep(max(t0 + 3.6 - time.monotonic(), 0))
        unhashed = agents["h0"].call("stats", qpn=7, digests=False)
        sent = agents["h0"].call("stats", qpn=7)
        got = agents["h1"].call("stats", qpn=7)
        for client in agents.values():
            client.close()
    trace = _trace(tmp_path / "h0-trace.jsonl")
    assert_nothing_left()

    # Exact delivery: every message the receiver completed has the sender's SHA-256 (the
    # sender's made when asked, from the pattern: none when the caller asks for none).
    assert unhashed["digests"] == {} and unhashed["stats"]["sent"] > 0
    assert len(got["digests"]) >= 8
    assert all(sent["digests"][msn] == digest for msn, digest in got["digests"].items())
    assert got["stats"]["forged"] == 0 and got["stats"]["malformed"] == 0
    # Goodput kept flowing through the cut: no 10 ms bin gap longer than 300 ms.
    bins = sorted(int(b) for b in got["bins"])
    assert max(b - a for a, b in zip(bins, bins[1:], strict=False)) * 10 < 300
    # The cut EV went ASSUMED_BAD after the cut, within a few RTTs, and GOOD after the restore.
    changes = [e for e in trace if e["event"] == "ev_state" and e["ev"] in cut_evs]
    went_bad = [e["t"] for e in changes if e["new"] == "ASSUMED_BAD" and e["t"] >= cut_at]
    assert went_bad, f"cut EV never went bad: {changes}"
    assert went_bad[0] - cut_at < 0.25
    came_back = [e["t"] for e in changes
                 if e["new"] == "GOOD" and e["old"] == "ASSUMED_BAD" and e["t"] >= restore_at]
    assert came_back, f"cut EV never came back after the restore: {changes}"
    assert came_back[0] - restore_at < 0.5
    # While the link was down the cut EV stayed benched (its probes kept failing)...
    back_early = [e for e in changes if e["new"] == "GOOD" and went_bad[0] < e["t"] < restore_at]
    assert not back_early, f"cut EV resurrected while its link was down: {back_early}"
    # ...and a healthy EV, if one was ever taken for dead (a queue on the surviving spine of
    # plane 0 grows fast when it takes the cut path's share), was back within 300 ms.
    others = [e for e in trace if e["event"] == "ev_state" and e["ev"] not in cut_evs
              and cut_at <= e["t"] < restore_at]
    for ev in {e["ev"] for e in others if e["new"] == "ASSUMED_BAD"}:
        bad_t = min(e["t"] for e in others if e["ev"] == ev and e["new"] == "ASSUMED_BAD")
        good_t = [e["t"] for e in trace
                  if e["event"] == "ev_state" and e["ev"] == ev and e["new"] == "GOOD" and e["t"] > bad_t]
        assert good_t and good_t[0] - bad_t < 0.3, f"healthy EV {ev:#x} stayed benched"


def test_agent_counts_malformed_datagrams_and_refuses_bad_requests(tmp_path):
    fabric = build(planes=1, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
    with Emulation(fabric, tmp_path) as em:
        agents = start_agents(em, ["h0", "h1"], tmp_path, seed=1)
        agents["h1"].call("open", qpn=5, peer="h0", peer_qpn=5, transport="mrc", role="recv")
        path = fabric.routes("h0", "h1")[0]
        good = wire.encode_data(wire.OP_DATA_ONLY, 0, 5, 0, 0, 0, 4, b"abcd")
        bad = [
            b"",  # empty
            b"\x4d" * 3,  # too short for any header
            struct.pack("!BBHII", 0x04, 0, 0xFFFF, 5, 0) + bytes(32),  # IBTA RC SEND Only to QP 5
            good[:-1],  # truncated payload
            good[:1] + b"\x00" + good[2:4] + struct.pack("!I", 99) + good[8:],  # unknown QP 99
            wire.encode_data(wire.OP_DATA_ONLY, 0, 5, 0, 0, 8, 4, b"abcd"),  # overruns message
        ]
        with netns.inside(em.pid("h0")):
            raw = netio.RawSender()
        try:
            for payload in bad:  # as an agent sends them: marked with the EV, encapsulated
                raw.send_marked(netio.build_packet(path.src_addr.packed, path.dst_addr.packed,
                                                   path.ev, payload), str(path.dst_addr), path.ev)
            time.sleep(0.3)
        finally:
            raw.close()
        counters = agents["h1"].call("agent_stats")["counters"]
        qp = agents["h1"].call("stats", qpn=5)
        assert counters.get("malformed", 0) == 3 and counters.get("unknown_qp", 0) == 1
        assert qp["stats"]["malformed"] == 2 and qp["stats"]["messages"] == 0
        assert agents["h1"].call("ping")["host"] == "h1"  # still alive and answering
        for request, words in [
            ({"cmd": "open", "qpn": 0, "peer": "h0", "peer_qpn": 1}, "qpn must be"),
            ({"cmd": "open", "qpn": 6, "peer": "h9", "peer_qpn": 1, "role": "send"}, "no host named"),
            ({"cmd": "open", "qpn": 5, "peer": "h0", "peer_qpn": 1, "role": "send"}, "already open"),
            ({"cmd": "stream", "qpn": 5, "msg_bytes": 10, "seconds": 1}, "is a recv QP"),
            ({"cmd": "write", "qpn": 42, "bytes": 10}, "no QP 42"),
            ({"cmd": "stats", "qpn": 5, "digests": "no"}, "digests must be true or false"),
            ({"cmd": "frobnicate"}, "unknown command"),
        ]:
            cmd = request.pop("cmd")
            with pytest.raises(ControlError, match=words):
                agents["h1"].call(cmd, **request)
        # restrict (ecn-balance's force): a sending QP onto the paths over (plane, spine)
        agents["h0"].call("open", qpn=5, peer="h1", peer_qpn=5, transport="mrc", role="send")
        for host, keep, words in [("h1", "p0/s0", "is a recv QP"), ("h0", 5, "keep must be"),
                                  ("h0", ",", "keep must be"), ("h0", "p1/s0", "has no path p1/s0"),
                                  ("h0", "p0/s0,p0/s9", "has no path p0/s9; its paths: p0/s0, p0/s1")]:
            with pytest.raises(ControlError, match=words):
                agents[host].call("restrict", qpn=5, keep=keep)
        by_spine = {r.spine: r.ev for r in fabric.routes("h0", "h1")}
        got = agents["h0"].call("restrict", qpn=5, keep="p0/s1")
        assert (got["kept"], got["denied"]) == ([by_spine[1]], [by_spine[0]])
        states = {r["ev"]: r["state"] for r in agents["h0"].call("evs", qpn=5)["rows"]}
        assert states == {by_spine[0]: "DENIED", by_spine[1]: "GOOD"}
        for client in agents.values():
            client.close()
    assert_nothing_left()
