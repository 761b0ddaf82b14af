"""The NIC pacer, and the sender building packets only when a port can take them."""

from __future__ import annotations

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.nicpacer import DEPTH_FRAMES, NicPacer
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender

RATE = 10e6
FRAME = wire.frame_bytes(4096)
FRAME_S = FRAME * 8 / RATE


def test_a_port_is_ready_while_it_holds_less_than_its_depth():
    p = NicPacer(2, RATE, FRAME)
    assert p.ready(0, 0.0)
    p.charge(0, FRAME, 0.0)
    p.charge(0, FRAME, 0.0)
    assert not p.ready(0, 0.0) and p.ready(1, 0.0)  # ports are independent
    assert abs(p.next_ready(0.0) - (2 - DEPTH_FRAMES) * FRAME_S) < 1e-9
    assert p.ready(0, p.next_ready(0.0))


def test_sync_never_believes_the_port_emptier_than_the_real_queue():
    p = NicPacer(1, RATE, FRAME)
    p.sync(0, 5 * FRAME, 1.0)
    assert not p.ready(0, 1.0) and p.ready(0, 1.0 + (5 - DEPTH_FRAMES) * FRAME_S + 1e-9)
    p.sync(0, 0, 1.0)  # an empty read does not erase what was charged
    assert not p.ready(0, 1.0)


def test_a_paced_sender_hands_out_a_port_depth_of_frames_then_waits_for_the_port():
    pacer = NicPacer(2, RATE, FRAME)
    evs = [EvInfo((p + 1) << 16 | 0xC000 + i, p) for p in range(2) for i in range(2)]
    snd = MrcSender(1, 2, evs, TransportConfig(), 1, pacer=pacer)
    snd.send_message(bytes(1 << 20), 0.0)
    first = snd.poll(0.0)
    # Two frames per port (the second makes the depth), where the window would allow 16.
    assert len(first) == 4 and {ev >> 16 for ev, _ in first} == {1, 2}
    wait = snd.next_deadline()
    assert wait is not None and 0 < wait <= FRAME_S
    assert snd.poll(wait / 2) == [] and len(snd.poll(wait)) == 2


def test_a_batched_port_wakes_its_sender_only_after_refill_frames_drained():
    # The agents' setting: depth 1.5 + 3 frames, woken once 3 frames have left.
    p = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3, refill=3)
    for _ in range(4):
        assert p.ready(0, 0.0)
        p.charge(0, FRAME, 0.0)
    assert p.ready(0, 0.0)  # 4 frames held: still under the depth (4.5)
    p.charge(0, FRAME, 0.0)
    assert not p.ready(0, 0.0)
    # Woken when the port holds depth - refill = 1.5 frames again (3.5 frames later), not at the
    # first moment it could take one more (0.5 frame later).
    assert abs(p.next_ready(0.0) - 3.5 * FRAME_S) < 1e-9
    assert NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3).next_ready(0.0) == 0.0


def test_a_refill_must_leave_the_port_something_to_send():
    import pytest
    with pytest.raises(ValueError, match="refill"):
        NicPacer(1, RATE, FRAME, depth=2.0, refill=2.0)


def test_frames_are_stamped_with_their_departure_where_the_pacer_says_so():
    stamping = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3, refill=3, stamp_departure=True)
    plain = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3, refill=3)
    assert [stamping.charge(0, FRAME, 1.0) for _ in range(3)] == \
        [1.0, 1.0 + FRAME_S, 1.0 + 2 * FRAME_S]  # each starts when the one before has left
    assert [plain.charge(0, FRAME, 1.0) for _ in range(3)] == [1.0] * 3
    # An idle port sends at once: the stamp is the time it was handed over.
    assert stamping.charge(0, FRAME, 10.0) == 10.0


def _token_bucket_departures(handed: list[tuple[float, int]], burst: int) -> list[float]:
    """When Linux HTB (rate RATE, `burst` bytes of credit) sends frames handed over at
    (time, bytes), in order: a frame leaves once the tokens are not negative, its bytes are
    then taken (so they may go below zero), and an idle bucket fills up to `burst`."""
    tokens, last, free, out = float(burst), 0.0, 0.0, []
    for t, size in handed:
        t = max(t, free)
        tokens = min(burst, tokens + (t - last) * RATE / 8)
        if tokens < 0:  # wait for the credit
            t += -tokens * 8 / RATE
            tokens = 0.0
        out.append(t)
        tokens -= size
        last = free = t
    return out


def _handed_in_batches(pacer: NicPacer, rounds: int) -> tuple[list[tuple[float, int]], list[float]]:
    """Frames handed to one port as a batching sender does (the port filled to its depth each
    wake-up, the wake-ups a little late, now and then the port left idle); with their stamps."""
    handed, stamps, now = [], [], 0.0
    for i in range(rounds):
        while pacer.ready(0, now):
            handed.append((now, FRAME))
            stamps.append(pacer.charge(0, FRAME, now))
        now = pacer.next_ready(now) + (0.0004 if i % 3 else 5 * FRAME_S)  # late, or idle
    return handed, stamps


def test_a_batched_frame_is_never_stamped_after_the_host_qdisc_sends_it():
    # The agents' host NICs: HTB with a burst of a few frames. A stamp later than the frame's
    # real departure echoes back from the sender's future and its RTT sample is lost.
    burst = 4 * FRAME + FRAME // 3
    honest = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 1, refill=1, stamp_departure=True,
                      burst_bytes=burst)
    handed, stamps = _handed_in_batches(honest, 40)
    real = _token_bucket_departures(handed, burst)
    assert all(h <= s <= r + 1e-9 for (h, _), s, r in zip(handed, stamps, real, strict=True))
    # Smaller credit, stamps nearer the real departures: never more than the burst early.
    tight = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 1, refill=1, stamp_departure=True,
                     burst_bytes=FRAME // 4)
    handed, stamps = _handed_in_batches(tight, 40)
    real = _token_bucket_departures(handed, FRAME // 4)
    assert all(-1e-9 <= r - s <= FRAME // 4 * 8 / RATE + 1e-9 for s, r in zip(stamps, real, strict=True))
    assert max(s - h for (h, _), s in zip(handed, stamps, strict=True)) > FRAME_S  # still stamped
    # The model alone (no burst allowed for) stamps frames that have already left.
    naive = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 1, refill=1, stamp_departure=True)
    handed, stamps = _handed_in_batches(naive, 40)
    real = _token_bucket_departures(handed, burst)
    assert sum(s > r + 1e-9 for s, r in zip(stamps, real, strict=True)) > len(stamps) // 4


def test_a_sender_on_a_stamping_pacer_measures_no_host_queue():
    pacer = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3, refill=3, stamp_departure=True)
    evs = [EvInfo(1 << 16 | 0xC000 + i, 0) for i in range(2)]
    snd = MrcSender(1, 2, evs, TransportConfig(), 1, pacer=pacer)
    snd.send_message(bytes(1 << 20), 0.0)
    sent = snd.poll(0.0)
    assert len(sent) == 5  # a batch: the depth's worth of frames in one poll
    stamps = sorted(p.sent for p in snd.outstanding.values())
    # One port: each frame leaves when the one before it has (its serialisation, the outer
    # header included), so the RTT it measures starts then, not while it waits in the host.
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert stamps[0] == 0.0 and all(abs(g - gaps[0]) < 1e-12 for g in gaps)
    assert gaps[0] >= FRAME_S * 0.95
    ts = sorted(wire.decode(payload).tsval for _, payload in sent)
    assert ts == [wire.ts_us(t) for t in stamps]


def test_a_lazily_woken_sender_fills_each_port_with_two_frames_and_no_deeper_queue():
    # The agents' lazy wake-ups (endpoints/host/dataloop.py, pacer_wake_lag): the depth unchanged,
    # the sender woken only when a port has less than half a frame left.
    from endpoints.host.dataloop import pacer_wake_lag
    lag = pacer_wake_lag(FRAME_S)
    pacer = NicPacer(2, RATE, FRAME, refill=lag, extra_bytes=wire.IPV6_HDR)
    eager = NicPacer(2, RATE, FRAME, extra_bytes=wire.IPV6_HDR)
    evs = [EvInfo((p + 1) << 16 | 0xC000 + i, p) for p in range(2) for i in range(2)]
    snd = MrcSender(1, 2, evs, TransportConfig(init_cwnd_pkts=64), 1, pacer=pacer)  # NIC-bound
    snd.send_message(bytes(1 << 20), 0.0)
    assert len(snd.poll(0.0)) == 4
    charged_s = (FRAME + wire.IPV6_HDR) * 8 / RATE  # a frame and the encapsulation's header
    eager.charge(0, FRAME, 0.0)
    eager.charge(0, FRAME, 0.0)
    wait = snd.next_deadline()
    assert wait is not None and wait > eager.next_ready(0.0) + 0.9 * FRAME_S  # a frame later
    for _ in range(3):  # each timer wake-up: two frames per port, then a wait as long again
        assert wait is not None
        sent = snd.poll(wait)
        assert sorted(ev >> 16 for ev, _ in sent) == [1, 1, 2, 2]
        # what a port then holds: never more than the eager pacer's deepest (depth + a frame)
        assert all(b - wait <= (DEPTH_FRAMES + 1.05) * FRAME_S for b in pacer.busy_until)
        following = snd.next_deadline()
        assert following is not None and abs(following - wait - 2 * charged_s) < 1e-9
        wait = following
    # A wake-up for another reason in between still fills a port that is ready.
    assert snd.poll(wait - 0.8 * FRAME_S) != []


def test_an_echo_from_the_senders_future_is_counted_and_teaches_nscc_nothing():
    # What a stamp later than the real departure does (the agents' batching measured
    # 2026-12-03): the SACK comes back before the instant its echo names.
    pacer = NicPacer(1, RATE, FRAME, depth=DEPTH_FRAMES + 3, refill=3, stamp_departure=True)
    evs = [EvInfo(1 << 16 | 0xC000 + i, 0) for i in range(2)]
    snd = MrcSender(1, 2, evs, TransportConfig(), 1, pacer=pacer)
    rcv = MrcReceiver(2, 1, evs, TransportConfig(), 1)
    snd.send_message(bytes(1 << 20), 0.0)
    sent = snd.poll(0.0)
    last_stamp = max(p.sent for p in snd.outstanding.values())
    early = last_stamp / 2  # everything arrived and was acknowledged by then
    for ev, payload in sent:
        rcv.on_datagram(payload, ev, early)
    sacks = [(ev, p) for ev, p in rcv.poll(early) if p[0] == wire.OP_SACK]
    assert sacks
    cwnd = snd.cc.cwnd
    for ev, payload in sacks:
        snd.on_datagram(payload, ev, early)
    # one SACK for the batch, echoing the last frame's stamp: later than `early`
    assert [wire.decode(p).echo_ts > wire.ts_us(early) for _, p in sacks] == [True]
    assert snd.stats["rtt_unusable"] == 1 and snd.cc.rtt.samples == 0
    assert snd.cc.cwnd == cwnd  # no sample, no increase


def test_a_full_port_frees_later_than_now_even_when_rounding_says_now():
    """`frees`: a sender that found its one port full is woken when the port drains to its wake
    slack, never at the instant it asked: a freeing that rounds to `now` would have it asked
    again at once, for ever (the paced go-back-N's first unit test spun on it)."""
    from endpoints.protocol.nicpacer import RETRY_S

    pacer = NicPacer(2, 10e6, 4206)
    pacer.charge(1, 4206, 0.0)
    pacer.charge(1, 4206, 0.0)
    due = pacer.busy_until[1] - pacer.wake_slack
    assert pacer.frees(1, 0.0) == due > 0.0
    assert pacer.frees(1, due) == due + RETRY_S  # asked at the freeing itself: a little later
    assert pacer.frees(0, 0.5) == 0.5 + RETRY_S  # an idle port: at once, but not at `now`


def test_qps_waiting_for_a_port_are_woken_in_turn_least_recently_served_first():
    """`turn`: the QP served least recently is woken when the port frees, each other one later
    by the next frames of the QPs ahead of it (ties in the order they asked); `leave` closes
    the gap. Counting a full frame for a short one left the port idle half the time."""
    pacer = NicPacer(2, RATE, FRAME, extra_bytes=40)
    pacer.charge(0, FRAME, 0.0)
    pacer.charge(0, FRAME, 0.0)
    frees, short = pacer.frees(0, 0.0), 1000

    def wire_s(*sizes: int) -> float:
        return sum(size + 40 for size in sizes) * 8 / RATE

    assert pacer.turn(0, 7, 0.0, FRAME, 0.0) == frees  # alone: the port's freeing, as `frees`
    assert pacer.turn(0, 8, -1.0, short, 0.0) == frees  # never served: ahead of 7
    assert pacer.turn(0, 9, -1.0, FRAME, 0.0) == frees + wire_s(short)  # behind 8, which asked first
    assert pacer.turn(0, 7, 0.0, FRAME, 0.0) == frees + wire_s(short, FRAME)  # 7 again: behind both
    assert pacer.turn(1, 7, 0.0, FRAME, 0.0) == pacer.frees(1, 0.0)  # another port, another line
    pacer.leave(0, 8)
    assert pacer.turn(0, 7, 0.0, FRAME, 0.0) == frees + wire_s(FRAME)
    pacer.leave_all(7)
    assert pacer.lines == [{9: (-1.0, FRAME)}, {}]
