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

TRIM_PACKETS = 15  # well past NSCC's target: cut payloads before the FIFO gets near full
# The drop threshold is the data FIFO's capacity (queue_packets full frames): the vq decides
# drops before the real pfifo would, so what the FIFO tail-drops is never trimmable MRC data.

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
    trim = min(TRIM_PACKETS, queue_packets - 1)
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

    def validate(self) -> None:
        rate_fp(self.rate_bps)
        if not 0 <= self.mark_bytes <= self.trim_bytes <= self.drop_bytes < VQ_CAP_BYTES:
            raise ValueError(f"{self.ifname}: need 0 <= mark <= trim <= drop < {VQ_CAP_BYTES} "
                             f"bytes, got {self.mark_bytes}/{self.trim_bytes}/{self.drop_bytes}")

    def config_values(self) -> tuple[int, int, int, int, int]:
        flags = (FLAG_LAST_HOP if self.last_hop else 0) | (FLAG_TRIM if self.trim else 0)
        return rate_fp(self.rate_bps), self.mark_bytes, self.trim_bytes, self.drop_bytes, flags


def switch_ports(ports: Iterable[tuple[str, bool]], link_mbps: float, queue_packets: int,
                 transport: TransportConfig, netns_pid: int | None = None,
                 trim: bool = True) -> list[PortSpec]:
    """PortSpecs with the default thresholds for (ifname, faces_host) switch-side ports, from
    the run's transport parameters."""
    th = default_thresholds(queue_packets, transport)
    return [PortSpec(name, netns_pid, link_mbps * 1e6, th.mark_bytes, th.trim_bytes,
                     th.drop_bytes, last_hop=faces_host, trim=trim) for name, faces_host in ports]
