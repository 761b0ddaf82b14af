"""Queue occupancy of the qdiscs in one network namespace, read straight from rtnetlink.

One RTM_GETQDISC dump returns, per qdisc, its interface, handle, parent, kind and
`gnet_stats_queue` (packets queued, backlog bytes, drops). Parsed with `struct` rather than
pyroute2: pyroute2 took about 1 ms per dump on the 2-core VM, too slow to sample every 20 ms
from a busy process; this takes a fraction of that. A root qdisc (HTB on every emulated port)
reports the sum of its leaves. The socket stays in the namespace it was opened in
(`topologies.netns.inside`), so one process can sample every host and switch.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_QUEUE = 3
TC_H_ROOT = 0xFFFFFFFF
_NLH = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_TCM = struct.Struct("=BxxxiIII")  # tcmsg: family, ifindex, handle, parent, info
_RTA = struct.Struct("=HH")  # rtattr: len, type
_QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits


class Qdisc(NamedTuple):
    ifindex: int
    handle: int
    parent: int
    kind: str
    qlen: int  # packets
    backlog: int  # bytes
    drops: int


def dump_request(seq: int) -> bytes:
    """RTM_GETQDISC dump request (every qdisc of the namespace)."""
    return _NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + \
        _TCM.pack(socket.AF_UNSPEC, 0, 0, 0, 0)


def parse(data: bytes, seq: int, roots_only: bool = False) -> tuple[list[Qdisc], bool]:
    """The qdiscs in one netlink read of dump `seq`, and whether the dump is done."""
    out: list[Qdisc] = []
    off = 0
    while off + _NLH.size <= len(data):
        length, kind, _flags, mseq, _pid = _NLH.unpack_from(data, off)
        if length < _NLH.size:
            return out, True  # malformed: stop rather than loop
        if mseq == seq:
            if kind == NLMSG_DONE:
                return out, True
            if kind == NLMSG_ERROR:
                raise OSError("RTM_GETQDISC dump failed")
            if kind == RTM_NEWQDISC:
                q = _qdisc(data, off + _NLH.size, off + length, roots_only)
                if q is not None:
                    out.append(q)
        off += (length + 3) & ~3
    return out, False


def _qdisc(data: bytes, start: int, end: int, roots_only: bool) -> Qdisc | None:
    _family, ifindex, handle, parent, _info = _TCM.unpack_from(data, start)
    if roots_only and parent != TC_H_ROOT:
        return None  # skipped before its attributes are read: most qdiscs are leaves
    off = start + _TCM.size
    kind, queue = "", (0, 0, 0, 0, 0)
    while off + _RTA.size <= end:
        alen, atype = _RTA.unpack_from(data, off)
        if alen < _RTA.size:
            break
        body = off + _RTA.size
        if atype == TCA_KIND:
            kind = data[body:off + alen].split(b"\0", 1)[0].decode()
        elif atype == TCA_STATS2:
            sub = body
            while sub + _RTA.size <= off + alen:
                slen, stype = _RTA.unpack_from(data, sub)
                if slen < _RTA.size:
                    break
                if stype == TCA_STATS_QUEUE and slen >= _RTA.size + _QUEUE.size:
                    queue = _QUEUE.unpack_from(data, sub + _RTA.size)
                sub += (slen + 3) & ~3
        off += (alen + 3) & ~3
    return Qdisc(ifindex, handle, parent, kind, queue[0], queue[1], queue[2])


class QdiscReader:
    """A netlink socket of the namespace it was created in; `read()` is one dump."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
        self.seq = 0

    def read(self, roots_only: bool = False) -> list[Qdisc]:
        self.seq += 1
        self.sock.send(dump_request(self.seq))
        out: list[Qdisc] = []
        done = False
        while not done:
            got, done = parse(self.sock.recv(1 << 16), self.seq, roots_only)
            out += got
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> QdiscReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
