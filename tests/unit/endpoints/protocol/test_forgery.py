"""Forged datagrams against the transport cores (issue 11, items 4 and 9), each the attack that
worked before: a receiver's memory is what arrived, not what a header claims; a forged packet
cannot wedge a QP; a forged SACK, NACK, timestamp or probe reply cannot steer a sender; per-EV
tables do not grow with attacker-chosen EVs. Deterministic, no root."""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvState, Ports
from endpoints.protocol.evset import ASSUMED_BAD
from endpoints.protocol.gobackn import GbnReceiver, GbnSender
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric

CFG = TransportConfig()
MTU = CFG.mtu_payload
HUGE = 1 << 28  # what a forged header claimed: the former max_message
# What a forger would claim in a NACK: trimmed (at the last hop or not), no buffer, out of window.
FORGED_NACK_REASONS = [wire.NACK_TRIMMED, wire.NACK_TRIMMED_LASTHOP, wire.NACK_NO_PKT_BUFFER,
                       wire.NACK_PSN_OOR_WINDOW]


def _peak_alloc(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ----- item 4: memory bounded by what was received ------------------------------------------------
def test_forged_first_packets_allocate_what_arrived_not_what_they_claim():
    rcv = MrcReceiver(2, 1, sim_fabric(2, 2).evs, CFG, 1)

    def attack():
        for msn in range(4):  # each a first packet of a future message claiming 256 MiB
            rcv.on_datagram(wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 100 + msn, msn, 0, HUGE,
                                             b"x" * MTU), 0x1C000, 0.0)
            rcv.on_datagram(wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 200 + msn, msn, 0, HUGE,
                                             b"x"), 0x1C000, 0.0)

    assert _peak_alloc(attack) < 4 << 20  # was 1 GiB (64 such datagrams: 16 GiB)


def test_go_back_n_receiver_allocates_what_arrived():
    rcv = GbnReceiver(2, 1, 0x1C000, CFG, 1)

    def attack():
        rcv.on_datagram(wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 0, 0, 0, HUGE, b"x" * MTU),
                        0x1C000, 0.0)

    assert _peak_alloc(attack) < 4 << 20  # was 256 MiB for one datagram


def test_bytes_held_in_later_messages_are_capped_and_refused_not_dropped():
    cfg = TransportConfig(max_held_bytes=16 * MTU)
    rcv = MrcReceiver(2, 1, sim_fabric(1, 1).evs, cfg, 1)
    msg = 64 * MTU  # messages 1.. of 64 packets, message 0 not started: all held, none complete
    for i in range(20):
        seq = 1000 + i  # message 1 starts somewhere after message 0 (at least one PSN later)
        rcv.on_datagram(wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, seq, 1, i * MTU, msg,
                                         b"y" * MTU), 0x1C000, 0.0)
    assert rcv.place.held == 16 * MTU and rcv.stats["no_buffer"] == 4
    nacks = [wire.decode(p) for _, p in rcv.poll(0.01) if p[0] == wire.OP_NACK]
    assert [n.reason for n in nacks] == [wire.NACK_NO_PKT_BUFFER] * 4  # "resend later"
    assert not any(rcv.place.received(1000 + i) for i in range(16, 20))


# ----- item 9: a forged datagram cannot wedge a QP -------------------------------------------------
def _attacked_transfer(forgeries, msgs, psn0=0, seed=1):
    """A clean 4-path transfer of `msgs` with `forgeries` (receiver-bound datagrams) injected
    before it starts; returns (sender, receiver, result)."""
    fab = sim_fabric(2, 2)
    snd = MrcSender(1, 2, fab.evs, CFG, seed, initial_psn=psn0)
    rcv = MrcReceiver(2, 1, fab.evs, CFG, seed, initial_psn=psn0)
    for f in forgeries:
        rcv.on_datagram(f, fab.evs[0].ev, 0.0)
    return snd, rcv, run_transfer(Simulation(seed), snd, rcv, fab.fwd, fab.rev, msgs, 30.0)


def _benched(result):
    return [e for e in result.sender_events if isinstance(e, EvState) and e.new == ASSUMED_BAD]


def test_a_forged_first_packet_of_a_future_message_cannot_wedge_the_qp():
    msgs = [random.Random(i).randbytes(10 * MTU) for i in range(3)]
    # Message 1 claimed 3 packets long, far ahead in the PSN window.
    forged = wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 1000, 1, 0, 3 * MTU, b"f" * MTU)
    snd, rcv, res = _attacked_transfer([forged], msgs)
    assert res.completed == list(enumerate(msgs)), "QP wedged (was: 1 of 3 messages)"
    assert not _benched(res), "healthy EVs benched"
    assert rcv.stats["evicted"] == 1  # the claim was proved forged once message 1 was next


def test_a_one_byte_fragment_inside_a_future_packet_cannot_wedge_the_qp():
    msgs = [random.Random(i).randbytes(10 * MTU) for i in range(3)]
    forged = wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, 12, 1, MTU + 100, 10 * MTU, b"z")
    snd, rcv, res = _attacked_transfer([forged], msgs)
    assert res.completed == list(enumerate(msgs))
    assert not _benched(res)
    assert rcv.stats["forged"] == 1


def test_forged_claims_for_every_future_message_still_let_every_message_complete():
    msgs = [random.Random(i).randbytes(5 * MTU + 17) for i in range(6)]
    rng = random.Random(5)
    forgeries = []
    for msn in range(6):
        for _ in range(3):
            length = rng.choice([MTU, 2 * MTU, 5 * MTU + 17, 9 * MTU])
            index = rng.randrange(-(-length // MTU))
            forgeries.append(wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, rng.randrange(1, 500), msn,
                                              index * MTU, length,
                                              b"f" * min(MTU, length - index * MTU)))
    snd, rcv, res = _attacked_transfer(forgeries, msgs, psn0=wire.PSN_MASK - 20)
    assert res.completed == list(enumerate(msgs))
    assert not _benched(res)


# ----- item 9: a forged acknowledgement cannot steer the sender -----------------------------------
def _sender_in_flight(packets=40):
    fab = sim_fabric(2, 2)
    snd = MrcSender(1, 2, fab.evs, CFG, 1)
    snd.send_message(b"m" * (packets * MTU), 0.0)
    return snd, snd.poll(0.0)


def test_a_forged_sack_completes_nothing():
    snd, sent = _sender_in_flight(10)
    snd.on_datagram(wire.encode_sack(1, snd.next_seq, snd.next_seq, 0, sent[0][0], 12345), 0, 0.001)
    assert snd.take_completed() == [] and snd.bytes_acked == 0, "completion from a forged SACK"
    assert snd.stats["unacceptable"] == 1
    # The genuine echo of a packet really sent is accepted.
    first = wire.decode(sent[0][1])
    snd.on_datagram(wire.encode_sack(1, 1, 1, 0, sent[0][0], first.tsval), 0, 0.002)
    assert snd.bytes_acked == MTU


def test_forged_nacks_for_never_sent_psns_do_not_shrink_the_window():
    snd, _ = _sender_in_flight()
    cwnd = snd.cc.cwnd
    for i in range(20):
        snd.on_datagram(wire.encode_nack(1, 5000 + i, wire.NACK_TRIMMED, 0x1C000, i), 0, 0.001 + i)
    assert snd.cc.cwnd == cwnd, "window shrank from NACKs for PSNs never sent (was 1000 -> 3.2)"
    assert snd.stats["unacceptable"] == 20 and snd.stats["trimmed_nacks"] == 0


def test_a_nack_must_echo_the_transmission_it_is_about():
    snd, sent = _sender_in_flight()
    ev, payload = sent[3]
    d = wire.decode(payload)
    snd.on_datagram(wire.encode_nack(1, d.psn, wire.NACK_TRIMMED, ev, d.tsval + 1), 0, 0.001)
    assert snd.stats["trimmed_nacks"] == 0
    snd.on_datagram(wire.encode_nack(1, d.psn, wire.NACK_TRIMMED, ev, d.tsval), 0, 0.001)
    assert snd.stats["trimmed_nacks"] == 1


def test_a_forged_timestamp_echo_is_no_rtt_sample():
    snd, sent = _sender_in_flight()
    now = 10.0
    forged_ts = wire.ts_us(now - 9.9)
    snd.on_datagram(wire.encode_sack(1, 1, 1, 0, sent[0][0], forged_ts), 0, now)
    assert snd.cc.srtt == 0.0, "srtt from a forged echo (was 9.9 s)"
    assert not snd.ev_rtt


def test_forged_probe_replies_cannot_resurrect_a_bad_ev():
    fab = sim_fabric(2, 2)
    snd = MrcSender(1, 2, fab.evs, CFG, 1)
    bad = fab.evs[0].ev
    snd.evs.mark_bad(bad, 0.0)
    for r in range(6):  # six probe rounds, each answered by a forger who counts the ids
        now = r * (CFG.probe_timeout + CFG.probe_interval)  # the last probe expired: a new one
        probes = [wire.decode(p) for ev, p in snd.poll(now) if ev == bad]
        if not probes:
            break  # no longer probed: it came back
        for guess in range(1, 20):  # probe ids used to be 1, 2, 3, ...
            snd.on_datagram(wire.encode_probe(wire.OP_EV_PROBE_REPLY, 1, guess, probes[0].tsval,
                                              bad), 0, now + 0.0001)
    assert snd.ev_states()[bad] == ASSUMED_BAD, "resurrected by forged probe replies"


def test_go_back_n_sender_ignores_forged_acknowledgements():
    snd = GbnSender(1, 2, 0x1C000, CFG, 1)
    snd.send_message(b"g" * (4 * MTU), 0.0)
    sent = snd.poll(0.0)
    snd.on_datagram(wire.encode_sack(1, 4, 4, 0, 0x1C000, 777), 0, 0.001)
    assert snd.take_completed() == [] and snd.stats["unacceptable"] == 1
    d = wire.decode(sent[-1][1])
    snd.on_datagram(wire.encode_sack(1, 4, 4, 0, 0x1C000, d.tsval), 0, 0.002)
    assert snd.take_completed() == [0]


# ----- item 9: per-EV tables accept only the peer's real EVs --------------------------------------
def test_per_ev_tables_do_not_grow_with_attacker_chosen_evs():
    fab = sim_fabric(2, 2)
    rcv = MrcReceiver(2, 1, fab.evs, CFG, 1)
    rng = random.Random(3)
    for i in range(20_000):
        ev = rng.getrandbits(32)
        rcv.on_datagram(wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, rng.randrange(wire.PSN_MASK + 1),
                                         rng.randrange(64), 0, MTU, b"e" * MTU), ev, i * 1e-4)
    assert len(rcv.ev_high) <= len(fab.evs), f"{len(rcv.ev_high)} per-EV entries"


# ----- property: an attacker who knows the QP but not the PSNs --------------------------------------
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, wire.PSN_MASK), st.integers(0, 1 << 16), st.integers(1, 40),
       st.lists(st.integers(1, 6 * MTU), min_size=1, max_size=5))
def test_forgeries_with_the_real_qpn_never_corrupt_stall_or_bench(psn0, seed, count, sizes):
    """Data packets forged with the real QPN, plausible MSNs and packetisation, but PSNs drawn
    without knowing the random initial PSN, plus forged SACKs and NACKs to the sender: every
    genuine message completes exactly, no EV is benched, nothing completes at the sender that
    the receiver did not get; forged port status (in those SACKs and NACKs, and in probe
    replies to both ends) takes no plane out."""
    rng = random.Random(seed)
    msgs = [rng.randbytes(n) for n in sizes]
    fab = sim_fabric(2, 2)
    snd = MrcSender(1, 2, fab.evs, CFG, seed, initial_psn=psn0)
    rcv = MrcReceiver(2, 1, fab.evs, CFG, seed, initial_psn=psn0)
    sim = Simulation(seed)

    def forge(now: float) -> None:
        if rng.random() > count / 100:
            return

        def psn() -> int:  # a guess: the attacker does not know the initial PSN
            return rng.randrange(wire.PSN_MASK + 1)

        length = rng.choice(sizes)
        index = rng.randrange(-(-length // MTU))
        rcv.on_datagram(wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, psn(),
                                         rng.randrange(len(msgs) + 2), index * MTU, length,
                                         b"F" * min(MTU, length - index * MTU)),
                        rng.choice(fab.evs).ev, now)
        snd.on_datagram(wire.encode_sack(1, psn(), psn(), rng.getrandbits(64),
                                         rng.choice(fab.evs).ev, rng.getrandbits(32),
                                         ports_down=rng.getrandbits(16)), 0, now)
        snd.on_datagram(wire.encode_nack(1, psn(), rng.choice(FORGED_NACK_REASONS),
                                         rng.choice(fab.evs).ev, rng.getrandbits(32),
                                         ports_down=rng.getrandbits(16)), 0, now)
        for core, qpn in ((snd, 1), (rcv, 2)):
            core.on_datagram(wire.encode_probe(wire.OP_EV_PROBE_REPLY, qpn, rng.getrandbits(32),
                                               rng.getrandbits(32), rng.choice(fab.evs).ev,
                                               rng.getrandbits(16)), 0, now)

    sim.add_pair(snd, rcv, fab.fwd, fab.rev)
    for m in msgs:
        snd.send_message(m, 0.0)
    got, acked, events = [], [], []

    def done() -> bool:
        forge(sim.now)
        got.extend(rcv.take_completed())
        acked.extend(snd.take_completed())
        events.extend(snd.take_events())
        assert len(acked) <= len(got)  # nothing acknowledged that was not delivered
        return len(got) == len(acked) == len(msgs)

    sim.run(60.0, stop=done)
    assert got == list(enumerate(msgs))
    assert acked == list(range(len(msgs)))
    assert not [e for e in events if isinstance(e, EvState) and e.new == ASSUMED_BAD]
    assert not [e for e in [*events, *rcv.events] if isinstance(e, Ports)]
    assert snd.ports.remote == rcv.ports.remote == 0
