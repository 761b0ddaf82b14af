"""MRC sender, one per QP: sans-IO (events and a clock value in, datagrams out).

Spraying: every packet, first transmission or retransmission, takes the next EV of the EV set's
shuffled rotation. What is lost is found and queued for resending by the loss recovery
(`LossRecovery`, endpoints/protocol/recovery.py: path order, dark paths, NACKs, the RTO);
what a dead NIC port strands, by the port steering (portstatus.py). ASSUMED_BAD EVs are probed
until `probes_to_resurrect` replies in a row.

With a `NicPacer` (the host's NIC ports, shared by its QPs) a packet is built only when a port
can take it, so the RTT measures the fabric, not a queue in the sending host.

Trace (`take_events`): besides completions, RTT samples, retransmissions and EV states, a `Cc`
sample every `cc_sample_interval`, every window decrease with its cause, every EV skip and
benching with its cause, and the per-EV load every `ev_load_interval`.
"""
from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc
from endpoints.protocol.core import CoreBase
from endpoints.protocol.echoes import Echoes
from endpoints.protocol.events import (
    Cc,
    Complete,
    CwndDec,
    EvActive,
    EvBad,
    EvLoad,
    EvSkip,
    EvState,
    FloorHold,
    Retx,
    Rtt,
    Timeout,
)
from endpoints.protocol.evset import ASSUMED_BAD, DENIED, SKIP, EvInfo, EvReport, EvSet
from endpoints.protocol.nicpacer import NicPacer
from endpoints.protocol.portstatus import PortStatus, PortSteering
from endpoints.protocol.prober import Prober
from endpoints.protocol.recovery import LossRecovery, SentPacket
from endpoints.protocol.rtt import RttEstimator
from endpoints.protocol.wire import ts_age, ts_us

CC_SAMPLE_INTERVAL = 0.005  # s between `Cc` trace samples: a few per RTT at 10 Mbit/s
EV_LOAD_INTERVAL = 0.05  # s over which `EvLoad` counts packets per EV


class MrcSender(PortSteering, LossRecovery, CoreBase):
    # The EV set and congestion control a sender builds: named override points
    # (endpoints/protocol/replaceable.py) set them in a subclass, nothing else does.
    evset_cls: type[EvSet] = EvSet
    cc_cls: type[Nscc] = Nscc

    def __init__(self, qpn: int, peer_qpn: int, evs: Sequence[EvInfo], config: TransportConfig,
                 seed: int, initial_psn: int = 0, pacer: NicPacer | None = None) -> None:
        self.qpn, self.peer_qpn, self.c = qpn, peer_qpn, config
        self.rng = random.Random(seed)
        self.evs = self.evset_cls([EvInfo(*e) for e in evs], config.active_fraction, config.ev_min_active,
                         config.skip_rotations, self.rng, config.ev_set_size,
                         stateless=not config.path_state, backup_min_paths=config.backup_min_paths)
        self.cc = self.cc_cls(config)
        # The host's NIC ports (nicpacer.py), shared with its other QPs; None: every packet the
        # window allows goes to the caller at once.
        self.pacer = pacer
        self.ports = PortStatus(config.port_status)  # NIC ports, ours and the peer's (portstatus.py)
        self._pace_wait: float | None = None  # when a busy port frees, while new data waits
        self._lasthop_marked_until = 0.0  # acks read as ECN-marked until then (lasthop_mark_rtts)
        self._frame_overhead = wire.DATA_OVERHEAD + wire.FRAME_OVERHEAD  # wire bytes besides payload
        self.next_seq = self.una = initial_psn
        self.outstanding: OrderedDict[int, SentPacket] = OrderedDict()  # in transmission order
        self.retx_queue: deque[SentPacket] = deque()
        self.retx_seqs: set[int] = set()
        self.retained: dict[int, memoryview] = {}  # msn -> data, until every packet is acked
        self.messages: deque[list[Any]] = deque()  # [msn, data, next_offset], in posting order
        self.pkts_left: dict[int, int] = {}  # msn -> packets not yet acknowledged
        self.msg_bytes: dict[int, int] = {}
        self.next_msn = 0
        self.next_complete = 0
        self.done_ahead: set[int] = set()
        self.completed: list[int] = []
        self.tx_count = 0
        self.rack_tx = 0  # highest transmission number acknowledged
        self._emit_clock = 0.0  # the latest `now` a packet was handed out at
        self._emit_ordered = True  # no `now` earlier than the one before (recovery's early stop)
        self.rto = config.rto_initial
        self.ev_rtt: dict[int, RttEstimator] = {}  # each path's own timing
        self.ev_bytes: dict[int, int] = {}  # payload bytes sent per EV (the CLI's `evs`)
        self._median_rtt: float | None = None
        self.recent: dict[int, SentPacket] = {}  # acknowledged packets at or above una (for SACK reasoning)
        # Path order says lost, pending `reorder_slack`: a trimmed packet's header overtakes the
        # data behind it, and its NACK can come back after the SACK that shows the later packet
        # (they take different reverse EVs); a trim must not bench the path.
        self.suspects: dict[int, tuple[float, int]] = {}  # seq -> (when path order first said
        # that transmission was lost, its tx number)
        self.last_progress = 0.0
        self.prober = Prober(peer_qpn, config.probe_interval, config.probe_timeout,
                             random.Random(self.rng.getrandbits(64)))  # bad EVs
        self.echoes = Echoes(config.echo_keep)  # what an acceptable SACK or NACK echoes
        self.deferred: dict[int, tuple[float, SentPacket]] = {}  # seq -> (resend at, packet): RNR
        self.replies: list[tuple[int, bytes]] = []  # probe replies owed to the receiver
        self._probed: tuple[int, int] | None = None  # tail probes (recovery.py)
        self._probe_echo: tuple[int, int, int] | None = None
        self.presumed: dict[int, int] = {}  # seq -> tx: presumed lost, out of the window (recovery.py)
        self.proven_ev: int | None = None  # forward EV that most recently delivered (ack, probe reply)
        self.events: list[Complete | Rtt | Retx | EvState | EvActive | Cc | CwndDec | EvSkip | EvBad |
                          FloorHold | EvLoad | Timeout] = []
        self.bytes_acked = 0
        self.cc_sample_interval: float | None = CC_SAMPLE_INTERVAL  # None: no `Cc` samples
        self._next_cc_sample = 0.0
        self.ev_load_interval: float | None = EV_LOAD_INTERVAL  # None: no `EvLoad`
        self._ev_sent: dict[int, int] = {}
        self._ev_load_since = 0.0  # start of the interval `_ev_sent` counts
        self.skips = {"ecn": 0, "trim": 0, "delay": 0, "dark": 0}  # EV skips by cause
        self.stats = {k: 0 for k in ("sent", "retransmitted", "lost", "timeouts", "trimmed_nacks",
                                     "ecn_echoes", "probes_sent", "probe_replies", "sacks",
                                     "nacks", "malformed", "foreign", "stale_acks", "bad_evs",
                                     "resurrected", "floor_holds", "delay_skips", "stranded_resent",
                                     "unacceptable", "rnr", "tail_probes", "presumed", "rtt_unusable")}

    # ----- API ------------------------------------------------------------------------------
    def send_message(self, data: bytes | memoryview, now: float) -> int:
        if not len(data):
            raise ValueError("a message needs at least one byte")
        if len(data) > self.c.max_message:
            raise ValueError(f"message of {len(data)} bytes exceeds max_message {self.c.max_message}")
        msn = self.next_msn
        self.next_msn += 1
        self.messages.append([msn, memoryview(data), 0])
        self.pkts_left[msn] = -(-len(data) // self.c.mtu_payload)
        self.msg_bytes[msn] = len(data)
        if not self.outstanding:
            self.last_progress = now
        return msn

    def ev_states(self) -> dict[int, str]:
        return dict(self.evs.state)

    def ev_report(self) -> list[EvReport]:
        evs, active = self.evs, set(self.evs.active)
        return [EvReport(ev, state, ev in active, evs.entered[ev, SKIP], evs.entered[ev, ASSUMED_BAD],
                         est.srtt if (est := self.ev_rtt.get(ev)) else None, self.ev_bytes.get(ev, 0))
                for ev, state in evs.state.items()]

    def deny_ev(self, ev: int) -> None:
        self.evs.deny(ev)
        self._drain_changes(0.0)

    @property
    def unsent_messages(self) -> int:
        """Messages not yet fully transmitted (the agent keeps this topped up when streaming)."""
        return len(self.messages)

    @property
    def idle(self) -> bool:
        return not self.outstanding and not self.retx_queue and not self.messages and \
            not self.deferred

    def next_deadline(self) -> float | None:
        # Asked after every poll. "At once" first: no timer can be earlier than 0.0 (times
        # are the caller's clock, never negative), so the timers need not be computed then.
        if self.retx_queue or self.replies:
            return 0.0
        deadlines = []
        if self._can_send_new():
            if self._pace_wait is None:
                return 0.0
            deadlines.append(self._pace_wait)
        elif not self.messages and (probe := self._tail_probe_due()) is not None:
            deadlines.append(probe)
        if self.outstanding:
            oldest = next(iter(self.outstanding.values()))
            # Neither loss timer is shorter than queue_delay_bound (_rto_for, _dark_window):
            # when a port frees sooner, as it usually does, they cannot be the earliest.
            if not deadlines or oldest.sent + self.c.queue_delay_bound < deadlines[0]:
                deadlines.append(oldest.sent + self._rto_for(oldest))
                if oldest.tx < self.rack_tx:
                    deadlines.append(oldest.sent + self._dark_window(oldest.ev))
            if oldest.missing and oldest.tx < self.rack_tx and oldest.seq not in self.presumed and \
                    self.c.presume_dark and not self.evs.stateless:  # its window place frees then
                deadlines.append(oldest.sent + self._pto(oldest.ev))
        if self.suspects:
            deadlines.append(min(first for first, _ in self.suspects.values()) + self.c.reorder_slack)
        if self.prober.pending or self.evs.any_bad():
            deadlines.append(self.prober.next_round)
        if self.deferred:
            deadlines.append(min(due for due, _ in self.deferred.values()))
        return min(deadlines) if deadlines else None

    # ----- receiving ------------------------------------------------------------------------
    def _ack_seq(self, seq: int, now: float) -> SentPacket | None:
        p = self.outstanding.pop(seq, None)
        if p is None and seq in self.deferred:
            p = self.deferred.pop(seq)[1]  # refused once (RNR), placed since from another copy
        if p is None:
            if seq not in self.retx_seqs:
                return None
            # Declared lost but acknowledged after all (a slow path): the ack wins.
            self.retx_seqs.discard(seq)
            p = next(q for q in self.retx_queue if q.seq == seq)
            self.retx_queue.remove(p)
        self.recent[seq] = p
        if p.retx == 0 and p.tx > self.rack_tx:  # Karn: a resent packet's ack is ambiguous
            self.rack_tx = p.tx
            self.proven_ev = p.ev
        self.bytes_acked += p.length
        left = self.pkts_left[p.msn] - 1
        self.pkts_left[p.msn] = left
        if left == 0:
            del self.pkts_left[p.msn]
            self.msg_bytes.pop(p.msn, None)
            self.retained.pop(p.msn, None)
            self.done_ahead.add(p.msn)
            while self.next_complete in self.done_ahead:
                self.done_ahead.discard(self.next_complete)
                self.completed.append(self.next_complete)
                self.events.append(Complete(now, self.next_complete))
                self.next_complete += 1
        return p

    def _on_sack(self, s: wire.Sack, now: float) -> None:
        if not self.echoes.genuine(s.echo_ev, s.echo_ts):
            self.stats["unacceptable"] += 1  # echoes no packet of ours: forged (or ancient)
            return
        self.stats["sacks"] += 1
        if s.ports_down != self.ports.remote:
            self._peer_ports(s.ports_down, s.echo_ts, now)
        ref = self.una
        cack = wire.psn_unwrap(s.cack, ref)
        if cack > self.next_seq:
            self.stats["stale_acks"] += 1  # acknowledges what was never sent: forged or stale
            return
        acked = 0
        if cack > self.una:
            for seq in range(self.una, cack):
                if self._ack_seq(seq, now) is not None:
                    acked += 1
        base = wire.psn_unwrap(s.base, ref)
        # What this one SACK proves: per EV, the newest transmission it reports received.
        newest: dict[int, int] = {}
        # The bitmap's meaningful window: PSNs in [max(base, cack), next_seq), as a bit mask.
        lo = max(cack - base, 0)
        hi = min(self.next_seq - base, 64)
        window = ((1 << hi) - 1) & ~((1 << lo) - 1) if hi > lo else 0
        received = s.bitmap & window
        bits = received
        while bits:  # set bits only: a SACK usually reports a handful
            low = bits & -bits
            bits ^= low
            seq = base + low.bit_length() - 1
            p = self._ack_seq(seq, now)
            if p is not None:
                acked += 1
            else:
                p = self.recent.get(seq)
            if p is not None and p.retx == 0 and p.tx > newest.get(p.ev, 0):
                newest[p.ev] = p.tx
        self._probe_evidence(s, cack, base, received, newest)
        self._lost_by_path_order(s, base, window & ~received, newest, now)
        self._advance_una()
        if acked:
            self.last_progress = now
            self.rto = max(self.c.rto_min, min(self.c.rto_max, self._rto_base()))
        ecn = bool(s.flags & wire.F_ECN_ECHO)
        if ecn:
            self.stats["ecn_echoes"] += 1
            self._skip(s.echo_ev, now, "ecn")
        rtt: float | None = ts_age(now, s.echo_ts)  # every SACK echoes a real tsval; 0 is one too
        if rtt is not None and rtt > 10.0:
            # A forged or ancient echo must not poison the estimator; nor one stamped later than
            # its packet left (it reads as one from the future): counted, as NSCC then learns
            # nothing from the SACK (nicpacer.py's docstring).
            rtt = None
            self.stats["rtt_unusable"] += 1
        if rtt is not None and not ecn and rtt > self.c.delay_skip_over_target * self.cc.target:
            self.stats["delay_skips"] += 1
            self._skip(s.echo_ev, now, "delay", rtt)  # a hot path: move load off it, as ECN would
        if rtt is not None:
            self._ev_rtt_sample(s.echo_ev, rtt)
            self.events.append(Rtt(now, s.echo_ev, rtt))
        lasthop = now < self._lasthop_marked_until  # the last hop's trims stand for its marks
        self.cc.on_ack(now, rtt, ecn or lasthop, acked, self._typical_path_delay())
        self._detect_losses(now)
        self._drain_changes(now)
        self._trace_cc(now)

    def _skip(self, ev: int, now: float, cause: str, rtt: float | None = None) -> None:
        """Skip `ev` (congestion on its path, not failure) for `skip_rotations` rotations and
        `skip_rtts` round trips of that path: its own smoothed RTT where longer than the QP's.
        The next news of a hot path (its next echo) takes the path's round trip, queue included;
        counted in the QP's RTT, which its cooler paths keep short, the EV came back after a
        fraction of that and carried its share of the spray for a whole round trip of the hot
        path before the next mark could say so again (Fig. 14, docs/experiments.md)."""
        base = self.cc.srtt
        est = self.ev_rtt.get(ev)
        if est is not None and est.srtt > base:
            base = est.srtt
        if self.evs.skip(ev, now + self.c.skip_rtts * base):
            self.skips[cause] += 1
            self.events.append(EvSkip(now, ev, cause, rtt))

    def _trace_cc(self, now: float, force: bool = False) -> None:
        """The window decreases since the last call, and a `Cc` sample when one is due."""
        cc = self.cc
        for t, cause, before, after, fraction in cc.log:
            self.events.append(CwndDec(t, cause, round(before, 2), round(after, 2), round(fraction, 4)))
        cc.log.clear()
        if self.cc_sample_interval is None or (now < self._next_cc_sample and not force):
            return
        self._next_cc_sample = now + self.cc_sample_interval
        base = None if cc.base_rtt == float("inf") else round(cc.base_rtt, 6)
        path = None if self._median_rtt is None else round(self._median_rtt, 6)
        self.events.append(Cc(now, round(cc.cwnd, 2), len(self.outstanding), round(cc.srtt, 6), base,
                              round(cc.target, 6), round(cc.ecn_frac, 4), path, round(self.rto, 4),
                              len(self.evs.usable())))

    def _advance_una(self) -> None:
        while self.una < self.next_seq and self.una not in self.outstanding and \
                self.una not in self.retx_seqs and self.una not in self.deferred:
            self.recent.pop(self.una, None)
            self.una += 1

    def _on_probe(self, p: wire.Probe, now: float) -> None:
        if p.opcode == wire.OP_EV_PROBE:
            # The receiver probes its reverse EVs; answer over the forward EV that delivered last:
            # an answer lost on a dead forward path would condemn a good reverse one.
            reply = wire.encode_probe(wire.OP_EV_PROBE_REPLY, self.peer_qpn, p.probe_id, p.tsval,
                                      p.probed_ev, self.ports.sent)
            ev = self.proven_ev
            if ev is None or self.evs.state.get(ev, DENIED) == DENIED:
                ev = self.evs.next_ev()
            self.replies.append((ev, reply))
            return
        ev = self.prober.answered(p.probe_id, p.probed_ev, p.tsval)
        if ev is None:
            self.stats["stale_acks"] += 1
            return
        self.stats["probe_replies"] += 1
        if p.ports_down != self.ports.remote:
            self._peer_ports(p.ports_down, p.tsval, now)
        self.proven_ev = ev
        if self.evs.probe_result(ev, True, self.c.probes_to_resurrect):
            self.stats["resurrected"] += 1
        self._drain_changes(now)

    # ----- path timing ----------------------------------------------------------------------
    def _typical_path_delay(self) -> float | None:
        """Median smoothed RTT over the active EVs, refreshed every 16 SACKs (cheap enough)."""
        if self.stats["sacks"] % 16 == 1 or self._median_rtt is None:
            values = sorted(est.srtt for ev in self.evs.active if (est := self.ev_rtt.get(ev)))
            self._median_rtt = values[len(values) // 2] if values else None
        return self._median_rtt

    def _ev_rtt_sample(self, ev: int, rtt: float) -> None:
        est = self.ev_rtt.get(ev)
        if est is None:
            est = self.ev_rtt[ev] = RttEstimator()
        est.sample(rtt)

    # ----- probing --------------------------------------------------------------------------
    def _probe(self, now: float, out: list[tuple[int, bytes]]) -> None:
        for ev in self.prober.expired(now):
            self.evs.probe_result(ev, False, self.c.probes_to_resurrect)
        probes = self.prober.due(now, self.evs.bad, self.ports.sent)
        self.stats["probes_sent"] += len(probes)
        out += probes

    def _drain_changes(self, now: float) -> None:
        for ev, old, new in self.evs.changes:
            self.events.append(EvState(now, ev, old, new))
        self.evs.changes.clear()
        for ev, active in self.evs.moves:
            self.events.append(EvActive(now, ev, active))
        self.evs.moves.clear()

    # ----- transmitting ---------------------------------------------------------------------
    def _can_send_new(self) -> bool:
        """Window open, and the next message within `max_open_messages` of the oldest one not yet
        complete: the receiver drops packets of messages beyond that (they would come back as
        losses and bench good paths). The receiver completes in MSN order no later than we do.
        (Asked a few times per packet: one call, no helper.)"""
        messages = self.messages
        flight = len(self.outstanding)
        if self.presumed:
            outstanding = self.outstanding
            flight -= sum(1 for seq, tx in self.presumed.items()
                          if (q := outstanding.get(seq)) is not None and q.tx == tx)
        return bool(messages) and flight < int(self.cc.cwnd) and \
            messages[0][0] < self.next_complete + self.c.max_open_messages

    def _emit(self, p: SentPacket, now: float, data: memoryview | None, retx: bool,
              ev: int | None = None) -> tuple[int, bytes]:
        p.ev = ev = self.evs.next_ev() if ev is None else ev
        self.ev_bytes[ev] = self.ev_bytes.get(ev, 0) + p.length
        self._ev_sent[ev] = self._ev_sent.get(ev, 0) + 1
        if self.pacer is not None:
            # The NIC's departure time where it stamps one (a queue the host holds is no RTT)
            sent = self.pacer.charge(self.evs.plane[ev], p.length + self._frame_overhead, now)
        else:
            sent = now
        p.sent, p.emitted = sent, now
        if now < self._emit_clock:
            self._emit_ordered = False  # a caller's clock went back: `_detect_losses` reads all
        self._emit_clock = now
        p.ts = ts = ts_us(sent)
        self.echoes.sent(p.ev, ts, now)
        p.missing = False  # only a SACK generated after this transmission may say it is missing
        self.tx_count += 1
        p.tx = self.tx_count
        flags = 0
        if retx:
            flags |= wire.F_RETRANSMIT | wire.F_ACK_REQ
        elif p.opcode in (wire.OP_DATA_LAST, wire.OP_DATA_ONLY):
            flags |= wire.F_ACK_REQ
        self.outstanding[p.seq] = p
        payload = data[p.offset:p.offset + p.length] if data is not None else b""
        return p.ev, wire.encode_data(p.opcode, flags, self.peer_qpn, p.seq, p.msn, p.offset,
                                      p.msg_len, payload, ts)

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        if self.replies:
            out += self.replies
            self.replies = []
        self.echoes.expire(now)
        self._detect_losses(now)
        self._check_rto(now)
        if not self.prober.quiet(now):
            self._probe(now, out)
        if self.deferred:
            for seq, (due, p) in list(self.deferred.items()):
                if due <= now:
                    del self.deferred[seq]
                    self._queue_retx(p, now, "rnr")
        while self.retx_queue:
            p = self.retx_queue.popleft()
            self.retx_seqs.discard(p.seq)
            data = self._message_data(p.msn)
            if data is None:
                continue  # its message completed meanwhile (acked through another copy)
            p.retx += 1
            self.stats["retransmitted"] += 1
            out.append(self._emit(p, now, data, True))
        mtu = self.c.mtu_payload
        self._pace_wait = None
        self.evs.now = now
        pacer = self.pacer
        if pacer is not None:
            plane_ok = pacer.ready_at(now)
        while self._can_send_new():
            ev = None
            if pacer is not None:
                ev = self.evs.next_ev_paced(plane_ok)
                if ev is None:  # every port this QP can use is busy: wait for one
                    self._pace_wait = pacer.next_ready(now)
                    break
            entry = self.messages[0]
            msn, data, offset = entry
            length = min(mtu, len(data) - offset)
            first, last = offset == 0, offset + length >= len(data)
            p = SentPacket(self.next_seq, msn, offset, length, len(data), wire.data_opcode(first, last))
            self.next_seq += 1
            entry[2] = offset + length
            if first:
                self.retained[msn] = data
            if last:
                self.messages.popleft()
            self.stats["sent"] += 1
            out.append(self._emit(p, now, data, False, ev))
        if not self.retx_queue and not self.messages:  # a tail: nothing left to send
            probe_at = self._tail_probe_due()
            if probe_at is not None and now >= probe_at and (probe := self._tail_probe(now)) is not None:
                out.append(probe)
        if self.evs.changes or self.evs.moves:
            self._drain_changes(now)
        if self.ev_load_interval is not None and now >= self._ev_load_since + self.ev_load_interval:
            if self._ev_sent:
                self.events.append(EvLoad(now, round(now - self._ev_load_since, 6),
                                          {str(k): v for k, v in self._ev_sent.items()}))
                self._ev_sent = {}
            self._ev_load_since = now
        return out

    def _message_data(self, msn: int) -> memoryview | None:
        return self.retained.get(msn) if msn in self.pkts_left else None
