"""Every transport parameter in one place, with the reason for its default.

One run's TransportConfig goes to both the agents and the switch data plane: the switches'
thresholds count frames of its `mtu_payload`, and their ECN marking threshold sits one frame
below NSCC's target queue (`target_queue_frames`), so that marks come before the target is
passed. Changing either parameter moves both ends together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from endpoints.protocol import wire

# Parameters the switches use too (their thresholds count frames of `mtu_payload`, and they
# mark one frame below `target_queue_frames`): one value per run, never one per QP.
FABRIC_WIDE = frozenset({"mtu_payload", "target_queue_frames"})


@dataclass(frozen=True)
class TransportConfig:
    # Per-path state
    path_state: bool = True  # False: the `spray` transport, no EV ever skipped or benched
    # Packetisation
    mtu_payload: int = 4096  # data bytes per packet, RoCE's 4096 MTU: ~300 pkt/s per 10 Mbit/s link
    # EV set (the MRC paper: 128-256 EVs split evenly over planes, >100 active, rest backups)
    ev_set_size: int = 256  # upper bound; fewer when the fabric has fewer paths
    active_fraction: float = 0.75  # of each plane's EVs; the rest are backups of that plane
    ev_min_active: int = 2  # floor: never mark EVs bad below this many usable ones
    skip_rotations: int = 1  # an ECN echo / trimmed NACK skips the EV for about one rotation
    # Loss detection and retransmission
    reorder_slack: float = 0.002  # s: added to the loss windows before a missing packet counts lost
    rto_min: float = 0.030  # tails only: SACK-based detection handles losses mid-stream
    rto_max: float = 0.200  # s: cap of the RTO and of its exponential backoff
    rto_initial: float = 0.050  # s: the RTO (and the dark-path window) before any RTT sample
    # Probing of ASSUMED_BAD EVs
    probe_interval: float = 0.005  # s between probes of each bad EV
    probes_to_resurrect: int = 3  # consecutive successes that bring an EV back
    probe_timeout: float = 0.050  # an unanswered probe resets its EV's success count
    reverse_evs_per_plane: int = 2  # receiver's reverse EV set for SACKs (>= 1 per plane)
    reverse_probe_interval: float = 0.100  # s: much more often, the reverse EVs' probes cost a plane of data
    # Acknowledgement cadence
    sack_every: int = 4  # data packets per SACK
    sack_delay: float = 0.0005  # s: a lone packet is still acknowledged promptly
    # Receiver limits (forged or runaway input must not exhaust memory)
    max_message: int = 1 << 26  # bytes: the largest message either end accepts (64 MiB: the
    # largest collective step, --step-kb 65536)
    psn_window: int = 1 << 16  # packets beyond cumulative ACK accepted (PSN_OOR_WINDOW past it)
    max_open_messages: int = 64  # incomplete messages ahead of the next one to complete
    # Payload bytes a receiver holds in messages other than the next to complete (that one is
    # bounded by its own length); past it, packets are refused with NACK NO_PKT_BUFFER.
    max_held_bytes: int = 1 << 26
    # A NO_PKT_BUFFER NACK (receiver not ready, RoCE's RNR) delays that packet's resend by this
    rnr_delay: float = 0.010
    # s a transmission stays acknowledgeable: a SACK or NACK must echo one of these (EV, ts)
    # pairs; longer than any queueing delay the fabric can build
    echo_keep: float = 2.0
    # Congestion control, in the spirit of UET NSCC (docs/transport.md)
    target_queue_frames: int = 6  # the RTT target allows this many full frames of queueing
    init_cwnd_pkts: float = 16.0  # the starting window
    min_cwnd_pkts: float = 2.0  # the window's floor
    max_cwnd_pkts: float = 2048.0  # its ceiling, far inside psn_window and the 24-bit PSN space
    target_delay_min: float = 0.002  # s: floor of the RTT target (see `for_link`)
    target_over_base: float = 1.5  # target = max(floor, base RTT x this)
    proportional_gain: float = 0.5  # cwnd growth per acked packet at zero queueing delay
    fair_increase_pkts: float = 1.0  # additive growth per RTT when above target, no ECN
    md_factor: float = 0.5  # strongest multiplicative decrease (ECN and far above target)
    delay_md_over_target: float = 1.5  # no ECN: median path RTT > this x target decreases the window
    delay_skip_over_target: float = 2.0  # one RTT sample > this x target skips its EV, like ECN
    # Go-back-N baseline (RoCE-like)
    gbn_window_pkts: int = 8  # about the path BDP at 10 Mbit/s: fills the link, not the queues

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ValueError(f"transport parameter {f.name} must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"transport parameter {f.name} must be a positive finite number, "
                                 f"got {value!r}")
        if not 0 < self.active_fraction <= 1:
            raise ValueError("active_fraction must be in (0, 1]")
        if self.mtu_payload > 8192:
            raise ValueError("mtu_payload above 8192 would not fit a jumbo frame")
        if self.target_queue_frames < 2:
            raise ValueError("target_queue_frames must be 2 or more (ECN marks one frame below it)")

    @property
    def ecn_mark_frames(self) -> int:
        """The switches' ECN marking threshold, in full frames of queue: just below NSCC's
        target, so the fabric marks before the target delay is reached."""
        return self.target_queue_frames - 1

    def link_target_delay(self, link_mbps: float) -> float:
        """The RTT target's floor on links of `link_mbps`: `target_queue_frames` full frames of
        queueing at that rate. Emulated links (HTB) shape rate but not per-packet
        serialisation, so an idle path's RTT is sub-millisecond whatever the rate; the target
        must allow a few packets of queueing at the bottleneck to keep it busy.

        >>> round(TransportConfig().link_target_delay(10.0), 5)
        0.02019
        """
        return self.target_queue_frames * wire.frame_bytes(self.mtu_payload) * 8 / (link_mbps * 1e6)

    def for_link(self, link_mbps: float) -> TransportConfig:
        """This config with the RTT target floor set for `link_mbps` links."""
        return replace(self, target_delay_min=self.link_target_delay(link_mbps))

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def with_overrides(base: TransportConfig, overrides: Mapping[str, Any],
                   per_qp: bool = False) -> TransportConfig:
    """`base` with some parameters changed, each name checked (`per_qp`: for one QP of a
    running fabric, which cannot change what the switches were set up with).

    >>> with_overrides(TransportConfig(), {"ev_set_size": 8}).ev_set_size
    8
    >>> with_overrides(TransportConfig(), {"mtu_payload": 1024}, per_qp=True)
    Traceback (most recent call last):
    ...
    ValueError: mtu_payload is set for the whole run (the switches use it too), not per QP
    """
    names = {f.name for f in fields(TransportConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown transport parameter(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(names))}")
    fixed = sorted(set(overrides) & FABRIC_WIDE) if per_qp else []
    if fixed:
        raise ValueError(f"{', '.join(fixed)} is set for the whole run (the switches use it too), "
                         f"not per QP")
    return replace(base, **overrides)


def parse_overrides(items: Iterable[str]) -> dict[str, bool | int | float]:
    """`NAME=VALUE` strings (the command line's `--param`) as typed overrides.

    >>> parse_overrides(["ev_set_size=8", "path_state=false", "target_over_base=2"])
    {'ev_set_size': 8, 'path_state': False, 'target_over_base': 2.0}
    """
    types = {f.name: f.type for f in fields(TransportConfig)}
    out: dict[str, bool | int | float] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in types:
            raise ValueError(f"{item!r}: expected NAME=VALUE with NAME a transport parameter, "
                             f"one of {', '.join(sorted(types))}")
        kind = types[name]
        try:
            if kind in ("bool", bool):
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(text)
                out[name] = text.lower() in ("true", "1", "yes")
            elif kind in ("int", int):
                out[name] = int(text)
            else:
                out[name] = float(text)
        except ValueError:
            kind_name = kind if isinstance(kind, str) else kind.__name__
            wants = {"bool": "true or false", "int": "a whole number"}.get(kind_name, "a number")
            raise ValueError(f"{item!r}: {name} takes {wants}") from None
    return out
