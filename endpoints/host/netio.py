"""Real kernel sockets for MRC datagrams.

MRC packets leave a host IPv6-in-IPv6 (the MRC paper's encapsulation): what a sender writes is
an ordinary UDP datagram between its NIC's own address and the peer NIC's (the inner header,
whose checksum the kernel writes and no hop rewrites), marked with the path's EV (SO_MARK); the
host's encapsulation program (topologies/dataplane/mrc_encap.bpf.c) adds the outer header to
the path's uSID carrier on the way out, and the receiving host's kernel takes it off
(End.DT6). Unmarked datagrams (the RoCE-like baseline) are routed by their destination.

Sending, fast path: one UDP socket per path (source address, EV, destination, traffic class,
mark), bound to the EV's source port and connected to the peer, with the EV's flow label
registered through the flow label manager (IPV6_FLOWLABEL_MGR: Linux refuses unregistered
labels), hop limit 64, no fragmentation and no automatic flow label. The kernel writes the IPv6
and UDP headers and the checksum, byte for byte what `build_packet` writes
(tests/integration/test_bench.py compares the frames), and the route stays cached in the socket.
Building packets in Python cost ~5 us per 1 KB packet (3 of them the checksum's big-integer
`%`), about half of what the agent now spends per packet in all. Where TX checksum offload is
on, frames would carry a partial checksum that the
receiving kernel trusts, as for any local UDP socket.

Sending, fallback (the kernel refused a path socket, or too many paths): an AF_INET6 raw socket
with IPPROTO_RAW (header included) carrying packets built by `build_packet`, the mark given
with each one (SO_MARK as ancillary data), so the same encapsulation applies. Either way the
kernel routes the packet and resolves the static gateway neighbour.

Receiving: an ordinary UDP socket on port 4791, so the kernel verifies checksums; ancillary data
gives the local address (which plane's NIC), the flow label and the traffic class (ECN).
EV layout: low 16 bits in the UDP source port, high 16 bits in the low 16 bits of the flow label.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import ipaddress
import socket
import struct
import sys
from collections.abc import Callable

from endpoints.protocol.wire import MRC_PORT, ev_to_wire, udp6_checksum

IPV6_FLOWINFO = 11  # sockopt: deliver the flow info (label) as ancillary data
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
IPV6_UNICAST_HOPS = getattr(socket, "IPV6_UNICAST_HOPS", 16)
IPV6_DONTFRAG = getattr(socket, "IPV6_DONTFRAG", 62)
IPV6_FLOWLABEL_MGR = 32  # linux/in6.h
IPV6_FLOWINFO_SEND = 33
IPV6_AUTOFLOWLABEL = 70
IPV6_FL_A_GET = 0
IPV6_FL_F_CREATE = 1
IPV6_FL_S_ANY = 255  # any socket may attach the same label (every QP's EVs share them)
_FL_REQ = struct.Struct("=16s4sBBHHHI")  # struct in6_flowlabel_req; the label is big-endian
MAX_PATH_SOCKETS = 512  # beyond this many paths, the raw socket carries the rest
ECN_ECT0 = 0b10
ECN_CE = 0b11
_IP6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_NEXT_UDP = 17
_NEXT_IPV6 = 41
_MARK = struct.Struct("=I")  # SO_MARK as ancillary data
HOP_LIMIT = 64


def build_packet(src: bytes, dst: bytes, ev: int, payload: bytes, tclass: int = ECN_ECT0,
                 dport: int = MRC_PORT) -> bytes:
    """An IPv6 + UDP packet (src/dst as 16 packed bytes) carrying `ev` and `payload`."""
    sport, label = ev_to_wire(ev)
    length = 8 + len(payload)
    csum = udp6_checksum(src, dst, _UDP.pack(sport, dport, length, 0) + payload)
    first = (6 << 28) | ((tclass & 0xFF) << 20) | label
    return _IP6.pack(first, length, _NEXT_UDP, HOP_LIMIT, src, dst) + \
        _UDP.pack(sport, dport, length, csum) + payload


def encapsulate(outer_src: bytes, outer_dst: bytes, packet: bytes) -> bytes:
    """`packet` (IPv6) inside an outer IPv6 header, as the kernel's `encap seg6 mode encap.red`
    with one segment builds it: no routing header; traffic class, flow label (with
    net.ipv6.seg6_flowlabel = 0, the default) and hop limit copied from the inner header."""
    first, = struct.unpack_from("!I", packet)
    return _IP6.pack(first, len(packet), _NEXT_IPV6, packet[7], outer_src, outer_dst) + packet


def open_path_socket(src: bytes, dst: bytes, ev: int, tclass: int = ECN_ECT0,
                     dport: int = MRC_PORT, sndbuf: int = 1 << 20, mark: int = 0,
                     priority: int = 0) -> socket.socket:
    """A connected, non-blocking UDP socket whose datagrams leave as `build_packet(src, dst, ev,
    payload, tclass, dport)` would (kernel checksum), marked `mark` (an MRC path: its EV, which
    picks the carrier the host encapsulates them to); `priority` (non-zero): their
    skb->priority, which names the host qdisc's class for them. OSError if the kernel refuses
    any step."""
    sport, label = ev_to_wire(ev)
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        opt = sock.setsockopt
        if label:
            opt(socket.IPPROTO_IPV6, IPV6_FLOWLABEL_MGR, _FL_REQ.pack(
                dst, label.to_bytes(4, "big"), IPV6_FL_A_GET, IPV6_FL_S_ANY, IPV6_FL_F_CREATE, 0, 0, 0))
            opt(socket.IPPROTO_IPV6, IPV6_FLOWINFO_SEND, 1)
        opt(socket.IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, 0)  # label 0 stays 0, as on the raw path
        opt(socket.IPPROTO_IPV6, IPV6_TCLASS, tclass & 0xFF)
        opt(socket.IPPROTO_IPV6, IPV6_UNICAST_HOPS, HOP_LIMIT)
        opt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 1)  # too big fails, as a raw packet would
        opt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        if priority:
            opt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)  # above 6: needs CAP_NET_ADMIN
        opt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # every peer's paths reuse the EV ports
        if mark:
            opt(socket.SOL_SOCKET, socket.SO_MARK, mark)  # before connect: its route sees it
        sock.bind((socket.inet_ntop(socket.AF_INET6, src), sport))
        sock.connect((socket.inet_ntop(socket.AF_INET6, dst), dport, label, 0))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# The kernel's queue is full: retry the same datagram later. Every other error is permanent
# for that datagram (no route, too big, NIC down): it is lost on its path, as on a dead link.
BACKPRESSURE = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS, errno.EINTR})
PATH_BACKLOG = 64  # datagrams one path may hold while its queue is full (about a window's share)


class TxPath:
    """One path's sending state: its connected socket, or None to use the raw fallback; the
    mark (an MRC path's EV, 0 for destination routing) goes with every raw packet."""
    __slots__ = ("src", "dst", "dst_text", "ev", "tclass", "sock", "mark")

    def __init__(self, src: bytes, dst: bytes, dst_text: str, ev: int, tclass: int,
                 sock: socket.socket | None, mark: int = 0) -> None:
        self.src, self.dst, self.dst_text, self.ev = src, dst, dst_text, ev
        self.tclass, self.sock, self.mark = tclass, sock, mark


class Transmitter:
    """Sends MRC payloads over paths: per-path kernel-checksummed sockets, raw fallback."""

    def __init__(self, sndbuf: int = 4 << 20, max_paths: int = MAX_PATH_SOCKETS,
                 kernel_checksum: bool = True) -> None:
        self.sndbuf = sndbuf
        # Opened here, so in the network namespace the transmitter is made in (paths may be
        # used from elsewhere); without the privilege, on first use instead.
        self._raw: RawSender | None = None
        try:
            self._raw = RawSender(sndbuf)
        except PermissionError:
            pass
        self.errors: dict[str, int] = {}  # errno name -> send attempts that raised it
        self.max_paths = max_paths
        self.kernel_checksum = kernel_checksum
        self.paths: dict[tuple[bytes, bytes, int, int, int, int], TxPath] = {}
        self.refused = 0  # paths the kernel would not open a socket for (raw instead)
        # Where sockets opened later (a path's, on first use) must be made: the namespace the
        # transmitter was made in, when the process runs several hosts' agents (shared.py).
        self.namespace: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
        self.dropped = 0  # datagrams lost to a permanent send error (counted by errno too)

    @property
    def raw(self) -> RawSender:
        if self._raw is None:
            with self.namespace():
                self._raw = RawSender(self.sndbuf)
        return self._raw

    def path(self, src: bytes, dst: bytes, dst_text: str, ev: int,
             tclass: int = ECN_ECT0, mark: int = 0, priority: int = 0) -> TxPath:
        """The path's state, opened on first use in the calling thread's network namespace;
        `mark`: the EV for an MRC path (encapsulated to its carrier), 0 for destination routing;
        `priority`: see open_path_socket (the raw fallback sends at priority 0)."""
        key = (src, dst, ev, tclass, mark, priority)
        path = self.paths.get(key)
        if path is None:
            sock = None
            if self.kernel_checksum and len(self.paths) < self.max_paths:
                try:
                    with self.namespace():
                        sock = open_path_socket(src, dst, ev, tclass, mark=mark, priority=priority)
                except OSError:
                    self.refused += 1  # e.g. source not local or port taken: raw still works
            path = self.paths[key] = TxPath(src, dst, dst_text, ev, tclass, sock, mark)
        return path

    def send(self, path: TxPath, payload: bytes) -> bool:
        """True when the datagram is done with: sent, or lost for good to a permanent error
        (counted in `dropped` and by errno; the transport sees a loss on that path). False on
        backpressure (the kernel's queue is full): the caller keeps it for later."""
        sock = path.sock
        try:
            if sock is None:
                self.raw.send_marked(build_packet(path.src, path.dst, path.ev, payload,
                                                  path.tclass), path.dst_text, path.mark)
            else:
                try:
                    sock.send(payload)
                except ConnectionRefusedError:
                    # An ICMP error about an earlier datagram, reported instead of sending this
                    # one (the raw socket never sees those): send it now.
                    sock.send(payload)
            return True
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            self.errors[name] = self.errors.get(name, 0) + 1
            if exc.errno in BACKPRESSURE:
                return False
            self.dropped += 1
            return True

    def close(self) -> None:
        for path in self.paths.values():
            if path.sock is not None:
                path.sock.close()
        self.paths.clear()
        if self._raw is not None:
            self._raw.close()


class Backlog:
    """Datagrams the kernel could not take yet, queued per path: a path whose queue is full
    waits alone (the others keep sending), and holds at most `per_path` datagrams; past that
    they are lost on that path (`overflow`), as a full NIC queue drops them."""

    def __init__(self, tx: Transmitter, per_path: int = PATH_BACKLOG) -> None:
        self.tx, self.per_path = tx, per_path
        self.queues: dict[TxPath, collections.deque[bytes]] = {}
        self.overflow = 0

    def send(self, path: TxPath, payload: bytes) -> None:
        queue = self.queues.get(path)
        if queue is None:
            if self.tx.send(path, payload):
                return
            queue = self.queues[path] = collections.deque()
        if len(queue) >= self.per_path:
            self.overflow += 1
            return
        queue.append(payload)  # behind the ones this path already holds: its order is kept

    def flush(self) -> None:
        send = self.tx.send
        for path, queue in list(self.queues.items()):
            while queue and send(path, queue[0]):
                queue.popleft()
            if not queue:
                del self.queues[path]

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def __bool__(self) -> bool:
        return bool(self.queues)


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

    def send_marked(self, packet: bytes, dst: str, mark: int) -> None:
        """Send with skb->mark `mark` (an MRC path's EV: the host encapsulates it); raises
        OSError like a socket's send."""
        if mark:
            self.sock.sendmsg([packet], [(socket.SOL_SOCKET, socket.SO_MARK, _MARK.pack(mark))],
                              0, (dst, 0))
        else:
            self.sock.sendto(packet, (dst, 0))

    def close(self) -> None:
        self.sock.close()


def open_receiver(port: int = MRC_PORT, rcvbuf: int = 8 << 20,
                  pktinfo: bool = True) -> socket.socket:
    """`pktinfo=False` leaves out the local address (one fewer control message per datagram)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if pktinfo:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
    sock.bind(("::", port))
    sock.setblocking(False)
    return sock


CMSG_SPACE = socket.CMSG_SPACE(20) + socket.CMSG_SPACE(4) * 2


def parse_ancillary(ancdata: list[tuple[int, int, bytes]]) -> tuple[bytes, int, int]:
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
