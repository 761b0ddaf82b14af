"""Lab 2's checker: the student's SRv6 tables for every switch (the uN entry, the static
routes), every path of the fabric walked through them, then the student's tables installed on one
real switch (OVS) in place of the controller's: every path through it delivers, and no other
switch's tables changed."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from controller.tables import COOKIE_SRV6, TABLE_CLASSIFY, TABLE_USID, FlowSpec, srv6_flows
from labs.checker import Check, CheckFailed, Context, Lab
from labs.checker import fabric as real
from topologies.model import ROLE_SPINE, Fabric, Route, Switch, build, usid_block, usid_prefix

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10)
ENVIRONMENT = ("cli", "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2",
               "--switch", "ovs")
TARGET = "p1l0"  # the real switch that gets the student's tables
DATAGRAMS = 20  # per path through the target

Tables = Callable[[Fabric, Switch], list[FlowSpec]]


def _generator(ctx: Context) -> Tables:
    return ctx.module("un_switch").srv6_flows  # type: ignore[no-any-return]


def _name(fabric: Fabric, sid: int) -> str:
    for sw in fabric.switches:
        if sw.usid == sid:
            return sw.name
    for host in fabric.hosts:
        for nic in host.nics:
            if nic.usid == sid:
                return f"{host.name}'s plane-{nic.plane} NIC"
    return f"uSID {sid:#06x}"


def _actions(flow: FlowSpec) -> str:
    return ", ".join(f"{a.kind} {a.arg}" if a.arg is not None else a.kind for a in flow.actions)


def _todo(fabric: Fabric, switch: Switch, sid: int) -> str:
    """Which TODO writes `switch`'s route to `sid`."""
    if any(nic.usid == sid for host in fabric.hosts for nic in host.nics):
        return "TODO 2"
    return "TODO 3" if switch.role == ROLE_SPINE else "TODO 4"


def un_entry(ctx: Context) -> str:
    gen = _generator(ctx)
    for sw in FABRIC.switches:
        flows = gen(FABRIC, sw)
        own = usid_prefix(sw.usid)
        un = [f for f in flows if f.table == TABLE_CLASSIFY and f.ipv6_dst == own]
        if not un:
            raise CheckFailed(f"{sw.name}: no table-0 entry matches its own uSID's /48 ({own})")
        f = un[0]
        if [a.kind for a in f.actions] != ["shift_usid"] or f.goto != TABLE_USID:
            raise CheckFailed(f"{sw.name}: its uN entry does {[a.kind for a in f.actions]} then "
                              f"goto {f.goto}; want shift_usid, then goto table {TABLE_USID}")
        block = [g for g in flows if g.table == TABLE_CLASSIFY and g.ipv6_dst == usid_block()]
        if block and block[0].priority >= f.priority:
            raise CheckFailed(f"{sw.name}: the uN entry (priority {f.priority}) does not beat the "
                              f"block-wide entry (priority {block[0].priority}): it never matches")
    return f"all {len(FABRIC.switches)} switches shift their own uSID and go to table 1"


def static_routes(ctx: Context) -> str:
    gen = _generator(ctx)
    n = 0
    for sw in FABRIC.switches:
        want = {f.ipv6_dst: f for f in srv6_flows(FABRIC, sw) if f.table == TABLE_USID}
        got = {f.ipv6_dst: f for f in gen(FABRIC, sw) if f.table == TABLE_USID}
        for prefix, flow in want.items():
            sid = int(prefix.network_address) >> 80 & 0xFFFF
            mine = got.get(prefix)
            todo = _todo(FABRIC, sw, sid)
            if mine is None:
                raise CheckFailed(f"{sw.name}: no table-1 route to {_name(FABRIC, sid)} ({prefix}) "
                                  f"({todo})")
            kinds = [a.kind for a in mine.actions]
            if [a.kind for a in flow.actions] != kinds or mine.actions[-1] != flow.actions[-1]:
                host = "set_eth_dst" in [a.kind for a in flow.actions] and "set_eth_dst" not in kinds
                why = ("a host only takes frames sent to its own MAC: rewrite both MACs" if host
                       else f"want {_actions(flow)}")
                raise CheckFailed(f"{sw.name}: the route to {_name(FABRIC, sid)} does "
                                  f"{_actions(mine) or 'nothing'}: {why} ({todo})")
            if mine.actions != flow.actions:
                raise CheckFailed(f"{sw.name}: the route to {_name(FABRIC, sid)} rewrites the wrong "
                                  f"address: want {_actions(flow)} ({todo})")
            n += 1
        extra = set(got) - set(want)
        if extra:
            raise CheckFailed(f"{sw.name}: routes to {sorted(map(str, extra))} are not neighbours")
    return f"{n} static routes, one per neighbour of every switch, with the right ports"


def walk(fabric: Fabric, tables: dict[str, list[FlowSpec]], route: Route) -> str | None:
    """Follow `route`'s carrier address through the tables; None when it reaches its
    destination's NIC with the destination's SID (fully shifted), else what went wrong."""
    node = fabric.host(route.src).nics[route.plane].leaf
    address = int(route.address)
    for _ in range(8):
        table, hop = TABLE_CLASSIFY, None
        while table is not None:
            hits = [f for f in tables[node] if f.table == table and f.ipv6_dst is not None
                    and ipaddress.IPv6Address(address) in f.ipv6_dst]
            if not hits:
                return (f"at {node}, table {table} has no entry for "
                        f"{ipaddress.IPv6Address(address)}")
            flow = max(hits, key=lambda f: (f.priority, f.ipv6_dst.prefixlen if f.ipv6_dst else 0))
            for action in flow.actions:
                if action.kind == "shift_usid":
                    low = address & ((1 << 96) - 1)
                    address = (address >> 96 << 96) | ((low << 16) & ((1 << 96) - 1))
                elif action.kind == "output":
                    hop = int(action.arg or 0)
            table = flow.goto
        if hop is None:
            return f"at {node}, the entry for {ipaddress.IPv6Address(address)} outputs nowhere"
        link = fabric.port_link(node, hop)
        if link is None:
            return f"at {node}, port {hop} has no link"
        nxt = link.a if link.b == node else link.b
        if nxt.startswith("h"):
            dst = fabric.host(route.dst).nics[route.plane]
            if nxt != route.dst:
                return f"delivered to {nxt}, not {route.dst}"
            if address != int(dst.sid):
                return (f"reached {nxt} with destination {ipaddress.IPv6Address(address)}, "
                        f"not its SID {dst.sid}: a uSID was not shifted")
            return None
        node = nxt
    return "looped"


def every_path(ctx: Context) -> str:
    gen = _generator(ctx)
    tables = {sw.name: gen(FABRIC, sw) for sw in FABRIC.switches}
    n = 0
    for src, dst in FABRIC.host_pairs():
        for route in FABRIC.routes(src, dst):
            problem = walk(FABRIC, tables, route)
            if problem:
                raise CheckFailed(f"{src}->{dst} {route.label} ({route.address}): {problem}")
            n += 1
    return f"all {n} paths of the fabric deliver through your tables"


def ofctl_flow(flow: FlowSpec) -> str:
    """A FlowSpec as an `ovs-ofctl add-flow` line (what controller/app.py sends as OpenFlow)."""
    actions = []
    for a in flow.actions:
        if a.kind == "shift_usid":
            actions += ["move:NXM_NX_IPV6_DST[0..79]->NXM_NX_IPV6_DST[16..95]",
                        "load:0->NXM_NX_IPV6_DST[0..15]"]
        elif a.kind == "dec_ttl":
            actions.append("dec_ttl")
        elif a.kind in ("set_eth_src", "set_eth_dst"):
            actions.append(f"set_field:{a.arg}->{a.kind[4:]}")
        elif a.kind == "output":
            actions.append(f"output:{a.arg}")
        else:
            raise CheckFailed(f"action {a.kind!r} has no place in the SRv6 tables")
    if flow.goto is not None:
        actions.append(f"goto_table:{flow.goto}")
    match = f"ipv6,ipv6_dst={flow.ipv6_dst}" if flow.ipv6_dst is not None else "ipv6"
    return (f"table={flow.table},priority={flow.priority},cookie={COOKIE_SRV6:#x},{match},"
            f"actions={','.join(actions) or 'drop'}")


def _flows_text(bed: object, switch: str) -> list[str]:
    out = bed.em.backend.ofctl("dump-flows", switch, "--no-stats")  # type: ignore[attr-defined]
    return sorted(line.strip() for line in out.splitlines() if "table=" in line)


def real_switch(ctx: Context) -> str:
    gen = _generator(ctx)
    bed = real.testbed(ctx, FABRIC, seed=1, switch="ovs")
    others = {sw.name: _flows_text(bed, sw.name) for sw in FABRIC.switches if sw.name != TARGET}
    backend = bed.em.backend
    backend.ofctl("del-flows", TARGET, f"cookie={COOKIE_SRV6:#x}/-1")  # type: ignore[attr-defined]
    for flow in gen(FABRIC, FABRIC.switch(TARGET)):
        backend.ofctl("add-flow", TARGET, ofctl_flow(flow))  # type: ignore[attr-defined]
    routes = [r for src, dst in FABRIC.host_pairs() for r in FABRIC.routes(src, dst)
              if any(TARGET in name.split("-") for name in r.links)]
    for route in routes:
        nic = FABRIC.host(route.dst).nics[route.plane].ifname
        before = real.nic_rx_packets(bed, route.dst, nic)
        real.send_udp(bed, route.src, str(route.address), DATAGRAMS)
        real.settle(0.1)
        got = real.nic_rx_packets(bed, route.dst, nic) - before
        if got < DATAGRAMS:
            raise CheckFailed(f"{route.src}->{route.dst} {route.label} through {TARGET}: "
                              f"{got} of {DATAGRAMS} datagrams reached {nic}")
    changed = [name for name, flows in others.items() if _flows_text(bed, name) != flows]
    if changed:
        raise CheckFailed(f"installing {TARGET}'s tables changed {', '.join(changed)}")
    return (f"your tables on the real {TARGET} (OVS) carry all {len(routes)} paths through it; "
            f"the other {len(others)} switches are untouched")


LAB = Lab(__file__, "The uN switch", files=("un_switch.py",), checks=[
    Check("un-entry", un_entry,
          "TODO 1: FlowSpec(TABLE_CLASSIFY, 300, usid_prefix(switch.usid), (Action('shift_usid'),), "
          "TABLE_USID); it must outrank the block-wide entry (priority 200)"),
    Check("static-routes", static_routes,
          "TODOs 2-4: one /48 per neighbour (usid_prefix of its uSID); a host's route also "
          "rewrites the MACs; ports come from the link (b_port below, a_port above)"),
    Check("every-path-delivers", every_path,
          "TODOs 1-4: follow one address by hand: shift at the switch whose uSID comes first, then route "
          "on the next uSID", needs=("un-entry",)),
    Check("real-switch", real_switch,
          "OVS refuses or misroutes what the pure checks let through: rerun them first",
          needs=("un-entry", "static-routes", "every-path-delivers"), emulated=True),
])
