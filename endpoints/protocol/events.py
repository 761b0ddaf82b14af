"""What the cores report as they work (`take_events()`): typed, one class per kind of event.

The agent writes each as one JSON object per line of its trace, `{"qpn": .., "event": kind,
"t": .., ...fields}` (`as_record`), which the runner reads back for the path-state plots.
Times are the core's `now`, seconds on the caller's monotonic clock.
"""

from __future__ import annotations

from typing import Literal, NamedTuple


class Complete(NamedTuple):
    """A message was fully acknowledged (sender)."""
    t: float
    msn: int
    event: Literal["complete"] = "complete"


class Rtt(NamedTuple):
    """An RTT sample from a SACK's echoed timestamp, for the EV the SACK names."""
    t: float
    ev: int
    rtt: float
    event: Literal["rtt"] = "rtt"


class Retx(NamedTuple):
    """A packet queued for retransmission: `reason` is sack, dark, rto, trimmed, nack<N> or
    ev_bad (in flight on an EV just benched)."""
    t: float
    seq: int
    ev: int
    reason: str
    event: Literal["retx"] = "retx"


class EvState(NamedTuple):
    """A forward EV changed state (GOOD, SKIP, ASSUMED_BAD, DENIED)."""
    t: float
    ev: int
    old: str
    new: str
    event: Literal["ev_state"] = "ev_state"


class ReverseEvState(NamedTuple):
    """A receiver's reverse EV was found dead (ASSUMED_BAD) or alive again (GOOD)."""
    t: float
    ev: int
    old: str
    new: str
    event: Literal["reverse_ev_state"] = "reverse_ev_state"


class Timeout(NamedTuple):
    """Go-back-N: the retransmission timer fired at `psn` with timeout `rto`."""
    t: float
    psn: int
    rto: float
    event: Literal["timeout"] = "timeout"


class GoBack(NamedTuple):
    """Go-back-N: everything from `psn` was resent."""
    t: float
    psn: int
    event: Literal["go_back"] = "go_back"


Event = Complete | Rtt | Retx | EvState | ReverseEvState | Timeout | GoBack


def as_record(qpn: int, event: Event) -> dict[str, object]:
    """The trace line's fields: the QP, the kind of event first, then its own fields.

    >>> as_record(7, EvState(1.5, 0x1C000, "GOOD", "ASSUMED_BAD"))
    {'qpn': 7, 'event': 'ev_state', 't': 1.5, 'ev': 114688, 'old': 'GOOD', 'new': 'ASSUMED_BAD'}
    """
    fields = event._asdict()
    kind = fields.pop("event")
    return {"qpn": qpn, "event": kind, **fields}
