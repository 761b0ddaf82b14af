"""The NIC pacer, and the sender building packets only when a port can take them."""

from __future__ import annotations

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.nicpacer import DEPTH_FRAMES, NicPacer
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
