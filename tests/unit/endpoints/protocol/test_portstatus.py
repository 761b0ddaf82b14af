"""NIC-port status over the simulated network: a port down at either end takes its plane out of
use at once for every EV, and the plane returns with the port (endpoints/protocol/portstatus.py)."""

import random
from dataclasses import replace

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvBad, EvLoad, Ports, Retx
from endpoints.protocol.evset import GOOD, EvInfo, EvSet
from endpoints.protocol.nicpacer import NicPacer
from endpoints.protocol.portstatus import PortStatus, planes_of
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.analysis import metrics
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric

PLANES, SPINES, DEAD = 4, 3, 1  # the port of plane DEAD goes down
DOWN_AT, UP_AT = 0.5, 1.2  # s
LINK_MBPS = 10.0


def _run(side: str, port_status: bool = True, seed: int = 1):
    """A transfer over 4 planes x 3 spines; from DOWN_AT to UP_AT the `side` ("send" or
    "recv") host's port on plane DEAD is down: both directions of its NIC link dead, and that
    host's core told, as its agent would be by the kernel."""
    fab = sim_fabric(PLANES, SPINES)
    cfg = replace(TransportConfig(), port_status=port_status).for_fabric(LINK_MBPS, PLANES, ecn=False)
    sim = Simulation(seed)
    snd = MrcSender(1, 2, fab.evs, cfg, seed)
    rcv = MrcReceiver(2, 1, fab.evs, cfg, seed)
    nic = ("nic_s", "rnic_s") if side == "send" else ("nic_d", "rnic_d")
    for name in nic:
        fab.links[(name, DEAD)].down.append((DOWN_AT, UP_AT))
    host = snd if side == "send" else rcv
    sim.schedule(DOWN_AT, lambda: host.set_local_ports(1 << DEAD, sim.now))
    sim.schedule(UP_AT, lambda: host.set_local_ports(0, sim.now))
    msgs = [random.Random(seed).randbytes(256 * 1024)] * 40  # ~2.3 s at 4 x 10 Mbit/s
    res = run_transfer(sim, snd, rcv, fab.fwd, fab.rev, msgs, 10.0)
    assert [m for m, _ in res.completed] == list(range(len(msgs)))  # exact delivery throughout
    return fab, snd, rcv, res


def _plane_load(fab, events):
    """[(interval start, interval end, data packets sent on plane DEAD's EVs)] from EvLoad."""
    plane = {e.ev: e.plane for e in fab.evs}
    return [(e.t - e.interval, e.t, sum(n for ev, n in e.sent.items() if plane[int(ev)] == DEAD))
            for e in events if isinstance(e, EvLoad)]


def _stall_ms(res) -> float:
    mbps = metrics.series(res.bins, 0, round(res.end / metrics.BIN_S))
    return metrics.longest_stall_ms(mbps, round(DOWN_AT / metrics.BIN_S), round(UP_AT / metrics.BIN_S) + 50)


@pytest.mark.parametrize("side", ["send", "recv"])
def test_a_dead_port_takes_its_whole_plane_out_within_a_few_rtts_and_back_with_the_port(side):
    fab, snd, rcv, res = _run(side)
    rtt = snd.cc.srtt
    load = _plane_load(fab, res.sender_events)
    settled = DOWN_AT + 4 * rtt  # the news crosses in a SACK (receiver) or is local (sender)
    during = [n for t0, t1, n in load if t0 >= settled and t1 <= UP_AT]
    after = [n for t0, t1, n in load if t0 >= UP_AT + 4 * rtt]
    before = [n for t0, t1, n in load if t1 <= DOWN_AT and t0 > 0.1]
    assert during and after and before
    assert sum(during) == 0  # no EV of the plane used while its port is down
    assert min(after) > 0.5 * min(before)  # the plane carries its share again
    # No EV of the plane was benched for it: the plane was parked as one, not failed EV by EV.
    plane = {e.ev: e.plane for e in fab.evs}
    assert not [e for e in res.sender_events if isinstance(e, EvBad) and plane[e.ev] == DEAD]
    assert all(state == GOOD for ev, state in snd.ev_states().items() if plane[ev] == DEAD)
    parked = [e for e in res.sender_events if isinstance(e, Ports)]
    assert parked[0].parked == [DEAD] and DOWN_AT <= parked[0].t < settled
    assert parked[-1].parked == [] and UP_AT <= parked[-1].t < UP_AT + 4 * rtt


def test_the_receiver_learns_the_senders_dead_port_from_its_probe_replies():
    _, snd, rcv, res = _run("send")
    learnt = [e for e in res.receiver_events if isinstance(e, Ports)]
    cfg = rcv.c
    assert learnt[0].remote == 1 << DEAD and learnt[0].t < DOWN_AT + 2 * cfg.reverse_probe_interval
    assert learnt[-1].remote == 0 and learnt[-1].t < UP_AT + 2 * cfg.reverse_probe_interval


@pytest.mark.parametrize("side", ["send", "recv"])
def test_without_port_status_each_ev_of_the_plane_fails_on_its_own_and_stalls_longer(side):
    fab, snd, _, res = _run(side, port_status=False)
    plane = {e.ev: e.plane for e in fab.evs}
    benched = {e.ev for e in res.sender_events if isinstance(e, EvBad) and plane[e.ev] == DEAD}
    assert benched == {ev for ev, p in plane.items() if p == DEAD}  # one by one, every EV
    assert not [e for e in res.sender_events if isinstance(e, Ports)]
    _, _, _, with_status = _run(side)

    def wasted(r):  # data sent on the dead plane while its port was down
        return sum(n for t0, t1, n in _plane_load(fab, r.sender_events) if DOWN_AT <= t0 and t1 <= UP_AT)

    assert wasted(with_status) == 0 < wasted(res)
    assert _stall_ms(with_status) <= _stall_ms(res)
    resent = [e for e in with_status.sender_events if isinstance(e, Retx) and e.reason == "port_down"]
    assert resent  # what was in flight on the dead plane went again at once


def test_control_packets_carry_the_down_mask_and_data_packets_do_not():
    sack = wire.encode_sack(5, 10, 10, 0b1, 0x1C000, 7, ports_down=0b1010)
    nack = wire.encode_nack(5, 3, wire.NACK_TRIMMED, ports_down=0b1)
    probe = wire.encode_probe(wire.OP_EV_PROBE, 5, 9, 1, 0x1C000, ports_down=0x7FFF)
    assert wire.decode(sack).ports_down == 0b1010 and wire.fields(sack)["ports_down"] == 0b1010
    assert wire.decode(nack).ports_down == 0b1 and wire.decode(probe).ports_down == 0x7FFF
    # Every port up: the very bytes sent before the field existed (reserved, zero).
    assert wire.encode_sack(5, 10, 10, 0b1, 0x1C000, 7)[wire.PORTS_DOWN_OFF:][:2] == b"\0\0"
    data = wire.encode_data(wire.OP_DATA_ONLY, 0, 5, 1, 0, 0, 4, b"abcd")
    assert "ports_down" not in wire.fields(data)


def test_a_disabled_port_status_neither_sends_nor_hears_a_mask():
    ps = PortStatus(enabled=False)
    assert not ps.set_local(0b10) and not ps.set_remote(0b1)
    assert (ps.sent, ps.down) == (0, 0)
    on = PortStatus(enabled=True)
    assert on.set_local(0b10) and on.set_remote(0b1) and not on.set_remote(0b1)
    assert (on.sent, on.down, planes_of(on.down)) == (0b10, 0b11, [0, 1])


def test_parking_keeps_the_planes_evs_as_they_were_and_benched_ones_stay_out():
    evs = [EvInfo(p << 16 | i, p) for p in range(2) for i in range(4)]
    s = EvSet(evs, 0.5, 1, 1, random.Random(1))
    plane1 = [ev for ev in s.active if s.plane[ev] == 1]
    assert s.park(1) and not s.park(1)
    assert all(s.plane[ev] == 0 for ev in s.active)
    assert all(s.plane[s.next_ev()] == 0 for _ in range(20))
    assert s.mark_bad(plane1[0], 1.0)  # a loss found while parked: benched, no backup swapped in
    assert all(s.plane[ev] == 0 for ev in s.active)
    assert s.unpark(1)
    back = [ev for ev in s.active if s.plane[ev] == 1]
    assert plane1[0] not in back and plane1[1] in back and len(back) == len(plane1)  # a backup filled in


def test_an_older_report_arriving_late_does_not_undo_a_newer_one():
    fab = sim_fabric(2, 2)
    cfg = TransportConfig().for_fabric(LINK_MBPS, 2, ecn=False)
    pacer = NicPacer(2, LINK_MBPS * 1e6, wire.frame_bytes(cfg.mtu_payload))  # sends over time
    snd = MrcSender(1, 2, fab.evs, cfg, 1, pacer=pacer)
    snd.send_message(bytes(64 * 1024), 0.0)
    first, last = snd.poll(0.0)[0], snd.poll(0.02)[-1]
    assert wire.decode(first[1]).tsval < wire.decode(last[1]).tsval
    # The receiver's port on plane 1 went down after the first packet and before the last:
    # the SACK for the last packet says so, the one for the first (mask 0) arrives after it.
    for (ev, datagram), mask in ((last, 0b10), (first, 0)):
        snd.on_datagram(wire.encode_sack(1, 0, 0, 0, ev, wire.decode(datagram).tsval,
                                         ports_down=mask), 0, 0.03)
    assert snd.ports.remote == 0b10 and snd.evs.parked.keys() == {1}
    assert snd.stats["sacks"] == 2  # both acceptable: only the older port report was ignored
