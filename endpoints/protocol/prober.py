"""The one probe loop: every `interval`, one EV probe to each target EV that has none in
flight; a probe unanswered after `timeout` counts as a failure. The MRC sender probes its
ASSUMED_BAD forward EVs with it, the receiver its reverse EVs: the same shape, other targets.

Sans-IO like the cores: the caller passes the time, sends what `due` returns, and reports the
replies (`answered`) and the timeouts (`expired`) to whatever keeps the EVs' state.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from endpoints.protocol import wire


class Prober:
    """`rng` draws the probe ids: a reply must name a probe in flight, its EV and its
    timestamp, so one cannot be forged by counting (ids were 1, 2, 3, ...)."""

    def __init__(self, peer_qpn: int, interval: float, timeout: float,
                 rng: random.Random | None = None) -> None:
        self.peer_qpn = peer_qpn
        self.interval = interval  # s between rounds
        self.timeout = timeout  # s after which a probe is taken as lost
        self.pending: dict[int, tuple[int, float, int]] = {}  # probe id -> (ev, sent, tsval)
        self.rng = rng or random.Random(peer_qpn)
        self.next_round = 0.0

    def quiet(self, now: float) -> bool:
        """No probe in flight and no round due: `expired` and `due` would both return nothing
        (one call for the caller's every poll instead of two)."""
        return not self.pending and now < self.next_round

    def expired(self, now: float) -> list[int]:
        """The EVs whose probe went unanswered for longer than `timeout` (forgotten now)."""
        if not self.pending:
            return []  # the usual case, asked on every poll
        lost = []
        for pid, (ev, sent, _) in list(self.pending.items()):
            if now - sent > self.timeout:
                del self.pending[pid]
                lost.append(ev)
        return lost

    def due(self, now: float, targets: Callable[[], Iterable[int]],
            ports_down: int = 0) -> list[tuple[int, bytes]]:
        """(ev, probe datagram) to send now: one per target without a probe in flight, once per
        round (`targets` is only asked when a round is due); `ports_down`: the sending host's
        port status (portstatus.py)."""
        if now < self.next_round:
            return []
        self.next_round = now + self.interval
        busy = {ev for ev, _, _ in self.pending.values()}
        out = []
        ts = wire.ts_us(now)
        for ev in targets():
            if ev in busy:
                continue
            probe_id = self.rng.getrandbits(32)
            while probe_id in self.pending:
                probe_id = self.rng.getrandbits(32)
            self.pending[probe_id] = (ev, now, ts)
            out.append((ev, wire.encode_probe(wire.OP_EV_PROBE, self.peer_qpn, probe_id, ts, ev,
                                              ports_down)))
        return out

    def answered(self, probe_id: int, probed_ev: int, tsval: int) -> int | None:
        """The EV a probe reply is for, or None for a reply to no probe in flight (or one
        that does not echo that probe's EV and timestamp)."""
        entry = self.pending.get(probe_id)
        if entry is None or entry[0] != probed_ev or entry[2] != tsval:
            return None
        del self.pending[probe_id]
        return entry[0]
