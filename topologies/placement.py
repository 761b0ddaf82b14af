"""Which machine runs which node of a fabric split over servers (`--servers head,s1,...`),
derived from the fabric model alone.

A multi-plane Clos has a natural cut: planes share no switch, so the only links between planes
are the host NIC links. Every host stays on the head (the machine the run starts on: agents,
captures and measurements stay local) and each plane's switches, with the T0-T1 links between
them, go to one server; planes are dealt round-robin over the servers after the head. With the
head alone, everything is local, as without `--servers`. Only host links cross machines.

Pure: names in, names out; whether a server answers is `topologies/cluster.py`'s business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topologies.model import Fabric, FabricError

# A server is a host name or an IPv4 address, as ssh takes it (no user@: the cluster logs in as
# root everywhere).
_SERVER_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$")


def parse_servers(text: str) -> tuple[str, ...]:
    """`head,s1,s2` -> ("head", "s1", "s2"), checked: at least one, each a host name or an
    IPv4 address, none twice. Raises FabricError with one line naming the problem."""
    names = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not n for n in names):
        raise FabricError(f"--servers {text!r}: give a comma-separated list, the head first "
                          f"(e.g. head,s1), with no empty name")
    for name in names:
        if not _SERVER_NAME.match(name):
            raise FabricError(f"--servers: {name!r} is not a host name or an IPv4 address")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise FabricError(f"--servers: {name!r} is given twice (each server runs its planes once)")
        seen.add(name)
    return names


@dataclass(frozen=True)
class Placement:
    """servers: the head first; plane_server[p]: the server running plane p's switches."""

    servers: tuple[str, ...]
    plane_server: tuple[str, ...]

    @property
    def head(self) -> str:
        return self.servers[0]

    @property
    def split(self) -> bool:
        """True when some switch runs on another machine than the head."""
        return any(server != self.head for server in self.plane_server)

    def server_of_plane(self, plane: int) -> str:
        return self.plane_server[plane]

    def planes_on(self, server: str) -> list[int]:
        return [p for p, s in enumerate(self.plane_server) if s == server]

    def as_dict(self) -> dict[str, object]:
        """What a summary records: the servers, the head, and which planes each one runs."""
        return {"servers": list(self.servers), "head": self.head, "split": self.split,
                "planes": {server: self.planes_on(server) for server in self.servers}}


def place(fabric: Fabric, servers: tuple[str, ...] | list[str]) -> Placement:
    """Hosts on the head; plane p's switches on server 1 + p mod (servers - 1), or on the head
    when it is the only one."""
    servers = tuple(servers)
    if not servers:
        raise FabricError("--servers: at least one server (the head) is needed")
    if len(set(servers)) != len(servers):
        raise FabricError(f"--servers: a server is given twice in {','.join(servers)}")
    workers = servers[1:] or servers[:1]
    planes = fabric.params.planes
    return Placement(servers, tuple(workers[p % len(workers)] for p in range(planes)))


def local(fabric: Fabric) -> Placement:
    """Everything on this machine (no `--servers`)."""
    return place(fabric, ("localhost",))


def server_of(placement: Placement, fabric: Fabric, node: str) -> str:
    """The server running node `node` (a host or a switch of `fabric`)."""
    if node in {h.name for h in fabric.hosts}:
        return placement.head
    return placement.server_of_plane(fabric.switch(node).plane)


def crossing_links(placement: Placement, fabric: Fabric) -> list[str]:
    """Names of the links whose ends run on different servers (tunnelled)."""
    return [link.name for link in fabric.links
            if server_of(placement, fabric, link.a) != server_of(placement, fabric, link.b)]
