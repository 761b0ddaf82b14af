"""Short versions of `make soak` and `make fuzz` (the full ones are not in CI: about 3 and 2.5
minutes on a 2-core VM)."""

from __future__ import annotations

import pytest

from experiments.tools import fuzz, soak

pytestmark = pytest.mark.usefixtures("emulation_ready")


def test_a_short_soak_leaves_nothing_and_keeps_earlier_results(tmp_path):
    report = soak.run(out=tmp_path, schedule=[("link-failure", "none"), ("link-failure", "kill_run"),
                                              ("link-failure", "double_sigint"),
                                              ("permutation", "kill_agent"),
                                              (soak.CLI, "double_sigint")], say=lambda m: None)
    bad = [r for r in report["records"] if not r["ok"]]
    assert not bad, bad
    assert report["leftovers_after_all"] == {}
    assert report["records"][0]["completed"] and report["records"][1]["earlier_result_intact"]


def test_a_short_fuzz_holds_every_bound(tmp_path, switch_backend):
    # On both backends: no healthy EV benched needs switches that trim MRC data rather than drop
    # it (kernel routers dropped every packet they should have trimmed, and benched EVs without
    # any attack, until the switch program could cut an skb the kernel flagged encapsulated).
    report = fuzz.run(datagrams=3000, rate=1000.0, seed=3, out=tmp_path, say=lambda m: None,
                      switch=switch_backend)
    assert report["checks"] == {k: True for k in report["checks"]}, report
    assert report["mrc_evs_benched"] == {"control": 0, "attack": 0}, report["mrc_bench_events"]
    assert report["switches"]["switch_backend"] == switch_backend
    assert report["datagrams"] >= 2900
    assert (tmp_path / "report.md").exists()
