"""Real kernel sockets for MRC datagrams.

Sending: an AF_INET6 raw socket with IPPROTO_RAW (header included), because MRC needs per-packet
control of the UDP source port and the IPv6 flow label, which carry the entropy value (EV), and
Linux refuses unregistered flow labels on ordinary sockets. The kernel still routes the packet
(the SRv6 destination picks the plane's NIC) and resolves the static gateway neighbour.

Receiving: an ordinary UDP socket on port 4791, so the kernel verifies checksums; ancillary data
gives the local address (which plane's NIC), the flow label and the traffic class (ECN).
EV layout: low 16 bits in the UDP source port, high 16 bits in the low 16 bits of the flow label.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys

MRC_PORT = 4791
IPV6_FLOWINFO = 11  # sockopt: deliver the flow info (label) as ancillary data
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
ECN_ECT0 = 0b10
ECN_CE = 0b11
_IP6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_NEXT_UDP = 17
HOP_LIMIT = 64


def ev_to_wire(ev: int) -> tuple[int, int]:
    """(UDP source port, flow label) for a 32-bit EV."""
    return ev & 0xFFFF, (ev >> 16) & 0xFFFF


def ev_from_wire(sport: int, flowlabel: int) -> int:
    return ((flowlabel & 0xFFFF) << 16) | sport


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


def build_packet(src: bytes, dst: bytes, ev: int, payload: bytes, tclass: int = ECN_ECT0,
                 dport: int = MRC_PORT) -> bytes:
    """An IPv6 + UDP packet (src/dst as 16 packed bytes) carrying `ev` and `payload`."""
    sport, label = ev_to_wire(ev)
    length = 8 + len(payload)
    csum = udp6_checksum(src, dst, _UDP.pack(sport, dport, length, 0) + payload)
    first = (6 << 28) | ((tclass & 0xFF) << 20) | label
    return _IP6.pack(first, length, _NEXT_UDP, HOP_LIMIT, src, dst) + \
        _UDP.pack(sport, dport, length, csum) + payload


class RawSender:
    """Sends prebuilt IPv6 packets; the destination address routes them."""

    def __init__(self, sndbuf: int = 4 << 20) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.sock.setblocking(False)
        self.dropped = 0  # local queue full (ENOBUFS/EAGAIN): counted, like a NIC drop

    def send(self, packet: bytes, dst: str) -> bool:
        try:
            self.sock.sendto(packet, (dst, 0))
            return True
        except (BlockingIOError, OSError):
            self.dropped += 1
            return False

    def close(self) -> None:
        self.sock.close()


def open_receiver(port: int = MRC_PORT, rcvbuf: int = 8 << 20) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
    sock.bind(("::", port))
    sock.setblocking(False)
    return sock


CMSG_SPACE = socket.CMSG_SPACE(20) + socket.CMSG_SPACE(4) * 2


def parse_ancillary(ancdata: list) -> tuple[bytes, int, int]:
    """(local address packed, flow label, traffic class) from recvmsg ancillary data."""
    local, label, tclass = b"", 0, 0
    for level, kind, data in ancdata:
        if level != socket.IPPROTO_IPV6:
            continue
        if kind == IPV6_PKTINFO:
            local = data[:16]
        elif kind == IPV6_FLOWINFO:
            label = int.from_bytes(data[:4], "big") & 0xFFFFF
        elif kind == IPV6_TCLASS:
            tclass = int.from_bytes(data[:4], sys.byteorder) & 0xFF
    return local, label, tclass


def packed(addr: str | ipaddress.IPv6Address) -> bytes:
    return ipaddress.IPv6Address(addr).packed
