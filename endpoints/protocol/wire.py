"""MRC wire format: the UDP payload of every MRC datagram (UDP destination port 4791).

Modelled on the RoCEv2 base transport header (opcode, destination QP, 24-bit PSN) plus the MRC
extensions the spec adds (message sequence number, placement offset and length carried in every
data packet, SACK with a 64-bit bitmap, NACK reasons, EV probes). Byte layout: docs/wire-format.md.
The entropy value (EV) is not in this header: the UDP source port and the IPv6 flow label carry
it (`ev_to_wire`), and SACKs echo it. The one home of the frame size is `frame_bytes`.

All fields are big-endian. Every decoder raises `MalformedPacket` and nothing else on bad input.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MRC_PORT = 4791  # UDP destination port of every MRC datagram (RoCEv2's)
MAGIC = 0x4D  # 'M': lets switches and agents ignore foreign traffic on port 4791 cheaply
VERSION = 1

# Opcodes. Data opcodes are 0x00-0x0F (the switch data plane relies on that split).
OP_DATA_FIRST, OP_DATA_MIDDLE, OP_DATA_LAST, OP_DATA_ONLY = 0x00, 0x01, 0x02, 0x03
OP_DATA_LAST_IMM, OP_DATA_ONLY_IMM = 0x04, 0x05
OP_SACK, OP_NACK, OP_EV_PROBE, OP_EV_PROBE_REPLY = 0x11, 0x12, 0x13, 0x14
DATA_OPCODE_MAX = 0x0F
DATA_OPCODES = frozenset({OP_DATA_FIRST, OP_DATA_MIDDLE, OP_DATA_LAST, OP_DATA_ONLY,
                          OP_DATA_LAST_IMM, OP_DATA_ONLY_IMM})

# Flags (byte 1).
F_RETRANSMIT = 0x01
F_PROBE = 0x02
F_TRIMMED = 0x04  # set by a switch that cut the payload
F_ECN_ECHO = 0x08  # SACK: the triggering packet arrived CE-marked
F_ACK_REQ = 0x10  # data: please acknowledge at once (last packet of a burst, retransmissions)
F_TRIMMED_LASTHOP = 0x20  # with F_TRIMMED: cut by the port facing the receiver (its own incast)

# Traffic class: switches trim only the MRC data class (a per-class feature, as in real
# switches); the RoCE baseline's packets carry DSCP 0 and see drop-tail.
TRIM_DSCP = 26
DATA_TCLASS = TRIM_DSCP << 2 | 0b10  # MRC packets: the trimmable class, ECN-capable (ECT(0))

# NACK reason codes (OCP MRC 1.0).
NACK_TRIMMED = 1
NACK_TRIMMED_LASTHOP = 2
NACK_NO_BITMAP = 3
NACK_NO_PKT_BUFFER = 4
NACK_PSN_OOR_WINDOW = 5
NACK_SEQUENCE_ERROR = 6  # go-back-N baseline: expected PSN in the `psn` field
NACK_REASONS = frozenset(range(1, 7))

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
QPN_MASK = 0xFFFFFF

COMMON = struct.Struct("!BBBBIII")  # opcode, flags, magic, version, dqpn, psn, msn
DATA_EXT = struct.Struct("!QIHHII")  # offset, msg_len, payload_len, reserved, immediate, tsval
SACK_EXT = struct.Struct("!IIQIIHH")  # cack, bitmap base, bitmap, echo_ev, echo_ts, ecn, credit
NACK_EXT = struct.Struct("!IB3xIII")  # psn, reason, echo_ev, echo_ts, cack
PROBE_EXT = struct.Struct("!IIII")  # probe_id, tsval, probed_ev, reserved
DATA_HDR = COMMON.size + DATA_EXT.size  # 40 bytes: what a trimmed packet keeps
SACK_LEN = COMMON.size + SACK_EXT.size
NACK_LEN = COMMON.size + NACK_EXT.size
PROBE_LEN = COMMON.size + PROBE_EXT.size
MAX_PAYLOAD = 9000

# What surrounds an MRC datagram on a link: skb->len at a switch's tc egress counts all three.
ETH_HDR, IPV6_HDR, UDP_HDR = 14, 40, 8
FRAME_OVERHEAD = ETH_HDR + IPV6_HDR + UDP_HDR


def frame_bytes(mtu_payload: int) -> int:
    """Bytes of a full MRC data frame on the wire (Ethernet included) carrying `mtu_payload`
    bytes of data: the one home of the frame size (switch thresholds, NSCC target, simulated
    links all use it).

    >>> frame_bytes(4096)
    4198
    """
    return FRAME_OVERHEAD + DATA_HDR + mtu_payload


def ev_to_wire(ev: int) -> tuple[int, int]:
    """(UDP source port, flow label) carrying a 32-bit EV: its low 16 bits in the port, its high
    16 bits in the label's low 16 bits.

    >>> ev_to_wire(0x1C005)
    (49157, 1)
    """
    return ev & 0xFFFF, (ev >> 16) & 0xFFFF


def udp6_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 8200 UDP checksum. The ones' complement sum of 16-bit words is the big-endian value
    of the bytes modulo 0xFFFF (2**16 = 1 mod 0xFFFF), one C-speed operation."""
    data = src + dst + len(udp).to_bytes(4, "big") + b"\x00\x00\x00\x11" + udp
    if len(data) & 1:
        data += b"\x00"
    value = int.from_bytes(data, "big")
    folded = value % 0xFFFF
    if folded == 0 and value:
        folded = 0xFFFF
    checksum = 0xFFFF - folded
    return checksum or 0xFFFF


class MalformedPacket(ValueError):
    """The datagram is not a well-formed MRC packet."""


class Data(NamedTuple):
    opcode: int
    flags: int
    qpn: int
    psn: int
    msn: int
    offset: int
    msg_len: int
    immediate: int
    tsval: int
    payload: bytes | memoryview


class Sack(NamedTuple):
    flags: int
    qpn: int
    cack: int  # every PSN before this one has arrived
    base: int  # PSN of bitmap bit 0
    bitmap: int
    echo_ev: int
    echo_ts: int
    ecn_count: int
    credit: int


class Nack(NamedTuple):
    flags: int
    qpn: int
    psn: int
    reason: int
    echo_ev: int
    echo_ts: int
    cack: int


class Probe(NamedTuple):
    opcode: int  # OP_EV_PROBE or OP_EV_PROBE_REPLY
    flags: int
    qpn: int
    probe_id: int
    tsval: int
    probed_ev: int


Packet = Data | Sack | Nack | Probe


_DATA = struct.Struct("!BBBBIII" "QIHHII")  # COMMON + DATA_EXT in one call (the hot path)


def encode_data(opcode: int, flags: int, qpn: int, psn: int, msn: int, offset: int, msg_len: int,
                payload: bytes | memoryview, tsval: int = 0, immediate: int = 0) -> bytes:
    # bytes + memoryview copies the payload once, where bytes(payload) + ... copied it twice.
    return _DATA.pack(opcode, flags, MAGIC, VERSION, qpn & QPN_MASK, psn & PSN_MASK,
                      msn & 0xFFFFFFFF, offset, msg_len, len(payload), 0, immediate & 0xFFFFFFFF,
                      tsval & 0xFFFFFFFF) + payload


def encode_sack(qpn: int, cack: int, base: int, bitmap: int, echo_ev: int, echo_ts: int,
                ecn_count: int = 0, credit: int = 0, flags: int = 0) -> bytes:
    return COMMON.pack(OP_SACK, flags, MAGIC, VERSION, qpn & QPN_MASK, cack & PSN_MASK, 0) + \
        SACK_EXT.pack(cack & PSN_MASK, base & PSN_MASK, bitmap & 0xFFFFFFFFFFFFFFFF,
                      echo_ev & 0xFFFFFFFF, echo_ts & 0xFFFFFFFF, min(ecn_count, 0xFFFF),
                      min(credit, 0xFFFF))


def encode_nack(qpn: int, psn: int, reason: int, echo_ev: int = 0, echo_ts: int = 0,
                cack: int = 0, flags: int = 0) -> bytes:
    return COMMON.pack(OP_NACK, flags, MAGIC, VERSION, qpn & QPN_MASK, psn & PSN_MASK, 0) + \
        NACK_EXT.pack(psn & PSN_MASK, reason, echo_ev & 0xFFFFFFFF, echo_ts & 0xFFFFFFFF,
                      cack & PSN_MASK)


def encode_probe(opcode: int, qpn: int, probe_id: int, tsval: int, probed_ev: int) -> bytes:
    return COMMON.pack(opcode, F_PROBE, MAGIC, VERSION, qpn & QPN_MASK, 0, 0) + \
        PROBE_EXT.pack(probe_id & 0xFFFFFFFF, tsval & 0xFFFFFFFF, probed_ev & 0xFFFFFFFF, 0)


def qpn_of(buf: bytes | memoryview) -> int:
    """Destination QPN of a datagram, for demultiplexing; MalformedPacket if not MRC."""
    if len(buf) < COMMON.size or buf[2] != MAGIC or buf[3] != VERSION:
        raise MalformedPacket("not an MRC datagram (short, or wrong magic/version)")
    return int.from_bytes(buf[4:8], "big") & QPN_MASK


def decode(buf: bytes | memoryview) -> Packet:
    n = len(buf)
    if n < COMMON.size:
        raise MalformedPacket(f"{n} bytes is shorter than the {COMMON.size}-byte header")
    opcode, flags, magic, version, qpn, psn, msn = COMMON.unpack_from(buf, 0)
    if magic != MAGIC or version != VERSION:
        raise MalformedPacket(f"bad magic/version {magic:#x}/{version}")
    if qpn > QPN_MASK or psn > PSN_MASK:
        raise MalformedPacket("reserved bits set in QPN or PSN")
    if opcode in DATA_OPCODES:
        if n < DATA_HDR:
            raise MalformedPacket(f"data packet of {n} bytes is shorter than its header")
        offset, msg_len, plen, _res, imm, tsval = DATA_EXT.unpack_from(buf, COMMON.size)
        trimmed = flags & F_TRIMMED
        if not trimmed and n != DATA_HDR + plen:
            raise MalformedPacket(f"payload length {plen} disagrees with datagram size {n}")
        if plen > MAX_PAYLOAD or offset + plen > msg_len:
            raise MalformedPacket("payload overruns its message")
        payload = b"" if trimmed else memoryview(buf)[DATA_HDR:DATA_HDR + plen]
        return Data(opcode, flags, qpn, psn, msn, offset, msg_len, imm, tsval, payload)
    if opcode == OP_SACK:
        if n < SACK_LEN:
            raise MalformedPacket("truncated SACK")
        cack, base, bitmap, echo_ev, echo_ts, ecn, credit = SACK_EXT.unpack_from(buf, COMMON.size)
        if cack > PSN_MASK or base > PSN_MASK:
            raise MalformedPacket("reserved bits set in SACK PSNs")
        return Sack(flags, qpn, cack, base, bitmap, echo_ev, echo_ts, ecn, credit)
    if opcode == OP_NACK:
        if n < NACK_LEN:
            raise MalformedPacket("truncated NACK")
        npsn, reason, echo_ev, echo_ts, cack = NACK_EXT.unpack_from(buf, COMMON.size)
        if reason not in NACK_REASONS or npsn > PSN_MASK or cack > PSN_MASK:
            raise MalformedPacket(f"bad NACK (reason {reason})")
        return Nack(flags, qpn, npsn, reason, echo_ev, echo_ts, cack)
    if opcode in (OP_EV_PROBE, OP_EV_PROBE_REPLY):
        if n < PROBE_LEN:
            raise MalformedPacket("truncated probe")
        probe_id, tsval, probed_ev, _ = PROBE_EXT.unpack_from(buf, COMMON.size)
        return Probe(opcode, flags, qpn, probe_id, tsval, probed_ev)
    raise MalformedPacket(f"unknown opcode {opcode:#x}")


def data_opcode(first: bool, last: bool, immediate: bool = False) -> int:
    if first and last:
        return OP_DATA_ONLY_IMM if immediate else OP_DATA_ONLY
    if first:
        return OP_DATA_FIRST
    if last:
        return OP_DATA_LAST_IMM if immediate else OP_DATA_LAST
    return OP_DATA_MIDDLE


US = 1_000_000


def ts_us(now: float) -> int:
    """A time in seconds as the 32-bit microsecond timestamp packets carry (wrapping).

    >>> ts_us(1.5), ts_us(4295.0)
    (1500000, 32704)
    """
    return int(now * US) & 0xFFFFFFFF


def ts_age(now: float, ts: int) -> float:
    """Seconds from wire timestamp `ts` to `now` (across one wrap of the 32-bit counter).

    >>> ts_age(4295.0, ts_us(4294.5))
    0.5
    """
    return ((ts_us(now) - ts) & 0xFFFFFFFF) / US


def psn_unwrap(psn24: int, reference: int) -> int:
    """The full sequence number nearest `reference` whose low 24 bits are `psn24`."""
    base = reference - (reference & PSN_MASK) + psn24
    if base - reference > (1 << (PSN_BITS - 1)):
        base -= 1 << PSN_BITS
    elif reference - base > (1 << (PSN_BITS - 1)):
        base += 1 << PSN_BITS
    return base
