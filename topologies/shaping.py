"""Link shaping with tc: the one `tc -batch` runner and the HTB scripts it runs.

Every port, host NIC or switch egress: HTB root 1: at the link rate with a strict-priority
control class 1:2 and a data class 1:3 (`switch_htb_batch`, `host_htb_batch`). At a switch the
eBPF data plane (topologies/dataplane/) steers control packets and trimmed headers into 1:2 by
naming it in skb->priority; at a host the agents' control sockets do, with SO_PRIORITY
(`CLASS_CONTROL`), so that a SACK never queues behind the host's own data. A
host's data FIFO is deep: a NIC back-pressures its QPs rather than drop.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from endpoints.protocol import wire
from topologies.model import LINK_MTU

SWITCH_QUEUE_PACKETS = 20  # switch egress FIFO, in full frames: ~67 ms at 10 Mbit/s, default mtu_payload
HOST_QUEUE_PACKETS = 1000  # host NIC: a NIC back-pressures its QPs rather than drop (Linux txqueuelen)
# Two full frames: a real port serialises, it does not pass 50 KB at once. A host NIC's too
# (`host_htb_batch`): its agent stamps batched frames knowing this much may leave at once.
BURST_BYTES = 2 * (LINK_MTU + wire.ETH_HDR)

HTB_HANDLE = 1
CLASS_CONTROL = (HTB_HANDLE << 16) | 2  # skb->priority naming an HTB leaf selects it directly
CLASS_DATA = (HTB_HANDLE << 16) | 3
CONTROL_QUEUE_FACTOR = 4  # control FIFO, in data-queue packets: headers are ~10x smaller


def tc_batch(script: str | Sequence[str], force: bool = False) -> None:
    """Run tc commands (one per line) in one `tc -batch` process, in the calling thread's
    network namespace. `force` goes on past failing lines and never raises (teardown, where
    devices may be gone); otherwise a failure raises RuntimeError with tc's message."""
    if not isinstance(script, str):
        script = "".join(f"{line}\n" for line in script)
    if not script:
        return
    cmd = ["tc", "-force", "-batch", "-"] if force else ["tc", "-batch", "-"]
    result = subprocess.run(cmd, input=script, text=True, capture_output=True)
    if result.returncode != 0 and not force:
        raise RuntimeError(f"tc -batch failed: {result.stderr.strip()[:400]}")


def host_htb_batch(intfs: Sequence[str], mbps: float, queue_packets: int, mtu_payload: int,
                   burst_bytes: int = BURST_BYTES) -> str:
    """`tc -batch` lines for host NICs: as a switch port's (`switch_htb_batch`), the data FIFO
    `queue_packets` deep; whatever names no class (TCP, ICMP, neighbour discovery) is data."""
    return switch_htb_batch(intfs, mbps, queue_packets, burst_bytes, mtu_payload)


def switch_htb_batch(intfs: Sequence[str], mbps: float, queue_packets: int,
                     burst_bytes: int, mtu_payload: int, fifo_headroom: int = 1) -> str:
    """`tc -batch` lines: HTB root 1: at link rate (1:1) with a strict-priority control class
    1:2 and the data class 1:3, which also takes whatever the program does not classify.

    Strictness: 1:2's own rate is the link rate and prio 0, so it never has to borrow and HTB
    always serves it first; 1:3 is guaranteed only a token 1% and borrows the rest from 1:1
    (total overshoot at most that 1% while both are busy). `fifo_headroom`: with the eBPF
    program enforcing the buffer, the real FIFO is made this many times deeper, so that it
    never tail-drops what the program's queue model (draining at exactly the link rate, a
    little faster than HTB on a busy host) has just decided to keep or to trim."""
    frame = wire.frame_bytes(mtu_payload)
    floor_kbit = max(8, round(mbps * 10))
    lines = []
    for intf in intfs:
        common = f"burst {burst_bytes} cburst {burst_bytes} quantum {frame}"
        lines += [
            f"qdisc replace dev {intf} root handle {HTB_HANDLE}: htb default {CLASS_DATA & 0xFFFF}",
            f"class add dev {intf} parent 1: classid 1:1 htb rate {mbps}mbit "
            f"burst {burst_bytes} cburst {burst_bytes}",
            f"class add dev {intf} parent 1:1 classid 1:2 htb rate {mbps}mbit ceil {mbps}mbit "
            f"prio 0 {common}",
            f"class add dev {intf} parent 1:1 classid 1:3 htb rate {floor_kbit}kbit "
            f"ceil {mbps}mbit prio 1 {common}",
            f"qdisc add dev {intf} parent 1:2 handle 12: pfifo limit "
            f"{queue_packets * CONTROL_QUEUE_FACTOR}",
            f"qdisc add dev {intf} parent 1:3 handle 13: pfifo limit {queue_packets * fifo_headroom}",
        ]
    return "\n".join(lines) + "\n"
