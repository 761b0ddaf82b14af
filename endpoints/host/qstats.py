"""Queue occupancy of every qdisc in the calling namespace, read straight from rtnetlink: the
agent's view of its own NIC queues (the NIC pacer's resynchronisation, the trace's `host`
samples), and the experiments' of the switch ports'.

One RTM_GETQDISC dump returns, per qdisc, its interface, handle, parent, kind and
`gnet_stats_queue` (qlen, backlog bytes, drops). Parsed by hand with `struct`: pyroute2 takes
about 1 ms per qdisc dump on this VM, too slow to sample every few milliseconds from inside a
busy agent; this takes tens of microseconds. Root qdiscs (HTB) report the sum of their leaves.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

RTM_GETQDISC = 38
RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_QUEUE = 3
TC_H_ROOT = 0xFFFFFFFF
_NLH = struct.Struct("=IHHII")
_TCM = struct.Struct("=BxxxiIII")
_RTA = struct.Struct("=HH")
_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits


class Qdisc(NamedTuple):
    ifindex: int
    handle: int
    parent: int
    kind: str
    qlen: int
    backlog: int  # bytes
    drops: int


class QdiscReader:
    """A netlink socket bound in the namespace it was created in."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
        self.seq = 0

    def read(self, roots_only: bool = False) -> list[Qdisc]:
        self.seq += 1
        req = _NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                        self.seq, 0) + _TCM.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(req)
        out: list[Qdisc] = []
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + _NLH.size <= len(data):
                length, kind, _flags, seq, _pid = _NLH.unpack_from(data, off)
                if length < _NLH.size:
                    return out
                if seq == self.seq:
                    if kind == NLMSG_DONE:
                        return out
                    if kind == NLMSG_ERROR:
                        raise OSError("RTM_GETQDISC dump failed")
                    if kind == RTM_NEWQDISC:
                        q = _parse(data, off + _NLH.size, off + length)
                        if q is not None and (not roots_only or q.parent == TC_H_ROOT):
                            out.append(q)
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


def _parse(data: bytes, start: int, end: int) -> Qdisc | None:
    _fam, ifindex, handle, parent, _info = _TCM.unpack_from(data, start)
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
