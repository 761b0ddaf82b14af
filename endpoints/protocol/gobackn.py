"""The RoCE-like baseline: one path (one EV, hashed by ECMP), go-back-N, no path state.

The receiver accepts only the next expected PSN; the first packet out of order draws one NACK
(sequence error, carrying the expected PSN) and the sender goes back to it, resending everything
from there. A timeout (RTO, exponential backoff capped at `rto_max`) does the same. When the one
path dies, nothing moves until routing moves the flow: that is the behaviour MRC is compared with.
Same wire format as MRC, same method names as MrcSender / MrcReceiver.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc
from endpoints.protocol.core import CoreBase
from endpoints.protocol.echoes import Echoes
from endpoints.protocol.events import Complete, Event, GoBack, Timeout
from endpoints.protocol.evset import EvReport
from endpoints.protocol.nicpacer import NicPacer
from endpoints.protocol.rtt import RttEstimator
from endpoints.protocol.wire import ts_age, ts_us


class GbnSender(CoreBase):
    def __init__(self, qpn: int, peer_qpn: int, ev: int, config: TransportConfig, seed: int,
                 initial_psn: int = 0, pacer: NicPacer | None = None, plane: int = 0) -> None:
        """`pacer`: the host's NIC ports, shared with its other QPs (nicpacer.py): a packet,
        new or resent, goes out only when `plane`'s port can take it, so that the NIC's QPs
        take turns as MRC's do. None: the whole window at once, into the host's queue."""
        self.qpn, self.peer_qpn, self.ev, self.c = qpn, peer_qpn, ev, config
        self.pacer, self.plane = pacer, plane
        self._going_back = False  # a paced go-back under way: its GoBack event is out
        self._pace_wait: float | None = None  # when its busy port frees, while packets wait
        self._served = -1.0  # when it last sent a frame while others waited (its place in line)
        self._in_line = False  # in its port's line (it leaves when it waits no more)
        self.una = self.next_seq = initial_psn
        self.pkts: dict[int, tuple[int, int, int, int]] = {}  # seq -> (msn, offset, len, msg_len)
        self.data: dict[int, memoryview] = {}
        self.msg_last_seq: dict[int, int] = {}
        self.queue: deque[list[Any]] = deque()  # [msn, data, next_offset], in posting order
        self.next_msn = 0
        self.completed: list[int] = []
        self.events: list[Complete | Timeout | GoBack] = []
        self.cc: Nscc | None = None  # no congestion control: a fixed window (gbn_window_pkts)
        self.rto = config.rto_initial
        self.rtt = RttEstimator()
        self.timer: float | None = None
        self.resend_from: int | None = None
        self.bytes_acked = 0
        self.bytes_sent = 0  # payload, retransmissions included
        self.stats = {k: 0 for k in ("sent", "retransmitted", "timeouts", "nacks", "acks",
                                     "malformed", "foreign", "stale_acks", "unacceptable")}
        self.echoes = Echoes(config.echo_keep)  # what an acceptable SACK or NACK echoes

    def send_message(self, data: bytes | memoryview, now: float) -> int:
        if not len(data):
            raise ValueError("a message needs at least one byte")
        msn = self.next_msn
        self.next_msn += 1
        self.queue.append([msn, memoryview(data), 0])
        self.data[msn] = memoryview(data)
        return msn

    @property
    def unsent_messages(self) -> int:
        return len(self.queue)

    def ev_states(self) -> dict[int, str]:
        return {self.ev: "GOOD"}

    def ev_report(self) -> list[EvReport]:
        """Its one path: go-back-N keeps no path state, so it is always GOOD and never skipped."""
        srtt = self.rtt.srtt if self.rtt.samples else None
        return [EvReport(self.ev, "GOOD", True, 0, 0, srtt, self.bytes_sent)]

    def next_deadline(self) -> float | None:
        if self.resend_from is not None or (self.queue and self._window_open()):
            wait = self._pace_wait
            if wait is None:
                return 0.0
            return wait if self.timer is None or wait < self.timer else self.timer
        return self.timer

    def _window_open(self) -> bool:
        return self.next_seq - self.una < self.c.gbn_window_pkts

    def _on_sack(self, s: wire.Sack, now: float) -> None:
        if not self.echoes.genuine(s.echo_ev, s.echo_ts):
            self.stats["unacceptable"] += 1  # echoes no packet of ours: forged (or ancient)
            return
        self._ack_to(wire.psn_unwrap(s.cack, self.una), now)
        self.stats["acks"] += 1
        if s.echo_ts:
            rtt = ts_age(now, s.echo_ts)
            if rtt < 10:
                self.rtt.sample(rtt)

    def _on_nack(self, n: wire.Nack, now: float) -> None:
        if n.reason != wire.NACK_SEQUENCE_ERROR:
            self.stats["foreign"] += 1  # MRC's NACKs mean nothing to go-back-N
            return
        if not self.echoes.genuine(n.echo_ev, n.echo_ts):
            self.stats["unacceptable"] += 1
            return
        self.stats["nacks"] += 1
        expected = wire.psn_unwrap(n.psn, self.una)
        self._ack_to(expected, now)
        if self.una < self.next_seq:
            self.resend_from = self.una
            self._going_back = False

    def _ack_to(self, cack: int, now: float) -> None:
        if cack > self.next_seq:
            self.stats["stale_acks"] += 1
            return
        if cack <= self.una:
            return
        for seq in range(self.una, cack):
            msn, _off, length, _ml = self.pkts.pop(seq)
            self.bytes_acked += length
            if self.msg_last_seq.get(msn) == seq:
                del self.msg_last_seq[msn]
                self.data.pop(msn, None)
                self.completed.append(msn)
                self.events.append(Complete(now, msn))
        self.una = cack
        self.rto = max(self.c.rto_min, min(self.c.rto_max, self.rtt.timeout())) \
            if self.rtt.samples else self.c.rto_initial
        self.timer = now + self.rto if self.una < self.next_seq else None
        if self.resend_from is not None and self.resend_from < self.una:
            self.resend_from = self.una if self.una < self.next_seq else None
            self._going_back = self._going_back and self.resend_from is not None

    def _packet(self, seq: int, now: float, retx: bool) -> tuple[int, bytes]:
        msn, offset, length, msg_len = self.pkts[seq]
        last = offset + length >= msg_len
        flags = (wire.F_RETRANSMIT if retx else 0) | (wire.F_ACK_REQ if last else 0)
        data = self.data[msn]
        self.bytes_sent += length
        if self.pacer is not None:
            self.pacer.charge(self.plane, wire.frame_bytes(length), now)
        ts = ts_us(now)
        self.echoes.sent(self.ev, ts, now)
        return self.ev, wire.encode_data(wire.data_opcode(offset == 0, last), flags,
                                         self.peer_qpn, seq, msn, offset, msg_len,
                                         data[offset:offset + length], ts)

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        out = []
        self.echoes.expire(now)
        if self.timer is not None and now >= self.timer and self.una < self.next_seq:
            self.stats["timeouts"] += 1
            self.events.append(Timeout(now, self.una, self.rto))
            self.resend_from = self.una
            self._going_back = False
            self.rto = min(self.rto * 2, self.c.rto_max)
            self.timer = now + self.rto
        pacer, plane = self.pacer, self.plane
        ready = None if pacer is None else pacer.ready_at(now)
        self._pace_wait = None
        if self.resend_from is not None:
            # Go back N: everything from the first unacknowledged packet, within the window
            # (paced: as far as the port takes now, the rest when it is ready again).
            start = seq = self.resend_from
            end = min(self.next_seq, self.una + self.c.gbn_window_pkts)
            while seq < end and (ready is None or ready(plane)):
                out.append(self._packet(seq, now, True))
                self.stats["retransmitted"] += 1
                seq += 1
            if not self._going_back:
                self.events.append(GoBack(now, start))
            self.resend_from = seq if seq < end else None
            self._going_back = self.resend_from is not None
            self.timer = now + self.rto
        if pacer is not None and self.resend_from is not None:  # the port filled first
            self._wait_turn(pacer, bool(out), self.pkts[self.resend_from][2], now)
            return out
        mtu = self.c.mtu_payload
        while self.queue and self._window_open() and (ready is None or ready(plane)):
            entry = self.queue[0]
            msn, data, offset = entry
            length = min(mtu, len(data) - offset)
            seq = self.next_seq
            self.pkts[seq] = (msn, offset, length, len(data))
            self.next_seq += 1
            entry[2] = offset + length
            if offset + length >= len(data):
                self.msg_last_seq[msn] = seq
                self.queue.popleft()
            out.append(self._packet(seq, now, False))
            self.stats["sent"] += 1
            if self.timer is None:
                self.timer = now + self.rto
        if pacer is not None:
            if self.queue and self._window_open():  # the port is full: wait in line for it
                _msn, data, offset = self.queue[0]
                self._wait_turn(pacer, bool(out), min(mtu, len(data) - offset), now)
            elif self._in_line:
                pacer.leave(plane, self.qpn)
                self._in_line = False
        return out

    def _wait_turn(self, pacer: NicPacer, sent: bool, length: int, now: float) -> None:
        """Wait in line for the port (NicPacer.turn), the next packet `length` bytes of payload:
        behind the QPs served less recently."""
        if sent:
            self._served = now
        self._in_line = True
        self._pace_wait = pacer.turn(self.plane, self.qpn, self._served, wire.frame_bytes(length), now)


class GbnReceiver(CoreBase):
    """Accepts the next PSN only, and only as the sender packetises: the next offset of the
    message being received, `min(mtu_payload, msg_len - offset)` bytes, one length per
    message. Chunks are kept as they arrive and joined when the message completes: memory is
    what arrived, never a length a header claims."""

    def __init__(self, qpn: int, peer_qpn: int, ev: int, config: TransportConfig, seed: int,
                 initial_psn: int = 0) -> None:
        self.qpn, self.peer_qpn, self.ev, self.c = qpn, peer_qpn, ev, config
        self.expected = initial_psn
        self.nacked = False  # one NACK per gap, as RoCE does
        self.chunks: list[bytes] = []  # the message being received, in order
        self.length = 0  # its length (from its first packet)
        self.got = 0
        self.next_msn = 0
        self.completed: list[tuple[int, bytes]] = []
        self.bytes_delivered = 0
        self.out: list[tuple[int, bytes]] = []
        self.unacked = 0
        self.ack_due: float | None = None
        self.last_ack = -1.0
        self.echo = (0, 0)  # (ev, tsval) of the newest packet accepted
        self.dup_echo: tuple[int, int] | None = None
        self.events: list[Event] = []  # none so far: it has no state worth tracing
        self.stats = {k: 0 for k in ("packets", "duplicates", "out_of_order", "malformed",
                                     "foreign", "forged", "acks", "nacks", "messages")}

    def next_deadline(self) -> float | None:
        return 0.0 if self.out else self.ack_due

    def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
        self.stats["packets"] += 1
        seq = wire.psn_unwrap(d.psn, self.expected)
        if seq < self.expected:
            # Answer it (its own echo: a flood of copies cannot displace the last accepted
            # packet's), at most once per sack_delay.
            self.stats["duplicates"] += 1
            self.dup_echo = (ev, d.tsval)
            due = max(now, self.last_ack + self.c.sack_delay)
            if self.ack_due is None or due < self.ack_due:
                self.ack_due = due
            return
        if seq > self.expected:
            self.stats["out_of_order"] += 1
            if not self.nacked:
                self.nacked = True
                self.out.append((self.ev, wire.encode_nack(self.peer_qpn, self.expected,
                                                          wire.NACK_SEQUENCE_ERROR, ev, d.tsval,
                                                          self.expected)))
                self.stats["nacks"] += 1
            return
        length = d.msg_len if not self.got else self.length
        if d.msn != self.next_msn or d.msg_len != length or not 0 < length <= self.c.max_message \
                or d.offset != self.got or len(d.payload) != min(self.c.mtu_payload, length - d.offset):
            self.stats["forged"] += 1
            return
        self.length = length
        self.chunks.append(bytes(d.payload))
        self.got += len(d.payload)
        self.bytes_delivered += len(d.payload)
        self.expected += 1
        self.nacked = False
        self.echo = (ev, d.tsval)
        if self.got >= length:
            self.completed.append((d.msn, b"".join(self.chunks)))
            self.chunks, self.got = [], 0
            self.next_msn += 1
            self.stats["messages"] += 1
        self.unacked += 1
        if self.unacked >= self.c.sack_every or d.flags & wire.F_ACK_REQ:
            self.ack_due = now
        elif self.ack_due is None:
            self.ack_due = now + self.c.sack_delay

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        if self.ack_due is not None and now >= self.ack_due:
            echoes = [self.dup_echo] if self.dup_echo is not None else []
            if self.unacked or not echoes:
                echoes.append(self.echo)
            for ev, ts in echoes:
                self.out.append((self.ev, wire.encode_sack(self.peer_qpn, self.expected,
                                                           self.expected, 0, ev, ts)))
                self.stats["acks"] += 1
            self.dup_echo = None
            self.last_ack = now
            self.unacked = 0
            self.ack_due = None
        out, self.out = self.out, []
        return out
