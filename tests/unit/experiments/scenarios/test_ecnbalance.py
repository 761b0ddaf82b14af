"""ecn-balance's pieces without an emulation: who sends where, what the fabric can carry before
and after the force, per-EV rates and shares from the polled counters, and its plot."""

from __future__ import annotations

import json

import pytest

from experiments.scenarios import default_options
from experiments.scenarios.ecnbalance import (
    SHARED,
    capacity_mbps,
    per_ev_mbps,
    plot_ev_load,
    roles,
    share_on,
)
from topologies.model import Fabric, FabricParams


def test_both_flows_leave_the_first_leaf_for_the_last_and_share_exactly_one_path():
    fabric = Fabric(FabricParams(planes=2, leaves=3, spines=2, hosts_per_leaf=3))
    (asrc, adst), (bsrc, bdst) = roles(fabric)
    leaf = {h.name: h.leaf_index for h in fabric.hosts}
    assert (leaf[asrc], leaf[bsrc], leaf[adst], leaf[bdst]) == (0, 0, 2, 2)
    assert len({asrc, adst, bsrc, bdst}) == 4
    a_shared = [r for r in fabric.routes(asrc, adst) if (r.plane, r.spine) == SHARED]
    b_shared = [r for r in fabric.routes(bsrc, bdst) if (r.plane, r.spine) == SHARED]
    assert len(a_shared) == len(b_shared) == 1
    # the two paths cross the same uplink and downlink (and only those fabric links)
    fabric_links = lambda r: {n for n in r.links if not n.startswith("h")}  # noqa: E731
    assert fabric_links(a_shared[0]) == fabric_links(b_shared[0]) and len(fabric_links(a_shared[0])) == 2


@pytest.mark.parametrize("params, before, after", [
    (FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0), 40.0, 30.0),
    # one plane: the first flow keeps one other path (10) besides the shared one
    (FabricParams(planes=1, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0), 20.0, 20.0),
    # 4 spines: the first flow's NIC (20), not its 7 other paths, limits it
    (FabricParams(planes=2, leaves=2, spines=4, hosts_per_leaf=2, link_mbps=5.0), 20.0, 15.0),
])
def test_capacity_before_and_after_the_force(params, before, after):
    assert capacity_mbps(params) == (before, after)


def test_per_ev_rates_and_the_shared_paths_share():
    # 1250 bytes in 1 ms on EV 1 is 10 Mbit/s; EV 2 sends nothing in the second period
    samples = [(0.0, {1: 0, 2: 0}), (0.001, {1: 1250, 2: 1250}), (0.002, {1: 2500, 2: 1250})]
    rates = per_ev_mbps(samples)
    assert [t for t, _ in rates] == [0.001, 0.002]
    assert rates[0][1] == pytest.approx({1: 10.0, 2: 10.0})
    assert rates[1][1] == pytest.approx({1: 10.0, 2: 0.0})
    assert share_on(samples, 1, 0.0, 0.002) == pytest.approx(2 / 3, abs=1e-3)
    assert share_on(samples, 2, 0.001, 0.002) == 0.0
    assert share_on(samples, 1, 0.0015, 0.002) is None  # one sample: no period


def test_defaults_are_the_papers_setting():
    opts = default_options("ecn-balance")
    assert opts.transports == ("mrc", "spray")
    assert 0.5 < opts.fault_at < opts.duration
    assert opts.scenario.figures[0] == "goodput_fraction"


@pytest.mark.parametrize("faithful", [True, False])
def test_the_ev_load_plot_draws_each_flow_and_says_when_there_is_nothing(tmp_path, figure_texts,
                                                                           faithful):
    fabric = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    f = Fabric(fabric)
    (asrc, adst), (bsrc, bdst) = roles(f)
    evs = {k: [r.ev for r in f.routes(s, d)] for k, (s, d) in (("a", (asrc, adst)), ("b", (bsrc, bdst)))}
    (tmp_path / "traces").mkdir()
    lines = []
    for i in range(20):
        for key in ("a", "b"):
            sent = {str(ev): i * 4096 * (j + 1) for j, ev in enumerate(evs[key])}
            lines.append(json.dumps({"flow": key, "t": i * 0.05, "bytes_sent": sent}))
    (tmp_path / "traces" / "ev-load-mrc.jsonl").write_text("\n".join(lines) + "\n")
    figures = {"flows": {"a": [asrc, adst], "b": [bsrc, bdst]},
               "shared_ev": {"a": evs["a"][0], "b": evs["b"][0]}, "a_shared_share_after": 0.1}
    summary = {"transports": {"mrc": figures, "spray": figures}, "fabric": fabric.as_dict(),
               "faults": [{"t": 0.5, "transport": "mrc", "action": "force_shared_path"}], "seed": 1,
               "fidelity": {"faithful": faithful, "problems": [] if faithful else ["CPU idle 4%"]}}
    plot_ev_load(tmp_path, summary)  # spray's file is missing: its panels say "no data"
    assert (tmp_path / "ev_load.png").stat().st_size > 10_000
    assert fabric.describe() in figure_texts["ev_load.png"]
    stamped = "EMULATION NOT FAITHFUL:\nCPU idle 4%" in figure_texts["ev_load.png"]
    assert stamped is not faithful
