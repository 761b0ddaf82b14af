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
    """A packet queued for retransmission: `reason` is sack, dark, rto, trimmed, nack<N>,
    ev_bad (in flight on an EV just benched) or tail_probe (a copy sent on its own EV, the
    original still in flight)."""
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


class EvActive(NamedTuple):
    """A forward EV joined (True) or left (False) the active set; at the QP's first send one
    for every EV of its set, its starting role, so that the trace alone holds every EV's
    active/backup role over time (the paper's Fig. 13) without polling."""
    t: float
    ev: int
    active: bool
    event: Literal["ev_active"] = "ev_active"


class ReverseEvState(NamedTuple):
    """A receiver's reverse EV was found dead (ASSUMED_BAD) or alive again (GOOD)."""
    t: float
    ev: int
    old: str
    new: str
    event: Literal["reverse_ev_state"] = "reverse_ev_state"


class Timeout(NamedTuple):
    """The retransmission timer fired at `psn` (the oldest packet outstanding) with timeout
    `rto` (go-back-N and MRC senders)."""
    t: float
    psn: int
    rto: float
    event: Literal["timeout"] = "timeout"


class Cc(NamedTuple):
    """The sender's congestion state, sampled (at most every `cc_sample_interval`): window and
    packets in flight; smoothed, base and target RTT; the EWMA of ECN-marked acks; the median
    smoothed RTT over the active EVs (None before samples); the RTO; usable EVs."""
    t: float
    cwnd: float
    inflight: int
    srtt: float
    base_rtt: float | None
    target: float
    ecn_frac: float
    path_rtt: float | None
    rto: float
    usable: int
    event: Literal["cc"] = "cc"


class CwndDec(NamedTuple):
    """A window decrease that took effect: `cause` ecn, delay, trim, loss or timeout
    (congestion.CAUSES); `fraction` of the window cut."""
    t: float
    cause: str
    before: float
    after: float
    fraction: float
    event: Literal["cwnd_dec"] = "cwnd_dec"


class EvSkip(NamedTuple):
    """A forward EV went GOOD -> SKIP: `cause` ecn (echo), trim (TRIMMED NACK) or delay (an
    RTT sample over `delay_skip_over_target` x target, in `rtt`; None for the others)."""
    t: float
    ev: int
    cause: str
    rtt: float | None = None
    event: Literal["ev_skip"] = "ev_skip"


class EvBad(NamedTuple):
    """A forward EV was benched (ASSUMED_BAD) by `rule`: sack (path order), dark (no news on
    it for its loss window) or rto; `seq` the packet judged lost, `age` s since it was sent."""
    t: float
    ev: int
    rule: str
    seq: int
    age: float
    event: Literal["ev_bad"] = "ev_bad"


class FloorHold(NamedTuple):
    """A loss on an EV that the `ev_min_active` floor kept in use (read as congestion)."""
    t: float
    ev: int
    rule: str
    event: Literal["floor_hold"] = "floor_hold"


class EvLoad(NamedTuple):
    """Data packets sent per EV over the last `interval` s (the per-EV load plot); keys are
    the EVs in decimal (JSON object keys are strings)."""
    t: float
    interval: float
    sent: dict[str, int]
    event: Literal["ev_load"] = "ev_load"


class SackCadence(NamedTuple):
    """A receiver's acknowledgements over the last `interval` s: SACKs sent, the data packets
    they covered, why each left (`on_count`: sack_every reached, `on_delay`: the sack_delay
    timer, `on_urgent`: ACK_REQ, a retransmission, a duplicate or a CE mark), the longest gap
    between two SACKs (s), NACKs sent and CE-marked packets received."""
    t: float
    interval: float
    sacks: int
    pkts: int
    on_count: int
    on_delay: int
    on_urgent: int
    max_gap: float
    nacks: int
    ce: int
    event: Literal["sack_cadence"] = "sack_cadence"


class Ports(NamedTuple):
    """What a core knows of the NIC ports changed: `local` and `remote` are down masks (bit p:
    plane p's port down, at this host and at the peer), `parked` the planes it now keeps out of
    use, `resent` the packets in flight there it resent at once (senders)."""
    t: float
    local: int
    remote: int
    parked: list[int]
    resent: int = 0
    event: Literal["ports"] = "ports"


class GoBack(NamedTuple):
    """Go-back-N: everything from `psn` was resent."""
    t: float
    psn: int
    event: Literal["go_back"] = "go_back"


Event = (Complete | Rtt | Retx | EvState | EvActive | ReverseEvState | Timeout | GoBack | Cc | CwndDec
         | EvSkip | EvBad | FloorHold | EvLoad | SackCadence | Ports)


def as_record(qpn: int, event: Event) -> dict[str, object]:
    """The trace line's fields: the QP, the kind of event first, then its own fields.

    >>> as_record(7, EvState(1.5, 0x1C000, "GOOD", "ASSUMED_BAD"))
    {'qpn': 7, 'event': 'ev_state', 't': 1.5, 'ev': 114688, 'old': 'GOOD', 'new': 'ASSUMED_BAD'}
    """
    fields = event._asdict()
    kind = fields.pop("event")
    return {"qpn": qpn, "event": kind, **fields}
