"""Fault schedules: the plan each scenario makes from the fabric model, the capacity left bin by
bin, the judgement against it, and the options refused in one line."""

from __future__ import annotations

import pytest

from experiments import cli
from experiments.scenarios import schedule
from topologies.model import Fabric, FabricError


def _opts(*argv: str):
    return cli.run_options(cli.make_parser().parse_args(["run", *argv]))


def test_a_cascade_takes_links_one_by_one_and_never_the_flows_last_path_in_a_plane():
    opts = _opts("link-cascade")
    fabric = Fabric(opts.fabric)
    plan = schedule.plan(opts, fabric, "h0")
    assert [f.t for f in plan] == [2.0 + i for i in range(len(plan))]  # one per second from --fault-at
    assert {f.action for f in plan} == {"cut"} and len({f.link for f in plan}) == len(plan)
    down: set[str] = set()
    for f in plan:  # after every cut each plane still has a path h0 -> h1: the capacity is whole
        down.add(f.link)
        assert fabric.path_capacity_mbps("h0", "h1", frozenset(down)) == 4 * fabric.params.link_mbps
    # 6 T0-T1 links per plane on the flow's two leaves: at most 4 go (one spine stays whole)
    assert 12 <= len(plan) <= 16
    assert schedule.plan(opts, fabric, "h0") == plan  # seeded
    other = schedule.plan(_opts("link-cascade", "--seed", "2"), fabric, "h0")
    assert [f.link for f in other] != [f.link for f in plan]


def test_uplink_failures_go_plane_by_plane_then_come_back_in_the_same_order():
    opts = _opts("uplink-failures")
    plan = schedule.plan(opts, Fabric(opts.fabric), "h0")
    cuts = [f.link for f in plan if f.action == "cut"]
    assert cuts == ["p0l0-p0s0", "p0l0-p0s1", "p0l0-p0s2", "p1l0-p1s0", "p1l0-p1s1", "p1l0-p1s2"]
    assert [f.link for f in plan if f.action == "restore"] == cuts
    assert plan[len(cuts)].t == plan[len(cuts) - 1].t + opts.fault_every


def test_links_flapping_together_go_down_and_up_at_the_same_instants():
    opts = _opts("flap-together", "--fault-count", "3")
    plan = schedule.plan(opts, Fabric(opts.fabric), "h0")
    times = sorted({(f.t, f.action) for f in plan})
    assert times[:2] == [(2.0, "cut"), (2.3, "restore")] and len(plan) == 3 * 2 * len(times) // 2


def test_half_the_senders_ports_flap_together():
    opts = _opts("port-flaps")
    plan = schedule.plan(opts, Fabric(opts.fabric), "h0")
    assert sorted({f.link for f in plan}) == ["h0-p0l0", "h0-p1l0"]  # 2 of its 4 planes
    assert {(f.t, f.action) for f in plan if f.t < 3} == {(2.0, "cut"), (2.3, "restore")}


def test_the_capacity_left_is_time_weighted_within_a_bin():
    fabric = Fabric(_opts("uplink-failures").fabric)
    planes = (0, 1, 2, 3)
    cuts = [(0.1, "cut", f"p0l0-p0s{i}") for i in range(3)]  # plane 0 of h0's leaf gone at 0.1 s
    got = schedule.capacity_bins(fabric, "h0", "h1", planes, cuts + [(0.5, "restore", "p0l0-p0s0")], 4)
    full, three = 4 * fabric.params.link_mbps, 3 * fabric.params.link_mbps
    assert got == [pytest.approx((full + three) / 2), three, pytest.approx((three + full) / 2), full]


def test_each_bin_is_judged_against_what_was_left_after_the_first_fault():
    worst, within = schedule.judge_bins([40, 20, 27, 40], [40, 30, 30, 40], 1.0, 1)
    assert (worst, within) == (0.667, 0.667)  # 20 of 30; two bins of three at 90% or more
    assert schedule.judge_bins([1.0], [0.0], 1.0, 0) == (None, None)  # nothing left to judge by


@pytest.mark.parametrize("argv, words", [
    (("link-cascade", "--fault-end", "5"), "--fault-end does not apply to link-cascade"),
    (("link-cascade", "--duration", "10"), "last fault comes 17 s after the flow starts"),
    (("link-cascade", "--fault-count", "25"), "--fault-count must be a whole number in [0, 24]"),
    (("flap-together", "--down-ms", "1500"), "--down-ms must be shorter than one flap period"),
    (("link-failure", "--fault-every", "2"), "--fault-every does not apply to the link-failure scenario"),
])
def test_a_schedule_that_cannot_run_is_refused_in_one_line(argv, words):
    from experiments.scenarios import check
    with pytest.raises(FabricError, match=words.replace("[", r"\[").replace("]", r"\]")):
        check(_opts(*argv))
