"""The agent's path table (endpoints/host/paths.py) read from the plain data the testbed hands
it (topologies/pathtables.py), through JSON: the same paths, EVs, addresses and planes the agent
built from the fabric model itself before."""

from __future__ import annotations

import json

import pytest

from endpoints.host.paths import SOURCE_ROUTED, TRANSPORTS, PathTable
from endpoints.protocol.evset import EvInfo
from topologies.model import Fabric, FabricError, FabricParams, build, ev_plane, ev_value
from topologies.pathtables import agent_paths

# Two leaves: same-leaf peers (one path per plane) and cross-leaf peers (one per spine).
FABRIC = build(FabricParams(planes=2, leaves=2, spines=3, hosts_per_leaf=2, link_mbps=20.0))


def _from_model(fabric: Fabric, me: str, peer: str, transport: str, plane: int) -> tuple:
    """(evs, dst, encap) as the agent computed them from the model (its former peer_paths)."""
    host = fabric.host(me)
    if transport not in SOURCE_ROUTED:
        mine, them = host.nics[plane], fabric.host(peer).nics[plane]
        ev = ev_value(plane, 0x3FFF & (host.index * 131 + them.plane))
        return [EvInfo(ev, plane)], {ev: (mine.addr.packed, them.addr.packed, str(them.addr))}, False
    routes = fabric.routes(me, peer)
    return ([EvInfo(r.ev, r.plane) for r in routes],
            {r.ev: (r.src_addr.packed, r.dst_addr.packed, str(r.dst_addr)) for r in routes}, True)


def _table(host: str) -> PathTable:
    data = agent_paths(FABRIC, host)
    sent = json.loads(json.dumps(data))  # what the agent's settings file carries
    assert sent == data
    return PathTable(sent)


def test_the_data_gives_every_path_the_model_gave():
    names = [h.name for h in FABRIC.hosts]
    checked, sizes = 0, set()
    for host in FABRIC.hosts:
        table = _table(host.name)
        assert table.name == host.name
        assert table.nics == {nic.ifname: nic.plane for nic in host.nics}
        assert (table.planes, table.link_mbps) == (FABRIC.params.planes, FABRIC.params.link_mbps)
        for peer in (n for n in names if n != host.name):
            assert table.forward_evs(peer) == [r.ev for r in FABRIC.routes(peer, host.name)]
            assert table.labels(peer) == [(r.ev, r.label) for r in FABRIC.routes(host.name, peer)]
            for transport in TRANSPORTS:
                for plane in range(FABRIC.params.planes):
                    got = table.peer_paths(peer, transport, plane)
                    assert (got.evs, got.dst, got.encap) == _from_model(FABRIC, host.name, peer,
                                                                       transport, plane)
                    # The plane the loop charges a datagram's NIC port by: the EV's own.
                    assert got.plane == {ev: ev_plane(ev) for ev in got.dst}
                    assert table.peer_paths(peer, transport, plane) is got  # sockets shared
                    sizes.add(len(got.evs))
                    checked += 1
    assert checked == len(names) * (len(names) - 1) * len(TRANSPORTS) * FABRIC.params.planes
    p = FABRIC.params
    assert sizes == {1, p.planes, p.planes * p.spines}  # ECMP, same-leaf, cross-leaf


def test_a_roce_qps_entropy_moves_its_source_port_within_its_plane_and_range():
    table = _table("h0")
    evs = {e: table.peer_paths("h2", "roce", 1, e).evs[0].ev for e in range(16)}
    assert evs[0] == _from_model(FABRIC, "h0", "h2", "roce", 1)[0][0].ev  # 0: every QP's path as before
    assert len(set(evs.values())) == 16  # each QP its own ECMP hash input
    assert {ev_plane(ev) for ev in evs.values()} == {1}
    assert all(0xC000 <= ev & 0xFFFF <= 0xFFFF for ev in evs.values())  # an ephemeral source port
    assert table.peer_paths("h2", "roce", 1, 3) is table.peer_paths("h2", "roce", 1, 3)
    assert table.peer_paths("h2", "mrc", 0, 3).evs == table.peer_paths("h2", "mrc", 0).evs


def test_an_unknown_peer_is_refused_as_the_model_refuses_it():
    table = _table("h0")
    with pytest.raises(FabricError) as model:
        FABRIC.host("h9")
    with pytest.raises(ValueError) as agent:
        table.check_peer("h9")
    assert str(agent.value) == str(model.value)
    with pytest.raises(ValueError):
        table.check_peer("h0")  # itself: no peer
