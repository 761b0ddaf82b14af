"""MRC wire format: the UDP payload of every MRC datagram (UDP destination port 4791), a RoCEv2
packet Wireshark's own InfiniBand dissector reads:

    BTH (12) | MRCETH (4) | type extension | [payload | pad] | ICRC (4)

* BTH: the IBTA Base Transport Header, every field in its IBTA position (opcode, SE/M/PadCnt/
  TVer, P_Key, FECN/BECN, destination QP, AckReq, PSN). Opcodes are in the manufacturer-specific
  range 0xE0-0xFF (transport-type bits 111); their low five bits reuse the IBTA operation where
  one fits (SEND First..Only with Immediate = 0x00..0x05, Acknowledge = 0x11). Data is
  0xE0-0xEF, control 0xF0-0xFF (the switch program's split).
* MRCETH, the MRC extended transport header: flags (retransmit, trimmed, trimmed at the last
  hop, ECN echo) and the MRC version, at the same offset in every packet, so a switch sets the
  trim flags without decoding the opcode; in control packets (SACK, NACK, probes) its last 16
  bits are the sender's port status (the OCP spec's Port Status Update): bit p set when the
  sending host's NIC port on plane p is down, 0 when every port is up (data packets send 0).
* One fixed extension per type (data, SACK, NACK, probe): one `struct` call per packet.
* PadCnt pads a data payload to a 4-byte multiple, as the BTH requires; a 4-byte ICRC field ends
  every packet. Agents and switches send it as zero (not computed): the receiving kernel checks
  the UDP checksum, which covers all the ICRC would; `icrc()` computes the real RoCEv2 value.

Byte layout and rationale: docs/wire-format.md. The entropy value (EV) is not in this header:
the UDP source port and the IPv6 flow label carry it (`ev_to_wire`), and SACKs echo it. The one
home of the frame size is `frame_bytes`. Every constant the switch program (`topologies/
dataplane/build.py`) and the Wireshark dissector (`experiments/tools/wireshark/`) use comes
from here. All fields are big-endian except the ICRC (RoCEv2 sends the CRC-32 least significant
byte first). Every decoder raises `MalformedPacket` and nothing else on bad input.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

MRC_PORT = 4791  # UDP destination port of every MRC datagram (RoCEv2's)
VERSION = 2  # MRCETH version byte; version 1 was the pre-BTH format (a magic 'M' in byte 2)

# ----- BTH ---------------------------------------------------------------------------------------
PKEY_DEFAULT = 0xFFFF  # default partition, full member: what RoCEv2 endpoints use
BTH_TVER = 0  # transport header version, the only one IBTA defines
OPCODE_VENDOR_MASK = 0xE0  # transport-type bits 111: manufacturer-specific opcodes 0xE0-0xFF
PADCNT_SHIFT = 4  # BTH byte 1 = SE(7) M(6) PadCnt(5:4) TVer(3:0)
PADCNT_MASK = 0x30
ACKREQ_BIT = 0x80  # BTH byte 8, bit 7

# Opcodes: 0xE0 | the IBTA operation's low bits where one fits.
OP_DATA_FIRST, OP_DATA_MIDDLE, OP_DATA_LAST = 0xE0, 0xE1, 0xE2
OP_DATA_LAST_IMM, OP_DATA_ONLY, OP_DATA_ONLY_IMM = 0xE3, 0xE4, 0xE5
OP_SACK, OP_NACK, OP_EV_PROBE, OP_EV_PROBE_REPLY = 0xF1, 0xF2, 0xF3, 0xF4
DATA_OPCODE_MAX = 0xEF  # opcode above this: control (the switch program's test)
DATA_OPCODES = frozenset({OP_DATA_FIRST, OP_DATA_MIDDLE, OP_DATA_LAST, OP_DATA_LAST_IMM,
                          OP_DATA_ONLY, OP_DATA_ONLY_IMM})
OPCODE_NAMES = {OP_DATA_FIRST: "DATA_FIRST", OP_DATA_MIDDLE: "DATA_MIDDLE",
                OP_DATA_LAST: "DATA_LAST", OP_DATA_LAST_IMM: "DATA_LAST_IMM",
                OP_DATA_ONLY: "DATA_ONLY", OP_DATA_ONLY_IMM: "DATA_ONLY_IMM", OP_SACK: "SACK",
                OP_NACK: "NACK", OP_EV_PROBE: "EV_PROBE", OP_EV_PROBE_REPLY: "EV_PROBE_REPLY"}

# ----- flags -------------------------------------------------------------------------------------
# One namespace for callers. On the wire F_ACK_REQ is the BTH AckReq bit (it has that bit's value,
# so neither side shifts it); the others are the MRCETH flags byte.
F_RETRANSMIT = 0x01
F_TRIMMED = 0x02  # set by a switch that cut the payload
F_TRIMMED_LASTHOP = 0x04  # with F_TRIMMED: cut by the port facing the receiver (its own incast)
F_ECN_ECHO = 0x08  # SACK/NACK: the triggering packet arrived CE-marked
F_ACK_REQ = ACKREQ_BIT  # data: acknowledge at once (last packet of a message, retransmissions)
ETH_FLAGS_MASK = 0x0F  # MRCETH bits in use; 0x10-0x80 reserved: sent 0, ignored

# Traffic class: switches trim only the MRC data class (a per-class feature, as in real
# switches); the RoCE baseline's packets carry DSCP 0 and see drop-tail.
TRIM_DSCP = 26
DATA_TCLASS = TRIM_DSCP << 2 | 0b10  # MRC packets: the trimmable class, ECN-capable (ECT(0))

# NACK reason codes (OCP MRC 1.0, and the go-back-N baseline's sequence error).
NACK_TRIMMED = 1
NACK_TRIMMED_LASTHOP = 2
NACK_NO_BITMAP = 3
NACK_NO_PKT_BUFFER = 4
NACK_PSN_OOR_WINDOW = 5
NACK_SEQUENCE_ERROR = 6  # go-back-N baseline: the expected PSN in the BTH PSN
NACK_REASONS = frozenset(range(1, 7))
NACK_REASON_NAMES = {NACK_TRIMMED: "TRIMMED", NACK_TRIMMED_LASTHOP: "TRIMMED_LASTHOP",
                     NACK_NO_BITMAP: "NO_BITMAP", NACK_NO_PKT_BUFFER: "NO_PKT_BUFFER",
                     NACK_PSN_OOR_WINDOW: "PSN_OOR_WINDOW", NACK_SEQUENCE_ERROR: "SEQUENCE_ERROR"}

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
QPN_MASK = 0xFFFFFF
MAX_PAYLOAD = 9000

# ----- layouts -----------------------------------------------------------------------------------
# BTH: opcode, SE|M|PadCnt|TVer, P_Key, FECN|BECN|resv6 + DestQP (one word), AckReq|resv7 + PSN.
BTH = struct.Struct("!BBHII")
MRCETH = struct.Struct("!BBH")  # flags, version, ports down (control) / reserved (data)
PORTS_DOWN_MASK = 0xFFFF  # one bit per plane (the model's planes: at most 15)
COMMON = struct.Struct(BTH.format + MRCETH.format[1:])  # 16 bytes, every packet
# Each extension and its members' names (`fields`, the dissector's field names and offsets).
DATA_EXT = struct.Struct("!IHHQIII")
DATA_EXT_FIELDS = ("msn", "payload_len", "reserved", "offset", "msg_len", "tsval", "immediate")
SACK_EXT = struct.Struct("!IQIIHH")  # base: PSN of bitmap bit 0
SACK_EXT_FIELDS = ("base", "bitmap", "echo_ev", "echo_ts", "ecn_count", "credit")
NACK_EXT = struct.Struct("!III")  # reason in the top byte of the first word, cack below it
NACK_EXT_FIELDS = ("reason_cack", "echo_ev", "echo_ts")
PROBE_EXT = struct.Struct("!III")
PROBE_EXT_FIELDS = ("probe_id", "tsval", "probed_ev")
ICRC_LEN = 4

BTH_LEN = BTH.size  # 12
OPCODE_OFF = 0
PADCNT_OFF = 1
PKEY_OFF = 2  # 16-bit partition key: bytes 2..3
QPN_OFF = 5  # 24-bit destination QP: bytes 5..7
ACKREQ_OFF = 8  # the AckReq bit's byte (ACKREQ_BIT)
PSN_OFF = 9  # 24-bit PSN: bytes 9..11
FLAGS_OFF = BTH_LEN  # MRCETH flags byte: where a switch sets F_TRIMMED / F_TRIMMED_LASTHOP
VERSION_OFF = BTH_LEN + 1
PORTS_DOWN_OFF = BTH_LEN + 2  # a control packet's 16-bit ports-down mask
PAYLOAD_LEN_OFF = COMMON.size + 4  # data: after the MSN
DATA_HDR = COMMON.size + DATA_EXT.size  # 44: the headers before the payload
DATA_OVERHEAD = DATA_HDR + ICRC_LEN  # 48: a data packet's bytes besides payload and pad
TRIM_KEEP = DATA_OVERHEAD  # what a trimmed packet keeps: the headers, then a zeroed ICRC field
SACK_LEN = COMMON.size + SACK_EXT.size + ICRC_LEN  # 44, exact
NACK_LEN = COMMON.size + NACK_EXT.size + ICRC_LEN  # 32, exact
PROBE_LEN = COMMON.size + PROBE_EXT.size + ICRC_LEN  # 32, exact

# What surrounds an MRC datagram on a link: skb->len at a switch's tc egress counts all three.
ETH_HDR, IPV6_HDR, UDP_HDR = 14, 40, 8
FRAME_OVERHEAD = ETH_HDR + IPV6_HDR + UDP_HDR

# The hot path's one struct call each; control packets include their (zero) ICRC.
_DATA = struct.Struct(COMMON.format + DATA_EXT.format[1:])
_SACK = struct.Struct(COMMON.format + SACK_EXT.format[1:] + "4x")
_NACK = struct.Struct(COMMON.format + NACK_EXT.format[1:] + "4x")
_PROBE = struct.Struct(COMMON.format + PROBE_EXT.format[1:] + "4x")
# Pad (0-3 bytes) + zero ICRC after a payload of n bytes: _TAILS[-n & 3].
_TAILS = tuple(bytes(pad + ICRC_LEN) for pad in range(4))
_PADCNT_BYTE = tuple((pad << PADCNT_SHIFT) | BTH_TVER for pad in range(4))
_join = b"".join


def data_len(payload_len: int) -> int:
    """UDP payload bytes of a data packet carrying `payload_len` bytes (headers, pad, ICRC).

    >>> data_len(4096), data_len(1021)
    (4144, 1072)
    """
    return DATA_OVERHEAD + payload_len + (-payload_len & 3)


def frame_bytes(mtu_payload: int) -> int:
    """Bytes of a full MRC data frame on the wire (Ethernet included) carrying `mtu_payload`
    bytes of data: the one home of the frame size (switch thresholds, NSCC target, simulated
    links all use it).

    >>> frame_bytes(4096)
    4206
    """
    return FRAME_OVERHEAD + data_len(mtu_payload)


def payload_ceiling(mtu_payload: int, sack_every: int | None, encapsulated: bool = True) -> float:
    """The most of a host link's rate that can be payload for a host that sends full frames on
    it while acknowledging a flow it receives on the same NIC (one SACK every `sack_every`
    data packets, as in a permutation; None: the link carries no SACKs, as one-way flows'
    forward links), the shaper counting Ethernet and every IP header (`encapsulated`: MRC's
    outer IPv6 header on data and SACKs alike). The figure a throughput is measured against
    when the frame changes.

    >>> round(payload_ceiling(4096, 4), 4), round(payload_ceiling(4096, 4, encapsulated=False), 4)
    (0.9565, 0.9677)
    >>> round(payload_ceiling(4096, None), 4)
    0.9647
    """
    outer = IPV6_HDR if encapsulated else 0
    acks = 0.0 if sack_every is None else (FRAME_OVERHEAD + SACK_LEN + outer) / sack_every
    per_data = frame_bytes(mtu_payload) + outer + acks
    return mtu_payload / per_data


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
    flags: int  # MRCETH flags | F_ACK_REQ
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
    cack: int  # every PSN before this one has arrived (the BTH PSN)
    base: int  # PSN of bitmap bit 0
    bitmap: int
    echo_ev: int
    echo_ts: int
    ecn_count: int
    credit: int
    ports_down: int = 0  # the sending host's NIC ports down, bit p = plane p (MRCETH)


class Nack(NamedTuple):
    flags: int
    qpn: int
    psn: int  # the NACKed PSN (the BTH PSN)
    reason: int
    echo_ev: int
    echo_ts: int
    cack: int
    ports_down: int = 0


class Probe(NamedTuple):
    opcode: int  # OP_EV_PROBE or OP_EV_PROBE_REPLY
    flags: int
    qpn: int
    probe_id: int
    tsval: int
    probed_ev: int
    ports_down: int = 0


Packet = Data | Sack | Nack | Probe
_new_tuple = tuple.__new__  # decode's constructor for the per-packet kinds (see there)


# ----- encoders ----------------------------------------------------------------------------------
def encode_data(opcode: int, flags: int, qpn: int, psn: int, msn: int, offset: int, msg_len: int,
                payload: bytes | memoryview, tsval: int = 0, immediate: int = 0) -> bytes:
    n = len(payload)
    pad = -n & 3
    # join copies the payload once; header + payload + tail would copy it twice.
    return _join((_DATA.pack(opcode, _PADCNT_BYTE[pad], PKEY_DEFAULT, qpn & QPN_MASK,
                             ((flags & F_ACK_REQ) << 24) | (psn & PSN_MASK),
                             flags & ETH_FLAGS_MASK, VERSION, 0, msn & 0xFFFFFFFF, n, 0, offset,
                             msg_len, tsval & 0xFFFFFFFF, immediate & 0xFFFFFFFF),
                  payload, _TAILS[pad]))


def encode_sack(qpn: int, cack: int, base: int, bitmap: int, echo_ev: int, echo_ts: int,
                ecn_count: int = 0, credit: int = 0, flags: int = 0, ports_down: int = 0) -> bytes:
    return _SACK.pack(OP_SACK, BTH_TVER, PKEY_DEFAULT, qpn & QPN_MASK,
                      ((flags & F_ACK_REQ) << 24) | (cack & PSN_MASK), flags & ETH_FLAGS_MASK,
                      VERSION, ports_down & PORTS_DOWN_MASK, base & PSN_MASK, bitmap & 0xFFFFFFFFFFFFFFFF,
                      echo_ev & 0xFFFFFFFF, echo_ts & 0xFFFFFFFF, min(ecn_count, 0xFFFF),
                      min(credit, 0xFFFF))


def encode_nack(qpn: int, psn: int, reason: int, echo_ev: int = 0, echo_ts: int = 0,
                cack: int = 0, flags: int = 0, ports_down: int = 0) -> bytes:
    return _NACK.pack(OP_NACK, BTH_TVER, PKEY_DEFAULT, qpn & QPN_MASK,
                      ((flags & F_ACK_REQ) << 24) | (psn & PSN_MASK), flags & ETH_FLAGS_MASK,
                      VERSION, ports_down & PORTS_DOWN_MASK, ((reason & 0xFF) << 24) | (cack & PSN_MASK),
                      echo_ev & 0xFFFFFFFF, echo_ts & 0xFFFFFFFF)


def encode_probe(opcode: int, qpn: int, probe_id: int, tsval: int, probed_ev: int,
                 ports_down: int = 0) -> bytes:
    return _PROBE.pack(opcode, BTH_TVER, PKEY_DEFAULT, qpn & QPN_MASK, 0, 0, VERSION,
                       ports_down & PORTS_DOWN_MASK,
                       probe_id & 0xFFFFFFFF, tsval & 0xFFFFFFFF, probed_ev & 0xFFFFFFFF)


# ----- decoders ----------------------------------------------------------------------------------
def is_mrc(buf: bytes | memoryview) -> bool:
    """The cheap test the agent and the switch program make (the agent inlines it): long
    enough, an opcode in the manufacturer-specific range, MRC's version."""
    return len(buf) >= COMMON.size and buf[OPCODE_OFF] & OPCODE_VENDOR_MASK == OPCODE_VENDOR_MASK \
        and buf[VERSION_OFF] == VERSION


def qpn_of(buf: bytes | memoryview) -> int:
    """Destination QPN of a datagram, for demultiplexing; MalformedPacket if not MRC."""
    if not is_mrc(buf):
        raise MalformedPacket("not an MRC datagram (short, non-MRC opcode, or wrong version)")
    return int.from_bytes(buf[QPN_OFF:QPN_OFF + 3], "big")


def decode(buf: bytes | memoryview) -> Packet:
    n = len(buf)
    if n < COMMON.size:
        raise MalformedPacket(f"{n} bytes is shorter than the {COMMON.size}-byte BTH + MRCETH")
    opcode = buf[0]
    if opcode in DATA_OPCODES:
        if n < DATA_OVERHEAD:
            raise MalformedPacket(f"data packet of {n} bytes is shorter than its headers + ICRC")
        (_, b1, pkey, word1, word2, eflags, version, _r, msn, plen, _r2, offset, msg_len,
         tsval, imm) = _DATA.unpack_from(buf, 0)
        if version != VERSION or pkey != PKEY_DEFAULT or b1 & 0x0F != BTH_TVER:
            _bad_common(b1, pkey, version)
        flags = eflags | (word2 >> 24 & F_ACK_REQ)
        if flags & F_TRIMMED:
            payload: bytes | memoryview = b""  # cut by a switch: headers and ICRC field only
        else:
            pad = (b1 & PADCNT_MASK) >> PADCNT_SHIFT
            if pad != -plen & 3 or n != DATA_OVERHEAD + plen + pad:
                raise MalformedPacket(f"payload length {plen} (pad {pad}) disagrees with "
                                      f"datagram size {n}")
            payload = memoryview(buf)[DATA_HDR:DATA_HDR + plen]
        if plen > MAX_PAYLOAD or offset + plen > msg_len:
            raise MalformedPacket("payload overruns its message")
        # tuple.__new__ rather than Data(...): a NamedTuple's constructor is a Python-level
        # function, a call per packet saved (the same tuple).
        return _new_tuple(Data, (opcode, flags, word1 & QPN_MASK, word2 & PSN_MASK, msn, offset,
                                 msg_len, imm, tsval, payload))
    if opcode == OP_SACK:
        if n != SACK_LEN:
            raise MalformedPacket(f"SACK of {n} bytes, expected {SACK_LEN}")
        (_, b1, pkey, word1, word2, eflags, version, down, base, bitmap, echo_ev, echo_ts, ecn,
         credit) = _SACK.unpack_from(buf, 0)
        if version != VERSION or pkey != PKEY_DEFAULT or b1 & 0x0F != BTH_TVER:
            _bad_common(b1, pkey, version)
        if base > PSN_MASK:
            raise MalformedPacket("reserved bits set in the SACK bitmap base")
        return _new_tuple(Sack, (eflags | (word2 >> 24 & F_ACK_REQ), word1 & QPN_MASK,
                                 word2 & PSN_MASK, base, bitmap, echo_ev, echo_ts, ecn, credit,
                                 down))
    if opcode == OP_NACK:
        if n != NACK_LEN:
            raise MalformedPacket(f"NACK of {n} bytes, expected {NACK_LEN}")
        (_, b1, pkey, word1, word2, eflags, version, down, rc, echo_ev,
         echo_ts) = _NACK.unpack_from(buf, 0)
        if version != VERSION or pkey != PKEY_DEFAULT or b1 & 0x0F != BTH_TVER:
            _bad_common(b1, pkey, version)
        reason = rc >> 24
        if reason not in NACK_REASONS:
            raise MalformedPacket(f"bad NACK (reason {reason})")
        return Nack(eflags | (word2 >> 24 & F_ACK_REQ), word1 & QPN_MASK, word2 & PSN_MASK,
                    reason, echo_ev, echo_ts, rc & PSN_MASK, down)
    if opcode in (OP_EV_PROBE, OP_EV_PROBE_REPLY):
        if n != PROBE_LEN:
            raise MalformedPacket(f"probe of {n} bytes, expected {PROBE_LEN}")
        (_, b1, pkey, word1, _word2, eflags, version, down, probe_id, tsval,
         probed_ev) = _PROBE.unpack_from(buf, 0)
        if version != VERSION or pkey != PKEY_DEFAULT or b1 & 0x0F != BTH_TVER:
            _bad_common(b1, pkey, version)
        return Probe(opcode, eflags, word1 & QPN_MASK, probe_id, tsval, probed_ev, down)
    if opcode & OPCODE_VENDOR_MASK != OPCODE_VENDOR_MASK:
        raise MalformedPacket(f"opcode {opcode:#04x} is not an MRC (manufacturer-specific) one")
    raise MalformedPacket(f"unknown MRC opcode {opcode:#04x}")


def _bad_common(b1: int, pkey: int, version: int) -> None:
    # decode() inlines the test (a call per packet costs ~100 ns); this only words the error.
    # FECN/BECN and the reserved bits are never checked: IBTA receivers ignore them.
    if version != VERSION:
        raise MalformedPacket(f"MRC version {version}, expected {VERSION}")
    raise MalformedPacket(f"BTH TVer {b1 & 0x0F} / P_Key {pkey:#06x} is not MRC's")


def fields(buf: bytes | memoryview) -> dict[str, int]:
    """Every header field of a well-formed datagram by name (the names the Wireshark dissector
    gives them after `mrc.`), for packet logs and tests, not the hot path: the BTH's opcode,
    qpn, psn, ackreq, padcnt; the MRCETH `flags` byte and, in a control packet, `ports_down`;
    the extension's members (`*_EXT_FIELDS`, a NACK's reason and cack apart, reserved ones left
    out); `len`, the UDP payload length.

    >>> f = fields(encode_nack(7, 5, NACK_TRIMMED, echo_ev=0x1C000, echo_ts=9, cack=4))
    >>> f["opcode"] == OP_NACK, f["psn"], f["reason"], f["cack"], f["len"]
    (True, 5, 1, 4, 32)
    """
    pkt = decode(buf)  # MalformedPacket unless well-formed
    out = {"opcode": buf[OPCODE_OFF], "qpn": pkt.qpn,
           "psn": int.from_bytes(buf[PSN_OFF:PSN_OFF + 3], "big"),
           "flags": buf[FLAGS_OFF], "ackreq": int(bool(pkt.flags & F_ACK_REQ)),
           "padcnt": (buf[PADCNT_OFF] & PADCNT_MASK) >> PADCNT_SHIFT, "len": len(buf)}
    ext, names = _EXTENSIONS[buf[OPCODE_OFF]]
    out.update(zip(names, ext.unpack_from(buf, COMMON.size), strict=True))
    out.pop("reserved", None)
    if not isinstance(pkt, Data):
        out["ports_down"] = int.from_bytes(buf[PORTS_DOWN_OFF:PORTS_DOWN_OFF + 2], "big")
    if "reason_cack" in out:
        word = out.pop("reason_cack")
        out.update(reason=word >> 24, cack=word & PSN_MASK)
    return out


_EXTENSIONS = {**{op: (DATA_EXT, DATA_EXT_FIELDS) for op in DATA_OPCODES},
               OP_SACK: (SACK_EXT, SACK_EXT_FIELDS), OP_NACK: (NACK_EXT, NACK_EXT_FIELDS),
               OP_EV_PROBE: (PROBE_EXT, PROBE_EXT_FIELDS),
               OP_EV_PROBE_REPLY: (PROBE_EXT, PROBE_EXT_FIELDS)}


# ----- helpers -----------------------------------------------------------------------------------
def data_opcode(first: bool, last: bool, immediate: bool = False) -> int:
    if first and last:
        return OP_DATA_ONLY_IMM if immediate else OP_DATA_ONLY
    if first:
        return OP_DATA_FIRST
    if last:
        return OP_DATA_LAST_IMM if immediate else OP_DATA_LAST
    return OP_DATA_MIDDLE


def trimmed(buf: bytes | bytearray | memoryview, last_hop: bool = False) -> bytes:
    """What a trimming switch leaves of a data packet's UDP payload (the Python model of the
    switch program's cut, for tests and the reference model): the headers, a zeroed ICRC
    field, PadCnt 0, F_TRIMMED (and F_TRIMMED_LASTHOP on a port facing the receiver)."""
    out = bytearray(buf[:TRIM_KEEP])
    out[DATA_HDR:TRIM_KEEP] = bytes(ICRC_LEN)
    out[PADCNT_OFF] &= ~PADCNT_MASK & 0xFF
    out[FLAGS_OFF] |= F_TRIMMED | (F_TRIMMED_LASTHOP if last_hop else 0)
    return bytes(out)


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


# ----- ICRC (RoCEv2, IBTA Annex A17) -------------------------------------------------------------
_MASKED_LRH = b"\xff" * 8  # RoCEv2 has no LRH: the CRC starts over 8 bytes of ones in its place


def icrc(ip6_header: bytes, udp_datagram: bytes | bytearray | memoryview) -> int:
    """The RoCEv2 invariant CRC of a packet: CRC-32 over 8 bytes of ones, the IPv6 header that
    precedes UDP (with IPv6-in-IPv6: the inner one) with traffic class, flow label and hop limit
    set to ones, the UDP header with its checksum set to ones, the BTH with byte 4 (FECN, BECN,
    reserved) set to ones, and everything up to the ICRC field. The wire carries it least
    significant byte first (`icrc_bytes`). Only the first 40 bytes of `ip6_header` are used;
    `udp_datagram` ends with the ICRC field. Not sent by the agents (see the module docstring)."""
    if len(ip6_header) < IPV6_HDR or len(udp_datagram) < UDP_HDR + BTH_LEN + ICRC_LEN:
        raise MalformedPacket("too short for an ICRC")
    ip = bytearray(ip6_header[:IPV6_HDR])
    ip[0] |= 0x0F  # traffic class (high nibble) ...
    ip[1:4] = b"\xff\xff\xff"  # ... the rest of it and the flow label
    ip[7] = 0xFF  # hop limit
    head = bytearray(udp_datagram[:UDP_HDR + BTH_LEN])
    head[6:8] = b"\xff\xff"  # UDP checksum
    head[UDP_HDR + 4] = 0xFF  # BTH FECN | BECN | resv6
    crc = zlib.crc32(_MASKED_LRH + bytes(ip) + bytes(head))
    return zlib.crc32(memoryview(udp_datagram)[UDP_HDR + BTH_LEN:len(udp_datagram) - ICRC_LEN],
                      crc)


def icrc_bytes(ip6_header: bytes, udp_datagram: bytes | bytearray | memoryview) -> bytes:
    return struct.pack("<I", icrc(ip6_header, udp_datagram))
