"""MRC receiver, one per QP: sans-IO.

Places every data packet as it arrives, in any order, once it is consistent with the sender's
packetisation and with what is already known (`placement.py`: memory is what arrived, a forged
claim cannot wedge the QP); suppresses duplicates by PSN; completes messages in MSN order, each
exactly once; acknowledges with SACKs (cumulative ACK + 64-bit bitmap + the EV and timestamp of
the packet that triggered it + ECN echo) every `sack_every` packets or after `sack_delay`, and
at once for a CE-marked packet (`ack_on_ce`: a coalesced SACK echoes only its newest packet's EV
and mark); NACKs trimmed packets, out-of-window PSNs, and (NO_PKT_BUFFER: resend later) packets it cannot
place yet. A duplicate is answered with its own echo, so a flood of forged copies cannot
displace the genuine trigger; per-EV state is kept for the sender's real paths only.
SACKs, NACKs and probe answers use a small reverse
EV set (`reverse_evs_per_plane` per plane), round-robin and kept honest by probes: a reverse
EV whose probes go unanswered twice is swapped for a spare reverse EV (same plane first) when
the fabric offers one, else dropped from the rotation until a probe gets through again; when
every reverse EV looks dead (a probe reply also needs a working forward path), SACKs rotate
over all of them rather than sit on one. SACKs also skip the reverse EVs whose forward twin (the
same path the other way) went silent, and go back the way their echoed packet came when every
one has (`sack_on_arrival_path`): links that fail both ways take reverse paths with the forward
ones, and probes take two rounds to condemn them.
Reverse EVs of a plane whose NIC port is down, here or at the sender (portstatus.py), are left
out of the rotation and of probing; every control packet carries this host's port status, and a
change of it goes out at once in a SACK.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.core import CoreBase
from endpoints.protocol.events import Ports, ReverseEvState, SackCadence
from endpoints.protocol.evset import EvInfo, spread_over_planes
from endpoints.protocol.placement import BUSY, DUPLICATE, FULL, LATE, PLACED, Placement
from endpoints.protocol.portstatus import PortStatus
from endpoints.protocol.prober import Prober

CADENCE_INTERVAL = 0.05  # s summed by one `SackCadence` trace event


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
        self.out = 0  # planes whose port is down at either end (bit p), left out of the rotation
        self.dead: set[int] = set()  # condemned by their probes, until one gets through again

    def next(self) -> int:
        out = self.out
        for _ in range(len(self.evs)):
            self._i = (self._i + 1) % len(self.evs)
            ev = self.evs[self._i]
            if self.alive[ev] and not (out and out >> self.plane[ev] & 1):
                return ev
        # All presumed dead: rotate over every one of them rather than go silent or sit on one.
        self._i = (self._i + 1) % len(self.evs)
        return self.evs[self._i]

    def back(self, ev: int, fallback: int | None = None) -> int:
        """The reverse EV for a reply to a packet that arrived on forward EV `ev`: that path's
        own way back (the model numbers both directions of a pair alike), which that arrival
        just proved up; `fallback` (else the rotation's next) when `ev` names no path back,
        probes condemned it or its plane is out."""
        plane = self.plane.get(ev)
        if plane is None or ev in self.dead or self.out >> plane & 1:
            return self.next() if fallback is None else fallback
        return ev

    def result(self, ev: int, ok: bool) -> tuple[bool, bool] | None:
        """Record a probe outcome; returns (old, new) liveness when it changed."""
        if ev not in self.alive:
            return None  # a late answer for an EV swapped out meanwhile
        old = self.alive[ev]
        if ok:
            self.misses[ev] = 0
            self.alive[ev] = True
            self.dead.discard(ev)
        else:
            self.misses[ev] += 1
            if self.misses[ev] >= 2:
                self.alive[ev] = False
                self.dead.add(ev)
                self._swap(ev)
        return (old, self.alive.get(ev, False)) if old != self.alive.get(ev, False) else None

    def probed(self) -> list[int]:
        """The EVs in use that probes should test: none on a plane whose port is down."""
        return [ev for ev in self.evs if not self.out >> self.plane[ev] & 1]

    def _swap(self, dead: int) -> None:
        """Replace a dead EV with a spare, same plane first; the dead one becomes the last spare.
        The spare carries nothing until a probe proves it: in a plane whose every path is
        down, a spare presumed alive took its share of the SACKs and probe answers for two
        probe rounds, then the next one did, so the sender's probes of its own bad EVs there
        kept going unanswered, and a restored path waited hundreds of milliseconds to be used."""
        if not self.spares:
            return
        spare = next((s for s in self.spares if self.plane[s] == self.plane[dead]), self.spares[0])
        self.spares.remove(spare)
        self.spares.append(dead)
        self.evs[self.evs.index(dead)] = spare
        del self.alive[dead], self.misses[dead]
        self.alive[spare] = False
        self.misses[spare] = 0


class MrcReceiver(CoreBase):
    def __init__(self, qpn: int, peer_qpn: int, reverse_evs: Sequence[EvInfo],
                 config: TransportConfig, seed: int, initial_psn: int = 0,
                 forward_evs: Collection[int] | None = None) -> None:
        """`reverse_evs`: this host's paths to the sender (for SACKs); `forward_evs`: the
        sender's EVs towards us, the only ones per-EV state is kept for (default: the same
        values as `reverse_evs`, as the model numbers both directions of a pair alike)."""
        self.qpn, self.peer_qpn, self.c = qpn, peer_qpn, config
        self.rng = random.Random(seed ^ 0x5EED)
        self.rev = ReverseEvs([EvInfo(*e) for e in reverse_evs], config.reverse_evs_per_plane,
                              self.rng)
        self.forward_evs = frozenset(forward_evs if forward_evs is not None
                                     else (EvInfo(*e).ev for e in reverse_evs))
        self.place = Placement(config.mtu_payload, config.max_message, config.max_open_messages,
                               config.max_held_bytes, initial_psn)
        self.highest = initial_psn - 1
        self.completed: list[tuple[int, bytes]] = []
        self.bytes_delivered = 0
        self.out: list[tuple[int, bytes]] = []
        self.unacked = 0
        self.sack_due: float | None = None
        self.last_sack = -1.0
        self.trigger = (0, 0, 0)  # (seq, ev, tsval) of the newest data packet placed
        self.dup_echo: tuple[int, int] | None = None  # (ev, tsval) of a duplicate to answer
        self.ce_pending = 0
        self.ce_on_trigger = False
        self.ports = PortStatus(config.port_status)  # NIC ports, ours and the sender's
        # The reverse EVs' liveness: answered probes keep them in the SACK rotation.
        self.prober = Prober(peer_qpn, config.reverse_probe_interval, config.probe_timeout,
                             random.Random(self.rng.getrandbits(64)))
        self.events: list[ReverseEvState | SackCadence | Ports] = []
        # SACK cadence for the trace, summed over `cadence_interval`: why each SACK left
        # (count / delay / urgent), the packets it covered, the longest gap between two.
        self.cadence_interval: float | None = CADENCE_INTERVAL  # None: no `SackCadence`
        self._cad = dict.fromkeys(("sacks", "pkts", "count", "delay", "urgent", "nacks", "ce"), 0)
        self._cad_gap = 0.0
        self._cad_since = 0.0
        self._last_sack_t: float | None = None
        self._sack_why = "delay"
        self.stats = {k: 0 for k in ("packets", "duplicates", "malformed", "foreign",
                                     "out_of_window", "forged", "busy", "no_buffer", "evicted",
                                     "trimmed", "sacks", "nacks", "ce_marked", "messages",
                                     "probe_replies", "ev_reordered", "unknown_ev")}
        self.ev_high: dict[int, int] = {}  # forward EV -> highest first-transmission PSN on it
        self.ev_seen: dict[int, float] = {}  # forward EV -> its latest packet's arrival
        self._gap = 0.0  # s between packets (on the sender's paths), smoothed as an RTT is
        self._last_arrival = 0.0

    @property
    def rcv_nxt(self) -> int:
        return self.place.rcv_nxt

    # ----- API ------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        # Asked after every poll: no list. Owed packets go at once (0.0: no timer is earlier).
        if self.out:
            return 0.0
        due = self.prober.next_round
        sack_due = self.sack_due
        return sack_due if sack_due is not None and sack_due < due else due

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        if self.sack_due is not None and now >= self.sack_due:
            self._send_sack(now)
        if self.cadence_interval is not None and now >= self._cad_since + self.cadence_interval:
            self._trace_cadence(now)
        if not self.prober.quiet(now):
            self._probe_reverse(now)
        out, self.out = self.out, []
        return out

    def set_local_ports(self, mask: int, now: float) -> None:
        """This host's NIC ports (bit p set while plane p's port is down): SACKs leave the
        dead planes, and a SACK tells the sender at once (once it has sent anything)."""
        if self.ports.set_local(mask):
            self._ports_changed(now)
            if self.stats["packets"]:
                self.sack_due = now
                self._sack_why = "urgent"

    def _ports_changed(self, now: float) -> None:
        self.rev.out = self.ports.down
        self.events.append(Ports(now, self.ports.local, self.ports.remote,
                                 [p for p in sorted(set(self.rev.plane.values())) if self.rev.out >> p & 1]))

    # ----- data -----------------------------------------------------------------------------
    def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
        self.stats["packets"] += 1
        seq = wire.psn_unwrap(d.psn, self.place.rcv_nxt)
        if d.flags & wire.F_TRIMMED:
            self.stats["trimmed"] += 1
            reason = wire.NACK_TRIMMED_LASTHOP if d.flags & wire.F_TRIMMED_LASTHOP else wire.NACK_TRIMMED
            self._nack(seq, reason, ev, d.tsval)
            return
        if seq >= self.place.rcv_nxt + self.c.psn_window:
            self.stats["out_of_window"] += 1
            self._nack(seq, wire.NACK_PSN_OOR_WINDOW, ev, d.tsval)
            return
        verdict = self.place.offer(seq, d.msn, d.offset, d.msg_len, d.payload)
        if verdict != PLACED:
            self._refused(verdict, seq, ev, d.tsval, now)
            return
        if ev in self.forward_evs:
            self.ev_seen[ev] = now
            self._gap += (now - self._last_arrival - self._gap) * 0.125
            self._last_arrival = now
            if not d.flags & wire.F_RETRANSMIT:
                # An EV is one source route: first transmissions on it should arrive in PSN
                # order. Counting the exceptions tells whether the emulated paths really are
                # FIFO (the sender's path-order loss rule relies on it).
                if seq < self.ev_high.get(ev, -1):
                    self.stats["ev_reordered"] += 1
                else:
                    self.ev_high[ev] = seq
            # The SACK echoes the newest packet placed: only one on a real path (a forgery on
            # an EV the sender never uses must not make the next SACK unacceptable to it).
            self.trigger = (seq, ev, d.tsval)
            self.ce_on_trigger = ce
        else:
            self.stats["unknown_ev"] += 1  # not one of the sender's paths: no per-EV state
        if ce:
            self.stats["ce_marked"] += 1
            self.ce_pending += 1
        self.bytes_delivered += len(d.payload)
        if seq > self.highest:
            self.highest = seq
        if self.place.completed:
            self.stats["messages"] += len(self.place.completed)
            self.completed += self.place.completed
            self.place.completed = []
        self.stats["evicted"] = self.place.evicted
        self._ack_soon(now, urgent=bool(d.flags & (wire.F_ACK_REQ | wire.F_RETRANSMIT)) or
                       (ce and self.c.ack_on_ce))

    def _refused(self, verdict: str, seq: int, ev: int, tsval: int, now: float) -> None:
        """A data packet not placed: nothing about it is marked received."""
        if verdict == DUPLICATE:
            # The sender may have missed our SACK: answer it, echoing this copy (not the
            # trigger, which a flood of copies must not displace), at most once per sack_delay.
            self.stats["duplicates"] += 1
            self.dup_echo = (ev, tsval)
            due = max(now, self.last_sack + self.c.sack_delay)
            if self.sack_due is None or due < self.sack_due:
                self.sack_due = due
                self._sack_why = "urgent"
        elif verdict in (BUSY, FULL):
            # Plausible but not placeable now: ask for it again later (RNR), unmarked.
            self.stats["busy" if verdict == BUSY else "no_buffer"] += 1
            self._nack(seq, wire.NACK_NO_PKT_BUFFER, ev, tsval)
        else:
            self.stats["out_of_window" if verdict == LATE else "forged"] += 1

    # ----- acknowledgements -----------------------------------------------------------------
    def _ack_soon(self, now: float, urgent: bool) -> None:
        self.unacked += 1
        if urgent or self.unacked >= self.c.sack_every:
            if self.sack_due is None or self.sack_due > now:
                self._sack_why = "urgent" if urgent else "count"
            self.sack_due = now
        elif self.sack_due is None:
            self.sack_due = now + self.c.sack_delay
            self._sack_why = "delay"

    def _trace_cadence(self, now: float) -> None:
        c = self._cad
        if c["sacks"] or c["nacks"]:
            self.events.append(SackCadence(now, round(now - self._cad_since, 6), c["sacks"], c["pkts"],
                                           c["count"], c["delay"], c["urgent"], round(self._cad_gap, 6),
                                           c["nacks"], c["ce"]))
        for k in c:
            c[k] = 0
        self._cad_gap = 0.0
        self._cad_since = now

    def _send_sack(self, now: float) -> None:
        c = self._cad
        c["sacks"] += 1
        c["pkts"] += self.unacked
        c[self._sack_why] += 1
        c["ce"] += self.ce_pending
        if self._last_sack_t is not None:
            self._cad_gap = max(self._cad_gap, now - self._last_sack_t)
        self._last_sack_t = now
        seq, ev, tsval = self.trigger
        rcv_nxt, ooo = self.place.rcv_nxt, self.place.ooo
        if self.highest - rcv_nxt < 64:
            base = rcv_nxt
        else:
            base = max(rcv_nxt, seq - 63)
        bitmap = 0
        # base >= rcv_nxt: what is received there is in `ooo`. Walk whichever is shorter, the
        # few PSNs received out of order (usual) or the bitmap's 64 positions.
        if len(ooo) < 64:
            for psn in ooo:
                if 0 <= psn - base < 64:
                    bitmap |= 1 << (psn - base)
        else:
            for i in range(64):
                if base + i in ooo:
                    bitmap |= 1 << i
        echoes = []
        if self.dup_echo is not None:
            echoes.append((*self.dup_echo, 0))
            self.dup_echo = None
        if self.unacked or not echoes:
            echoes.append((ev, tsval, wire.F_ECN_ECHO if self.ce_on_trigger else 0))
        for echo_ev, echo_ts, flags in echoes:
            self.out.append((self._sack_way(echo_ev, now), wire.encode_sack(
                self.peer_qpn, rcv_nxt, base, bitmap, echo_ev, echo_ts,
                self.ce_pending if flags else 0, flags=flags, ports_down=self.ports.sent)))
            self.stats["sacks"] += 1
        self.last_sack = now
        self.unacked = 0
        self.ce_pending = 0
        self.sack_due = None

    def _sack_way(self, echo_ev: int, now: float) -> int:
        """The rotation's next reverse EV whose forward twin (the same path the other way) has
        not gone silent: nothing on it for a round of every path the sender was heard on, at
        the mean gap between packets, + `reorder_slack` (its links may be down both ways). When
        every one has, the way the echoed packet came, which its arrival just proved up
        (`sack_on_arrival_path`). Never the way back by default: SACKs that follow their data
        made the emulated uplinks queue (docs/transport.md)."""
        way = self.rev.next()
        if not self.c.sack_on_arrival_path:
            return way
        silent = len(self.ev_seen) * self._gap + self.c.reorder_slack
        for _ in range(len(self.rev.evs)):
            seen = self.ev_seen.get(way)
            if seen is None or now - seen <= silent:
                return way
            way = self.rev.next()
        return self.rev.back(echo_ev, way)

    def _nack(self, seq: int, reason: int, ev: int, tsval: int) -> None:
        self._cad["nacks"] += 1
        self.out.append((self.rev.next(), wire.encode_nack(
            self.peer_qpn, seq, reason, ev, tsval, self.place.rcv_nxt, ports_down=self.ports.sent)))
        self.stats["nacks"] += 1

    # ----- probes ---------------------------------------------------------------------------
    def _on_probe(self, p: wire.Probe, now: float) -> None:
        if p.opcode == wire.OP_EV_PROBE:
            # The sender tests one of its bad forward EVs: answer over a live reverse EV.
            self.out.append((self.rev.next(), wire.encode_probe(
                wire.OP_EV_PROBE_REPLY, self.peer_qpn, p.probe_id, p.tsval, p.probed_ev,
                self.ports.sent)))
            return
        ev = self.prober.answered(p.probe_id, p.probed_ev, p.tsval)
        if ev is None:
            return
        self.stats["probe_replies"] += 1
        if p.ports_down != self.ports.remote and self.ports.set_remote(p.ports_down):
            self._ports_changed(now)
        self._record_reverse(ev, True, now)

    def _record_reverse(self, ev: int, ok: bool, now: float) -> None:
        change = self.rev.result(ev, ok)
        if change is not None:
            names = {True: "GOOD", False: "ASSUMED_BAD"}
            self.events.append(ReverseEvState(now, ev, names[change[0]], names[change[1]]))

    def _probe_reverse(self, now: float) -> None:
        for ev in self.prober.expired(now):
            self._record_reverse(ev, False, now)
        self.out += self.prober.due(now, self.rev.probed if self.rev.out else lambda: self.rev.evs,
                                    self.ports.sent)
