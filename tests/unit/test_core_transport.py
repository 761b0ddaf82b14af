"""The MRC core over the simulated multi-path network: deterministic, no root."""

import random

import pytest

from endpoints import wire
from endpoints.config import TransportConfig
from endpoints.evset import ASSUMED_BAD, GOOD
from endpoints.receiver import MrcReceiver
from endpoints.sender import MrcSender
from endpoints.simnet import Simulation, run_transfer, sim_fabric

CFG = TransportConfig()


def _messages(n, size, seed=1):
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


def _transfer(fab, msgs, until=20.0, seed=1, cfg=CFG, initial_psn=0):
    sim = Simulation(seed)
    snd = MrcSender(1, 2, fab.evs, cfg, seed, initial_psn=initial_psn)
    rcv = MrcReceiver(2, 1, fab.evs, cfg, seed, initial_psn=initial_psn)
    return snd, rcv, run_transfer(sim, snd, rcv, fab.fwd, fab.rev, msgs, until)


def _check_exact(result, msgs):
    assert [msn for msn, _ in result.completed] == list(range(len(msgs)))
    assert all(data == msgs[msn] for msn, data in result.completed)


def test_clean_transfer_sprays_over_every_path_at_line_rate():
    fab = sim_fabric(4, 2)
    msgs = _messages(6, 1 << 20)
    snd, rcv, res = _transfer(fab, msgs)
    _check_exact(res, msgs)
    assert snd.stats["retransmitted"] == 0 and snd.stats["bad_evs"] == 0
    carried = [fab.links[("up", p, s)].carried for p in range(4) for s in range(2)]
    assert min(carried) > 0.8 * max(carried)  # even spread over all 8 paths
    # 4 planes x 10 Mbit/s, less headers: at least 85% of 4 x 9.1 Mbit/s payload
    mbps = sum(len(m) for m in msgs) * 8 / res.end / 1e6
    assert mbps > 0.85 * 4 * 10 * 1024 / (1024 + 40 + 62)


@pytest.mark.parametrize("fault", ["loss", "reorder", "duplicate"])
def test_exact_delivery_under_random_faults(fault):
    kw = {"loss": {"loss": 0.02}, "reorder": {"jitter": 0.004}, "duplicate": {"dup": 0.03}}[fault]
    fab = sim_fabric(2, 3, **kw)
    msgs = _messages(5, 200_000, seed=3)
    snd, rcv, res = _transfer(fab, msgs, seed=4)
    _check_exact(res, msgs)
    if fault == "loss":
        assert snd.stats["retransmitted"] > 0
    if fault == "duplicate":
        assert rcv.stats["duplicates"] > 0
    assert rcv.stats["forged"] == 0


def test_dead_path_goes_bad_within_a_few_rtts_and_comes_back_after_repair():
    fab = sim_fabric(4, 2)
    fab.links[("up", 0, 0)].down = [(1.0, 2.0)]
    dead_ev = next(e.ev for e in fab.evs if e.plane == 0 and e.ev & 0xFFFF == 0xC000)
    msgs = _messages(12, 1 << 20)
    snd, rcv, res = _transfer(fab, msgs)
    _check_exact(res, msgs)
    changes = [e for e in res.sender_events if e[0] == "ev_state" and e[2] == dead_ev]
    went_bad = next(e for e in changes if e[4] == ASSUMED_BAD)
    assert 1.0 <= went_bad[1] < 1.05  # a few RTTs (RTT here is ~7 ms)
    came_back = next(e for e in changes if e[4] == GOOD and e[1] > went_bad[1])
    assert 2.0 <= came_back[1] < 2.1  # probes bring it back soon after the repair
    # Nothing else was taken for dead: only the failed path's EV went bad.
    bad = {e[2] for e in res.sender_events if e[0] == "ev_state" and e[4] == ASSUMED_BAD}
    assert bad == {dead_ev}
    # Goodput while the path is down stays near the pre-failure level (the plane keeps its share).
    before = sum(res.bins.get(b, 0) for b in range(50, 100))
    during = sum(res.bins.get(b, 0) for b in range(110, 190)) * 50 / 80
    assert during > 0.9 * before


def test_reverse_path_failure_moves_acks_elsewhere():
    fab = sim_fabric(2, 2)
    for key in (("rup", 0, 0), ("rup", 0, 1)):
        fab.links[key].down = [(0.5, 30.0)]  # every plane-0 reverse path dies for good
    msgs = _messages(8, 1 << 20)
    snd, rcv, res = _transfer(fab, msgs, until=30)
    _check_exact(res, msgs)
    dropped = [e for e in res.receiver_events if e[0] == "reverse_ev_state" and e[4] == "ASSUMED_BAD"]
    assert dropped and all(e[1] >= 0.5 for e in dropped)


def test_psn_wrap_around():
    fab = sim_fabric(2, 2)
    msgs = _messages(3, 300_000)
    snd, rcv, res = _transfer(fab, msgs, initial_psn=(1 << 24) - 100)
    _check_exact(res, msgs)
    assert snd.next_seq > 1 << 24  # crossed the 24-bit boundary


def test_many_qps_share_the_network():
    fab = sim_fabric(2, 2)
    sim = Simulation(9)
    pairs = []
    for q in range(6):
        snd = MrcSender(10 + q, 20 + q, fab.evs, CFG, q)
        rcv = MrcReceiver(20 + q, 10 + q, fab.evs, CFG, q)
        sim.add_pair(snd, rcv, fab.fwd, fab.rev)
        msgs = _messages(2, 150_000, seed=q)
        for m in msgs:
            snd.send_message(m, 0.0)
        pairs.append((snd, rcv, msgs, []))

    def done():
        for _, rcv, msgs, got in pairs:
            got.extend(rcv.take_completed())
        return all(len(got) == len(msgs) for *_, msgs, got in pairs)

    sim.run(30.0, stop=done)
    for _, _, msgs, got in pairs:
        assert [d for _, d in got] == msgs


def test_forged_and_out_of_window_datagrams_are_counted_and_dropped():
    rcv = MrcReceiver(2, 1, sim_fabric(1, 1).evs, CFG, 1)
    good = wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 0, 0, 0, 2048, b"a" * 1024)
    rcv.on_datagram(good, 1, 0.0)
    cases = [
        wire.encode_data(wire.OP_DATA_LAST, 0, 99, 1, 0, 1024, 2048, b"b" * 1024),  # wrong QPN
        wire.encode_data(wire.OP_DATA_LAST, 0, 2, 1, 0, 1024, 4096, b"b" * 1024),  # length changes
        wire.encode_data(wire.OP_DATA_LAST, 0, 2, 2, 0, 0, 2048, b"b" * 1024),  # offset re-used
        wire.encode_data(wire.OP_DATA_LAST, 0, 2, 1 << 20, 0, 1024, 2048, b"b" * 1024),  # window
        b"\x00\x01garbage",
        wire.encode_sack(2, 1, 1, 1, 1, 1),  # an ACK sent to a receiving QP
    ]
    for c in cases:
        rcv.on_datagram(c, 1, 0.001)
    st = rcv.stats
    assert (st["foreign"], st["forged"], st["out_of_window"], st["malformed"]) == (2, 2, 1, 1)
    assert rcv.take_completed() == []  # nothing completed with wrong bytes
    rcv.on_datagram(wire.encode_data(wire.OP_DATA_LAST, 0, 2, 1, 0, 1024, 2048, b"c" * 1024), 1, 0.002)
    assert rcv.take_completed() == [(0, b"a" * 1024 + b"c" * 1024)]
    out = rcv.poll(0.01)
    assert any(wire.decode(p).__class__ is wire.Nack for _, p in out)  # out-of-window NACKed


def test_trimmed_packet_is_nacked_and_resent_without_marking_the_path_bad():
    fab = sim_fabric(2, 2)
    sim = Simulation(1)
    snd = MrcSender(1, 2, fab.evs, CFG, 1)
    rcv = MrcReceiver(2, 1, fab.evs, CFG, 1)
    msg = _messages(1, 8 * 1024)[0]
    snd.send_message(msg, 0.0)
    first = snd.poll(0.0)
    ev, pkt = first[0]
    trimmed = bytearray(pkt[:wire.DATA_HDR])
    trimmed[1] |= wire.F_TRIMMED
    rcv.on_datagram(bytes(trimmed), ev, 0.001)
    for ev2, p in first[1:]:
        rcv.on_datagram(p, ev2, 0.001)
    for rev_ev, p in rcv.poll(0.002):
        snd.on_datagram(p, rev_ev, 0.003)
    assert snd.stats["trimmed_nacks"] == 1
    assert snd.ev_states()[ev] == "SKIP"  # skipped, not ASSUMED_BAD
    resent = [(e, p) for e, p in snd.poll(0.003) if p[0] in wire.DATA_OPCODES]
    assert len(resent) == 1 and wire.decode(resent[0][1]).flags & wire.F_RETRANSMIT
    assert resent[0][0] != ev
    rcv.on_datagram(resent[0][1], resent[0][0], 0.004)
    assert rcv.take_completed() == [(0, msg)]
