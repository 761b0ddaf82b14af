"""The pure Python model of the eBPF program (mrc_qos.bpf.c): how it classifies a frame, how it
trims one, and what it does on a port with a given backlog. No kernel needed: the unit tests
run it, and the integration tests hold the kernel program to it frame by frame."""

from __future__ import annotations

import struct
from typing import NamedTuple

from endpoints.protocol import wire
from topologies.dataplane.ports import VQ_CAP_BYTES, PortSpec
from topologies.shaping import CLASS_CONTROL, CLASS_DATA

TC_ACT_OK, TC_ACT_SHOT = 0, 2
# Offsets in an Ethernet frame: IPv6 header, UDP header, MRC header.
_L3 = wire.ETH_HDR
_L4 = _L3 + wire.IPV6_HDR
_MRC = _L4 + wire.UDP_HDR
TRIM_LEN = _MRC + wire.DATA_HDR  # what a trimmed frame keeps: every header, no payload


class RunResult(NamedTuple):
    verdict: int  # TC_ACT_OK or TC_ACT_SHOT
    frame: bytes  # the frame as the program left it
    priority: int  # skb->priority afterwards


def classify(frame: bytes) -> tuple[str, bool, bool]:
    """(kind, trimmable, ect) as the C program sees an Ethernet frame: kind is "data",
    "control" or "other" (anything it does not parse, which it never changes)."""
    n = len(frame)
    if n < _MRC + wire.COMMON.size or frame[12:14] != b"\x86\xdd" or frame[_L3] >> 4 != 6 \
            or frame[_L3 + 6] != 17:
        return "other", False, False
    mrc = frame[_MRC:_MRC + wire.COMMON.size]
    dport, udp_len = struct.unpack_from("!H H", frame, _L4 + 2)
    ip_plen = struct.unpack_from("!H", frame, _L3 + 4)[0]
    if dport != wire.MRC_PORT or mrc[2] != wire.MAGIC or mrc[3] != wire.VERSION \
            or udp_len != ip_plen or udp_len < 8 + wire.COMMON.size or _L4 + udp_len > n:
        return "other", False, False
    ecn = (frame[_L3 + 1] >> 4) & 3
    ect = ecn in (1, 2)
    if mrc[0] > wire.DATA_OPCODE_MAX or mrc[1] & wire.F_TRIMMED:
        return "control", False, ect
    dscp = ((frame[_L3] & 0x0F) << 2) | (frame[_L3 + 1] >> 6)
    return "data", udp_len > 8 + wire.DATA_HDR and dscp == wire.TRIM_DSCP, ect


def trim_frame(frame: bytes, last_hop: bool = False) -> bytes:
    """A data frame cut as the program cuts it: lengths fixed, TRIMMED (and on a port facing
    a host TRIMMED_LASTHOP) set, checksum valid."""
    out = bytearray(frame[:TRIM_LEN])
    l4len = 8 + wire.DATA_HDR
    struct.pack_into("!H", out, _L3 + 4, l4len)
    struct.pack_into("!HH", out, _L4 + 4, l4len, 0)
    out[_MRC + 1] |= wire.F_TRIMMED | (wire.F_TRIMMED_LASTHOP if last_hop else 0)
    check = wire.udp6_checksum(bytes(out[_L3 + 8:_L3 + 24]), bytes(out[_L3 + 24:_L3 + 40]),
                               bytes(out[_L4:]))
    struct.pack_into("!H", out, _L4 + 6, check)
    return bytes(out)


def reference(frame: bytes, vq_bytes: int, spec: PortSpec, priority: int = 0) -> tuple[RunResult, int]:
    """What the program does to `frame` on a port with backlog `vq_bytes` and no draining:
    (result, backlog afterwards). The integration tests hold the kernel to this model."""
    kind, trimmable, ect = classify(frame)
    q = vq_bytes + len(frame)
    admitted, verdict, out, prio = len(frame), TC_ACT_OK, frame, priority
    if kind == "other":
        admitted = 0 if q > spec.drop_bytes else admitted
    elif kind == "control":
        prio = CLASS_CONTROL
    elif q > spec.trim_bytes and spec.trim and trimmable:
        admitted, out, prio = TRIM_LEN, trim_frame(frame, spec.last_hop), CLASS_CONTROL
    elif q > spec.drop_bytes:
        admitted, verdict = 0, TC_ACT_SHOT
    else:
        prio = CLASS_DATA
        if q > spec.mark_bytes and ect and not spec.last_hop:
            out = frame[:_L3 + 1] + bytes([frame[_L3 + 1] | 0x30]) + frame[_L3 + 2:]
    return RunResult(verdict, out, prio), min(vq_bytes + admitted, VQ_CAP_BYTES)


