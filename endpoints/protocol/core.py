"""What every sans-IO transport core (MRC and go-back-N, sender and receiver) shares: the
drains the agent calls, and the first checks on an arriving datagram."""

from __future__ import annotations

from endpoints.protocol import wire


class CoreBase:
    """Subclasses set `qpn`, `stats` (with "malformed" and "foreign"), `completed`, `events`."""

    qpn: int
    stats: dict[str, int]
    completed: list
    events: list[tuple]

    def take_completed(self) -> list:
        """Senders: MSNs fully acknowledged; receivers: (msn, bytes) delivered, in MSN order."""
        done, self.completed = self.completed, []
        return done

    def take_events(self) -> list[tuple]:
        events, self.events = self.events, []
        return events

    def _accept(self, payload: bytes | memoryview) -> wire.Packet | None:
        """The decoded packet if it is well-formed MRC for this QP; else counted and None."""
        try:
            pkt = wire.decode(payload)
        except wire.MalformedPacket:
            self.stats["malformed"] += 1
            return None
        if pkt.qpn != self.qpn:
            self.stats["foreign"] += 1
            return None
        return pkt
