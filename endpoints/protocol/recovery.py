"""The MRC sender's loss recovery, sans-IO: loss detection, NACK handling, the RTO and what a
loss does to the EV set and the window (a base of `MrcSender`, as aioquic keeps its recovery
beside its connection).

Loss detection, in the style of RACK over many paths: a packet is lost once a packet
transmitted after it has been acknowledged (SACK cumulative ACK or bitmap) and it is older than
srtt + 4 rttvar + `reorder_slack`; an RTO with exponential backoff is the backstop for tails. A
lost packet's EV becomes ASSUMED_BAD at once (a backup of its plane takes over) and only that
packet is resent, on another EV. Trimmed packets (NACK TRIMMED) are resent at once and only
skip their EV. No loss timer fires before `queue_delay_bound` (the longest a packet may
legitimately queue). A tail probe (`tail_probe`) shortens the wait for a tail: when nothing
is left to send and the oldest packet in flight is past its probe timeout (srtt + 4 rttvar +
`reorder_slack`), a copy of it goes out on its own EV, in the data class. A packet reported
missing past that same probe timeout, with later ones acknowledged, is presumed lost
(`presume_dark`): it leaves the window and its EV is skipped until the loss timers judge it, so
a path that died mid-window does not hold the live ones idle for `queue_delay_bound`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc
from endpoints.protocol.echoes import Echoes
from endpoints.protocol.events import EvBad, EvSkip, FloorHold, Retx, Timeout
from endpoints.protocol.evset import DENIED, GOOD, SKIP, EvSet
from endpoints.protocol.nicpacer import NicPacer
from endpoints.protocol.portstatus import PortStatus
from endpoints.protocol.rtt import RttEstimator


class SentPacket:
    """One packet of a message as last transmitted: what an acknowledgement, a NACK or a loss
    timer is checked against."""

    __slots__ = ("seq", "msn", "offset", "length", "msg_len", "opcode", "ev", "sent", "emitted", "ts",
                 "tx", "retx", "missing")

    def __init__(self, seq: int, msn: int, offset: int, length: int, msg_len: int,
                 opcode: int) -> None:
        self.seq, self.msn, self.offset, self.length = seq, msn, offset, length
        self.msg_len, self.opcode = msg_len, opcode
        self.ev = 0
        self.sent = 0.0
        self.emitted = 0.0  # the sender's `now` when it was handed out (`sent`: then or later)
        self.tx = 0
        self.retx = 0
        self.missing = False  # a SACK generated after it was sent reported it absent
        self.ts = 0  # the 32-bit microsecond timestamp it carried (ts_us(sent))


class LossRecovery:
    """The MRC sender's part that finds lost packets and queues them for resending (a base of
    `MrcSender`): path order and dark paths (SACKs), NACKs, the RTO."""

    # MrcSender's (annotations only)
    c: TransportConfig
    cc: Nscc
    evs: EvSet
    ports: PortStatus
    stats: dict[str, int]
    events: list[Any]
    una: int
    outstanding: OrderedDict[int, SentPacket]
    retx_queue: deque[SentPacket]
    retx_seqs: set[int]
    deferred: dict[int, tuple[float, SentPacket]]
    suspects: dict[int, tuple[float, int]]
    skips: dict[str, int]
    presumed: dict[int, int]
    ev_rtt: dict[int, RttEstimator]
    rack_tx: int
    _emit_ordered: bool
    rto: float
    tx_count: int
    peer_qpn: int
    echoes: Echoes
    pacer: NicPacer | None
    _frame_overhead: int
    _lasthop_marked_until: float
    # Tail probes: the (seq, tx) of the transmission last probed; the (ev, ts, tx) of the copy
    # until a SACK echoes it
    _probed: tuple[int, int] | None
    _probe_echo: tuple[int, int, int] | None
    _message_data: Callable[[int], memoryview | None]
    _skip: Callable[..., None]
    _peer_ports: Callable[[int, int, float], None]
    _drain_changes: Callable[[float], None]
    _trace_cc: Callable[..., None]

    def _lost_by_path_order(self, s: wire.Sack, base: int, missing: int, newest: dict[int, int],
                            now: float) -> None:
        """Each EV is one source route, a FIFO path: a packet this SACK reports missing (bit i of
        `missing` is PSN base + i) is lost if the same SACK reports a packet sent after it on
        the same EV as received."""
        lost = []
        echo_ts = s.echo_ts
        outstanding = self.outstanding
        while missing:
            low = missing & -missing
            missing ^= low
            seq = base + low.bit_length() - 1
            p = outstanding.get(seq)
            if p is None:
                continue
            if (echo_ts - p.ts) & 0xFFFFFFFF < 0x80000000:
                p.missing = True  # this SACK was triggered by a packet sent after it
            if newest.get(p.ev, 0) > p.tx:
                entry = self.suspects.get(seq)
                if entry is None or entry[1] != p.tx:
                    entry = self.suspects[seq] = (now, p.tx)
                if now - entry[0] >= self.c.reorder_slack:
                    lost.append(p)
        for p in lost:
            self.suspects.pop(p.seq, None)
            if self.outstanding.pop(p.seq, None) is not None:  # not already resent as stranded
                self._lose(p, now, "sack")

    # ----- tail probe ------------------------------------------------------------------------
    def _tail_probe_due(self) -> float | None:
        """When the oldest packet in flight gets its tail probe (None: none owed). The probe
        timeout is srtt + 4 rttvar (the QP's or the packet's path's, whichever is longer) +
        `reorder_slack`, with no `queue_delay_bound` floor: a probe early on a queued packet
        costs one duplicate packet, not a benched path (see `_tail_probe`)."""
        if not self.c.tail_probe or not self.outstanding:
            return None
        oldest = next(iter(self.outstanding.values()))
        rtt = self.cc.rtt
        if self._probed == (oldest.seq, oldest.tx) or not rtt.samples:
            return None  # one probe per transmission; no timing yet: the RTO alone
        due = oldest.sent + self._pto(oldest.ev)
        pacer = self.pacer
        if pacer is not None:  # a copy is a frame like any other: it waits for its port
            due = max(due, pacer.busy_until[self.evs.plane[oldest.ev]] - pacer.slack)
        return due

    def _pto(self, ev: int) -> float:
        pto = self.cc.rtt.timeout()
        est = self.ev_rtt.get(ev)
        if est is not None:
            pto = max(pto, est.timeout())
        return pto + self.c.reorder_slack

    def _tail_probe(self, now: float) -> tuple[int, bytes] | None:
        """A copy of the oldest packet in flight, on the EV it was sent on, flagged as a
        retransmission (the receiver acknowledges one at once, a duplicate within
        `sack_delay`, echoing the copy's EV and timestamp). An EV is a FIFO path and the copy
        is data, never in the control class, so it cannot overtake the original: if the
        original was lost the copy repairs it; if it is queued the copy arrives after it (a
        duplicate); and the SACK echoing the copy is path-order evidence (`_probe_evidence`)
        against every older packet on that EV it reports missing. No loss is declared on
        time alone, so no queueing delay can make a healthy path look bad; a dead path
        loses the copy too and is left to the loss timers. The original's record (send time,
        RTO) is unchanged."""
        p = next(iter(self.outstanding.values()))
        ev = p.ev
        if self.pacer is not None and not self.pacer.ready(self.evs.plane[ev], now):
            return None  # its port is full: `_tail_probe_due` says when it is not
        self._probed = (p.seq, p.tx)
        data = self._message_data(p.msn)
        if data is None or self.evs.state.get(ev, DENIED) == DENIED:
            return None
        sent = now if self.pacer is None else \
            self.pacer.charge(self.evs.plane[ev], p.length + self._frame_overhead, now)
        ts = wire.ts_us(sent)
        # Evidence only from an echo that names the copy alone: another transmission on the
        # same EV in the same microsecond would echo alike, and prove nothing of the copy.
        unique = not self.echoes.genuine(ev, ts)
        self.echoes.sent(ev, ts, now)
        self.tx_count += 1
        self._probe_echo = (ev, ts, self.tx_count) if unique else None
        self.stats["tail_probes"] += 1
        self.events.append(Retx(now, p.seq, ev, "tail_probe"))
        return ev, wire.encode_data(p.opcode, wire.F_RETRANSMIT | wire.F_ACK_REQ, self.peer_qpn,
                                    p.seq, p.msn, p.offset, p.msg_len,
                                    data[p.offset:p.offset + p.length], ts)

    def _probe_evidence(self, s: wire.Sack, cack: int, base: int, received: int,
                        newest: dict[int, int]) -> None:
        """A SACK echoing the tail probe was sent when the copy arrived: on the copy's EV,
        everything transmitted before it had arrived or is lost (FIFO). It must also report
        the copied packet received: a timestamp is a microsecond, and a packet sent in the same
        microsecond on the same EV echoes alike."""
        probe, probed = self._probe_echo, self._probed
        if probe is None or probed is None or s.echo_ev != probe[0] or s.echo_ts != probe[1]:
            return
        seq = probed[0]
        if seq >= cack and not (0 <= seq - base < 64 and received >> (seq - base) & 1):
            return  # another packet's echo: the copy is still on its way
        self._probe_echo = None
        if probe[2] > newest.get(probe[0], 0):
            newest[probe[0]] = probe[2]

    def _on_nack(self, n: wire.Nack, now: float) -> None:
        seq = wire.psn_unwrap(n.psn, self.una)
        p = self.outstanding.get(seq)
        if p is None or p.ev != n.echo_ev or p.ts != n.echo_ts:
            # Not about the latest transmission of a packet in flight: a PSN never sent, one
            # already acknowledged or resent, or a forgery. Ignored, never a window decrease.
            self.stats["unacceptable"] += 1
            return
        self.stats["nacks"] += 1
        if n.ports_down != self.ports.remote:
            self._peer_ports(n.ports_down, n.echo_ts, now)
        if n.reason in (wire.NACK_TRIMMED, wire.NACK_TRIMMED_LASTHOP):
            self.stats["trimmed_nacks"] += 1
            self.outstanding.pop(seq)
            self._queue_retx(p, now, "trimmed")
            if n.reason == wire.NACK_TRIMMED:
                self._skip(p.ev, now, "trim")  # congestion on that path, not failure
            self.cc.on_trim(now)
            if n.reason == wire.NACK_TRIMMED_LASTHOP:
                self._lasthop_marked_until = now + self.c.lasthop_mark_rtts * self.cc.srtt
            self._trace_cc(now)
        elif n.reason == wire.NACK_NO_PKT_BUFFER:
            # Receiver not ready (RoCE's RNR): resend after rnr_delay, no penalty for the path.
            self.stats["rnr"] += 1
            self.outstanding.pop(seq)
            self.deferred[seq] = (now + self.c.rnr_delay, p)
        elif n.reason in (wire.NACK_PSN_OOR_WINDOW, wire.NACK_NO_BITMAP):
            self.outstanding.pop(seq)
            self._queue_retx(p, now, f"nack{n.reason}")
        self._drain_changes(now)

    def _rto_base(self) -> float:
        rtt = self.cc.rtt
        return rtt.timeout() if rtt.samples else self.c.rto_initial

    def _dark_window(self, ev: int) -> float:
        """How long a packet may stay unacknowledged after later ones on other paths were:
        paths differ in queueing, and one path's queue can grow fast when it takes over a
        failed sibling's share, hence twice its RTT, never less than the QP's own spread.
        A path with no RTT sample of its own yet has no timing to judge by (the QP's samples may
        all be of small packets, on other paths): only the RTO can say it went dark."""
        est = self.ev_rtt.get(ev)
        if est is None:
            return max(self.rto, self.c.queue_delay_bound)
        return max(self._rto_base(), 2 * est.srtt, est.timeout(), self.c.queue_delay_bound) + \
            self.c.reorder_slack

    def _detect_losses(self, now: float) -> None:
        """The time rule, for a path gone dark (nothing on it arrives, so path order proves
        nothing): a packet a SACK reported missing, with packets sent after it acknowledged,
        is lost once older than twice its path's RTT (or srtt + 4 rttvar, if larger)."""
        if self.suspects:
            confirmed = []
            for seq, (first, tx) in list(self.suspects.items()):
                p = self.outstanding.get(seq)
                if p is None or p.tx != tx:
                    del self.suspects[seq]  # acknowledged, NACKed or resent meanwhile
                elif now - first >= self.c.reorder_slack:
                    del self.suspects[seq]
                    confirmed.append(p)
            for p in confirmed:
                if self.outstanding.pop(p.seq, None) is not None:
                    self._lose(p, now, "sack")
        presumed = self.presumed
        if presumed:  # forget those acknowledged, judged or resent since
            outstanding = self.outstanding
            for seq, tx in list(presumed.items()):
                q = outstanding.get(seq)
                if q is None or q.tx != tx:
                    del presumed[seq]
        presume = self.c.presume_dark and not self.evs.stateless
        # Neither window is shorter than `young` (`_dark_window` never under queue_delay_bound,
        # `_pto` never under the QP's own timeout + reorder_slack), and the packets in flight
        # were handed out in this order: past the first that young, none is due. With a
        # standing queue most of the window is, and this loop ran on every SACK.
        young = self.c.queue_delay_bound
        if presume:
            young = min(young, self.cc.rtt.timeout() + self.c.reorder_slack)
        ordered = self._emit_ordered
        lost = []
        for p in self.outstanding.values():
            if p.tx >= self.rack_tx:
                break  # nothing transmitted after this one has been acknowledged yet
            if ordered and now - p.emitted < young:
                break
            if not p.missing:
                continue
            age = now - p.sent
            if age >= self._dark_window(p.ev):
                lost.append(p)
            elif presume and p.seq not in presumed and age >= self._pto(p.ev):
                self._presume(p, now)
        for p in lost:
            if self.outstanding.pop(p.seq, None) is not None:  # not already resent as stranded
                self._lose(p, now, "dark")

    def _presume(self, p: SentPacket, now: float) -> None:
        """`p` is overdue on its path while later packets on others arrived: a dead path's
        packet, or one queued on a slow path. Either way new data should not follow it there,
        nor wait for it: it leaves the window and its EV is skipped (as a late RTT sample skips
        one), and the loss timers still decide whether it was lost."""
        self.presumed[p.seq] = p.tx
        self.stats["presumed"] += 1
        if self.evs.skip(p.ev, p.sent + self._dark_window(p.ev)):  # until the timers judge it
            self.skips["dark"] += 1
            self.events.append(EvSkip(now, p.ev, "dark", None))

    def _lose(self, p: SentPacket, now: float, reason: str) -> None:
        """A real loss means a bad path (MRC: congestion is trimmed, not dropped): the EV leaves
        the active set and what else is in flight on it is resent at once on other EVs. The
        window is left alone for a path failure, the path state has dealt with it; only a loss
        on an EV the floor keeps in use, a timeout on an EV already benched, or any loss when
        path state is off (spray) is treated as congestion."""
        self.stats["lost"] += 1
        state = self.evs.state.get(p.ev)
        if self.evs.mark_bad(p.ev, now):
            self.stats["bad_evs"] += 1
            self.events.append(EvBad(now, p.ev, reason, p.seq, round(now - p.sent, 6)))
            self._queue_retx(p, now, reason)
            stranded = [q for q in self.outstanding.values() if q.ev == p.ev]
            for q in stranded:
                del self.outstanding[q.seq]
                self.stats["stranded_resent"] += 1
                self._queue_retx(q, now, "ev_bad")
            return
        cause = "timeout" if reason == "rto" else "loss"
        if self.evs.stateless:
            self.cc.on_loss(now, cause)  # no path state: a loss can only be read as congestion
        elif state in (GOOD, SKIP):
            self.stats["floor_holds"] += 1
            self.events.append(FloorHold(now, p.ev, reason))
            self.cc.on_loss(now, cause)
        elif reason == "rto":
            self.cc.on_loss(now, cause)
        self._queue_retx(p, now, reason)

    def _queue_retx(self, p: SentPacket, now: float, reason: str) -> None:
        self.retx_queue.append(p)
        self.retx_seqs.add(p.seq)
        self.events.append(Retx(now, p.seq, p.ev, reason))

    def _rto_for(self, p: SentPacket) -> float:
        """The QP's RTO, stretched to the packet's own path if that path is slower (a deep
        queue on one plane must not look like a dead path): at least twice the path's smoothed
        RTT, since a path that takes over a failed sibling's share can double its queue within
        one RTT, faster than its variance estimate follows."""
        est = self.ev_rtt.get(p.ev)
        if est is None:
            return max(self.rto, self.c.queue_delay_bound)
        path = max(2 * est.srtt, est.timeout()) + self.c.reorder_slack
        return max(self.rto, min(self.c.rto_max, path), self.c.queue_delay_bound)

    def _check_rto(self, now: float) -> None:
        if not self.outstanding:
            return
        oldest = next(iter(self.outstanding.values()))
        # _rto_for is never below the QP's RTO: younger than that, no need to compute it.
        if now - oldest.sent < self.rto or now - oldest.sent < self._rto_for(oldest):
            return
        self.stats["timeouts"] += 1
        self.events.append(Timeout(now, oldest.seq, round(self._rto_for(oldest), 6)))
        expired = [p for p in self.outstanding.values() if now - p.sent >= self._rto_for(p)]
        for p in expired:
            if self.outstanding.pop(p.seq, None) is not None:  # not already resent as stranded
                self._lose(p, now, "rto")
        self.rto = min(self.rto * 2, self.c.rto_max)
        self._trace_cc(now, force=True)
