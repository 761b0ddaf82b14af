"""Lab 8, your own MRC parser: from the bytes of a captured IPv6 packet to the MRC datagram
inside it, its BTH, a SACK's bitmap and a NACK's reason.

Write every decoding yourself from the byte layout (docs/wire-format.md, the lab's README):
importing the product's wire format (`endpoints.protocol.wire`) or the dissector does not
count. Fill in each TODO between its `# TODO N` and `# END TODO N` lines, then run
`make check-lab N=8`.
"""

from __future__ import annotations

from typing import NamedTuple

MRC_PORT = 4791  # the UDP destination port of every MRC datagram (RoCEv2's)


class Bth(NamedTuple):
    opcode: int
    qpn: int  # destination queue pair
    psn: int  # 24-bit packet sequence number (a SACK's cumulative ACK, a NACK's PSN)


def mrc_datagram(ip: bytes) -> bytes | None:
    """The MRC datagram (the UDP payload of a datagram to UDP port 4791) inside an IPv6
    packet, through the IPv6-in-IPv6 encapsulation MRC uses; None for any other packet. A
    capture with a snap length keeps only the start of a long packet: return what is there."""
    # TODO 1: an IPv6 header is 40 bytes, its first 4 bits the version (6) and its byte 6 the
    # next header: 41 is another IPv6 header (the encapsulation), 17 a UDP header of 8 bytes
    # (source port, destination port, length, checksum; 16 bits each, big-endian)
    if len(ip) < 40 or ip[0] >> 4 != 6:
        return None
    if ip[6] == 41:
        return mrc_datagram(ip[40:])
    udp = ip[40:]
    if ip[6] != 17 or len(udp) < 8 or int.from_bytes(udp[2:4], "big") != MRC_PORT:
        return None
    return udp[8:int.from_bytes(udp[4:6], "big")]
    # END TODO 1


def bth(datagram: bytes) -> Bth:
    """The opcode, destination QP and PSN of an MRC datagram's Base Transport Header."""
    # TODO 2: the BTH's 12 bytes: opcode (byte 0), flags, P_Key (2), one reserved byte, the
    # destination QP (3 bytes), then the AckReq bit and 7 reserved bits, and the PSN (3 bytes);
    # every field big-endian
    return Bth(datagram[0], int.from_bytes(datagram[5:8], "big"),
               int.from_bytes(datagram[9:12], "big"))
    # END TODO 2


def sack_received(datagram: bytes) -> list[int]:
    """The PSNs a SACK's bitmap says have arrived, bit 0 first: bitmap bit i (bit 0 the least
    significant) stands for PSN base + i, counted modulo 2**24 as PSNs are."""
    # TODO 3: after the BTH (12 bytes) and the MRCETH (4) come the base (4 bytes) and the
    # bitmap (8 bytes), big-endian
    base = int.from_bytes(datagram[16:20], "big")
    bitmap = int.from_bytes(datagram[20:28], "big")
    return [(base + i) % 2**24 for i in range(64) if bitmap >> i & 1]
    # END TODO 3


def nack_reason(datagram: bytes) -> str:
    """A NACK's reason, by its name in the OCP MRC list (docs/wire-format.md, "NACK reason
    codes"): "TRIMMED", "TRIMMED_LASTHOP", ..., "SEQUENCE_ERROR"."""
    # TODO 4: after the BTH and the MRCETH, a 32-bit word: the reason code in its top byte,
    # the receiver's cumulative ACK in the 24 bits below
    names = {1: "TRIMMED", 2: "TRIMMED_LASTHOP", 3: "NO_BITMAP", 4: "NO_PKT_BUFFER",
             5: "PSN_OOR_WINDOW", 6: "SEQUENCE_ERROR"}
    return names[datagram[16]]
    # END TODO 4
