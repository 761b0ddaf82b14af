"""MRC receiver, one per QP: sans-IO.

Places every data packet into its message buffer by offset as it arrives, in any order;
suppresses duplicates by PSN; completes messages in MSN order, each exactly once; acknowledges
with SACKs (cumulative ACK + 64-bit bitmap + the EV and timestamp of the packet that triggered
it + ECN echo) every `sack_every` packets or after `sack_delay`; NACKs trimmed packets and
out-of-window PSNs. SACKs travel on a small reverse EV set (`reverse_evs_per_plane` per plane),
used round-robin and kept honest by probes: a reverse EV whose probes go unanswered twice is
swapped for a spare reverse EV (same plane first) when the fabric offers one, else dropped from the
rotation until a probe gets through again; when every reverse EV looks dead (a probe reply also
needs a working forward path), SACKs rotate over all of them rather than sit on one.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.core import CoreBase
from endpoints.protocol.events import ReverseEvState
from endpoints.protocol.evset import EvInfo, spread_over_planes
from endpoints.protocol.prober import Prober


class _Message:
    __slots__ = ("buf", "got", "starts", "ends")

    def __init__(self, length: int) -> None:
        self.buf = bytearray(length)
        self.got = 0
        self.starts: list[int] = []  # placed byte ranges [start, end), disjoint, sorted
        self.ends: list[int] = []

    def overlaps(self, offset: int, length: int) -> bool:
        i = bisect.bisect_right(self.starts, offset)
        return (i > 0 and self.ends[i - 1] > offset) or \
            (i < len(self.starts) and self.starts[i] < offset + length)

    def add(self, offset: int, length: int) -> None:
        i = bisect.bisect_right(self.starts, offset)
        self.starts.insert(i, offset)
        self.ends.insert(i, offset + length)


class ReverseEvs:
    """The receiver's EVs towards the sender, with liveness from probes."""

    def __init__(self, evs: Sequence[EvInfo], per_plane: int, rng: random.Random) -> None:
        planes = {e.plane for e in evs}
        pool = spread_over_planes(evs, len(evs))
        if not pool:
            raise ValueError("a receiver needs at least one reverse EV")
        in_use = per_plane * max(len(planes), 1)
        self.plane = {e.ev: e.plane for e in pool}
        self.evs = [e.ev for e in pool[:in_use]]
        rng.shuffle(self.evs)
        self.spares = [e.ev for e in pool[in_use:]]  # swapped in when an EV in use dies
        self.alive = dict.fromkeys(self.evs, True)
        self.misses = dict.fromkeys(self.evs, 0)
        self._i = 0

    def next(self) -> int:
        for _ in range(len(self.evs)):
            self._i = (self._i + 1) % len(self.evs)
            ev = self.evs[self._i]
            if self.alive[ev]:
                return ev
        # All presumed dead: rotate over every one of them rather than go silent or sit on one.
        self._i = (self._i + 1) % len(self.evs)
        return self.evs[self._i]

    def result(self, ev: int, ok: bool) -> tuple[bool, bool] | None:
        """Record a probe outcome; returns (old, new) liveness when it changed."""
        if ev not in self.alive:
            return None  # a late answer for an EV swapped out meanwhile
        old = self.alive[ev]
        if ok:
            self.misses[ev] = 0
            self.alive[ev] = True
        else:
            self.misses[ev] += 1
            if self.misses[ev] >= 2:
                self.alive[ev] = False
                self._swap(ev)
        return (old, self.alive.get(ev, False)) if old != self.alive.get(ev, False) else None

    def _swap(self, dead: int) -> None:
        """Replace a dead EV with a spare, same plane first; the dead one becomes the last spare."""
        if not self.spares:
            return
        spare = next((s for s in self.spares if self.plane[s] == self.plane[dead]), self.spares[0])
        self.spares.remove(spare)
        self.spares.append(dead)
        self.evs[self.evs.index(dead)] = spare
        del self.alive[dead], self.misses[dead]
        self.alive[spare] = True
        self.misses[spare] = 0


class MrcReceiver(CoreBase):
    def __init__(self, qpn: int, peer_qpn: int, reverse_evs: Sequence[EvInfo],
                 config: TransportConfig, seed: int, initial_psn: int = 0) -> None:
        self.qpn, self.peer_qpn, self.c = qpn, peer_qpn, config
        self.rng = random.Random(seed ^ 0x5EED)
        self.rev = ReverseEvs([EvInfo(*e) for e in reverse_evs], config.reverse_evs_per_plane,
                              self.rng)
        self.rcv_nxt = initial_psn
        self.ooo: set[int] = set()  # received sequence numbers above rcv_nxt
        self.highest = initial_psn - 1
        self.messages: dict[int, _Message] = {}
        self.next_msn = 0
        self.done_ahead: dict[int, bytes] = {}
        self.completed: list[tuple[int, bytes]] = []
        self.bytes_delivered = 0
        self.out: list[tuple[int, bytes]] = []
        self.unacked = 0
        self.sack_due: float | None = None
        self.trigger = (0, 0, 0)  # (seq, ev, tsval) of the newest data packet
        self.ce_pending = 0
        self.ce_on_trigger = False
        # The reverse EVs' liveness: answered probes keep them in the SACK rotation.
        self.prober = Prober(peer_qpn, config.reverse_probe_interval, config.probe_timeout)
        self.events: list[ReverseEvState] = []
        self.stats = {k: 0 for k in ("packets", "duplicates", "malformed", "foreign",
                                     "out_of_window", "forged", "trimmed", "sacks", "nacks",
                                     "ce_marked", "messages", "probe_replies", "ev_reordered")}
        self.ev_high: dict[int, int] = {}  # EV -> highest first-transmission PSN seen on it

    # ----- API ------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        deadlines = [self.prober.next_round]
        if self.sack_due is not None:
            deadlines.append(self.sack_due)
        if self.out:
            deadlines.append(0.0)
        return min(deadlines)

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        if self.sack_due is not None and now >= self.sack_due:
            self._send_sack()
        self._probe_reverse(now)
        out, self.out = self.out, []
        return out

    # ----- data -----------------------------------------------------------------------------
    def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
        self.stats["packets"] += 1
        seq = wire.psn_unwrap(d.psn, self.rcv_nxt)
        if ce:
            self.stats["ce_marked"] += 1
            self.ce_pending += 1
        if d.flags & wire.F_TRIMMED:
            self.stats["trimmed"] += 1
            reason = wire.NACK_TRIMMED_LASTHOP if d.flags & wire.F_TRIMMED_LASTHOP else wire.NACK_TRIMMED
            self._nack(seq, reason, ev, d.tsval)
            return
        if not d.flags & wire.F_RETRANSMIT:
            # An EV is one source route: first transmissions on it should arrive in PSN order.
            # Counting the exceptions tells whether the emulated paths really are FIFO (the
            # sender's path-order loss rule relies on it).
            if seq < self.ev_high.get(ev, -1):
                self.stats["ev_reordered"] += 1
            else:
                self.ev_high[ev] = seq
        if seq >= self.rcv_nxt + self.c.psn_window:
            self.stats["out_of_window"] += 1
            self._nack(seq, wire.NACK_PSN_OOR_WINDOW, ev, d.tsval)
            return
        self.trigger = (seq, ev, d.tsval)
        self.ce_on_trigger = ce
        if seq < self.rcv_nxt or seq in self.ooo:
            self.stats["duplicates"] += 1
            self._ack_soon(now, urgent=True)  # the sender may have missed our SACK
            return
        if not self._place(d):
            return
        if seq == self.rcv_nxt:
            self.rcv_nxt += 1
            while self.rcv_nxt in self.ooo:
                self.ooo.discard(self.rcv_nxt)
                self.rcv_nxt += 1
        else:
            self.ooo.add(seq)
        if seq > self.highest:
            self.highest = seq
        self._ack_soon(now, urgent=bool(d.flags & (wire.F_ACK_REQ | wire.F_RETRANSMIT)))

    def _place(self, d: wire.Data) -> bool:
        msn = d.msn
        if msn < self.next_msn or msn in self.done_ahead:
            self.stats["forged"] += 1  # new PSN for a message already complete
            return False
        if msn >= self.next_msn + self.c.max_open_messages:
            self.stats["out_of_window"] += 1
            return False
        msg = self.messages.get(msn)
        if msg is None:
            if d.msg_len > self.c.max_message or d.msg_len == 0:
                self.stats["forged"] += 1
                return False
            msg = self.messages[msn] = _Message(d.msg_len)
        elif len(msg.buf) != d.msg_len:
            self.stats["forged"] += 1  # disagrees with the message's first packet
            return False
        length = len(d.payload)
        if length == 0 or msg.overlaps(d.offset, length):
            # Empty, or over bytes already placed: the same offset twice, or a range no sender
            # produces. Placing it would overwrite good bytes and count them twice toward `got`.
            self.stats["forged"] += 1
            return False
        msg.buf[d.offset:d.offset + length] = d.payload
        msg.add(d.offset, length)
        msg.got += length
        self.bytes_delivered += length
        if msg.got >= len(msg.buf):
            del self.messages[msn]
            self.done_ahead[msn] = bytes(msg.buf)
            while self.next_msn in self.done_ahead:
                self.completed.append((self.next_msn, self.done_ahead.pop(self.next_msn)))
                self.stats["messages"] += 1
                self.next_msn += 1
        return True

    # ----- acknowledgements -----------------------------------------------------------------
    def _ack_soon(self, now: float, urgent: bool) -> None:
        self.unacked += 1
        if urgent or self.unacked >= self.c.sack_every:
            self.sack_due = now
        elif self.sack_due is None:
            self.sack_due = now + self.c.sack_delay

    def _send_sack(self) -> None:
        seq, ev, tsval = self.trigger
        if self.highest - self.rcv_nxt < 64:
            base = self.rcv_nxt
        else:
            base = max(self.rcv_nxt, seq - 63)
        bitmap = 0
        for i in range(64):
            if base + i in self.ooo:
                bitmap |= 1 << i
        flags = wire.F_ECN_ECHO if self.ce_on_trigger else 0
        self.out.append((self.rev.next(), wire.encode_sack(
            self.peer_qpn, self.rcv_nxt, base, bitmap, ev, tsval, self.ce_pending, flags=flags)))
        self.stats["sacks"] += 1
        self.unacked = 0
        self.ce_pending = 0
        self.sack_due = None

    def _nack(self, seq: int, reason: int, ev: int, tsval: int) -> None:
        self.out.append((self.rev.next(), wire.encode_nack(
            self.peer_qpn, seq, reason, ev, tsval, self.rcv_nxt)))
        self.stats["nacks"] += 1

    # ----- probes ---------------------------------------------------------------------------
    def _on_probe(self, p: wire.Probe, now: float) -> None:
        if p.opcode == wire.OP_EV_PROBE:
            # The sender tests one of its bad forward EVs: answer over a live reverse EV.
            self.out.append((self.rev.next(), wire.encode_probe(
                wire.OP_EV_PROBE_REPLY, self.peer_qpn, p.probe_id, p.tsval, p.probed_ev)))
            return
        ev = self.prober.answered(p.probe_id)
        if ev is None:
            return
        self.stats["probe_replies"] += 1
        self._record_reverse(ev, True, now)

    def _record_reverse(self, ev: int, ok: bool, now: float) -> None:
        change = self.rev.result(ev, ok)
        if change is not None:
            names = {True: "GOOD", False: "ASSUMED_BAD"}
            self.events.append(ReverseEvState(now, ev, names[change[0]], names[change[1]]))

    def _probe_reverse(self, now: float) -> None:
        for ev in self.prober.expired(now):
            self._record_reverse(ev, False, now)
        self.out += self.prober.due(now, lambda: self.rev.evs)
