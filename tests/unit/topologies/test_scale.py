"""topologies/scale.py: the scale arithmetic `mrclab plan` prints, held to the MRC paper's
figures (one test per figure) and to the fabric model's own layout."""

from __future__ import annotations

from fractions import Fraction

import pytest

from topologies import scale
from topologies.model import FabricError, FabricParams, build

PAPER = scale.plan(planes=8, radix=512)


@pytest.mark.parametrize("params", [
    FabricParams(planes=2, leaves=3, spines=2, hosts_per_leaf=2),
    FabricParams(planes=4, leaves=4, spines=2, hosts_per_leaf=1),
    FabricParams(planes=1, leaves=2, spines=3, hosts_per_leaf=4),
])
def test_counts_are_the_models_layout(params):
    fabric = build(params)
    counts = scale.fabric_counts(params)
    assert counts["switches"] == len(fabric.switches)
    assert counts["hosts"] == len(fabric.hosts)
    assert counts["host_links"] == sum(link.kind == "host" for link in fabric.links)
    assert counts["fabric_links"] == sum(link.kind == "fabric" for link in fabric.links)
    leaf, spine = fabric.leaf(0, 0).name, fabric.spine(0, 0).name
    assert counts["leaf_ports"] == len(fabric.ports(leaf))
    assert counts["spine_ports"] == len(fabric.ports(spine))


def test_the_paper_fabric_is_the_models_two_tier_layout_at_full_size():
    params = scale.multi_plane_params(8, 512, 131_072, 8)
    assert (params.leaves, params.spines, params.hosts_per_leaf) == (512, 256, 256)
    counts = scale.fabric_counts(params)  # one link from every T0 to every T1, as the model has
    assert counts == scale.fabric_counts(params, uplinks=256)
    assert counts["leaf_ports"] == counts["spine_ports"] == 512
    assert PAPER.multi.switches == counts["switches"]
    assert PAPER.multi.links == counts["host_links"] + counts["fabric_links"]


# ----- the paper's figures, one test each --------------------------------------------------
def test_131072_gpus_in_two_tiers_with_512_port_switches_and_8_planes():
    assert PAPER.gpus == 131_072  # the default: all that two tiers reach
    m = PAPER.multi
    assert (m.tiers, m.planes, m.switch_ports, m.port_gbps) == (2, 8, 512, 100)
    assert m.as_dict()["t0_down"] == 256 and m.t0_up == 256
    assert m.reach == 131_072
    assert m.switches_per_tier == (8 * 512, 8 * 256)
    with pytest.raises(FabricError, match="beyond what two tiers"):
        scale.plan(planes=8, radix=512, gpus=131_073)


def test_single_plane_of_the_same_nic_bandwidth_needs_three_tiers_or_more():
    three = PAPER.single[0]
    assert (three.planes, three.switch_ports, three.port_gbps) == (1, 64, 800)
    assert three.tiers == 3 and three.switches_per_tier == (4096, 4096, 2048)
    assert scale.clos_reach(64, 2) < 131_072  # two tiers of 64 x 800G reach 2,048
    # Strictly, three tiers of 64-port switches reach 65,536: the plan says so and shows four.
    assert three.reach == 65_536 and PAPER.single[-1].tiers == 4
    assert "131,072 GPUs need 4" in scale.render(PAPER)


def test_about_two_thirds_of_the_optics_of_the_three_tier_single_plane():
    three = PAPER.single[0]
    assert three.optics_ratio == Fraction(2, 3)
    assert PAPER.multi.optics_lanes == 2 * 8 * 131_072 * 2  # 2 tiers of 100G links, 2 ends
    assert three.optics_lanes == 3 * 131_072 * 2 * 8  # 3 tiers of 800G links = 8 lanes each


def test_about_three_fifths_of_the_switches_of_the_three_tier_single_plane():
    three = PAPER.single[0]
    assert three.switch_ratio == Fraction(3, 5)
    assert (PAPER.multi.switches, three.switches) == (6144, 10240)


def test_one_t0_t1_link_costs_0_4_percent_multi_plane_and_3_percent_single_plane():
    assert round(float(PAPER.multi.t0_t1_link_share) * 100, 1) == 0.4  # 1/256
    assert round(float(PAPER.single[0].t0_t1_link_share) * 100) == 3  # 1/32
    assert PAPER.multi.t0_t1_link_nic_share == Fraction(1, 2048)  # only its plane is touched


def test_one_nic_port_costs_12_5_percent():
    assert PAPER.multi.nic_port_share == Fraction(1, 8)
    assert PAPER.single[0].nic_port_share == 1  # the single plane's NIC has one port


# ----- beyond the paper's point ------------------------------------------------------------
def test_the_ratios_hold_wherever_the_single_plane_needs_exactly_three_tiers():
    p = scale.plan(planes=8, radix=512, gpus=65_536)
    assert [f.tiers for f in p.single] == [3]
    assert (p.single[0].optics_ratio, p.single[0].switch_ratio) == (Fraction(2, 3), Fraction(3, 5))
    assert "(*)" not in scale.render(p)


def test_a_small_partial_fabric_rounds_switches_up():
    p = scale.plan(planes=4, radix=64, gpus=100)
    assert p.multi.switches_per_tier == (4 * 4, 4 * 2)  # 4 T0s of 32 hosts, their uplinks on 2 T1s
    assert p.multi.links_per_tier == (400, 4 * 4 * 32)
    assert [f.tiers for f in p.single] == [2] and p.single[0].switch_ports == 16


def test_nic_ports_beyond_the_planes_share_a_t0():
    p = scale.plan(planes=4, radix=512, nic_ports=8)
    assert p.gpus == 65_536 and p.multi.nic_port_share == Fraction(1, 8)
    assert p.single[0].switch_ports == 64


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"planes": 0}, "--planes must be a whole number >= 1"),
    ({"planes": 2.5}, "--planes must be a whole number"),
    ({"planes": True}, "--planes must be a whole number"),
    ({"radix": 511}, "--radix must be even"),
    ({"radix": "512"}, "--radix must be a whole number"),
    ({"gpus": 0}, "--gpus must be a whole number >= 1"),
    ({"gpus": 10**9}, "beyond what two tiers of 512-port switches reach"),
    ({"nic_ports": 12}, "cannot be split evenly over 8 planes"),
    ({"planes": 8, "radix": 16}, "no single-plane fabric to compare with"),
    ({"planes": 2, "nic_ports": 2, "radix": 6}, "no single-plane fabric"),
    ({"planes": 1, "nic_ports": 4, "radix": 36}, "cannot take whole NICs"),
    ({"port_gbps": 0}, "--port-gbps must be a whole number >= 1"),
])
def test_bad_values_are_one_precise_line(kwargs, message):
    with pytest.raises(FabricError, match=message) as info:
        scale.plan(**kwargs)
    assert "\n" not in str(info.value)


def test_json_and_text_carry_the_same_figures():
    d = PAPER.as_dict()
    assert d["multi_plane"]["switches"] == 6144 and d["nic_gbps"] == 800
    assert d["single_plane"][0]["multi_plane_optics_ratio"] == pytest.approx(2 / 3)
    assert d["single_plane"][0]["multi_plane_switch_ratio"] == pytest.approx(0.6)
    text = scale.render(PAPER)
    for figure in ("6,144", "10,240", "2/3 (0.667)", "3/5 (0.600)", "0.39%", "3.1%", "12.5%"):
        assert figure in text
