"""The fabric model: one source of truth for planes, switches, ports, links, uSIDs and paths.

Pure Python, no Mininet import. The Mininet topology, the controller's flow tables and the
agents' path tables are all derived from a `Fabric` built from `FabricParams`.

The numbering plan (names, uSIDs, EVs, addresses) is `topologies/numbering.py`'s; a
`Route` joins them into the carrier a packet follows (`usid_address`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from endpoints import numbercheck

# The numbering plan, handed on: `topologies.model` stays the one import of the fabric's facts.
from topologies.numbering import BASELINE_PREFIX as BASELINE_PREFIX
from topologies.numbering import EV_PORT_BASE as EV_PORT_BASE
from topologies.numbering import IFNAME_MAX as IFNAME_MAX
from topologies.numbering import MAX_INDEX as MAX_INDEX
from topologies.numbering import MAX_PLANES as MAX_PLANES
from topologies.numbering import MAX_USIDS_IN_ADDRESS as MAX_USIDS_IN_ADDRESS
from topologies.numbering import ROLE_HOST as ROLE_HOST
from topologies.numbering import ROLE_LEAF as ROLE_LEAF
from topologies.numbering import ROLE_SPINE as ROLE_SPINE
from topologies.numbering import USID_BLOCK as USID_BLOCK
from topologies.numbering import ev_plane as ev_plane
from topologies.numbering import ev_value as ev_value
from topologies.numbering import host_name as host_name
from topologies.numbering import ifname as ifname
from topologies.numbering import link_name as link_name
from topologies.numbering import mac as mac
from topologies.numbering import plane_usid_prefix as plane_usid_prefix
from topologies.numbering import switch_name as switch_name
from topologies.numbering import usid as usid
from topologies.numbering import usid_block as usid_block
from topologies.numbering import usid_prefix as usid_prefix

# Jumbo links: MRC/RoCE NICs run a 4096-byte MTU; four times fewer packets per Mbit/s than
# 1 KB frames is what keeps the userspace OVS datapath and the agents within a 2-core VM.
LINK_MTU = 9000
GATEWAY_LLADDR = "fe80::1"  # every host NIC's static next hop; the leaf never answers ND
GATEWAY_MAC = "02:ff:00:00:00:01"  # its MAC: the source MAC of frames switches deliver to hosts
# The plan's uN as the Linux kernel spells it (RFC 9800 NEXT-C-SID: a 32-bit locator block, 16-bit
# uSIDs), for the kernel-router backend and the check of whether this machine runs it.
KERNEL_END_BEHAVIOUR = "End flavors next-csid lblen 32 nflen 16"
# The baseline's routing detection delay in ms, before a failed next hop is withdrawn: BFD-like
# detection (3 x 300 ms), or BGP's hold timer (3 s keepalives, 9 s hold).
DETECT_MS = {"bfd": 900.0, "bgp": 9000.0}
DEFAULT_DETECT_MS = DETECT_MS["bfd"]


class FabricError(ValueError):
    """A fabric parameter is invalid; the message names the problem and the fix."""


def check_number(name: str, value: object, lo: float, hi: float, *, integral: bool = False,
                 lo_open: bool = False) -> Any:
    """The one validator of numbers (endpoints/numbercheck.py), raising FabricError: `value` if
    it is a finite number in [lo, hi] (`lo_open`: (lo, hi]), and a whole number (an int, not a
    float) when `integral`.

    >>> check_number("--steps", 20, 2, 1000, integral=True)
    20
    >>> check_number("--duration", float("inf"), 0, 3600, lo_open=True)
    Traceback (most recent call last):
    ...
    topologies.model.FabricError: --duration must be a finite number in (0, 3600], got inf
    """
    return numbercheck.check_number(name, value, lo, hi, integral=integral, lo_open=lo_open,
                                    error=FabricError)


@dataclass(frozen=True)
class FabricParams:
    planes: int = 4
    leaves: int = 2  # T0 switches per plane
    spines: int = 2  # T1 switches per plane
    hosts_per_leaf: int = 2
    link_mbps: float = 10.0  # rate of every link, applied with tc on the switch side

    def validate(self) -> None:
        for name in ("planes", "leaves", "spines", "hosts_per_leaf"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FabricError(
                    f"{name} must be a whole number >= 1, got {value!r}: "
                    f"pass --{name.replace('_', '-')} 1 or more"
                )
        if self.planes > MAX_PLANES:
            raise FabricError(
                f"planes={self.planes} exceeds the uSID plan's {MAX_PLANES} planes "
                f"(4-bit plane field): use --planes {MAX_PLANES} or fewer"
            )
        for name, count in (("leaves", self.leaves), ("spines", self.spines),
                            ("hosts", self.leaves * self.hosts_per_leaf)):
            if count > MAX_INDEX:
                raise FabricError(
                    f"{count} {name} per plane exceed the uSID plan's {MAX_INDEX} "
                    f"(10-bit index field): use a smaller fabric"
                )
        if not isinstance(self.link_mbps, (int, float)) or isinstance(self.link_mbps, bool) \
                or not 0.01 <= self.link_mbps <= 100_000:
            raise FabricError(
                f"link_mbps must be between 0.01 and 100000, got {self.link_mbps!r}: "
                f"pass --link-mbps 10 for example"
            )
        longest = max(
            len(ifname(switch_name(ROLE_LEAF, self.planes - 1, self.leaves - 1),
                       self.hosts_per_leaf + self.spines)),
            len(ifname(host_name(self.leaves * self.hosts_per_leaf - 1), self.planes - 1)),
        )
        if longest > IFNAME_MAX:
            raise FabricError(
                f"interface names would be {longest} characters, over Linux's {IFNAME_MAX}: "
                f"use fewer leaves, spines or hosts per leaf"
            )

    def describe(self) -> str:
        """The fabric in words, as figure titles, the report and the console name it."""
        def n(count: int, one: str, many: str) -> str:
            return f"{count} {one if count == 1 else many}"

        return (f"{n(self.planes, 'plane', 'planes')} x {n(self.leaves, 'leaf', 'leaves')} x "
                f"{n(self.spines, 'spine', 'spines')}, {n(self.hosts_per_leaf, 'host', 'hosts')} "
                f"per leaf, {self.link_mbps:g} Mbit/s links")

    def as_dict(self) -> dict[str, int | float]:
        return {"planes": self.planes, "leaves": self.leaves, "spines": self.spines,
                "hosts_per_leaf": self.hosts_per_leaf, "link_mbps": self.link_mbps}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FabricParams:
        known = {"planes", "leaves", "spines", "hosts_per_leaf", "link_mbps"}
        unknown = set(data) - known
        if unknown:
            raise FabricError(f"unknown fabric parameter(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


def usid_address(usids: tuple[int, ...]) -> ipaddress.IPv6Address:
    """The SRv6 destination address carrying `usids` after the locator block."""
    if not 1 <= len(usids) <= MAX_USIDS_IN_ADDRESS:
        raise FabricError(f"a segment list holds 1..{MAX_USIDS_IN_ADDRESS} uSIDs, got {len(usids)}")
    value = USID_BLOCK << 96
    for position, sid in enumerate(usids):
        value |= sid << (80 - 16 * position)
    return ipaddress.IPv6Address(value)


@dataclass(frozen=True)
class Switch:
    name: str
    role: int  # ROLE_LEAF or ROLE_SPINE
    plane: int
    index: int
    usid: int
    dpid: int

    @property
    def tier(self) -> str:
        return "T0" if self.role == ROLE_LEAF else "T1"


@dataclass(frozen=True)
class Nic:
    host: str
    plane: int
    ifname: str
    mac: str
    usid: int
    # The host's SID on this plane, fcbb:bb00:<host uSID>::/48: where every carrier to this NIC
    # ends; the host decapsulates there. A SID, not an address the NIC holds.
    sid: ipaddress.IPv6Address
    addr: ipaddress.IPv6Address  # the NIC's own (and only) address, fd00:0:0:<plane>::<host+1>
    leaf: str
    leaf_port: int


@dataclass(frozen=True)
class Host:
    name: str
    index: int
    leaf_index: int
    nics: tuple[Nic, ...]  # one per plane, in plane order


@dataclass(frozen=True)
class Link:
    """A bidirectional link; `a` is the lower tier (host or leaf)."""
    a: str
    a_port: int
    b: str
    b_port: int
    plane: int
    kind: str  # "host" (host-leaf) or "fabric" (leaf-spine, T0-T1)

    @property
    def name(self) -> str:
        return link_name(self.a, self.b)

    @property
    def a_ifname(self) -> str:
        return ifname(self.a, self.a_port)

    @property
    def b_ifname(self) -> str:
        return ifname(self.b, self.b_port)


@dataclass(frozen=True)
class Route:
    """One source-routed path between two hosts: what an EV names. Its packets are
    IPv6-in-IPv6: inner header `src_addr` -> `dst_addr` (the two NICs' own addresses, which the
    transport checksum covers), outer header to `address`, the uSID carrier the switches
    shift."""
    src: str
    dst: str
    plane: int
    spine: int | None  # None for a same-leaf route
    usids: tuple[int, ...]
    address: ipaddress.IPv6Address  # the uSID carrier: the outer destination the sender writes
    src_addr: ipaddress.IPv6Address  # the sending NIC's address on this plane (inner source)
    dst_addr: ipaddress.IPv6Address  # the receiving NIC's address on this plane (inner destination)
    links: tuple[str, ...]  # names of the links crossed, in order
    ev: int  # the EV naming it (`ev_value` of its plane and its index in the pair's routes)

    @property
    def label(self) -> str:
        via = "direct" if self.spine is None else f"s{self.spine}"
        return f"p{self.plane}/{via}"


@dataclass(frozen=True)
class Fabric:
    params: FabricParams
    switches: tuple[Switch, ...] = field(init=False)
    hosts: tuple[Host, ...] = field(init=False)
    links: tuple[Link, ...] = field(init=False)

    def __post_init__(self) -> None:
        p = self.params
        p.validate()
        switches: list[Switch] = []
        for plane in range(p.planes):
            for role, count in ((ROLE_LEAF, p.leaves), (ROLE_SPINE, p.spines)):
                for index in range(count):
                    switches.append(Switch(
                        name=switch_name(role, plane, index), role=role, plane=plane,
                        index=index, usid=usid(role, plane, index),
                        dpid=(role << 32) | (plane << 16) | index))
        hosts: list[Host] = []
        links: list[Link] = []
        for h in range(p.leaves * p.hosts_per_leaf):
            leaf_index, local = divmod(h, p.hosts_per_leaf)
            nics = []
            for plane in range(p.planes):
                sid = usid(ROLE_HOST, plane, h)
                leaf = switch_name(ROLE_LEAF, plane, leaf_index)
                nic = Nic(
                    host=host_name(h), plane=plane, ifname=ifname(host_name(h), plane),
                    mac=f"02:00:{plane:02x}:{(h >> 16) & 0xff:02x}:{(h >> 8) & 0xff:02x}:{h & 0xff:02x}",
                    usid=sid, sid=usid_address((sid,)),
                    addr=ipaddress.IPv6Address((BASELINE_PREFIX << 112) | (plane << 64) | (h + 1)),
                    leaf=leaf, leaf_port=local + 1)
                nics.append(nic)
                links.append(Link(a=nic.host, a_port=plane, b=leaf, b_port=local + 1,
                                  plane=plane, kind="host"))
            hosts.append(Host(name=host_name(h), index=h, leaf_index=leaf_index, nics=tuple(nics)))
        for plane in range(p.planes):
            for leaf_index in range(p.leaves):
                for spine in range(p.spines):
                    links.append(Link(
                        a=switch_name(ROLE_LEAF, plane, leaf_index),
                        a_port=p.hosts_per_leaf + spine + 1,
                        b=switch_name(ROLE_SPINE, plane, spine), b_port=leaf_index + 1,
                        plane=plane, kind="fabric"))
        object.__setattr__(self, "switches", tuple(switches))
        object.__setattr__(self, "hosts", tuple(hosts))
        object.__setattr__(self, "links", tuple(links))

    # ----- look-ups -------------------------------------------------------------------------
    @cached_property
    def _switch_by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    @cached_property
    def _host_by_name(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def _link_by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    def switch(self, name: str) -> Switch:
        try:
            return self._switch_by_name[name]
        except KeyError:
            raise FabricError(f"no switch named {name!r} (switches are like p0l0, p0s1)") from None

    def switch_by_dpid(self, dpid: int) -> Switch | None:
        return next((s for s in self.switches if s.dpid == dpid), None)

    def host(self, name: str) -> Host:
        try:
            return self._host_by_name[name]
        except KeyError:
            raise FabricError(f"no host named {name!r} (hosts are h0..h{len(self.hosts) - 1})") from None

    def link(self, name: str) -> Link:
        try:
            return self._link_by_name[name]
        except KeyError:
            raise FabricError(
                f"no link named {name!r}: T0-T1 links are named like p0l0-p0s1, "
                f"host links like h0-p0l0") from None

    def leaf(self, plane: int, index: int) -> Switch:
        return self.switch(switch_name(ROLE_LEAF, plane, index))

    def spine(self, plane: int, index: int) -> Switch:
        return self.switch(switch_name(ROLE_SPINE, plane, index))

    def fabric_links(self) -> list[Link]:
        return [link for link in self.links if link.kind == "fabric"]

    def links_of(self, node: str) -> list[Link]:
        return [link for link in self.links if node in (link.a, link.b)]

    def port_link(self, switch: str, port: int) -> Link | None:
        """The link attached to OpenFlow port `port` of `switch`."""
        return self._port_index.get((switch, port))

    @cached_property
    def _port_index(self) -> dict[tuple[str, int], Link]:
        index: dict[tuple[str, int], Link] = {}
        for link in self.links:
            if link.kind == "fabric":
                index[(link.a, link.a_port)] = link
            index[(link.b, link.b_port)] = link
        return index

    def ports(self, switch: str) -> list[int]:
        """The port numbers of `switch`, in order."""
        return self._ports_of[switch]

    @cached_property
    def _ports_of(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {sw.name: [] for sw in self.switches}
        for name, port in sorted(self._port_index):
            out[name].append(port)
        return out

    def port_ifname(self, switch: str, port: int) -> str:
        """The interface of port `port` of `switch`."""
        link = self._port_index[(switch, port)]
        return link.b_ifname if link.b == switch else link.a_ifname

    def port_mac(self, switch: str, port: int) -> str:
        """The MAC a switch port carries where the switch has MACs of its own (kernel routers):
        a leaf's host ports the gateway's (the hosts' static neighbour), every other port
        `02:fd:<uSID>:<port>`, unique in the fabric."""
        sw = self.switch(switch)
        if sw.role == ROLE_LEAF and port <= self.params.hosts_per_leaf:
            return GATEWAY_MAC
        return mac(0x02FD, sw.usid, port)

    def peer_mac(self, switch: str, port: int) -> str:
        """The MAC at the far end of port `port`'s cable: a host NIC's, or a switch port's."""
        link = self._port_index[(switch, port)]
        if link.kind == "host":
            return self.host(link.a).nics[link.plane].mac
        if link.a == switch:
            return self.port_mac(link.b, link.b_port)
        return self.port_mac(link.a, link.a_port)

    # ----- routes ---------------------------------------------------------------------------
    def routes(self, src: str, dst: str) -> list[Route]:
        """Every source-routed path from host `src` to host `dst`, plane by plane, spine by
        spine; route i carries EV `ev_value(plane, i)`."""
        s, d = self.host(src), self.host(dst)
        if s.name == d.name:
            raise FabricError(f"source and destination are both {src}")
        out: list[Route] = []
        for plane in range(self.params.planes):
            src_nic, dst_nic = s.nics[plane], d.nics[plane]
            src_leaf = self.leaf(plane, s.leaf_index)
            sids: tuple[int, ...]
            if s.leaf_index == d.leaf_index:
                sids = (src_leaf.usid, dst_nic.usid)
                out.append(Route(src, dst, plane, None, sids, usid_address(sids), src_nic.addr,
                                 dst_nic.addr, (link_name(src, src_leaf.name), link_name(dst, src_leaf.name)),
                                 ev_value(plane, len(out))))
                continue
            dst_leaf = self.leaf(plane, d.leaf_index)
            for spine_index in range(self.params.spines):
                spine = self.spine(plane, spine_index)
                sids = (src_leaf.usid, spine.usid, dst_leaf.usid, dst_nic.usid)
                out.append(Route(src, dst, plane, spine_index, sids, usid_address(sids),
                                 src_nic.addr, dst_nic.addr,
                                 (link_name(src, src_leaf.name), link_name(src_leaf.name, spine.name),
                                  link_name(dst_leaf.name, spine.name), link_name(dst, dst_leaf.name)),
                                 ev_value(plane, len(out))))
        return out

    def host_pairs(self) -> Iterator[tuple[str, str]]:
        for a in self.hosts:
            for b in self.hosts:
                if a.name != b.name:
                    yield a.name, b.name

    def path_capacity_mbps(self, src: str, dst: str, down_links: frozenset[str] = frozenset(),
                           planes: tuple[int, ...] | None = None) -> float:
        """Max rate src->dst can reach over `planes` (all by default) with `down_links` cut.

        Per plane: min(host links, sum over spines of min(uplink, downlink)); the host NIC link
        is the bottleneck on a non-blocking fabric, so a cut only matters when it leaves fewer
        than one working spine path's worth of capacity.
        """
        rate = self.params.link_mbps
        total = 0.0
        by_plane: dict[int, list[Route]] = {}
        for route in self.routes(src, dst):
            by_plane.setdefault(route.plane, []).append(route)
        for plane, plane_routes in by_plane.items():
            if planes is not None and plane not in planes:
                continue
            live = [r for r in plane_routes if not set(r.links) & down_links]
            total += min(rate, rate * len(live))
        return total


def fair_share_mbps(fabric: Fabric, pairs: list[tuple[str, str]],
                    planes: int) -> dict[tuple[str, str], float]:
    """Max-min fair rate of each (src, dst) flow over `planes` planes when every flow spreads
    perfectly over all spines of a plane (the best any transport can do): water-filling over
    host NICs and each leaf's aggregate up and down links. What the fabric can carry for these
    flows, oversubscribed or not; ECMP collisions and imperfect spraying only lose to it."""
    p = fabric.params
    rate = p.link_mbps * planes
    leaf_of = {h.name: h.leaf_index for h in fabric.hosts}
    links: dict[tuple[str, str | int], list[int]] = {}  # link -> flows crossing it
    for i, (src, dst) in enumerate(pairs):
        crossing: list[tuple[str, str | int]] = [("tx", src), ("rx", dst)]
        if leaf_of[src] != leaf_of[dst]:
            crossing += [("up", leaf_of[src]), ("down", leaf_of[dst])]
        for link in crossing:
            links.setdefault(link, []).append(i)
    capacity = {link: rate if link[0] in ("tx", "rx") else rate * p.spines for link in links}
    share = [0.0] * len(pairs)
    frozen = [False] * len(pairs)
    while not all(frozen):
        # The tightest link decides the next increment for every flow still growing.
        step = min((capacity[link] - sum(share[i] for i in flows)) / sum(not frozen[i] for i in flows)
                   for link, flows in links.items() if any(not frozen[i] for i in flows))
        for i in range(len(pairs)):
            if not frozen[i]:
                share[i] += step
        for link, flows in links.items():
            if sum(share[i] for i in flows) >= capacity[link] - 1e-9:
                for i in flows:
                    frozen[i] = True
    return {pair: share[i] for i, pair in enumerate(pairs)}


def build(params: FabricParams | None = None, **kwargs: object) -> Fabric:
    """Build and validate a fabric: `build(planes=4, leaves=2, ...)` or `build(params)`."""
    if params is None:
        params = FabricParams(**kwargs)  # type: ignore[arg-type]
    return Fabric(params)
