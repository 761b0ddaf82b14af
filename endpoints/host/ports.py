"""The host's NIC ports as the kernel sees them: one NETLINK_ROUTE socket subscribed to link
events (and one dump at the start), in the agent's selector. A port is up while its interface
is administratively up and has carrier: a cut host link leaves the host's NIC up without
carrier (the leaf's end is set down, as a pulled cable), which is what a real NIC reports.

On every change the agent's cores hear the new down mask (bit p: plane p's port down) through
`set_local_ports` (endpoints/protocol/portstatus.py). The netlink parsing is also what the
kernel routers' control plane reads its ports with (controller/kernel_app.py).
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
IFLA_IFNAME = 3
NLMSG_HDR = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BBHiII")


def parse_link_events(data: bytes) -> list[tuple[str, bool]]:
    """(ifname, usable) for every RTM_NEWLINK / RTM_DELLINK in a netlink datagram; usable = up
    and with carrier."""
    out = []
    off = 0
    while off + NLMSG_HDR.size <= len(data):
        length, kind, _flags, _seq, _pid = NLMSG_HDR.unpack_from(data, off)
        if length < NLMSG_HDR.size or off + length > len(data):
            break  # malformed or cut short
        if kind in (RTM_NEWLINK, RTM_DELLINK) and length >= NLMSG_HDR.size + IFINFOMSG.size:
            _fam, _pad, _type, _index, flags, _change = IFINFOMSG.unpack_from(data, off + NLMSG_HDR.size)
            name = ""
            attr = off + NLMSG_HDR.size + IFINFOMSG.size
            while attr + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", data, attr)
                if alen < 4:
                    break
                if atype & 0x3FFF == IFLA_IFNAME:
                    name = data[attr + 4:attr + alen].split(b"\0", 1)[0].decode()
                attr += (alen + 3) & ~3
            usable = kind == RTM_NEWLINK and bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
            out.append((name, usable))
        off += (length + 3) & ~3
    return out


def down_mask(planes: dict[str, int], usable: dict[str, bool]) -> int:
    """The down mask of the NICs `planes` (ifname -> plane) from what the kernel said of each
    (an interface not reported yet counts as up).

    >>> down_mask({"h0-eth0": 0, "h0-eth1": 1}, {"h0-eth1": False, "lo": False})
    2
    """
    mask = 0
    for ifname, plane in planes.items():
        if not usable.get(ifname, True):
            mask |= 1 << plane
    return mask


class PortWatch:
    """Link events for one host's NICs (`planes`: interface name -> plane); `mask` is its ports
    down now. `cores()` gives the cores to tell on a change (the agent's QPs' cores)."""

    def __init__(self, planes: dict[str, int], selector: selectors.BaseSelector,
                 cores: Callable[[], Iterable[Any]],
                 on_change: Callable[[], None] | None = None) -> None:
        """`on_change`: called after the cores heard a new mask (the agent polls them all)."""
        self.planes = dict(planes)
        self.cores = cores
        self.on_change = on_change
        self.usable: dict[str, bool] = {}
        self.mask = 0
        self.changes = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                                  socket.NETLINK_ROUTE)
        self.sock.bind((0, RTMGRP_LINK))
        self._dump()
        selector.register(self.sock, selectors.EVENT_READ, self._readable)

    def _dump(self) -> None:
        """Ask for every interface's state now: answered on this socket, like the events."""
        self.sock.send(NLMSG_HDR.pack(NLMSG_HDR.size + IFINFOMSG.size, RTM_GETLINK,
                                      NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                       + IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0))

    def _readable(self, _key: object = None) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                self._dump()  # events overran the socket: read the state again
                continue
            self.update(parse_link_events(data))

    def update(self, events: Iterable[tuple[str, bool]]) -> None:
        """Take (ifname, usable) events; the cores hear the new mask if it changed."""
        for ifname, usable in events:
            if ifname in self.planes:
                self.usable[ifname] = usable
        mask = down_mask(self.planes, self.usable)
        if mask != self.mask:
            self.mask = mask
            self.changes += 1
            now = time.monotonic()
            for core in self.cores():
                core.set_local_ports(mask, now)
            if self.on_change is not None:
                self.on_change()

    def close(self) -> None:
        self.sock.close()
