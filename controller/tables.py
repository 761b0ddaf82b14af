"""Every switch's flow tables, as plain data derived from the fabric model.

Nothing here talks OpenFlow: `app.py` turns these specs into os-ken messages, and the unit tests
check them directly. Table layout on every switch:

* table 0 (classify): SRv6 traffic whose first uSID is this switch's own gets the uN
  behaviour (shift the remaining uSIDs left by 16 bits, then route); other SRv6 traffic is
  routed unchanged; baseline (fd00::/16) traffic goes to table 2; everything else is dropped
  (no learning, no flooding, no neighbour discovery: hosts use static neighbours).
* table 1 (uSID routes): static /48 routes, one per neighbour uSID (attached hosts, and the
  adjacent tier's switches). Installed once, never changed: no routing protocol runs.
* table 2 (baseline): destination routes to host addresses, over ECMP select groups at leaves.
  Only these groups change, and only after the routing detection delay (see `baseline_groups`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from topologies.model import (
    BASELINE_PREFIX,
    GATEWAY_MAC,
    ROLE_LEAF,
    Fabric,
    Switch,
    link_name,
    usid_block,
    usid_prefix,
)

TABLE_CLASSIFY, TABLE_USID, TABLE_BASELINE = 0, 1, 2
ETH_TYPE_IPV6 = 0x86DD
COOKIE_SRV6, COOKIE_BASELINE = 0x5256, 0xBA5E


@dataclass(frozen=True)
class Action:
    kind: str  # "shift_usid" | "dec_ttl" | "set_eth_src" | "set_eth_dst" | "output" | "group"
    arg: str | int | None = None


@dataclass(frozen=True)
class FlowSpec:
    table: int
    priority: int
    ipv6_dst: ipaddress.IPv6Network | None  # None: match every IPv6 packet
    actions: tuple[Action, ...] = ()
    goto: int | None = None
    cookie: int = COOKIE_SRV6


@dataclass(frozen=True)
class GroupSpec:
    group_id: int
    ports: tuple[int, ...]  # one select bucket per port; empty = no route (drop)


def _deliver(mac: str, port: int) -> tuple[Action, ...]:
    return (Action("dec_ttl"), Action("set_eth_src", GATEWAY_MAC), Action("set_eth_dst", mac),
            Action("output", port))


def _forward(port: int) -> tuple[Action, ...]:
    return (Action("dec_ttl"), Action("output", port))


def srv6_flows(fabric: Fabric, switch: Switch) -> list[FlowSpec]:
    """uN shift-and-forward for the switch's own uSID plus static /48 routes to its neighbours."""
    block = usid_block()
    flows = [
        FlowSpec(TABLE_CLASSIFY, 300, usid_prefix(switch.usid), (Action("shift_usid"),), TABLE_USID),
        FlowSpec(TABLE_CLASSIFY, 200, block, (), TABLE_USID),
    ]
    for link in fabric.links_of(switch.name):
        if link.b == switch.name:  # neighbour below: a host (leaf) or a leaf (spine)
            port = link.b_port
            if link.kind == "host":
                nic = fabric.host(link.a).nics[link.plane]
                flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(nic.usid), _deliver(nic.mac, port)))
            else:
                flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(fabric.switch(link.a).usid),
                                      _forward(port)))
        else:  # neighbour above: a spine, seen from a leaf
            flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(fabric.switch(link.b).usid),
                                  _forward(link.a_port)))
    return flows


def baseline_group_id(dst_leaf: int) -> int:
    return dst_leaf + 1


def baseline_flows(fabric: Fabric, switch: Switch) -> list[FlowSpec]:
    """Destination routes to every host address of the switch's plane (static part)."""
    prefix = ipaddress.IPv6Network((BASELINE_PREFIX << 112, 16))
    flows = [FlowSpec(TABLE_CLASSIFY, 100, prefix, (), TABLE_BASELINE, COOKIE_BASELINE)]
    for host in fabric.hosts:
        nic = host.nics[switch.plane]
        dst = ipaddress.IPv6Network((int(nic.addr), 128))
        if switch.role == ROLE_LEAF:
            if host.leaf_index == switch.index:
                actions = _deliver(nic.mac, nic.leaf_port)
            else:
                actions = (Action("dec_ttl"), Action("group", baseline_group_id(host.leaf_index)))
        else:
            actions = _forward(host.leaf_index + 1)
        flows.append(FlowSpec(TABLE_BASELINE, 100, dst, actions, None, COOKIE_BASELINE))
    return flows


def baseline_groups(fabric: Fabric, switch: Switch,
                    down_links: frozenset[str] = frozenset()) -> list[GroupSpec]:
    """ECMP groups of a leaf as a converged routing protocol would leave them.

    A spine is a next hop towards leaf L only while both the uplink to it and its downlink to
    L are up: what BGP converges to once the failure is detected and withdrawn. Spines have
    no groups (one way down to each leaf).
    """
    if switch.role != ROLE_LEAF:
        return []
    p = fabric.params
    groups = []
    for dst_leaf in range(p.leaves):
        if dst_leaf == switch.index:
            continue
        dst = fabric.leaf(switch.plane, dst_leaf).name
        ports = []
        for spine_index in range(p.spines):
            spine = fabric.spine(switch.plane, spine_index).name
            if link_name(switch.name, spine) in down_links or link_name(dst, spine) in down_links:
                continue
            ports.append(p.hosts_per_leaf + spine_index + 1)
        groups.append(GroupSpec(baseline_group_id(dst_leaf), tuple(ports)))
    return groups


def switch_tables(fabric: Fabric, switch: Switch) -> tuple[list[FlowSpec], list[GroupSpec]]:
    """Everything installed on `switch` at start-up."""
    return srv6_flows(fabric, switch) + baseline_flows(fabric, switch), baseline_groups(fabric, switch)
