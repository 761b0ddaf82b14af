"""Lab 7, a NIC port dies: what an MRC sender does when a port at either end of its QP goes
down, and when it comes back.

`LabPortSteering` is the sender's port steering (`endpoints/protocol/portstatus.py`) with your
version of its two decisions; everything else (reading the masks from packets, authenticating
them, parking a plane in the EV set, resending) is the product's. Read `PortStatus` and
`EvSet.park`/`EvSet.unpark` first. Fill in each TODO between its `# TODO N` and `# END TODO N`
lines, then run `make check-lab N=7`.

    the peer's authenticated SACK, NACK or probe reply carries its down mask   _peer_ports
    a plane's port down at either end: park it, resend what was in flight      _steer
    its port back: unpark it                                                    _steer
"""

from __future__ import annotations

from endpoints.protocol.events import Ports
from endpoints.protocol.portstatus import PortSteering


class LabPortSteering(PortSteering):
    def _peer_ports(self, mask: int, echo_ts: int, now: float) -> None:
        """An authenticated SACK, NACK or probe reply carried the peer's down `mask` (which
        differs from `self.ports.remote`); it echoes `echo_ts`, the 32-bit microsecond
        timestamp (our clock, wrapping at 2**32) of the packet of ours it answers.
        `self._ports_ts` is the one echoed by the report that last set the mask (None: none yet)."""
        # TODO 1: reports take different paths and can arrive out of order: ignore (return)
        # one that echoes an OLDER packet than self._ports_ts (compare modulo 2**32: older
        # means (echo_ts - self._ports_ts) mod 2**32 is 2**31 or more)
        if self._ports_ts is not None and (echo_ts - self._ports_ts) & 0xFFFFFFFF >= 0x80000000:
            return
        # END TODO 1
        if self.ports.set_remote(mask):
            self._ports_ts = echo_ts
            self._steer(now)

    def _steer(self, now: float) -> None:
        """What this QP knows of the ports changed: `self.ports.down` is the planes down at
        either end (bit p: plane p)."""
        down, evs = self.ports.down, self.evs
        # TODO 2: park every plane of the EV set (its planes: the keys of evs.backup) whose
        # bit is set in `down`, with evs.park(p) (the whole plane out at once, no EV benched:
        # its EVs are not broken, its port is); `gone`: the planes parked now (park() is True)
        gone = [p for p in sorted(evs.backup) if down >> p & 1 and evs.park(p)]
        # END TODO 2
        # TODO 3: unpark (evs.unpark(p)) every parked plane (the keys of evs.parked) whose port
        # is up again at both ends
        for p in [p for p in evs.parked if not down >> p & 1]:
            evs.unpark(p)
        # END TODO 3
        # TODO 4: what is in flight (self.outstanding: seq -> packet, its EV in .ev) on a plane
        # parked now (evs.plane[ev]) died with the port: take it out of self.outstanding and
        # resend it at once, self._queue_retx(packet, now, "port_down"); `stranded`: those
        stranded = [q for q in self.outstanding.values() if evs.plane.get(q.ev) in gone]
        for q in stranded:
            del self.outstanding[q.seq]
            self._queue_retx(q, now, "port_down")
        # END TODO 4
        self.events.append(Ports(now, self.ports.local, self.ports.remote, sorted(evs.parked),
                                 len(stranded)))
        self._drain_changes(now)
