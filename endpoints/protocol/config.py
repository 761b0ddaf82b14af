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
FABRIC_WIDE = frozenset({"mtu_payload", "target_queue_frames", "trim_queue_frames"})
# Parameters `for_fabric` derives from the fabric (link rate, planes, whether switches mark)
# unless the run sets them explicitly.
FABRIC_DERIVED = ("target_delay_min", "max_cwnd_pkts", "queue_delay_bound", "sack_delay",
                  "ecn_fabric")


@dataclass(frozen=True)
class TransportConfig:
    # Per-path state
    path_state: bool = True  # False: the `spray` transport, no EV ever skipped or benched
    # Packetisation
    mtu_payload: int = 4096  # data bytes per packet, RoCE's 4096 MTU: ~300 pkt/s per 10 Mbit/s link
    # EV set (the MRC paper: 128-256 EVs split evenly over planes, >100 active, rest backups)
    ev_set_size: int = 256  # upper bound; fewer when the fabric has fewer paths
    active_fraction: float = 0.75  # of each plane's EVs; the rest are backups of that plane
    # A plane keeps backups only with at least this many paths; below it every path is active.
    # An EV is one path here: with few paths a backup is a path this QP never uses while
    # healthy, and every QP leaving out the same one idles it for all (issue 10, P2). With
    # backups, each QP picks its own at random, so none is left out by everyone.
    backup_min_paths: int = 8  # a plane keeps backups only with at least this many paths
    ev_min_active: int = 2  # floor: never mark EVs bad below this many usable ones
    # An ECN echo / trimmed NACK skips the EV for `skip_rotations` rotations of its plane AND
    # `skip_rtts` round trips of the EV's path (its smoothed RTT, or the QP's if longer),
    # whichever ends later: with a few EVs per plane a rotation is a couple of packets, far
    # shorter than the RTT the echo describes (with the paper's 128-256 EVs one rotation is
    # hundreds of packets, and the RTT bound changes nothing).
    skip_rotations: int = 1  # an ECN echo / trimmed NACK skips the EV for this many rotations
    skip_rtts: float = 8.0  # ... and this many of its path's smoothed RTTs, whichever ends later
    # Loss detection and retransmission
    reorder_slack: float = 0.002  # s: added to the loss windows before a missing packet counts lost
    # No packet is declared lost (RTO, dark path) before it could have waited behind a full
    # trimming queue at a hop plus the target: a timeout benches the EV, and with trimming that
    # is the longest a packet legitimately queues (issue 10, I2). `for_fabric` derives it:
    # (trim_queue_frames + target_queue_frames) frame times at the link rate.
    queue_delay_bound: float = 0.070  # s: no loss timer fires sooner (derived, `for_fabric`)
    rto_min: float = 0.030  # tails only: SACK-based detection handles losses mid-stream
    rto_max: float = 0.200  # s: cap of the RTO and of its exponential backoff
    rto_initial: float = 0.050  # s: the RTO (and the dark-path window) before any RTT sample
    # With nothing left to send (a tail) and the oldest packet in flight older than srtt + 4 rttvar +
    # reorder_slack, send a copy of it on its own EV (recovery.py): a random tail loss is
    # repaired in a round trip instead of waiting for a loss timer (queue_delay_bound or more).
    tail_probe: bool = True  # a tail probe instead of waiting for the loss timers (issue 21)
    # A packet a SACK reported missing, with later packets on other EVs acknowledged, and older
    # than srtt + 4 rttvar + reorder_slack is presumed lost until the loss timers judge it: it
    # no longer holds a place in the window and its EV is skipped, so that the live paths carry
    # on while a dead one's packets wait out `queue_delay_bound` (Fig. 9d; recovery.py). Only
    # where the switches mark and trim (`for_fabric`): on a drop-tail fabric a missing packet
    # is more likely congestion's, and presuming it would send more into the queue that dropped it.
    presume_dark: bool = True  # a missing packet past its probe timeout leaves the window
    # Probing of ASSUMED_BAD EVs
    probe_interval: float = 0.005  # s between probes of each bad EV
    probes_to_resurrect: int = 3  # consecutive successes that bring an EV back
    probe_timeout: float = 0.050  # an unanswered probe resets its EV's success count
    reverse_evs_per_plane: int = 2  # receiver's reverse EV set for SACKs (>= 1 per plane)
    reverse_probe_interval: float = 0.100  # s: much more often, the reverse EVs' probes cost a plane of data
    # SACKs skip the reverse EVs whose forward twin (the model numbers both directions of a
    # pair alike) went silent, and take the way their packet came when all have: the rotation
    # alone kept sending SACKs into reverse paths that died with their forward ones for as long
    # as two probe rounds took to notice (Fig. 9d; receiver.py).
    sack_on_arrival_path: bool = True  # SACKs avoid reverse EVs whose forward twin went silent
    # NIC-port status (endpoints/protocol/portstatus.py): a host stops using the planes whose
    # port is down, its own (the agent learns them from the kernel) and its peer's (the down
    # mask its SACKs, NACKs and probes carry).
    port_status: bool = True  # False: every EV of a dead port's plane fails on its own
    # Acknowledgement cadence
    sack_every: int = 4  # data packets per SACK
    # s: a lone packet is still acknowledged within this; `for_fabric` sets it to
    # `sack_delay_frames` frame times at the link rate, so that the count (`sack_every`), not
    # the timer, sets the pace of a busy QP (issue 10, P3: a timer shorter than the gap between
    # packets sent a SACK every 1-2 packets, 40% of all packets the switches forwarded).
    sack_delay: float = 0.005  # s: a lone packet is still acknowledged within this (derived)
    sack_delay_frames: float = 1.5  # sack_delay in frame times at the link rate
    # A CE-marked packet is acknowledged at once: a coalesced SACK echoes only its newest
    # packet's EV and mark, so the sender would learn of a hot path only by chance.
    ack_on_ce: bool = True  # a CE-marked packet is acknowledged at once, its EV echoed
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
    # The switches trim MRC data above this many full frames of queue (the data plane's
    # threshold, topologies/dataplane/ports.py); the loss timers' floor follows from it.
    trim_queue_frames: int = 15  # switches trim MRC data above this many frames of queue
    init_cwnd_pkts: float = 16.0  # the starting window
    min_cwnd_pkts: float = 2.0  # the window's floor
    # Its ceiling, far inside psn_window and the 24-bit PSN space; `for_fabric` sets it to
    # `max_cwnd_bdp` x the QP's bandwidth-delay product at the target (planes x target frames):
    # with a NIC that paces, a NIC-limited sender never sees queueing and would grow its window
    # without bound, then flood the fabric when competition starts.
    max_cwnd_pkts: float = 2048.0  # the window's ceiling (derived, `for_fabric`)
    max_cwnd_bdp: float = 1.5  # max_cwnd in bandwidth-delay products at the target
    target_delay_min: float = 0.002  # s: floor of the RTT target (see `for_link`)
    target_over_base: float = 1.5  # target = max(floor, base RTT x this)
    proportional_gain: float = 0.5  # cwnd growth per acked packet at zero queueing delay
    fair_increase_pkts: float = 1.0  # additive growth per RTT when above target, no ECN
    md_factor: float = 0.5  # a trim's and a loss's decrease (x severity)
    # NSCC (uet-1.0-nscc): on ECN with the queueing delay above target, the window shrinks by
    # gamma x (avg - target) / avg of the smoothed queueing delay, at most max_md_jump, once
    # per RTT; every other quadrant also adds eta packets per RTT, so a QP that cannot move
    # (one usable path) is not stuck at the window it had.
    gamma: float = 0.8  # ECN above target: cut gamma x (avg - target) / avg of the queueing delay
    max_md_jump: float = 0.5  # ... at most this fraction of the window
    eta: float = 0.15  # packets per RTT added in every quadrant but the decrease
    # The last hop never marks (MRC), so an incast's only signals would be the delay (NSCC's fair
    # increase quadrant) and trims: windows grew until every excess packet crossed the fabric
    # to be trimmed at the last hop. A TRIMMED_LASTHOP NACK is that hop's mark: for this many
    # smoothed RTTs every acknowledgement is read as marked.
    lasthop_mark_rtts: float = 4.0  # a last-hop trim counts as a mark for this many RTTs
    # Whether the switches mark ECN (False: `--dataplane droptail`). Only without marks does a
    # median path RTT beyond `delay_md_over_target` x target decrease the window: with marks,
    # unmarked delay is in queues no switch marks (host NICs, the emulator), not congestion.
    ecn_fabric: bool = True  # the switches mark ECN (derived: false on a drop-tail data plane)
    delay_md_over_target: float = 1.5  # no ECN fabric: median path RTT > this x target decreases
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
        if self.trim_queue_frames <= self.target_queue_frames:
            raise ValueError("trim_queue_frames must be above target_queue_frames (trims come after marks)")
        if self.max_md_jump >= 1:
            raise ValueError("max_md_jump must be below 1 (a decrease never empties the window)")

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

    def frame_time(self, link_mbps: float) -> float:
        """Seconds a full data frame takes at `link_mbps`."""
        return wire.frame_bytes(self.mtu_payload) * 8 / (link_mbps * 1e6)

    def for_link(self, link_mbps: float) -> TransportConfig:
        """This config with the RTT target floor set for `link_mbps` links."""
        return replace(self, target_delay_min=self.link_target_delay(link_mbps))

    def for_fabric(self, link_mbps: float, planes: int, ecn: bool = True,
                   keep: Iterable[str] = ()) -> TransportConfig:
        """This config with what follows from the fabric: the RTT target floor, the window's
        ceiling, the loss timers' floor, the SACK timer, whether the switches mark (and so
        whether a missing packet may be presumed a dead path's); parameters named in `keep`
        (set explicitly for the run) are left as they are.

        >>> c = TransportConfig().for_fabric(10.0, 2)
        >>> round(c.target_delay_min, 4), c.max_cwnd_pkts, round(c.queue_delay_bound, 4)
        (0.0202, 18.0, 0.0707)
        >>> round(c.sack_delay, 4), c.ecn_fabric, c.presume_dark
        (0.005, True, True)
        >>> TransportConfig().for_fabric(10.0, 2, ecn=False).presume_dark
        False
        """
        frame = self.frame_time(link_mbps)
        derived: dict[str, Any] = {
            "target_delay_min": self.link_target_delay(link_mbps),
            "max_cwnd_pkts": self.max_cwnd_bdp * planes * self.target_queue_frames,
            "queue_delay_bound": (self.trim_queue_frames + self.target_queue_frames) * frame,
            "sack_delay": self.sack_delay_frames * frame,
            "ecn_fabric": ecn,
            "presume_dark": self.presume_dark and ecn,
        }
        kept = set(keep)
        return replace(self, **{k: v for k, v in derived.items() if k not in kept})

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
