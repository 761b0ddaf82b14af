"""The agent's path table: this host's paths to each peer, as its QPs use them, read from the
plain data the testbed computed from the fabric model (topologies/pathtables.py describes it):
the agent never builds the model itself.

An MRC or spray QP sprays over every source-routed path to its peer, each EV's datagrams
IPv6-in-IPv6 to the path's uSID carrier (the host's encapsulation program holds it, keyed by
the EV); a RoCE QP has one destination-routed path on its plane, hashed over the plane's ECMP
groups by its EV (the UDP source port).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from endpoints.evnumber import EV_INDEX_MASK
from endpoints.host import netio
from endpoints.protocol.evset import EvInfo

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
    plane: dict[int, int] = field(default_factory=dict)  # ev -> the plane (NIC port) it leaves by

    def __post_init__(self) -> None:
        self.plane = {e.ev: e.plane for e in self.evs}


def _addr(text: str) -> tuple[bytes, str]:
    addr = ipaddress.IPv6Address(text)
    return addr.packed, str(addr)


class PathTable:
    """One host's paths to its peers, from its table (`table`: topologies.pathtables's
    `agent_paths`). A peer's paths are built once per transport kind and plane and shared by
    the QPs to it (with their sockets)."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.name: str = table["host"]
        self.planes = int(table["planes"])
        self.link_mbps = float(table["link_mbps"])
        self.nics = {nic["ifname"]: int(nic["plane"]) for nic in table["nics"]}  # ifname -> plane
        self._addrs = [nic["addr"] for nic in sorted(table["nics"], key=lambda n: n["plane"])]
        self._ecmp_evs = [int(ev) for ev in table["ecmp_evs"]]
        self._peers: dict[str, dict[str, Any]] = table["peers"]
        self._paths_cache: dict[tuple[str, str], PeerPaths] = {}

    def check_peer(self, peer: str) -> None:
        """ValueError naming the hosts unless `peer` is another host."""
        if peer not in self._peers:
            raise ValueError(f"no host named {peer!r} (hosts are h0..h{len(self._peers)})")

    def labels(self, peer: str) -> list[tuple[int, str]]:
        """(EV, label) of each source-routed path to `peer` (`Route.label`: p0/s1, p0/direct)."""
        return [(r["ev"], r["label"]) for r in self._peers[peer]["routes"]]

    def forward_evs(self, peer: str) -> list[int]:
        """The EVs of `peer`'s source-routed paths to this host (what a receiver may see)."""
        return list(self._peers[peer]["forward"])

    def peer_paths(self, peer: str, transport: str, plane: int, entropy: int = 0) -> PeerPaths:
        """`entropy`: a single-path QP's own share of its ECMP hash, so that QPs of one host
        pair on one plane may take different paths (RoCE with N QPs); 0 for every QP otherwise."""
        key = (peer, f"{transport}{plane}/{entropy}")
        if key in self._paths_cache:
            return self._paths_cache[key]
        if transport not in SOURCE_ROUTED:
            # One path per QP: destination routing over the plane's ECMP groups.
            ev = ecmp_ev_with(self._ecmp_evs[plane], entropy)
            me, (them, text) = _addr(self._addrs[plane])[0], _addr(self._peers[peer]["addrs"][plane])
            table = PeerPaths([EvInfo(ev, plane)], {ev: (me, them, text)}, encap=False)
        else:
            evs, dst = [], {}
            for route in self._peers[peer]["routes"]:
                evs.append(EvInfo(route["ev"], route["plane"]))
                dst[route["ev"]] = (_addr(route["src"])[0], *_addr(route["dst"]))
            table = PeerPaths(evs, dst, encap=True)
        self._paths_cache[key] = table
        return table




def ecmp_ev_with(ev: int, entropy: int) -> int:
    """A destination-routed EV moved by `entropy` within its source port's range (the port's
    low bits XORed, its plane and range kept): another ECMP hash input, the same EV for 0.

    >>> hex(ecmp_ev_with(0x2C084, 0)), hex(ecmp_ev_with(0x2C084, 1))
    ('0x2c084', '0x2c185')
    """
    return ev ^ (entropy * 257 & EV_INDEX_MASK)
