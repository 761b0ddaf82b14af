"""The kernel routers' routes say what the OpenFlow tables say: checked flow by flow against
`switch_tables`, and by walking every path and every baseline destination through the routes
with longest-prefix match, as the kernel forwards."""

from __future__ import annotations

import ipaddress

import pytest

from controller import kernel_tables as kt
from controller.tables import TABLE_CLASSIFY, baseline_groups, switch_tables
from topologies.dataplane import usid
from topologies.model import Fabric, build, usid_block

SHAPES = [dict(planes=2, leaves=3, spines=2, hosts_per_leaf=2),
          dict(planes=1, leaves=2, spines=3, hosts_per_leaf=1)]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_flow_has_its_route(shape):
    f = build(**shape)
    down = frozenset({f.fabric_links()[0].name})
    for sw in f.switches:
        flows, _ = switch_tables(f, sw)
        for links in (frozenset(), down):
            routes = kt.kernel_routes(f, sw, links)
            groups = {g.group_id: g.ports for g in baseline_groups(f, sw, links)}
            assert len(routes) == len(flows)
            for flow, route in zip(flows, routes, strict=True):
                assert route.dst == str(flow.ipv6_dst)
                kinds = [a.kind for a in flow.actions]
                if "shift_usid" in kinds:
                    assert route.kind == kt.END and not route.ports
                elif flow.table == TABLE_CLASSIFY:
                    assert route.kind == kt.BLACKHOLE and not route.ports
                elif "group" in kinds:
                    group = next(a.arg for a in flow.actions if a.kind == "group")
                    assert route.ports == groups[group] and route.baseline
                    assert route.kind == {0: kt.BLACKHOLE, 1: kt.VIA}.get(len(route.ports), kt.MULTIPATH)
                else:
                    assert route.kind == kt.VIA
                    assert route.ports == (next(a.arg for a in flow.actions if a.kind == "output"),)
                assert route.baseline == (flow.cookie == 0xBA5E)


def _lpm(routes: list[kt.KRoute], dst: ipaddress.IPv6Address) -> kt.KRoute | None:
    best = None
    for r in routes:
        net = ipaddress.IPv6Network(r.dst)
        if dst in net and (best is None or net.prefixlen > ipaddress.IPv6Network(best.dst).prefixlen):
            best = r
    return best


def _shift(addr: ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    """RFC 9800 NEXT-C-SID with a 32-bit block and 16-bit uSIDs: what End next-csid does."""
    value = int(addr)
    block = value & ~((1 << 96) - 1)
    return ipaddress.IPv6Address(block | ((value << 16) & ((1 << 96) - 1)))


Walked = tuple[str, ipaddress.IPv6Address, list[str]]


def _walk(f: Fabric, routes: dict[str, list[kt.KRoute]], start: str, dst: ipaddress.IPv6Address,
          choose: int = 0, down: frozenset[str] = frozenset()) -> Walked:
    """Forward from switch `start` until a host or a drop: (where it ended, address, links)."""
    node, crossed = start, []
    for _ in range(16):
        route = _lpm(routes[node], dst)
        if route is None or route.kind == kt.BLACKHOLE:
            return "dropped", dst, crossed
        if route.kind == kt.END:
            dst = _shift(dst)
            continue
        port = route.ports[choose % len(route.ports)]
        link = f.port_link(node, port)
        crossed.append(link.name)
        if link.name in down:
            return "lost", dst, crossed
        node = link.a if link.b == node else link.b
        if link.kind == "host" and node == link.a:
            return node, dst, crossed
    raise AssertionError("forwarding loop")


def test_every_path_reaches_its_host_sid_over_its_links():
    f = build(**SHAPES[0])
    routes = {sw.name: kt.kernel_routes(f, sw) for sw in f.switches}
    for src, dst in f.host_pairs():
        for path in f.routes(src, dst):
            leaf = f.host(src).nics[path.plane].leaf
            end, addr, crossed = _walk(f, routes, leaf, path.address)
            assert end == dst and addr == f.host(dst).nics[path.plane].sid
            assert tuple(crossed) == path.links[1:]
    # Nothing outside the fabric's prefixes is forwarded.
    leaf = f.switches[0].name
    assert _walk(f, routes, leaf, ipaddress.IPv6Address("2001:db8::1"))[0] == "dropped"
    unknown = ipaddress.IPv6Address(int(usid_block().network_address) | (0x0FFF << 80))
    assert _walk(f, routes, leaf, unknown)[0] == "dropped"


def test_baseline_reaches_every_nic_over_every_ecmp_choice_and_avoids_a_withdrawn_link():
    f = build(**SHAPES[0])
    cut = "p0l0-p0s0"
    for down in (frozenset(), frozenset({cut})):
        routes = {sw.name: kt.kernel_routes(f, sw, down) for sw in f.switches}
        for src in f.hosts:
            for dst in f.hosts:
                if src is dst:
                    continue
                for plane in range(f.params.planes):
                    for choice in range(f.params.spines):
                        end, _, crossed = _walk(f, routes, src.nics[plane].leaf,
                                                dst.nics[plane].addr, choice, down)
                        assert end == dst.name, (src.name, dst.name, plane, choice, down)
                        assert cut not in crossed or not down


def test_routes_via_a_port_and_the_ip_lines():
    f = build(**SHAPES[0])
    leaf = f.switch("p0l0")
    routes = kt.kernel_routes(f, leaf)
    uplink = f.params.hosts_per_leaf + 1  # to p0s0
    via = kt.routes_via(routes, uplink)
    assert via and all(uplink in r.ports for r in via)
    assert {r.kind for r in via} == {kt.VIA, kt.MULTIPATH}  # the spine's /48, ECMP to remote NICs
    lines = kt.router_script(f, leaf)
    dev = f.port_ifname("p0l0", uplink)
    assert f"neigh replace fe80::1 lladdr {f.port_mac('p0s0', 1)} dev {dev} nud permanent" in lines
    assert (f"route replace local fcbb:bb00:{leaf.usid:x}::/48 encap seg6local action End flavors "
            f"next-csid lblen 32 nflen 16 count dev lo") in lines
    assert "route replace blackhole fcbb:bb00::/32" in lines and "route replace blackhole fd00::/16" in lines
    remote = str(f.host("h2").nics[0].addr)
    assert (f"route replace {remote}/128 nexthop via fe80::1 dev {dev} nexthop via fe80::1 dev "
            f"{f.port_ifname('p0l0', uplink + 1)}") in lines
    # A withdrawn uplink leaves one next hop: a plain route.
    one = kt.route_lines(f, leaf, [r for r in kt.kernel_routes(f, leaf, frozenset({"p0l0-p0s0"}))
                                   if r.dst == f"{remote}/128"])
    assert one == [f"route replace {remote}/128 via fe80::1 dev {f.port_ifname('p0l0', uplink + 1)}"]


def test_without_seg6local_the_end_route_is_a_plain_local_route_and_nothing_else_changes():
    f = build(**SHAPES[0])
    leaf = f.switch("p0l0")
    kernel, ebpf = kt.router_script(f, leaf), kt.router_script(f, leaf, usid=usid.EBPF)
    own = f"route replace local fcbb:bb00:{leaf.usid:x}::/48"
    assert [x for x in ebpf if x.startswith(own)] == [f"{own} dev lo"]  # the eBPF End asks the FIB
    assert not any("seg6local" in x for x in ebpf)
    assert [x for x in kernel if not x.startswith(own)] == [x for x in ebpf if not x.startswith(own)]
