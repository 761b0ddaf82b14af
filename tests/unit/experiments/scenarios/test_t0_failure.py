"""t0-failure's fault plan: a leaf of one plane goes down with every link it has, host links
first (its hosts see carrier loss on that plane), and the capacity the figure expects follows."""

from __future__ import annotations

from experiments.paper.figures import t0_expected
from experiments.scenarios import default_options
from experiments.scenarios.failure import receiver_leaf, t0_links
from topologies.model import Fabric, FabricParams


def test_a_t0_failure_cuts_every_link_of_the_leaf_host_links_first():
    fabric = Fabric(FabricParams(planes=2, leaves=2, spines=3, hosts_per_leaf=2))
    links = t0_links(fabric, "p1l0")
    assert links == ["h0-p1l0", "h1-p1l0", "p1l0-p1s0", "p1l0-p1s1", "p1l0-p1s2"]
    assert {ln.name for ln in fabric.links_of("p1l0")} == set(links)


def test_the_default_target_is_the_receivers_plane_0_leaf_and_costs_one_port():
    opts = default_options("t0-failure")
    fabric = Fabric(opts.fabric)
    assert receiver_leaf(fabric, "h1") == "p0l1"
    down = frozenset(t0_links(fabric, "p0l1"))
    before = fabric.path_capacity_mbps("h0", "h1")
    during = fabric.path_capacity_mbps("h0", "h1", down)
    assert during / before == t0_expected(opts.fabric.planes) == 0.75
