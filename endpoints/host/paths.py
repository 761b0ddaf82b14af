"""The agent's path table: this host's paths to each peer, as its QPs use them.

An MRC or spray QP sprays over every source-routed path to its peer (`Fabric.routes`), each
EV's datagrams IPv6-in-IPv6 to the path's uSID carrier; a RoCE QP has one destination-routed
path on its plane, hashed over the plane's ECMP groups by its EV (the UDP source port).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from endpoints.host import netio
from endpoints.protocol.evset import EvInfo
from topologies.model import Fabric, ev_value

TRANSPORTS = ("mrc", "spray", "roce")  # roce: go-back-N on one ECMP-hashed path
# Sprayed over the model's paths, IPv6-in-IPv6 to each path's uSID carrier; the others are
# destination-routed, unencapsulated.
SOURCE_ROUTED = ("mrc", "spray")


@dataclass
class PeerPaths:
    evs: list[EvInfo]
    dst: dict[int, tuple[bytes, bytes, str]]  # ev -> (own NIC addr, peer NIC addr, its text)
    encap: bool  # marked with the EV (source-routed, encapsulated) or destination-routed
    # (ev, control) -> socket state, opened on first use; control packets get their own
    # sockets (the host qdisc's priority class)
    tx: dict[tuple[int, bool], netio.TxPath] = field(default_factory=dict)


class PathTable:
    """One host's paths to its peers. A peer's paths are built once per transport kind and
    plane and shared by the QPs to it (with their sockets)."""

    def __init__(self, fabric: Fabric, host: str) -> None:
        self.fabric = fabric
        self.host = fabric.host(host)
        self.name = self.host.name
        self.planes = fabric.params.planes
        self.nics = {nic.ifname: nic.plane for nic in self.host.nics}  # ifname -> plane
        self._paths_cache: dict[tuple[str, str], PeerPaths] = {}

    def check_peer(self, peer: str) -> None:
        """ValueError naming the hosts unless `peer` is one."""
        self.fabric.host(peer)

    def labels(self, peer: str) -> list[tuple[int, str]]:
        """(EV, label) of each source-routed path to `peer` (`Route.label`: p0/s1, p0/direct)."""
        return [(r.ev, r.label) for r in self.fabric.routes(self.name, peer)]

    def forward_evs(self, peer: str) -> list[int]:
        """The EVs of `peer`'s source-routed paths to this host (what a receiver may see)."""
        return [r.ev for r in self.fabric.routes(peer, self.name)]

    def peer_paths(self, peer: str, transport: str, plane: int) -> PeerPaths:
        key = (peer, f"{transport}{plane}")
        if key in self._paths_cache:
            return self._paths_cache[key]
        if transport not in SOURCE_ROUTED:
            # One path per QP: destination routing over the plane's ECMP groups.
            me, them = self.host.nics[plane], self.fabric.host(peer).nics[plane]
            ev = ev_value(plane, 0x3FFF & (self.host.index * 131 + them.plane))
            table = PeerPaths([EvInfo(ev, plane)],
                              {ev: (me.addr.packed, them.addr.packed, str(them.addr))}, encap=False)
        else:
            evs, dst = [], {}
            for route in self.fabric.routes(self.host.name, peer):
                evs.append(EvInfo(route.ev, route.plane))
                dst[route.ev] = (route.src_addr.packed, route.dst_addr.packed, str(route.dst_addr))
            table = PeerPaths(evs, dst, encap=True)
        self._paths_cache[key] = table
        return table
