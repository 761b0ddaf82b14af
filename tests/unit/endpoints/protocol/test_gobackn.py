"""The RoCE-like baseline's sender at a paced NIC (endpoints/protocol/gobackn.py): a packet, new
or resent, leaves only when its port can take it, as MRC's do, and a go-back spread over several
polls is still one go-back. Unpaced, the whole window leaves at once, as before. Deterministic."""

from __future__ import annotations

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import GoBack
from endpoints.protocol.gobackn import GbnReceiver, GbnSender
from endpoints.protocol.nicpacer import DEPTH_FRAMES, NicPacer

CFG = TransportConfig()
MTU = CFG.mtu_payload
EV = 0x1C000
RATE = 10e6
FRAME = wire.frame_bytes(MTU)  # what one full data packet costs its port
FRAME_S = FRAME * 8 / RATE


def _sender(pacer: NicPacer | None, packets: int = 10) -> GbnSender:
    snd = GbnSender(1, 2, EV, CFG, 1, pacer=pacer, plane=0)
    snd.send_message(b"r" * (packets * MTU), 0.0)
    return snd


def test_unpaced_the_whole_window_leaves_at_once():
    snd = _sender(None)
    assert len(snd.poll(0.0)) == min(10, CFG.gbn_window_pkts)
    assert snd.next_deadline() == snd.timer


def test_paced_a_packet_leaves_only_when_its_port_can_take_it():
    pacer = NicPacer(1, RATE, FRAME)
    snd = _sender(pacer, packets=6)  # within the window: only the port holds them back
    first = snd.poll(0.0)
    assert 1 <= len(first) <= 2  # a port holds at most DEPTH_FRAMES (1.5): the rest wait in the QP
    wake = snd.next_deadline()
    assert wake is not None and 0 < wake < FRAME_S * len(first)  # woken as the port frees
    assert snd.poll(wake * 0.5) == []  # earlier the port is still full
    handed = [0.0] * len(first)  # when each packet was handed to the port
    now = wake
    while len(handed) < 6:
        handed += [now] * len(snd.poll(now))
        deadline = snd.next_deadline()
        assert deadline is not None and deadline > now
        now = deadline
    # The k-th packet never ran more than DEPTH_FRAMES ahead of the port's line rate.
    assert all(t >= (k - DEPTH_FRAMES) * FRAME_S - 1e-9 for k, t in enumerate(handed))
    assert handed[-1] > 3 * FRAME_S and snd.stats["sent"] == 6 and snd.stats["retransmitted"] == 0


def test_a_paced_go_back_resends_each_packet_once_as_one_go_back():
    pacer = NicPacer(1, RATE, FRAME)
    snd = _sender(pacer, packets=6)
    now = 0.0
    while snd.stats["sent"] < 6:
        snd.poll(now)
        now = snd.next_deadline() or now
    assert snd.timer is not None
    now = max(now, snd.timer) + 0.001  # nothing acknowledged: the RTO fires, back to the first
    resent: list[int] = []
    for _ in range(40):
        resent += [wire.decode(d).psn for _, d in snd.poll(now)]
        if snd.resend_from is None:
            break
        deadline = snd.next_deadline()
        assert deadline is not None and deadline < snd.timer  # the port, not the RTO, is next
        now = deadline
    assert resent == list(range(6))  # every packet once, in order
    go_backs = [e for e in snd.take_events() if isinstance(e, GoBack)]
    assert len(go_backs) == 1 and go_backs[0].psn == 0


def test_a_paced_transfer_completes_through_the_receiver():
    pacer = NicPacer(1, RATE, FRAME)
    snd = _sender(pacer, packets=5)
    rcv = GbnReceiver(2, 1, EV, CFG, 1)
    now = 0.0
    for _ in range(200):
        for ev, datagram in snd.poll(now):
            rcv.on_datagram(datagram, ev, now)
        for ev, reply in rcv.poll(now):
            snd.on_datagram(reply, ev, now)
        if snd.take_completed():
            break
        deadlines = [d for d in (snd.next_deadline(), rcv.next_deadline()) if d is not None]
        now = max(now + 1e-4, min(deadlines))
    else:
        raise AssertionError("the paced transfer did not complete")
    assert [len(data) for _, data in rcv.take_completed()] == [5 * MTU]
