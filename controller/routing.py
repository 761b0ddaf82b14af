"""The baseline's routing plane, sans-IO: port and switch events in, timers and convergence
decisions out. Both control planes (`app.py` for os-ken on OVS, `kernel_app.py` for kernel
routers) are I/O shells around it: they read events from their switches, pass them in with the
time, and carry out what comes back (OpenFlow group mods, multipath routes). No sockets, no
threads, no clock: the caller says what time it is.

What it decides, as a routing protocol (BFD, BGP) would:

* A switch reports a port down or up; a switch that silently stopped forwarding (its ports stay
  up) is reported by the fault injector, as BFD sessions over its links would see it. An event
  that does not change the state (a port already down reported down) is nothing.
* Every change bumps the generation; the caller, once it has done its own I/O for the change
  (logged it, put a port's routes back), schedules it: a convergence `detect_s` later (a
  `Timer`), which the caller waits for and hands back to `due`.
* When a timer's time comes, only the latest generation acts (a later change restarted the
  delay), and only on the state that holds then: the links down (a port down, or any link of a
  switch down) become the withdrawn set. If that differs from what is withdrawn, the decision
  names the links that changed and the planes whose switches need new groups; otherwise
  nothing (a link restored before the delay ran out was never withdrawn).

>>> from topologies.model import build
>>> plane = RoutingPlane(build(planes=1, leaves=2, spines=2, hosts_per_leaf=1), detect_s=0.9)
>>> change = plane.port("p0l0", 2, down=True)  # port 2: its uplink to p0s0
>>> change.event, change.link, change.generation
('port_down', 'p0l0-p0s0', 1)
>>> plane.schedule(change, now=10.0)
Timer(at=10.9, generation=1)
>>> plane.due(10.5)
[]
>>> [(sorted(d.withdrawn), sorted(d.planes)) for d in plane.due(10.9)]
[(['p0l0-p0s0'], [0])]
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass

from topologies.model import Fabric

NOTIFY_COMMANDS = ("switch_down", "switch_up")


@dataclass(frozen=True, order=True)
class Timer:
    """When the routing plane acts on a change, and which change."""

    at: float
    generation: int


@dataclass(frozen=True)
class Change:
    """An event that changed the state: what the events file records, and its generation."""

    event: str  # port_down, port_up, switch_down, switch_up
    switch: str
    port: int | None  # None for a switch event
    link: str | None  # the port's link, if it has one
    generation: int

    @property
    def down(self) -> bool:
        return self.event.endswith("_down")

    def record(self) -> dict[str, object]:
        """The events file's fields for it (beside `t` and `event`)."""
        if self.port is None:
            return {"switch": self.switch}
        return {"switch": self.switch, "port": self.port, "link": self.link}


@dataclass(frozen=True)
class Convergence:
    """A decision: the baseline now routes around `withdrawn`; `changed` links were withdrawn
    or put back by it; the switches of `planes` need their groups for `withdrawn`."""

    withdrawn: frozenset[str]
    changed: frozenset[str]
    planes: frozenset[int]

    def record(self) -> dict[str, object]:
        return {"withdrawn": sorted(self.withdrawn), "changed": sorted(self.changed)}


def parse_notification(raw: bytes | str, fabric: Fabric) -> tuple[str, bool]:
    """(switch, down) from a notify-socket datagram `{"cmd": "switch_down"|"switch_up",
    "switch": NAME}`; ValueError with the reason for anything else (an unknown switch too)."""
    try:
        msg = json.loads(raw)
        name = str(msg["switch"])
        cmd = msg["cmd"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a notification: {exc!r}") from None
    fabric.switch(name)  # FabricError (a ValueError) for a switch the fabric does not have
    if cmd not in NOTIFY_COMMANDS:
        raise ValueError(cmd)
    return name, cmd == "switch_down"


class RoutingPlane:
    def __init__(self, fabric: Fabric, detect_s: float) -> None:
        self.fabric = fabric
        self.detect_s = detect_s
        self.port_down: set[tuple[str, int]] = set()  # (switch, port) the switches report down
        self.switches_down: set[str] = set()  # switches that stopped forwarding (BFD would see)
        self.withdrawn: frozenset[str] = frozenset()  # links the baseline has converged around
        self.generation = 0  # bumps on every change; a stale timer does nothing
        self._timers: list[Timer] = []

    # ----- events in ---------------------------------------------------------------------
    def port(self, switch: str, port: int, down: bool) -> Change | None:
        """A switch reports `port` down or up; None if that is no change."""
        key = (switch, port)
        if down == (key in self.port_down):
            return None
        (self.port_down.add if down else self.port_down.discard)(key)
        link = self.fabric.port_link(switch, port)
        self.generation += 1
        return Change("port_down" if down else "port_up", switch, port,
                      link.name if link else None, self.generation)

    def switch(self, name: str, down: bool) -> Change | None:
        """A switch stopped (or resumed) forwarding; None if that is no change."""
        if down == (name in self.switches_down):
            return None
        (self.switches_down.add if down else self.switches_down.discard)(name)
        self.generation += 1
        return Change("switch_down" if down else "switch_up", name, None, None, self.generation)

    def schedule(self, change: Change, now: float) -> Timer:
        """The routing plane acts on `change` `detect_s` after `now` (like BFD/BGP: only after
        its detection delay, and only on the state that still holds then)."""
        timer = Timer(now + self.detect_s, change.generation)
        heapq.heappush(self._timers, timer)
        return timer

    # ----- decisions out -----------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """When the earliest pending timer falls due, or None."""
        return self._timers[0].at if self._timers else None

    def due(self, now: float) -> list[Convergence]:
        """Every timer due by `now` fires, in order; the decisions that change something."""
        out = []
        while self._timers and self._timers[0].at <= now:
            decision = self.converge(heapq.heappop(self._timers).generation)
            if decision is not None:
                out.append(decision)
        return out

    def down_links(self) -> frozenset[str]:
        """The links the state says are down now: a port down, or any link of a switch down."""
        f = self.fabric
        return frozenset(
            link.name for (sw, port) in self.port_down
            if (link := f.port_link(sw, port)) is not None) | frozenset(
            link.name for sw in self.switches_down for link in f.links_of(sw))

    def converge(self, generation: int) -> Convergence | None:
        """The decision of a timer set at `generation`: None if a later change superseded it or
        the links down are already what is withdrawn."""
        if generation != self.generation:
            return None
        down_links = self.down_links()
        if down_links == self.withdrawn:
            return None
        changed = down_links ^ self.withdrawn
        self.withdrawn = down_links
        return Convergence(down_links, changed,
                           frozenset(self.fabric.link(name).plane for name in changed))
