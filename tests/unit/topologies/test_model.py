import ipaddress

import pytest

from topologies.model import (
    GATEWAY_MAC,
    ROLE_HOST,
    ROLE_LEAF,
    ROLE_SPINE,
    FabricError,
    FabricParams,
    build,
    plane_usid_prefix,
    usid,
    usid_address,
    usid_prefix,
)


def test_counts_follow_parameters():
    f = build(planes=3, leaves=4, spines=2, hosts_per_leaf=5)
    assert len(f.switches) == 3 * (4 + 2)
    assert len(f.hosts) == 20
    assert all(len(h.nics) == 3 for h in f.hosts)
    assert len([lk for lk in f.links if lk.kind == "host"]) == 20 * 3
    assert len(f.fabric_links()) == 3 * 4 * 2


def test_usids_unique_nonzero_and_carry_the_plane():
    f = build(planes=8, leaves=8, spines=4, hosts_per_leaf=8)
    sids = [s.usid for s in f.switches] + [n.usid for h in f.hosts for n in h.nics]
    assert len(sids) == len(set(sids))
    assert 0 not in sids
    for s in f.switches:
        assert s.usid >> 12 == s.plane + 1
    for h in f.hosts:
        for n in h.nics:
            assert n.usid >> 12 == n.plane + 1
            assert n.sid in plane_usid_prefix(n.plane)


def test_usid_layout_matches_rfc9800_carrier():
    assert usid(ROLE_LEAF, 0, 0) == 0x1400
    assert usid(ROLE_SPINE, 1, 3) == 0x2803
    assert usid(ROLE_HOST, 0, 2) == 0x1C02
    addr = usid_address((0x1400, 0x1800, 0x1401, 0x1C02))
    assert addr == ipaddress.IPv6Address("fcbb:bb00:1400:1800:1401:1c02::")
    assert usid_prefix(0x1800) == ipaddress.IPv6Network("fcbb:bb00:1800::/48")


def test_addresses_and_macs_unique():
    f = build(planes=4, leaves=4, spines=2, hosts_per_leaf=4)
    nics = [n for h in f.hosts for n in h.nics]
    for attr in ("sid", "addr", "mac", "ifname"):
        values = [getattr(n, attr) for n in nics]
        assert len(values) == len(set(values)), attr


def test_ports_are_consistent_with_links():
    f = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    for sw in f.switches:
        ports = [lk.b_port for lk in f.links if lk.b == sw.name] + \
                [lk.a_port for lk in f.links if lk.a == sw.name]
        assert sorted(ports) == list(range(1, len(ports) + 1)), sw.name
        for port in ports:
            assert f.port_link(sw.name, port) is not None


def test_cross_leaf_paths_are_plane_times_spine():
    f = build(planes=4, leaves=2, spines=3, hosts_per_leaf=2)
    paths = f.routes("h0", "h2")
    assert len(paths) == 4 * 3
    assert {(p.plane, p.spine) for p in paths} == {(p, s) for p in range(4) for s in range(3)}
    for p in paths:
        leaf0, spine, leaf1 = f.leaf(p.plane, 0), f.spine(p.plane, p.spine), f.leaf(p.plane, 1)
        assert p.usids == (leaf0.usid, spine.usid, leaf1.usid, f.host("h2").nics[p.plane].usid)
        assert p.links == (f"h0-{leaf0.name}", f"{leaf0.name}-{spine.name}",
                           f"{leaf1.name}-{spine.name}", f"h2-{leaf1.name}")
        for name in p.links:
            assert f.link(name).plane == p.plane
        # Inner header between the two NICs' own addresses; the carrier ends at the SID.
        assert p.src_addr == f.host("h0").nics[p.plane].addr
        assert p.dst_addr == f.host("h2").nics[p.plane].addr
        assert p.address not in (p.src_addr, p.dst_addr)


def test_same_leaf_paths_one_per_plane():
    f = build(planes=4, leaves=2, spines=3, hosts_per_leaf=2)
    paths = f.routes("h0", "h1")
    assert [p.plane for p in paths] == [0, 1, 2, 3]
    assert all(p.spine is None and len(p.usids) == 2 for p in paths)


def test_shift_walks_the_path_to_the_host_address():
    """Apply the uN shift the switches do: the final address is the receiver's NIC address."""
    f = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    block_mask = (1 << 128) - (1 << 96)
    for p in f.routes("h0", "h1"):
        value = int(p.address)
        for sid in p.usids[:-1]:
            assert (value >> 80) & 0xFFFF == sid
            value = (value & block_mask) | ((value << 16) & ((1 << 96) - 1))
        assert ipaddress.IPv6Address(value) == f.host("h1").nics[p.plane].sid


@pytest.mark.parametrize("kwargs, words", [
    ({"planes": 0}, "planes must be"),
    ({"leaves": -1}, "leaves must be"),
    ({"spines": 1.5}, "spines must be"),
    ({"planes": 16}, "planes=16 exceeds"),
    ({"spines": 1025}, "1025 spines"),
    ({"leaves": 512, "hosts_per_leaf": 4}, "2048 hosts"),
    ({"link_mbps": 0}, "link_mbps"),
    ({"planes": 15, "leaves": 1024, "hosts_per_leaf": 1, "spines": 1000}, "interface names"),
])
def test_invalid_parameters_name_the_problem(kwargs, words):
    with pytest.raises(FabricError, match=words):
        build(**kwargs)


def test_unknown_names_are_clear_errors():
    f = build()
    with pytest.raises(FabricError, match="no link named"):
        f.link("p9l9-p9s9")
    with pytest.raises(FabricError, match="no host named"):
        f.host("h99")
    with pytest.raises(FabricError, match="both h0"):
        f.routes("h0", "h0")
    with pytest.raises(FabricError, match="unknown fabric parameter"):
        FabricParams.from_dict({"planes": 2, "colour": "red"})


def test_capacity_accounts_for_cut_links():
    f = build(planes=4, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10)
    assert f.path_capacity_mbps("h0", "h2") == 40
    assert f.path_capacity_mbps("h0", "h2", frozenset({"p0l0-p0s0"})) == 40
    both = frozenset({"p0l0-p0s0", "p0l0-p0s1"})
    assert f.path_capacity_mbps("h0", "h2", both) == 30
    assert f.path_capacity_mbps("h0", "h2", both, planes=(0,)) == 0


def test_fair_share_counts_oversubscription_and_host_links():
    from topologies.model import build, fair_share_mbps

    fab = build(planes=2, leaves=2, spines=2, hosts_per_leaf=3, link_mbps=10.0)
    # Three hosts of leaf 0 to three hosts of leaf 1: 60 Mbit/s of demand per direction over
    # 2 planes x 2 spines x 10 = 40 Mbit/s of uplinks: each flow gets a third of that.
    cross = [("h0", "h3"), ("h1", "h4"), ("h2", "h5")]
    assert all(abs(v - 40 / 3) < 1e-6 for v in fair_share_mbps(fab, cross, 2).values())
    # Non-blocking (3 spines): every flow gets its NICs' 20 Mbit/s; same-leaf flows always do.
    fab3 = build(planes=2, leaves=2, spines=3, hosts_per_leaf=3, link_mbps=10.0)
    assert all(abs(v - 20) < 1e-6 for v in fair_share_mbps(fab3, cross, 2).values())
    # One plane only (a single-path transport's view): half of it.
    assert all(abs(v - 10) < 1e-6 for v in fair_share_mbps(fab3, cross, 1).values())
    # Two flows into one host share its NICs.
    assert sorted(fair_share_mbps(fab3, [("h0", "h5"), ("h1", "h5")], 2).values()) == [10.0, 10.0]


def test_port_macs_unique_and_peers_see_each_other():
    f = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    macs = {}
    for sw in f.switches:
        assert f.ports(sw.name) == sorted({lk.b_port for lk in f.links if lk.b == sw.name} |
                                          {lk.a_port for lk in f.links if lk.a == sw.name})
        for port in f.ports(sw.name):
            mac = f.port_mac(sw.name, port)
            link = f.port_link(sw.name, port)
            assert f.port_ifname(sw.name, port) in (link.a_ifname, link.b_ifname)
            if link.kind == "host":
                assert mac == GATEWAY_MAC  # what every host NIC's static neighbour says
                assert f.peer_mac(sw.name, port) == f.host(link.a).nics[link.plane].mac
            else:
                macs.setdefault(mac, []).append((sw.name, port))
                other, other_port = (link.b, link.b_port) if link.a == sw.name else (link.a, link.a_port)
                assert f.peer_mac(sw.name, port) == f.port_mac(other, other_port)
    assert all(len(v) == 1 for v in macs.values())
    nic_macs = {n.mac for h in f.hosts for n in h.nics}
    assert not nic_macs & set(macs) and GATEWAY_MAC not in nic_macs
    assert f.port_mac("p1s1", 3) == "02:fd:28:01:00:03"
