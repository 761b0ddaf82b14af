"""The pure Python model of the eBPF program (mrc_qos.bpf.c): how it classifies a frame, how it
trims one, and what it does on a port with a given backlog. No kernel needed: the unit tests
run it, and the integration tests hold the kernel program to it frame by frame.

Two layouts: plain (Ethernet | IPv6 | UDP | MRC) and the MRC paper's IPv6-in-IPv6 (Ethernet |
outer IPv6 | inner IPv6 | UDP | MRC), told apart by the outer next header. The class (DSCP) and
ECN are read from the outer header, the one switches queue by; UDP's addresses are the inner
header's."""

from __future__ import annotations

import struct
from typing import NamedTuple

from endpoints.protocol import wire
from topologies.dataplane.ports import REINJECT_MARK, VQ_CAP_BYTES, PortSpec
from topologies.shaping import CLASS_CONTROL, CLASS_DATA

TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT = 0, 2, 7
IPPROTO_IPV6 = 41  # the next header of IPv6-in-IPv6
_NEXT_UDP = 17
_ECN_BITS = 0x30  # ECN in the second byte of an IPv6 header (CE: both bits set)
# Offsets in a plain Ethernet frame: IPv6 header, UDP header, MRC header. Encapsulated frames
# have one more IPv6 header before UDP (`Layout`).
_L3 = wire.ETH_HDR
_L4 = _L3 + wire.IPV6_HDR
_MRC = _L4 + wire.UDP_HDR
TRIM_LEN = _MRC + wire.TRIM_KEEP  # what a trimmed plain frame keeps: every header, no payload


class Layout(NamedTuple):
    ip: int  # the IPv6 header that carries the UDP datagram (the inner one when encapsulated)
    l4: int
    mrc: int
    trim_len: int  # what a trimmed frame keeps


PLAIN = Layout(_L3, _L4, _MRC, TRIM_LEN)
ENCAP = Layout(_L3 + wire.IPV6_HDR, _L4 + wire.IPV6_HDR, _MRC + wire.IPV6_HDR,
               TRIM_LEN + wire.IPV6_HDR)


class RunResult(NamedTuple):
    verdict: int  # TC_ACT_OK, TC_ACT_SHOT or TC_ACT_REDIRECT (a trimmed header, sent again)
    frame: bytes  # the frame as the program left it
    priority: int  # skb->priority afterwards
    mark: int = 0  # skb->mark afterwards


def layout(frame: bytes) -> Layout:
    """The layout the program parses `frame` with: its outer next header decides."""
    return ENCAP if len(frame) > _L3 + 6 and frame[_L3 + 6] == IPPROTO_IPV6 else PLAIN


# The UDP payload size the wire format gives each control opcode (C: control_shape_ok).
CONTROL_LEN = {wire.OP_SACK: wire.SACK_LEN, wire.OP_NACK: wire.NACK_LEN,
               wire.OP_EV_PROBE: wire.PROBE_LEN, wire.OP_EV_PROBE_REPLY: wire.PROBE_LEN}


def classify(frame: bytes) -> tuple[str, bool, bool]:
    """(kind, trimmable, ect) as the C program sees an Ethernet frame: kind is "data",
    "control", "demoted" (labelled control, but not the size the wire format gives it: handled
    as data, never trimmed) or "other" (anything it does not parse, which it never changes)."""
    n, lay = len(frame), layout(frame)
    if n < lay.mrc + wire.COMMON.size or frame[12:14] != b"\x86\xdd" or frame[lay.ip] >> 4 != 6 \
            or frame[lay.ip + 6] != _NEXT_UDP:
        return "other", False, False
    if lay is ENCAP:
        outer_plen = struct.unpack_from("!H", frame, _L3 + 4)[0]
        if frame[_L3] >> 4 != 6 or _L3 + wire.IPV6_HDR + outer_plen != n:
            return "other", False, False
    mrc = frame[lay.mrc:lay.mrc + wire.COMMON.size]
    dport, udp_len = struct.unpack_from("!H H", frame, lay.l4 + 2)
    ip_plen = struct.unpack_from("!H", frame, lay.ip + 4)[0]
    if dport != wire.MRC_PORT or not wire.is_mrc(mrc) \
            or udp_len != ip_plen or udp_len < 8 + wire.COMMON.size or lay.l4 + udp_len > n:
        return "other", False, False
    ecn = (frame[_L3 + 1] >> 4) & 3
    ect = ecn in (1, 2)
    opcode = mrc[wire.OPCODE_OFF]
    if opcode > wire.DATA_OPCODE_MAX or mrc[wire.FLAGS_OFF] & wire.F_TRIMMED:
        want = wire.TRIM_KEEP if opcode <= wire.DATA_OPCODE_MAX else CONTROL_LEN.get(opcode)
        return ("control" if udp_len - 8 == want else "demoted"), False, ect
    dscp = ((frame[_L3] & 0x0F) << 2) | (frame[_L3 + 1] >> 6)
    return "data", udp_len > 8 + wire.TRIM_KEEP and dscp == wire.TRIM_DSCP, ect


def trim_frame(frame: bytes, last_hop: bool = False) -> bytes:
    """A data frame cut as the program cuts it (`wire.trimmed`: headers kept, ICRC field zeroed,
    PadCnt cleared, TRIMMED and on a port facing a host TRIMMED_LASTHOP set), lengths fixed (both
    IPv6 payload lengths when encapsulated), UDP checksum valid over the inner pseudo-header."""
    lay = layout(frame)
    out = bytearray(frame[:lay.mrc] + wire.trimmed(frame[lay.mrc:], last_hop))
    l4len = 8 + wire.TRIM_KEEP
    if lay is ENCAP:
        struct.pack_into("!H", out, _L3 + 4, wire.IPV6_HDR + l4len)
    struct.pack_into("!H", out, lay.ip + 4, l4len)
    struct.pack_into("!HH", out, lay.l4 + 4, l4len, 0)
    check = wire.udp6_checksum(bytes(out[lay.ip + 8:lay.ip + 24]), bytes(out[lay.ip + 24:lay.ip + 40]),
                               bytes(out[lay.l4:]))
    struct.pack_into("!H", out, lay.l4 + 6, check)
    return bytes(out)


def mark_ce(frame: bytes) -> bytes:
    """CE on the outer header and, when encapsulated and the inner packet is ECN-capable, on the
    inner one (decapsulation does not copy it inward)."""
    out = bytearray(frame)
    out[_L3 + 1] |= _ECN_BITS
    lay = layout(frame)
    if lay is ENCAP and out[lay.ip + 1] & _ECN_BITS:
        out[lay.ip + 1] |= _ECN_BITS
    return bytes(out)


def reference(frame: bytes, vq_bytes: int, spec: PortSpec, priority: int = 0,
              mark: int = 0, control_budget: int | None = None) -> tuple[RunResult, int]:
    """What the program does to `frame` (arriving with skb->priority and skb->mark) on a port
    with backlog `vq_bytes` and no draining, and `control_budget` bytes left for the control
    class (None: plenty): (result, backlog afterwards). The integration tests hold the kernel to
    this model. A trimmed header is redirected to the same port with REINJECT_MARK and passes
    the second time untouched and uncounted."""
    if mark == REINJECT_MARK:
        return RunResult(TC_ACT_OK, frame, CLASS_CONTROL, 0), vq_bytes
    kind, trimmable, ect = classify(frame)
    if kind == "control" and control_budget is not None and control_budget < len(frame):
        kind = "demoted"  # over the port's control budget
    q = vq_bytes + len(frame)
    admitted, out, prio = len(frame), frame, priority
    if kind == "other":
        admitted = 0 if q > spec.drop_bytes else admitted
    elif kind == "control":
        prio = CLASS_CONTROL
    elif q > spec.trim_bytes and spec.trim and trimmable:
        out = trim_frame(frame, spec.last_hop)
        return RunResult(TC_ACT_REDIRECT, out, CLASS_CONTROL, REINJECT_MARK), \
            min(vq_bytes + len(out), VQ_CAP_BYTES)
    elif q > spec.drop_bytes:
        return RunResult(TC_ACT_SHOT, frame, priority, mark), min(vq_bytes, VQ_CAP_BYTES)
    else:
        prio = CLASS_DATA
        if q > spec.mark_bytes and ect and not spec.last_hop:
            out = mark_ce(frame)
    return RunResult(TC_ACT_OK, out, prio, mark), min(vq_bytes + admitted, VQ_CAP_BYTES)


def charged_bytes(result: RunResult) -> int:
    """What the port's shaper (HTB) charges for a frame the program returned: its length as it
    leaves (a trimmed header is sized again on its second pass), nothing for a drop."""
    return 0 if result.verdict == TC_ACT_SHOT else len(result.frame)
