"""Every kernel router's routes, as plain data translated from the OpenFlow tables-as-data.

Pure: no netlink here. `tables.switch_tables()` says what every switch does as OpenFlow flows
and groups; this module says the same as Linux routes, flow by flow, and renders them as
`ip -6 -batch` lines (`kernel_app.py` runs them in each router's namespace):

  table 0, own uSID /48, shift_usid  -> local <prefix> encap seg6local action End flavors
                                        next-csid lblen 32 nflen 16 count dev lo
                                        (a kernel without seg6local: local <prefix> dev lo, and
                                        the uN of topologies/dataplane/usid.py at every port)
  table 0, uSID block -> table 1     -> blackhole <block>   (longest prefix first: what no more
  table 0, NIC /16 -> table 2        -> blackhole <prefix>   specific route takes is dropped,
                                                            silently, as OpenFlow's table miss)
  table 1, /48 -> output / deliver   -> <prefix> via fe80::1 dev <port>
  table 2, /128 -> output / deliver  -> <dst> via fe80::1 dev <port>
  table 2, /128 -> group(g)          -> <dst> nexthop via fe80::1 dev <p1> ... dev <pN> (ECMP over
                                        the group's ports; one port: via; none: blackhole)

The End route is a *local* route on lo: the kernel turns a unicast route through the loopback
device into a reject route, which drops everything. `count` gives each router a uN counter.
Every port has one PERMANENT neighbour fe80::1, the MAC at the other end of its cable
(`Fabric.peer_mac`), so no neighbour discovery ever runs; a delivery's MAC rewrite is this.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.tables import COOKIE_BASELINE, TABLE_CLASSIFY, FlowSpec, baseline_groups, switch_tables
from topologies.dataplane.usid import KERNEL
from topologies.model import GATEWAY_LLADDR, KERNEL_END_BEHAVIOUR, Fabric, Switch

END, VIA, MULTIPATH, BLACKHOLE = "end", "via", "multipath", "blackhole"
END_BEHAVIOUR = KERNEL_END_BEHAVIOUR


@dataclass(frozen=True)
class KRoute:
    dst: str  # prefix, as ip writes it
    kind: str  # END | VIA | MULTIPATH | BLACKHOLE
    ports: tuple[int, ...] = ()  # next-hop ports (model numbering)
    baseline: bool = False  # the routing plane's (changes after failures); the rest never does


def _port_of(flow: FlowSpec) -> int:
    for action in flow.actions:
        if action.kind == "output" and isinstance(action.arg, int):
            return action.arg
    raise ValueError(f"flow to {flow.ipv6_dst} has no output port")


def _group_of(flow: FlowSpec) -> int | None:
    for action in flow.actions:
        if action.kind == "group" and isinstance(action.arg, int):
            return action.arg
    return None


def kernel_routes(fabric: Fabric, switch: Switch,
                  down_links: frozenset[str] = frozenset()) -> list[KRoute]:
    """The routes that do what `switch_tables(fabric, switch)` does, with the baseline's ECMP
    as a converged routing protocol leaves it around `down_links` (`baseline_groups`)."""
    flows, _ = switch_tables(fabric, switch)
    groups = {g.group_id: g.ports for g in baseline_groups(fabric, switch, down_links)}
    out: list[KRoute] = []
    for flow in flows:
        if flow.ipv6_dst is None:
            raise ValueError("every flow of the tables matches a destination prefix")
        dst = str(flow.ipv6_dst)
        baseline = flow.cookie == COOKIE_BASELINE
        group = _group_of(flow)
        if any(a.kind == "shift_usid" for a in flow.actions):
            out.append(KRoute(dst, END))
        elif flow.table == TABLE_CLASSIFY:
            out.append(KRoute(dst, BLACKHOLE, baseline=baseline))
        elif group is not None:
            ports = groups[group]
            kind = MULTIPATH if len(ports) > 1 else VIA if ports else BLACKHOLE
            out.append(KRoute(dst, kind, tuple(ports), baseline=True))
        else:
            out.append(KRoute(dst, VIA, (_port_of(flow),), baseline=baseline))
    return out


def routes_via(routes: list[KRoute], port: int) -> list[KRoute]:
    """The routes through `port`: what the kernel deletes when the port is set down, and what
    must be put back when it comes up."""
    return [r for r in routes if port in r.ports]


def route_lines(fabric: Fabric, switch: Switch, routes: list[KRoute], usid: str = KERNEL) -> list[str]:
    """`ip -6 -batch` lines installing (or replacing) `routes` on `switch`; `usid`: where the
    End behaviour runs (topologies/dataplane/usid.py: the kernel's, or eBPF asking for a
    plain local route)."""
    lines = []
    for r in routes:
        devs = [fabric.port_ifname(switch.name, p) for p in r.ports]
        if r.kind == END and usid != KERNEL:
            lines.append(f"route replace local {r.dst} dev lo")
        elif r.kind == END:
            lines.append(f"route replace local {r.dst} encap seg6local action {END_BEHAVIOUR} "
                         f"count dev lo")
        elif r.kind == BLACKHOLE:
            lines.append(f"route replace blackhole {r.dst}")
        elif r.kind == VIA:
            lines.append(f"route replace {r.dst} via {GATEWAY_LLADDR} dev {devs[0]}")
        else:
            hops = " ".join(f"nexthop via {GATEWAY_LLADDR} dev {d}" for d in devs)
            lines.append(f"route replace {r.dst} {hops}")
    return lines


def neighbour_line(fabric: Fabric, switch: Switch, port: int) -> str:
    """The port's one neighbour: the MAC across its cable, permanent."""
    return (f"neigh replace {GATEWAY_LLADDR} lladdr {fabric.peer_mac(switch.name, port)} "
            f"dev {fabric.port_ifname(switch.name, port)} nud permanent")


def router_script(fabric: Fabric, switch: Switch, down_links: frozenset[str] = frozenset(),
                  usid: str = KERNEL) -> list[str]:
    """Everything the controller installs on `switch` at start-up: each port's neighbour, then
    its routes."""
    lines = [neighbour_line(fabric, switch, port) for port in fabric.ports(switch.name)]
    return lines + route_lines(fabric, switch, kernel_routes(fabric, switch, down_links), usid)
