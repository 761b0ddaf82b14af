"""What every sans-IO transport core (MRC and go-back-N, sender and receiver) offers the agent and
the simulated network: the interfaces (`SenderCore`, `ReceiverCore`) and the base class with
the drains and the first checks on an arriving datagram.

A core never touches a socket or a clock: the caller hands it datagrams and the time, and
sends what `poll` returns, on the EV it names.
"""

from __future__ import annotations

from typing import Any, Protocol

from endpoints.protocol import wire
from endpoints.protocol.congestion import Nscc
from endpoints.protocol.events import Event
from endpoints.protocol.evset import EvReport


class Core(Protocol):
    """What the agent's loop and the simulated network call on any core."""

    qpn: int
    stats: dict[str, int]

    def on_datagram(self, payload: bytes | memoryview, ev: int, now: float,
                    ecn_ce: bool = False) -> None:
        """An MRC datagram for this QP arrived on `ev` (rebuilt from the UDP source port and
        the flow label); `ecn_ce`: its traffic class says Congestion Experienced."""

    def poll(self, now: float) -> list[tuple[int, bytes]]:
        """Run the timers; (ev, datagram) to send now."""

    def next_deadline(self) -> float | None:
        """When `poll` should next be called (0.0: at once; None: only on input)."""

    def take_events(self) -> list[Event]:
        """What happened since the last call (for the trace)."""

    def set_local_ports(self, mask: int, now: float) -> None:
        """This host's NIC ports now: bit p set while plane p's port is down."""


class SenderCore(Core, Protocol):
    bytes_acked: int

    @property
    def cc(self) -> Nscc | None:
        """The congestion window, where the transport has one."""

    def send_message(self, data: bytes | memoryview, now: float) -> int:
        """Post one message; its MSN."""

    @property
    def unsent_messages(self) -> int:
        """Messages not yet fully transmitted (a streaming caller keeps this topped up)."""

    def ev_states(self) -> dict[int, str]:
        """Each forward EV's state (GOOD, SKIP, ASSUMED_BAD, DENIED)."""

    def ev_report(self) -> list[EvReport]:
        """Each forward EV now: state, place in the set, skips, benchings, RTT, bytes."""

    def take_completed(self) -> list[int]:
        """MSNs fully acknowledged since the last call, in order."""


class ReceiverCore(Core, Protocol):
    bytes_delivered: int

    def take_completed(self) -> list[tuple[int, bytes]]:
        """(msn, message) delivered since the last call, in MSN order, each exactly once."""


class CoreBase:
    """Subclasses set `qpn`, `stats` (with "malformed" and "foreign"), `completed`, `events`,
    and override the `_on_*` handlers of the packets they take."""

    qpn: int
    stats: dict[str, int]
    completed: list[Any]
    events: list[Any]

    def take_completed(self) -> list[Any]:
        """Senders: MSNs fully acknowledged; receivers: (msn, bytes) delivered, in MSN order."""
        done, self.completed = self.completed, []
        return done

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def set_local_ports(self, mask: int, now: float) -> None:
        """Cores that act on port status override it (portstatus.py); the go-back-N baseline,
        like RoCE, has one path and nothing to steer."""

    def on_datagram(self, payload: bytes | memoryview, ev: int, now: float,
                    ecn_ce: bool = False) -> None:
        """Check the datagram (`_accept`), then hand it to the handler of its kind; a kind
        this core does not take (data sent to a sender, acknowledgements to a receiver)
        counts as foreign."""
        pkt = self._accept(payload)
        if pkt is None:
            return
        if isinstance(pkt, wire.Data):
            self._on_data(pkt, ev, now, ecn_ce)
        elif isinstance(pkt, wire.Sack):
            self._on_sack(pkt, now)
        elif isinstance(pkt, wire.Nack):
            self._on_nack(pkt, now)
        else:
            self._on_probe(pkt, now)

    def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
        self.stats["foreign"] += 1

    def _on_sack(self, s: wire.Sack, now: float) -> None:
        self.stats["foreign"] += 1

    def _on_nack(self, n: wire.Nack, now: float) -> None:
        self.stats["foreign"] += 1

    def _on_probe(self, p: wire.Probe, now: float) -> None:
        self.stats["foreign"] += 1

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
