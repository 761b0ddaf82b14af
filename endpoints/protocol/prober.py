"""The one probe loop: every `interval`, one EV probe to each target EV that has none in
flight; a probe unanswered after `timeout` counts as a failure. The MRC sender probes its
ASSUMED_BAD forward EVs with it, the receiver its reverse EVs: the same shape, other targets.

Sans-IO like the cores: the caller passes the time, sends what `due` returns, and reports the
replies (`answered`) and the timeouts (`expired`) to whatever keeps the EVs' state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from endpoints.protocol import wire


class Prober:
    def __init__(self, peer_qpn: int, interval: float, timeout: float) -> None:
        self.peer_qpn = peer_qpn
        self.interval = interval  # s between rounds
        self.timeout = timeout  # s after which a probe is taken as lost
        self.pending: dict[int, tuple[int, float]] = {}  # probe id -> (ev, sent)
        self.probe_id = 0
        self.next_round = 0.0

    def expired(self, now: float) -> list[int]:
        """The EVs whose probe went unanswered for longer than `timeout` (forgotten now)."""
        lost = []
        for pid, (ev, sent) in list(self.pending.items()):
            if now - sent > self.timeout:
                del self.pending[pid]
                lost.append(ev)
        return lost

    def due(self, now: float, targets: Callable[[], Iterable[int]]) -> list[tuple[int, bytes]]:
        """(ev, probe datagram) to send now: one per target without a probe in flight, once per
        round (`targets` is only asked when a round is due)."""
        if now < self.next_round:
            return []
        self.next_round = now + self.interval
        busy = {ev for ev, _ in self.pending.values()}
        out = []
        for ev in targets():
            if ev in busy:
                continue
            self.probe_id = (self.probe_id + 1) & 0xFFFFFFFF
            self.pending[self.probe_id] = (ev, now)
            out.append((ev, wire.encode_probe(wire.OP_EV_PROBE, self.peer_qpn, self.probe_id,
                                              wire.ts_us(now), ev)))
        return out

    def answered(self, probe_id: int) -> int | None:
        """The EV a probe reply is for, or None for a reply to no probe in flight."""
        entry = self.pending.pop(probe_id, None)
        return None if entry is None else entry[0]
