"""What the eBPF program is told about each port: rate, thresholds and flags (pure).

Thresholds are in bytes of backlog at the port (this packet included), counted in full data
frames (`wire.frame_bytes` of the run's payload size) so that they mean the same queueing
delay at any link rate (frames x 8 / rate). They come from the run's TransportConfig, the one
the agents run with: ECN marks start one frame below NSCC's target queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig

# The drop threshold is the data FIFO's capacity (queue_packets full frames): the vq decides
# drops before the real pfifo would, so what the FIFO tail-drops is never trimmable MRC data.

# The control class's budget (strict priority) on every port: SACKs, NACKs, probes and trimmed
# headers beyond it are demoted to the data class. Trimmed headers of a 7:1 incast into one
# 10 Mbit/s last hop take about 17% of it (7 x 10 Mbit/s of 4 KB frames arriving, one ~100-byte
# header each), SACKs and probes a few percent: a quarter leaves them room, and three quarters
# of the link to data whatever one host labels as control.
CONTROL_SHARE = 0.25
CONTROL_BURST_BYTES = 16 * 1024  # about 150 headers at once

FLAG_LAST_HOP = 1  # port faces a host: no ECN marks (the MRC paper marks everywhere else)
FLAG_TRIM = 2
# skb->mark of a trimmed header the program sends through its port once more (so that HTB sizes
# it again): the second pass lets it through uncounted. Any value nothing else on a switch port
# uses; "MRCT" in ASCII.
REINJECT_MARK = 0x4D524354
RATE_SHIFT = 32  # fixed point for bytes/ns and the vq: exact to 0.01% even at 0.01 Mbit/s
VQ_CAP_BYTES = 1 << 30  # as in the C program; thresholds must stay below it


class Thresholds(NamedTuple):
    mark_bytes: int
    trim_bytes: int
    drop_bytes: int


def default_thresholds(queue_packets: int, transport: TransportConfig) -> Thresholds:
    """mark < trim < drop in whole frames of the run's payload size, squeezed to fit a small
    queue; marking starts at `transport.ecn_mark_frames`."""
    if queue_packets < 3:
        raise ValueError(f"queue_packets={queue_packets}: need at least 3 to mark, trim and drop")
    frame = wire.frame_bytes(transport.mtu_payload)
    # `trim_queue_frames`: well past NSCC's target, before the FIFO gets near full; its home is
    # the transport config, because the agents' loss timers are floored by it too.
    trim = min(transport.trim_queue_frames, queue_packets - 1)
    mark = min(transport.ecn_mark_frames, trim - 1)
    return Thresholds(mark * frame, trim * frame, queue_packets * frame)


def rate_fp(rate_bps: float) -> int:
    """The port rate as the C program wants it: bytes per ns, fixed point << RATE_SHIFT."""
    if not rate_bps > 0:
        raise ValueError(f"rate_bps must be positive, got {rate_bps!r}")
    return max(1, round(rate_bps / 8e9 * (1 << RATE_SHIFT)))


@dataclass(frozen=True)
class PortSpec:
    ifname: str
    netns_pid: int | None  # None: this process's namespace (switch ports in Mininet)
    rate_bps: float
    mark_bytes: int
    trim_bytes: int
    drop_bytes: int
    last_hop: bool = False  # faces a host: never ECN-mark
    trim: bool = True  # False: drop-tail above drop_bytes, as a switch without trimming
    control_share: float = CONTROL_SHARE  # of rate_bps: the control class's budget
    control_burst_bytes: int = CONTROL_BURST_BYTES

    def validate(self) -> None:
        rate_fp(self.rate_bps)
        if not 0 < self.control_share <= 1 or not 0 < self.control_burst_bytes < VQ_CAP_BYTES:
            raise ValueError(f"{self.ifname}: control_share must be in (0, 1] and the burst "
                             f"positive, got {self.control_share}, {self.control_burst_bytes}")
        if not 0 <= self.mark_bytes <= self.trim_bytes <= self.drop_bytes < VQ_CAP_BYTES:
            raise ValueError(f"{self.ifname}: need 0 <= mark <= trim <= drop < {VQ_CAP_BYTES} "
                             f"bytes, got {self.mark_bytes}/{self.trim_bytes}/{self.drop_bytes}")

    def config_values(self) -> tuple[int, int, int, int, int, int, int, int]:
        """The C struct port_cfg's fields, in order (the last one is padding)."""
        flags = (FLAG_LAST_HOP if self.last_hop else 0) | (FLAG_TRIM if self.trim else 0)
        return (rate_fp(self.rate_bps), self.mark_bytes, self.trim_bytes, self.drop_bytes, flags,
                rate_fp(self.rate_bps * self.control_share), self.control_burst_bytes, 0)


def vq_now(vq_fp: int, last_ns: int, now_ns: int, rate: int) -> int:
    """A port's virtual backlog in bytes at `now_ns`, drained at `rate` (rate_fp) since the
    program last touched it at `last_ns`, as the C program's drain() would."""
    if now_ns <= last_ns:
        return vq_fp >> RATE_SHIFT
    return max(0, vq_fp - (now_ns - last_ns) * rate) >> RATE_SHIFT


def switch_ports(ports: Iterable[tuple[str, bool]], link_mbps: float, queue_packets: int,
                 transport: TransportConfig, netns_pid: int | None = None,
                 trim: bool = True) -> list[PortSpec]:
    """PortSpecs with the default thresholds for (ifname, faces_host) switch-side ports, from
    the run's transport parameters."""
    th = default_thresholds(queue_packets, transport)
    return [PortSpec(name, netns_pid, link_mbps * 1e6, th.mark_bytes, th.trim_bytes,
                     th.drop_bytes, last_hop=faces_host, trim=trim) for name, faces_host in ports]
