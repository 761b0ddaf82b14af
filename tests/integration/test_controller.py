"""The control plane on each switch backend (os-ken on real Open vSwitch, the kernel routers'
controller on Linux routers): what it installs, and what it does (not) change on failure."""

import ctypes.util
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from controller.tables import switch_tables
from tests.conftest import require_backend_or_skip
from tests.integration.helpers import assert_nothing_left
from topologies import netns
from topologies.dataplane import usid
from topologies.emulation import Emulation
from topologies.model import build
from topologies.switches.ovs import ALLOCATOR, OvsBackend
from topologies.switches.routers import MULTIPATH_SEED_KEY, multipath_seed

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


def _assert_allocator_preloaded(ovs: OvsBackend) -> None:
    """`make setup` installs ovs-vswitchd's allocator: every instance runs with it mapped."""
    assert ovs.info()["allocator"] == ovs.allocator == ctypes.util.find_library(ALLOCATOR) \
        is not None, "the allocator is not installed: run `make setup`"
    for pid in ovs.forwarding_pids():
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert f"lib{ALLOCATOR}.so" in maps, f"ovs-vswitchd {pid} runs without {ovs.allocator}"


def test_tables_installed_and_srv6_untouched_by_failure(tmp_path):
    fabric = build(planes=2, leaves=3, spines=2, hosts_per_leaf=1)
    detect_ms = 600
    with Emulation(fabric, tmp_path, detect_ms=detect_ms, switch="ovs") as em:
        ovs = em.switches
        assert isinstance(ovs, OvsBackend)
        _assert_allocator_preloaded(ovs)
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
    # The delay runs from when the controller heard of the cut (its first port_down), which a
    # loaded machine may log a moment before set_link's own stamp is taken.
    heard = min(e["t"] for e in downs)
    assert heard <= cut + detect_ms / 1000 * 0.5
    assert converged[0]["t"] - heard >= detect_ms / 1000
    assert_nothing_left()


def _kroutes(em: Emulation, router: str) -> dict[str, list[int]]:
    """{destination: next-hop ports} of a kernel router's IPv6 routes (blackholes: [])."""
    out = subprocess.run(netns.command(em.pid(router), ["ip", "-6", "-j", "route", "show"]),
                         capture_output=True, text=True, check=True).stdout
    port = {em.fabric.port_ifname(router, p): p for p in em.fabric.ports(router)}
    routes = {}
    for r in json.loads(out):
        hops = r.get("nexthops") or ([r] if "dev" in r and r.get("type") != "blackhole" else [])
        routes[r["dst"]] = sorted(port[h["dev"]] for h in hops if h.get("dev") in port)
    return routes


def _end_routes(em: Emulation, router: str) -> list[str]:
    out = subprocess.run(netns.command(em.pid(router), ["ip", "-6", "route", "show", "table", "local"]),
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("local fcbb:bb00:")]


def _ingress_programs(em: Emulation, router: str) -> set[str]:
    """The tc ingress programs on each port of `router` (the eBPF uN, where the kernel has none)."""
    names = set()
    for port in em.fabric.ports(router):
        out = subprocess.run(netns.command(em.pid(router), [
            "tc", "filter", "show", "dev", em.fabric.port_ifname(router, port), "ingress"]),
            capture_output=True, text=True, check=True).stdout
        names |= {f"{port}:{w}" for w in out.split() if w.startswith("usid_")}
    return names


def _uplinks_taken(em: Emulation, router: str, src: str, dst: str) -> list[str]:
    """The next hop the router's kernel picks for UDP flows from `src` to `dst`, one per source
    port of a range: the baseline's ECMP draw as the kernel makes it."""
    out = []
    for sport in range(49152, 49152 + 24):
        got = subprocess.run(netns.command(em.pid(router), [
            "ip", "-6", "route", "get", dst, "from", src, "ipproto", "udp", "sport", str(sport),
            "dport", "4791"]), capture_output=True, text=True, check=True).stdout
        out.append(got.split(" dev ")[1].split()[0])
    return out


def _check_ecmp_seeded(em: Emulation, fabric: Any, leaf: str, src: str, dst: str) -> None:
    """Every router's ECMP hash is keyed from the run's seed (routers.multipath_seed), and the
    kernel's draw follows the key: another key moves some flows, the run's key brings them back."""
    if not os.path.exists(f"/proc/sys/{MULTIPATH_SEED_KEY}"):  # before 6.11: the boot's key
        assert em.switch_info()["ecmp_hash_seed"] is None
        return
    assert em.switch_info()["ecmp_hash_seed"] == 7
    read = ["sysctl", "-n", MULTIPATH_SEED_KEY.replace("/", ".")]
    for sw in fabric.switches:
        got = subprocess.run(netns.command(em.pid(sw.name), read), capture_output=True, text=True,
                             check=True).stdout.strip()
        assert int(got) == multipath_seed(7, sw.name), sw.name
    draw = _uplinks_taken(em, leaf, src, dst)
    assert len(set(draw)) == 2, draw  # both uplinks of the leaf carry some of the flows
    write = ["sysctl", "-qw", f"{MULTIPATH_SEED_KEY.replace('/', '.')}={multipath_seed(8, leaf)}"]
    subprocess.run(netns.command(em.pid(leaf), write), check=True)
    assert _uplinks_taken(em, leaf, src, dst) != draw, "the hash key moved no flow"
    write[-1] = write[-1].split("=")[0] + f"={multipath_seed(7, leaf)}"
    subprocess.run(netns.command(em.pid(leaf), write), check=True)
    assert _uplinks_taken(em, leaf, src, dst) == draw


def test_kernel_routes_installed_and_srv6_untouched_by_failure(tmp_path):
    """The same contract on the Linux kernel-router backend: the routes say what the tables say,
    uN is the kernel's own End with NEXT-C-SID (or the eBPF one, on every port, where the kernel
    has none), and only the baseline's multipath routes change,
    after the detection delay."""
    require_backend_or_skip("linux")
    fabric = build(planes=2, leaves=3, spines=2, hosts_per_leaf=1)
    detect_ms = 600
    with Emulation(fabric, tmp_path, detect_ms=detect_ms, switch="linux", ecmp_seed=7) as em:
        leaf, spine, other = fabric.leaf(0, 0), fabric.spine(0, 0), fabric.leaf(0, 1)
        h0, h1, h2 = (str(fabric.host(f"h{i}").nics[0].addr) for i in range(3))
        end = _end_routes(em, leaf.name)
        assert len(end) == 1 and end[0].startswith("local fcbb:bb00:1400::/48")
        if em.usid == usid.KERNEL:
            assert "End flavors next-csid lblen 32 nflen 16" in end[0]
        else:  # the same route, the End in eBPF on every port
            assert "encap" not in end[0]
            assert _ingress_programs(em, leaf.name) == {f"{p}:usid_end" for p in fabric.ports(leaf.name)}
        _check_ecmp_seeded(em, fabric, leaf.name, h0, h1)
        before = {sw.name: _kroutes(em, sw.name) for sw in (leaf, spine)}
        uplinks = [fabric.params.hosts_per_leaf + 1 + s for s in range(2)]
        assert before[leaf.name][h1] == before[leaf.name][h2] == uplinks
        assert before[leaf.name][h0] == [1]

        cut = em.set_link(f"{leaf.name}-{spine.name}", up=False)
        time.sleep(detect_ms / 1000 * 0.5)
        assert _kroutes(em, leaf.name)[h1] == uplinks, "withdrawn before the delay"
        time.sleep(detect_ms / 1000 * 0.5 + 0.6)
        assert _kroutes(em, leaf.name)[h1] == _kroutes(em, leaf.name)[h2] == [uplinks[1]]
        assert _kroutes(em, other.name)[h0] == [uplinks[1]]  # spine 0 only towards leaf 0
        assert _kroutes(em, other.name)[h2] == uplinks
        static = {d: p for d, p in before[leaf.name].items() if d.startswith("fcbb")}
        assert {d: p for d, p in _kroutes(em, leaf.name).items() if d.startswith("fcbb")} == static

        em.set_link(f"{leaf.name}-{spine.name}", up=True)
        em.wait_link_state(f"{leaf.name}-{spine.name}", up=True)
        # The spine's routes through the port the cut set down are back at once (the kernel
        # deleted them), the baseline after the delay.
        assert _kroutes(em, spine.name) == before[spine.name]
        time.sleep(detect_ms / 1000 + 0.8)
        assert _kroutes(em, leaf.name) == before[leaf.name]
        events = [json.loads(x) for x in em.events_path.read_text().splitlines()]
    downs = [e for e in events if e["event"] == "port_down"]
    converged = [e for e in events if e["event"] == "baseline_converged"]
    restored = [e for e in events if e["event"] == "port_routes_restored"]
    assert {e["switch"] for e in downs} == {leaf.name, spine.name}
    assert len(converged) == 2 and not any(e["errors"] for e in converged + restored)
    assert converged[0]["withdrawn"] == [f"{leaf.name}-{spine.name}"]
    assert converged[1]["withdrawn"] == []
    # The delay runs from when the controller heard of the cut (its first port_down), which a
    # loaded machine may log a moment before set_link's own stamp is taken.
    heard = min(e["t"] for e in downs)
    assert heard <= cut + detect_ms / 1000 * 0.5
    assert converged[0]["t"] - heard >= detect_ms / 1000
    assert_nothing_left()
