"""NIC-port status, sans-IO: what a QP knows of the ports at both ends, and what it does about it.

A host has one NIC port per plane. When one goes down, every path of that plane is dead for
every QP of the host, in both directions. The host's agent learns it from the kernel
(endpoints/host/ports.py) and tells its cores (`set_local_ports`); each core then carries the
host's down mask (bit p: plane p's port down) in every SACK, NACK and probe it sends (the MRCETH
field, wire.py), as the OCP MRC spec's Port Status Update announces a port's state to peers.
A sender that reads a peer's mask in an acceptable SACK, NACK or probe reply, or learns that its
own port died, parks the plane (`EvSet.park`: all of its EVs out of use at once, none benched)
and resends at once what was in flight there; when the port returns the plane comes back as it
was. Without it (`port_status` False) each EV of a dead plane must fail on its own, one loss
window each, and be probed back one by one.

Only authenticated packets change the remote mask (a SACK echoing a packet of ours, a NACK of
one in flight, a reply to a probe of ours): a forged mask would otherwise steer a sender off its
planes. With every port up the mask is 0 and nothing here runs: a seeded simulation with every
port up is bit-identical to one with port status off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from endpoints.protocol.events import Ports
from endpoints.protocol.evset import EvSet
from endpoints.protocol.wire import PORTS_DOWN_MASK


def planes_of(mask: int) -> list[int]:
    """The planes a down mask names.

    >>> planes_of(0b101)
    [0, 2]
    """
    return [p for p in range(mask.bit_length()) if mask >> p & 1]


class PortStatus:
    """The down masks of one QP's two ends. Disabled (`enabled` False): both stay 0 whatever
    is reported, and the mask sent is 0 (a peer reads "every port up")."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.local = 0  # this host's ports down
        self.remote = 0  # the peer's, as its last authenticated packet said

    @property
    def sent(self) -> int:
        """The mask this end's control packets carry."""
        return self.local

    @property
    def down(self) -> int:
        """Planes out of use: a port down at either end kills every path of its plane."""
        return self.local | self.remote

    def set_local(self, mask: int) -> bool:
        """This host's ports changed; True when what this QP knows changed."""
        mask = mask & PORTS_DOWN_MASK if self.enabled else 0
        changed, self.local = mask != self.local, mask
        return changed

    def set_remote(self, mask: int) -> bool:
        """A peer's authenticated packet carried `mask`; True when it changed."""
        mask = mask & PORTS_DOWN_MASK if self.enabled else 0
        changed, self.remote = mask != self.remote, mask
        return changed


class PortSteering:
    """The MRC sender's part (a base of `MrcSender`, kept apart from its loss machinery): park
    the planes whose port is down at either end, resend what was in flight on them, unpark them
    when the port returns."""

    # MrcSender's (annotations only)
    ports: PortStatus
    evs: EvSet
    outstanding: OrderedDict[int, Any]
    events: list[Any]
    _queue_retx: Callable[[Any, float, str], None]
    _drain_changes: Callable[[float], None]
    # The echoed timestamp (our clock) of the packet whose report last changed the peer's mask:
    # reports travel on different paths and can arrive out of order, and an older one must not
    # undo a newer one.
    _ports_ts: int | None = None

    def set_local_ports(self, mask: int, now: float) -> None:
        """This host's NIC ports: bit p set while plane p's port is down."""
        if self.ports.set_local(mask):
            self._steer(now)

    def _peer_ports(self, mask: int, echo_ts: int, now: float) -> None:
        """An acceptable SACK, NACK or probe reply, echoing our timestamp `echo_ts`, carried
        the peer's mask (`mask` differs from what this QP knew: the caller compares, once per
        packet). Ignored when it echoes an older packet than the report that set the mask."""
        if self._ports_ts is not None and (echo_ts - self._ports_ts) & 0xFFFFFFFF >= 0x80000000:
            return
        if self.ports.set_remote(mask):
            self._ports_ts = echo_ts
            self._steer(now)

    def _steer(self, now: float) -> None:
        down, evs = self.ports.down, self.evs
        gone = [p for p in sorted(evs.backup) if down >> p & 1 and evs.park(p)]
        for p in [p for p in evs.parked if not down >> p & 1]:
            evs.unpark(p)
        # In flight on a plane now parked: lost with its port (or delivered, and resending
        # costs a duplicate), resent on the planes that work without waiting for a loss timer.
        stranded = [q for q in self.outstanding.values() if evs.plane.get(q.ev) in gone]
        for q in stranded:
            del self.outstanding[q.seq]
            self._queue_retx(q, now, "port_down")
        self.events.append(Ports(now, self.ports.local, self.ports.remote, sorted(evs.parked),
                                 len(stranded)))
        self._drain_changes(now)
