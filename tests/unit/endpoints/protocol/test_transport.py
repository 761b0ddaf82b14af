"""The MRC core over the simulated multi-path network: deterministic, no root."""

import random
from dataclasses import replace

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvActive, EvState, Retx, ReverseEvState
from endpoints.protocol.evset import ASSUMED_BAD, GOOD, SKIP, EvInfo
from endpoints.protocol.receiver import MrcReceiver, ReverseEvs
from endpoints.protocol.sender import MrcSender
from endpoints.protocol.wire import ts_us
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric

CFG = TransportConfig()
# 1 KB packets, pinned where a scenario's timing or packet counts were built on them.
KB = TransportConfig(mtu_payload=1024)
LINK_MBPS = 10.0  # sim_fabric's default rate


def _for(fab, cfg):
    """`cfg` as an agent would derive it for this fabric: sim_fabric's links mark nothing."""
    return cfg.for_fabric(LINK_MBPS, len({e.plane for e in fab.evs}), ecn=False)


def _messages(n, size, seed=1):
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


def _transfer(fab, msgs, until=20.0, seed=1, cfg=CFG, initial_psn=0):
    sim = Simulation(seed)
    cfg = _for(fab, cfg)
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
    snd, rcv, res = _transfer(fab, msgs, cfg=KB)
    _check_exact(res, msgs)
    changes = [e for e in res.sender_events if isinstance(e, EvState) and e.ev == dead_ev]
    went_bad = next(e for e in changes if e.new == ASSUMED_BAD)
    assert 1.0 <= went_bad.t < 1.05  # a few RTTs (RTT here is ~7 ms)
    came_back = next(e for e in changes if e.new == GOOD and e.t > went_bad.t)
    assert 2.0 <= came_back.t < 2.1  # probes bring it back soon after the repair
    # Nothing else was taken for dead: only the failed path's EV went bad.
    bad = {e.ev for e in res.sender_events if isinstance(e, EvState) and e.new == ASSUMED_BAD}
    assert bad == {dead_ev}
    # Goodput while the path is down stays near the pre-failure level (the plane keeps its share).
    before = sum(res.bins.get(b, 0) for b in range(50, 100))
    during = sum(res.bins.get(b, 0) for b in range(110, 190)) * 50 / 80
    assert during > 0.9 * before
    # The per-EV report (the CLI's `evs`) agrees with the events: the dead EV benched once,
    # GOOD again, and every EV carried its share of the bytes and has an RTT of its own.
    report = {r.ev: r for r in snd.ev_report()}
    assert set(report) == {e.ev for e in fab.evs}
    assert report[dead_ev].benched == 1 and report[dead_ev].state == GOOD
    assert all(r.benched == 0 for ev, r in report.items() if ev != dead_ev)
    assert sum(r.skips for r in report.values()) == \
        sum(1 for e in res.sender_events if isinstance(e, EvState) and e.new == SKIP)
    # Every plane carried the same; plane 0's surviving EV took the dead one's share.
    per_plane = [sum(report[e.ev].bytes_sent for e in fab.evs if e.plane == p) for p in range(4)]
    assert max(per_plane) < 1.01 * min(per_plane)
    survivor = next(e.ev for e in fab.evs if e.plane == 0 and e.ev != dead_ev)
    assert 0 < report[dead_ev].bytes_sent < report[survivor].bytes_sent
    assert sum(per_plane) >= sum(len(m) for m in msgs)
    assert all(r.srtt is not None and 0.001 < r.srtt < 0.2 for r in report.values())


def test_reverse_path_failure_moves_acks_elsewhere():
    fab = sim_fabric(2, 2)
    for key in (("rup", 0, 0), ("rup", 0, 1)):
        fab.links[key].down = [(0.5, 30.0)]  # every plane-0 reverse path dies for good
    msgs = _messages(8, 1 << 20)
    snd, rcv, res = _transfer(fab, msgs, until=30)
    _check_exact(res, msgs)
    dropped = [e for e in res.receiver_events if isinstance(e, ReverseEvState) and e.new == "ASSUMED_BAD"]
    assert dropped and all(e.t >= 0.5 for e in dropped)


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
        for _, rcv, _msgs, got in pairs:
            got.extend(rcv.take_completed())
        return all(len(got) == len(msgs) for *_, msgs, got in pairs)

    sim.run(30.0, stop=done)
    for _, _, msgs, got in pairs:
        assert [d for _, d in got] == msgs


def test_forged_and_out_of_window_datagrams_are_counted_and_dropped():
    rcv = MrcReceiver(2, 1, sim_fabric(1, 1).evs, KB, 1)  # 1 KB packets, as the sender cuts them
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
    snd = MrcSender(1, 2, fab.evs, CFG, 1)
    rcv = MrcReceiver(2, 1, fab.evs, CFG, 1)
    msg = _messages(1, 8 * 1024)[0]
    snd.send_message(msg, 0.0)
    first = snd.poll(0.0)
    ev, pkt = first[0]
    rcv.on_datagram(wire.trimmed(pkt), ev, 0.001)
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


def _ev(fab, plane, spine):
    """The forward EV whose path crosses spine `spine` of plane `plane`."""
    return next(ev for ev, path in fab.fwd.items() if path.links[1] is fab.links[("up", plane, spine)])


def _went_bad(res):
    return [e for e in res.sender_events if isinstance(e, EvState) and e.new == ASSUMED_BAD]


def test_one_of_16_paths_dropping_20_percent_is_benched_at_once_and_line_rate_holds():
    """The paper's experiment: 20% drop on one of 16 EVs. The EV leaves the active set after its
    first loss or two, a backup of its plane takes over, and goodput stays at the clean level."""
    def run(loss):
        fab = sim_fabric(4, 4)  # 16 paths, 12 active, one backup per plane (as with many paths)
        fab.links[("up", 0, 0)].loss = loss
        snd, rcv, res = _transfer(fab, _messages(3, 1 << 20), cfg=replace(KB, backup_min_paths=4))
        _check_exact(res, _messages(3, 1 << 20))
        return fab, snd, res

    _, _, clean = run(0.0)
    fab, snd, res = run(0.2)
    lossy = _ev(fab, 0, 0)
    assert [e.ev for e in _went_bad(res)] == [lossy]  # that EV and nothing else
    assert _went_bad(res)[0].t < 0.05  # within a few RTTs (~6 ms) of the start
    assert fab.links[("up", 0, 0)].dropped <= 3 and snd.stats["lost"] <= 3
    # The trace says so at the bench's time: the lossy EV left the active set, a backup of
    # plane 0 (idle until then) joined it.
    bench_t = _went_bad(res)[0].t
    moves = [e for e in res.sender_events if isinstance(e, EvActive) and e.t == bench_t]
    plane0_evs = {_ev(fab, 0, s) for s in range(4)}
    assert (lossy, False) in [(e.ev, e.active) for e in moves]
    joined = [e.ev for e in moves if e.active]
    assert len(joined) == 1 and joined[0] in plane0_evs - {lossy}
    assert not any(e.ev == joined[0] and e.active for e in res.sender_events
                   if isinstance(e, EvActive) and e.t < bench_t)
    # Out of the rotation: it carried ~1% of its plane's packets (a few data packets, then
    # probes), where its share as an active EV would be a third.
    plane0 = sum(fab.links[("up", 0, s)].carried for s in range(4))
    assert fab.links[("up", 0, 0)].carried < 0.05 * plane0
    # Line rate holds: within 2% of the clean run, which is itself near 4 x 10 Mbit/s.
    assert res.end < 1.02 * clean.end
    assert 3 * 8 * (1 << 20) / res.end > 0.85 * 4 * 10e6 * 1024 / wire.frame_bytes(1024)


def test_ecn_echo_skips_the_ev_and_decreases_the_window_but_never_benches_it():
    """CE marks on one path (a congested hop): the SACK echoes them, the sender skips that EV for
    about a rotation (SKIP, never ASSUMED_BAD: congestion is not failure), moves load to its
    siblings, and NSCC cuts the window (ECN with the RTT above target: multiplicative decrease)."""
    def run(mark):
        fab = sim_fabric(2, 2)
        hot = _ev(fab, 0, 0)
        snd = MrcSender(1, 2, fab.evs, KB, 1)
        rcv = MrcReceiver(2, 1, fab.evs, KB, 1)
        deliver = rcv.on_datagram

        def on_datagram(payload, ev, now, ecn_ce=False):
            deliver(payload, ev, now, ecn_ce or (mark and ev == hot))

        rcv.on_datagram = on_datagram
        msgs = _messages(2, 200_000)
        res = run_transfer(Simulation(1), snd, rcv, fab.fwd, fab.rev, msgs, 20.0)
        _check_exact(res, msgs)
        states = [e.new for e in res.sender_events if isinstance(e, EvState) and e.ev == hot]
        return fab, snd, rcv, states

    _, quiet, _, _ = run(False)
    fab, snd, rcv, states = run(True)
    assert rcv.stats["ce_marked"] > 0 and snd.stats["ecn_echoes"] > 0
    assert SKIP in states and GOOD in states and ASSUMED_BAD not in states  # skipped, came back
    assert snd.stats["bad_evs"] == 0 and snd.stats["retransmitted"] == 0
    assert quiet.cc.decreases == 0 and snd.cc.decreases > 0
    assert snd.cc.cwnd < quiet.cc.cwnd
    assert fab.links[("up", 0, 0)].carried < fab.links[("up", 0, 1)].carried  # load moved off


# ----- regressions: bugs the property tests (test_core_properties.py) found -------------------
def test_sender_stays_within_the_receivers_open_message_window():
    """Bug: the receiver drops packets of messages `max_open_messages` or more past its oldest
    incomplete one (without a NACK); the sender, streaming tiny messages behind one lost packet,
    ran further ahead, so those drops came back as losses that benched good paths."""
    fab = sim_fabric(2, 2, rate_bps=None)
    fab.links[("up", 1, 0)].down = [(0.01, 0.1)]
    msgs = [bytes([i % 251]) for i in range(300)]
    snd, rcv, res = _transfer(fab, msgs, seed=13, cfg=KB)
    _check_exact(res, msgs)
    assert rcv.stats["out_of_window"] == 0
    assert {e.ev for e in _went_bad(res)} == {_ev(fab, 1, 0)}
    # And directly: however wide the window, no packet of message 64 leaves before message 0 is done.
    snd = MrcSender(1, 2, fab.evs, TransportConfig(init_cwnd_pkts=512), 1)
    for m in msgs:
        snd.send_message(m, 0.0)
    assert max(wire.decode(p).msn for _, p in snd.poll(0.0)) == CFG.max_open_messages - 1


def test_floor_does_not_keep_dead_evs_while_a_backup_waits():
    """Bug: with only `ev_min_active` usable EVs, the floor refused to bench a failed one even
    when a backup of its plane stood ready: two dead paths stayed in use, the good one idle,
    and the transfer stalled for good."""
    fab = sim_fabric(1, 3, rate_bps=None)  # 2 active EVs (the floor), 1 backup
    for s in (0, 1):
        fab.links[("up", 0, s)].down = [(0.0, 1e9)]
    msgs = _messages(1, 20_000)
    snd, rcv, res = _transfer(fab, msgs, until=10.0, cfg=KB)
    _check_exact(res, msgs)
    assert snd.ev_states()[_ev(fab, 0, 2)] == GOOD


def test_dead_reverse_evs_are_replaced_from_the_rest_of_the_fabric():
    """Bug: the receiver's reverse EV set (`reverse_evs_per_plane` per plane) was fixed at start;
    when both of a one-plane QP's reverse paths died no SACK ever got through again, although a
    third reverse path was fine."""
    fab = sim_fabric(1, 3, rate_bps=None)
    for s in (0, 1):  # the two reverse paths the receiver starts with
        fab.links[("rdown", 0, s)].down = [(0.0, 1e9)]
    msgs = _messages(1, 20_000)
    snd, rcv, res = _transfer(fab, msgs, until=10.0, cfg=KB)
    _check_exact(res, msgs)
    assert res.end < 0.5
    condemned = {e.ev for e in res.receiver_events if isinstance(e, ReverseEvState) and e.new == ASSUMED_BAD}
    assert condemned == {fab.evs[0].ev, fab.evs[1].ev}  # the dead ones (reverse EV i: path i)
    assert fab.links[("rdown", 0, 2)].carried > 0  # the spare took over


def test_reverse_evs_all_presumed_dead_rotate_instead_of_pinning_one():
    """Bug: when every reverse EV failed its probes (their answers need a working forward path
    too), the last one was kept 'alive' and carried every SACK, dead or not."""
    rev = ReverseEvs([EvInfo(e, e >> 16) for e in (0x10001, 0x10002, 0x20001, 0x20002)], 2,
                     random.Random(1))
    for ev in list(rev.evs):
        rev.result(ev, False)
        rev.result(ev, False)
    assert not any(rev.alive.values())
    assert {rev.next() for _ in range(4)} == set(rev.evs)


def test_reverse_probes_are_answered_over_a_forward_ev_that_delivers():
    """Bug: the sender answered the receiver's reverse-path probes over its next spraying EV.
    With two of three planes dead (the floor keeps them in use) those answers were lost, the
    receiver condemned its good reverse EVs, and the lossy but live forward EV never collected
    the probe answers it needed to come back: the transfer stalled."""
    fab = sim_fabric(3, 1, rate_bps=None)
    for plane in (0, 1):
        fab.links[("up", plane, 0)].down = [(0.0, 1e9)]
    fab.links[("rdown", 1, 0)].down = [(0.0, 1e9)]
    fab.links[("nic_d", 2)].loss = 0.2
    msgs = _messages(1, 20_000)
    snd, rcv, res = _transfer(fab, msgs, until=10.0, cfg=KB)
    _check_exact(res, msgs)
    # And directly: the answer goes over the EV whose packet was acknowledged last.
    snd = MrcSender(1, 2, fab.evs, KB, 1)
    snd.send_message(b"x" * 3000, 0.0)
    sent = [(ev, wire.decode(p)) for ev, p in snd.poll(0.0)]
    ev_b, pkt_b = sent[1]
    snd.on_datagram(wire.encode_sack(1, pkt_b.psn, pkt_b.psn, 1, ev_b, 0), 7, 0.002)
    snd.on_datagram(wire.encode_probe(wire.OP_EV_PROBE, 1, 9, 0, 7), 7, 0.003)
    assert [(ev, wire.decode(p).opcode) for ev, p in snd.poll(0.003)] == [(ev_b, wire.OP_EV_PROBE_REPLY)]


def test_a_resent_packet_is_not_declared_lost_on_stale_sack_evidence():
    """Bug: `missing` (a SACK sent after the packet reported it absent) survived retransmission,
    so a resent packet that arrived, but fell outside later SACKs' 64-packet bitmap, was declared
    lost again by the time rule, and its good new EV benched."""
    fab = sim_fabric(2, 2)  # 4 EVs, all active
    snd = MrcSender(1, 2, fab.evs, KB, 1)
    snd.send_message(b"z" * 20 * 1024, 0.0)
    first = [wire.decode(p) for _, p in snd.poll(0.0)]
    assert len(first) == 16  # the initial window
    # PSN 0 missing, 1..15 received: path order proves 0 lost (once `reorder_slack` has passed
    # with no NACK for it); it is resent on another EV.
    snd.on_datagram(wire.encode_sack(1, 0, 0, 0xFFFE, fab.evs[0].ev, 0), 7, 0.003)
    new = [wire.decode(p) for _, p in snd.poll(0.003)]
    assert [d.psn for d in new if not d.flags & wire.F_RETRANSMIT] == [16, 17, 18, 19]
    assert not any(d.flags & wire.F_RETRANSMIT for d in new)
    out = [(ev, wire.decode(p)) for ev, p in snd.poll(0.003 + KB.reorder_slack)]
    resent_ev, resent = next((ev, d) for ev, d in out if d.flags & wire.F_RETRANSMIT and d.psn == 0)
    # A later SACK acknowledges 16..19 with a bitmap starting at 1: it says nothing about 0
    # (and gives the new EV an RTT sample, so the time rule has a window for it).
    snd.on_datagram(wire.encode_sack(1, 0, 1, (1 << 19) - 1, resent_ev, ts_us(0.005)), 7, 0.006)
    for t in (0.02, 0.025):  # past the time rule's window, before the RTO
        snd.poll(t)
    assert [e for e in snd.take_events() if isinstance(e, Retx) and e.reason == "dark"] == []
    assert snd.ev_states()[resent_ev] == GOOD and snd.stats["lost"] == 1


def test_a_zero_timestamp_is_a_real_rtt_sample():
    """Bug: a SACK echoing tsval 0 (a packet sent at t=0, or when the 32-bit microsecond clock
    wraps) gave no RTT sample; the simulator's first window always does, so loss detection ran on
    too few samples and declared queued packets lost on a clean network."""
    fab = sim_fabric(2, 2)
    snd = MrcSender(1, 2, fab.evs, CFG, 1)
    snd.send_message(b"a", 0.0)
    ev, pkt = snd.poll(0.0)[0]
    assert wire.decode(pkt).tsval == 0
    snd.on_datagram(wire.encode_sack(1, 1, 1, 0, ev, 0), 7, 0.004)
    assert snd.cc.srtt == pytest.approx(0.004)
    # The clean network case it broke: three planes at 10 Mbit/s, from t=0, not one retransmission.
    fab = sim_fabric(3, 1)
    rng = random.Random(229)
    msgs = [rng.randbytes(n) for n in (2181, 1, 11181, 2024, 1)]
    snd, rcv, res = _transfer(fab, msgs, seed=229, cfg=KB)
    _check_exact(res, msgs)
    assert snd.stats["retransmitted"] == 0 and snd.stats["bad_evs"] == 0


def test_forged_overlapping_range_cannot_overwrite_placed_bytes():
    """Bug: the receiver only refused a second packet at the very same offset; a forged packet
    with a fresh PSN whose range overlapped bytes already placed overwrote them, and its bytes
    were counted twice, so the message could complete with wrong bytes."""
    rcv = MrcReceiver(2, 1, sim_fabric(1, 1).evs, KB, 1)
    a, c = b"a" * 1024, b"c" * 1024
    rcv.on_datagram(wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 0, 0, 0, 2048, a), 1, 0.0)
    rcv.on_datagram(wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, 2, 0, 512, 2048, b"X" * 1024), 1, 0.001)
    rcv.on_datagram(wire.encode_data(wire.OP_DATA_LAST, 0, 2, 1, 0, 1023, 2048, b"Y" * 2), 1, 0.001)
    assert rcv.stats["forged"] == 2 and rcv.bytes_delivered == 1024
    rcv.on_datagram(wire.encode_data(wire.OP_DATA_LAST, 0, 2, 1, 0, 1024, 2048, c), 1, 0.002)
    assert rcv.take_completed() == [(0, a + c)]


def test_a_path_with_no_rtt_sample_yet_is_not_judged_by_other_paths_timing():
    """Bug: the time rule judged a packet on a path with no RTT sample of its own by the QP's
    samples, here one 1-byte packet's 3 ms; a 2.5 KB packet on the other plane (four 10 Mbit/s
    store-and-forward hops: 11 ms) was declared lost a few microseconds before its SACK came."""
    cfg = TransportConfig(mtu_payload=4096)
    fab = sim_fabric(2, 1)
    sim = Simulation(0)
    snd, rcv = MrcSender(1, 2, fab.evs, cfg, 0), MrcReceiver(2, 1, fab.evs, cfg, 0)
    sim.add_pair(snd, rcv, fab.fwd, fab.rev)
    msgs = _messages(1, 2544) + [b"x"]
    for m in msgs:
        snd.send_message(m, 0.0)
    acked = []

    def both_acked():  # run_transfer stops at the receiver; the false loss came after that
        acked.extend(snd.take_completed())
        return len(acked) == 2

    sim.run(1.0, stop=both_acked)
    assert acked == [0, 1] and rcv.take_completed() == list(enumerate(msgs))
    assert snd.stats["retransmitted"] == 0 and snd.stats["lost"] == 0


def test_a_spare_reverse_ev_carries_nothing_until_a_probe_proves_it():
    """Bug: a spare swapped in for a dead reverse EV was presumed alive. With every path of a
    plane down, each spare in turn carried its share of the SACKs and probe answers, lost,
    for two probe rounds, so the sender's probes of its own bad EVs there went unanswered and
    a restored path waited hundreds of milliseconds (Fig. 19's restores) to be used again."""
    evs = [EvInfo(e, e >> 16) for e in (0x10001, 0x10002, 0x10003, 0x20001, 0x20002)]
    rev = ReverseEvs(evs, 2, random.Random(1))
    plane1 = [ev for ev in rev.evs if ev >> 16 == 1]
    dead = plane1[0]
    rev.result(dead, False)
    assert rev.result(dead, False) == (True, False)
    spare = next(ev for ev in rev.evs if ev >> 16 == 1 and ev not in plane1)
    assert dead in rev.spares and not rev.alive[spare]
    assert spare not in {rev.next() for _ in range(20)}  # unproven: nothing goes over it
    assert rev.result(spare, True) == (False, True)  # its probe answered: in the rotation
    assert spare in {rev.next() for _ in range(20)}


def test_a_restored_uplink_is_used_again_within_a_probe_timeout():
    """Fig. 19's restores, simulated: the sending leaf's three uplinks in plane 0 down (both
    ways), then the first one back. The sender's probes of that EV are answered over reverse
    EVs the receiver has proven; before, spares presumed alive in the dead plane took some of
    the answers, and the EV came back up to 359 ms late (seeds 1, 2 and 5 of these five)."""
    down, back = 0.2, 0.6
    # the probe in flight on the dead path times out, then probes_to_resurrect answers
    bound = KB.probe_timeout + (KB.probes_to_resurrect + 1) * KB.probe_interval + 0.01
    for seed in range(1, 6):
        fab = sim_fabric(2, 3)
        for s in range(3):
            end = back if s == 0 else 1e9
            fab.links[("up", 0, s)].down = [(down, end)]
            fab.links[("rdown", 0, s)].down = [(down, end)]
        msgs = _messages(8, 200_000)
        snd, rcv, res = _transfer(fab, msgs, until=20.0, seed=seed, cfg=KB)
        _check_exact(res, msgs)
        restored = _ev(fab, 0, 0)
        good_again = [e.t for e in res.sender_events
                      if isinstance(e, EvState) and e.ev == restored and e.new == GOOD and e.t >= back]
        assert good_again and good_again[0] - back <= bound, (seed, good_again[:1], back, bound)
