import ipaddress

from controller.tables import (
    TABLE_BASELINE,
    TABLE_CLASSIFY,
    TABLE_USID,
    baseline_flows,
    baseline_groups,
    srv6_flows,
    switch_tables,
)
from topologies.model import build, usid_prefix


def _route(flows, address):
    """Longest-prefix match in table 1, as OVS would."""
    hits = [f for f in flows if f.table == TABLE_USID and ipaddress.IPv6Address(address) in f.ipv6_dst]
    return max(hits, key=lambda f: f.ipv6_dst.prefixlen) if hits else None


def test_each_switch_shifts_only_its_own_usid():
    f = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    for sw in f.switches:
        shifts = [fl for fl in srv6_flows(f, sw) if any(a.kind == "shift_usid" for a in fl.actions)]
        assert len(shifts) == 1
        assert shifts[0].table == TABLE_CLASSIFY and shifts[0].goto == TABLE_USID
        assert shifts[0].ipv6_dst == usid_prefix(sw.usid)


def test_static_routes_cover_exactly_the_neighbours():
    f = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    leaf = f.leaf(1, 1)
    routes = {fl.ipv6_dst: fl for fl in srv6_flows(f, leaf) if fl.table == TABLE_USID}
    hosts = [h for h in f.hosts if h.leaf_index == 1]
    expected = {usid_prefix(h.nics[1].usid) for h in hosts} | \
               {usid_prefix(f.spine(1, s).usid) for s in range(2)}
    assert set(routes) == expected
    for h in hosts:
        nic = h.nics[1]
        acts = routes[usid_prefix(nic.usid)].actions
        assert ("set_eth_dst", nic.mac) in [(a.kind, a.arg) for a in acts]
        assert acts[-1].kind == "output" and acts[-1].arg == nic.leaf_port
    spine = f.spine(0, 1)
    sroutes = [fl for fl in srv6_flows(f, spine) if fl.table == TABLE_USID]
    assert {fl.ipv6_dst for fl in sroutes} == {usid_prefix(f.leaf(0, i).usid) for i in range(3)}
    assert {fl.actions[-1].arg for fl in sroutes} == {1, 2, 3}


def test_tables_forward_every_path_hop_by_hop():
    """Walk each path through the switches' tables as data: shift, route, next switch."""
    f = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    block_mask = (1 << 128) - (1 << 96)
    tables = {sw.name: srv6_flows(f, sw) for sw in f.switches}
    for src, dst in [("h0", "h5"), ("h3", "h1"), ("h0", "h1")]:
        for path in f.routes(src, dst):
            node = f.host(src).nics[path.plane].leaf
            value = int(path.address)
            for _hop in range(4):
                sw = f.switch(node)
                if (value >> 80) & 0xFFFF == sw.usid:
                    value = (value & block_mask) | ((value << 16) & ((1 << 96) - 1))
                flow = _route(tables[node], ipaddress.IPv6Address(value))
                assert flow is not None, (path.label, node)
                link = f.port_link(node, flow.actions[-1].arg)
                nxt = link.a if link.b == node else link.b
                if nxt == dst:
                    break
                node = nxt
            else:
                raise AssertionError(f"{path.label} did not reach {dst}")
            assert ipaddress.IPv6Address(value) == f.host(dst).nics[path.plane].sid


def test_baseline_groups_withdraw_only_broken_next_hops():
    f = build(planes=2, leaves=3, spines=3, hosts_per_leaf=1)
    leaf = f.leaf(0, 0)
    full = {g.group_id: g.ports for g in baseline_groups(f, leaf)}
    assert full == {2: (2, 3, 4), 3: (2, 3, 4)}  # host port 1, spine ports 2..4
    # Uplink to spine 1 down: spine 1 is gone towards every leaf.
    cut = {g.group_id: g.ports for g in baseline_groups(f, leaf, frozenset({"p0l0-p0s1"}))}
    assert cut == {2: (2, 4), 3: (2, 4)}
    # Leaf 2's downlink from spine 0 down: only routes towards leaf 2 lose spine 0.
    far = {g.group_id: g.ports for g in baseline_groups(f, leaf, frozenset({"p0l2-p0s0"}))}
    assert far == {2: (2, 3, 4), 3: (3, 4)}
    assert baseline_groups(f, f.spine(0, 0)) == []


def test_baseline_routes_reach_every_host_of_the_plane():
    f = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    for sw in f.switches:
        routes = [fl for fl in baseline_flows(f, sw) if fl.table == TABLE_BASELINE]
        dsts = {fl.ipv6_dst.network_address for fl in routes}
        assert dsts == {h.nics[sw.plane].addr for h in f.hosts}
        if sw.role == 2:  # spine: straight down to the host's leaf
            for fl in routes:
                dst = fl.ipv6_dst.network_address
                host = next(h for h in f.hosts if h.nics[sw.plane].addr == dst)
                assert fl.actions[-1].arg == host.leaf_index + 1


def test_switch_tables_have_no_learning_or_flooding():
    f = build()
    for sw in f.switches:
        flows, _ = switch_tables(f, sw)
        kinds = {a.kind for fl in flows for a in fl.actions}
        assert kinds <= {"shift_usid", "dec_ttl", "set_eth_src", "set_eth_dst", "output", "group"}
        assert all(fl.ipv6_dst is not None for fl in flows)
