"""The controller on real Open vSwitch: what it installs, and what it does (not) change on failure."""

import json
import re
import time

import pytest

from controller.tables import switch_tables
from tests.integration.helpers import assert_nothing_left
from topologies.emulation import Emulation
from topologies.model import build
from topologies.switches.ovs import OvsBackend

pytestmark = pytest.mark.usefixtures("emulation_ready")


def _flows(ovs: OvsBackend, bridge: str) -> list[str]:
    out = ovs.ofctl("dump-flows", bridge, "--no-stats")
    return sorted(line.strip() for line in out.splitlines() if "priority" in line)


def _group_ports(ovs: OvsBackend, bridge: str) -> dict[int, list[int]]:
    out = ovs.ofctl("dump-groups", bridge)
    groups = {}
    for line in out.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if m:
            groups[int(m.group(1))] = sorted(int(p) for p in re.findall(r"output:(\d+)", line))
    return groups


def test_tables_installed_and_srv6_untouched_by_failure(tmp_path):
    fabric = build(planes=2, leaves=3, spines=2, hosts_per_leaf=1)
    detect_ms = 600
    with Emulation(fabric, tmp_path, detect_ms=detect_ms, switch="ovs") as em:
        ovs = em.switches
        assert isinstance(ovs, OvsBackend)
        leaf, spine = fabric.leaf(0, 0), fabric.spine(0, 0)
        flows_before = {sw.name: _flows(ovs, sw.name) for sw in (leaf, spine)}
        for sw in (leaf, spine):
            expected, _ = switch_tables(fabric, sw)
            assert len(flows_before[sw.name]) == len(expected)
        shift = [f for f in flows_before[leaf.name] if "move:" in f]
        assert len(shift) == 1 and "ipv6_dst=fcbb:bb00:1400::/48" in shift[0]
        assert "NXM_NX_IPV6_DST[0..79]->NXM_NX_IPV6_DST[16..95]" in shift[0]
        uplinks = [fabric.params.hosts_per_leaf + 1 + s for s in range(2)]
        assert _group_ports(ovs, leaf.name) == {2: uplinks, 3: uplinks}

        cut = em.set_link(f"{leaf.name}-{spine.name}", up=False)
        time.sleep(detect_ms / 1000 * 0.5)
        assert _group_ports(ovs, leaf.name) == {2: uplinks, 3: uplinks}, "withdrawn before the delay"
        time.sleep(detect_ms / 1000 * 0.5 + 0.6)
        assert _group_ports(ovs, leaf.name) == {2: [uplinks[1]], 3: [uplinks[1]]}
        # The other leaves lose spine 0 towards leaf 0 only.
        other = fabric.leaf(0, 1).name
        assert _group_ports(ovs, other) == {1: [uplinks[1]], 3: uplinks}
        for sw in (leaf, spine):
            assert _flows(ovs, sw.name) == flows_before[sw.name], "SRv6/static flows changed"

        em.set_link(f"{leaf.name}-{spine.name}", up=True)
        time.sleep(detect_ms / 1000 + 0.8)
        assert _group_ports(ovs, leaf.name) == {2: uplinks, 3: uplinks}
        events = [json.loads(x) for x in em.events_path.read_text().splitlines()]
    downs = [e for e in events if e["event"] == "port_down"]
    converged = [e for e in events if e["event"] == "baseline_converged"]
    assert {e["switch"] for e in downs} == {leaf.name, spine.name}
    assert len(converged) == 2
    assert converged[0]["withdrawn"] == [f"{leaf.name}-{spine.name}"]
    assert converged[1]["withdrawn"] == []
    assert converged[0]["t"] - cut >= detect_ms / 1000
    assert_nothing_left()
