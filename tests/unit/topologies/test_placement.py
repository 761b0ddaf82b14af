import pytest

from topologies.model import FabricError, build
from topologies.placement import crossing_links, local, parse_servers, place, server_of


def test_parse_servers_keeps_order_and_strips():
    assert parse_servers("head, s1,10.0.0.7") == ("head", "s1", "10.0.0.7")


@pytest.mark.parametrize("text, words", [
    ("", "comma-separated"), ("head,,s1", "no empty name"), ("head,s1,head", "twice"),
    ("head,s_1", "not a host name"), ("head,root@s1", "not a host name"), ("-x", "not a host name"),
])
def test_parse_servers_refuses_with_one_line(text, words):
    with pytest.raises(FabricError) as err:
        parse_servers(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_planes_dealt_round_robin_over_the_servers_after_the_head():
    fabric = build(planes=5, leaves=2, spines=2, hosts_per_leaf=1)
    p = place(fabric, ("head", "s1", "s2"))
    assert p.plane_server == ("s1", "s2", "s1", "s2", "s1")
    assert p.planes_on("s1") == [0, 2, 4] and p.planes_on("s2") == [1, 3] and p.planes_on("head") == []
    assert p.split
    assert p.as_dict() == {"servers": ["head", "s1", "s2"], "head": "head", "split": True,
                           "planes": {"head": [], "s1": [0, 2, 4], "s2": [1, 3]}}


def test_more_servers_than_planes_leaves_some_idle():
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    p = place(fabric, ("head", "a", "b", "c"))
    assert p.plane_server == ("a", "b") and p.planes_on("c") == []


def test_one_server_is_everything_local():
    fabric = build(planes=3, leaves=2, spines=2, hosts_per_leaf=1)
    for p in (place(fabric, ("head",)), local(fabric)):
        assert not p.split
        assert set(p.plane_server) == {p.head}
        assert crossing_links(p, fabric) == []


def test_hosts_on_head_switches_with_their_plane():
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    p = place(fabric, ("head", "s1", "s2"))
    assert all(server_of(p, fabric, h.name) == "head" for h in fabric.hosts)
    for sw in fabric.switches:
        assert server_of(p, fabric, sw.name) == p.plane_server[sw.plane]


def test_only_host_links_cross_machines():
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    crossing = set(crossing_links(place(fabric, ("head", "s1")), fabric))
    assert crossing == {lk.name for lk in fabric.links if lk.kind == "host"}


def test_place_refuses_no_server_and_duplicates():
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    with pytest.raises(FabricError):
        place(fabric, ())
    with pytest.raises(FabricError):
        place(fabric, ("head", "s1", "s1"))
