"""The machine's own cost figures: cached with a fingerprint, stale when it no longer matches;
the cost benchmark's fit."""

from __future__ import annotations

import os

import pytest

from experiments import calibration
from experiments.tools import cost_bench


def test_a_calibration_holds_only_for_the_machine_backend_and_code_it_was_made_on(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    assert calibration.load("linux", path) is None and calibration.stale("linux", path)
    calibration.save({"fingerprint": calibration.fingerprint("linux"), "fixed_cores": 0.2}, path)
    assert calibration.load("linux", path)["fixed_cores"] == 0.2
    assert calibration.load("ovs", path) is None  # another backend
    monkeypatch.setattr(calibration, "code_hash", lambda: "changed")
    assert calibration.stale("linux", path)  # the code that sets the cost changed


def test_the_code_hash_follows_the_agents_code(tmp_path, monkeypatch):
    (tmp_path / "endpoints").mkdir()
    (tmp_path / "endpoints" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(calibration, "REPO", tmp_path)
    monkeypatch.setattr(calibration, "COST_CODE", ("endpoints",))
    before = calibration.code_hash()
    (tmp_path / "endpoints" / "a.py").write_text("x = 2\n")
    assert calibration.code_hash() != before


def test_busy_and_steal_shares():
    # user nice system idle iowait irq softirq steal
    busy, steal = calibration.busy_fraction([0] * 8, [30, 0, 10, 40, 0, 0, 10, 10])
    assert (busy, steal) == pytest.approx((0.5, 0.1))


def _run(rate, pps, busy, faithful=True):
    return {"link_mbps": rate, "delivered_data_pps": pps, "busy_cores": busy, "faithful": faithful}


def test_the_fit_splits_fixed_and_marginal_over_the_faithful_runs():
    runs = [_run(5, 2000, 0.3 + 2000 * 200e-6), _run(10, 4000, 0.3 + 4000 * 200e-6),
            _run(20, 8000, 1.9, faithful=False)]  # saturated: off the line
    got = cost_bench.fit(runs)
    assert got["fixed_cores"] == pytest.approx(0.3) and got["marginal_us_per_packet"] == pytest.approx(200)
    assert got["fitted_rates"] == [5, 10]
    # With fewer than two faithful runs every run counts.
    assert cost_bench.fit([_run(5, 2000, 0.7, False), _run(10, 4000, 1.1, False)])["fitted_rates"] == [5, 10]


def test_a_loaded_machine_calibrates_lower_until_two_runs_are_faithful():
    assert cost_bench.lower_rate([_run(5, 2000, 1.2, False), _run(10, 4000, 1.9, False)]) == 2.5
    assert cost_bench.lower_rate([_run(5, 2000, 0.9), _run(10, 4000, 1.9, False)]) == 2.5
    assert cost_bench.lower_rate([_run(5, 2000, 0.9), _run(10, 4000, 1.3)]) is None  # two faithful
    assert cost_bench.lower_rate([_run(1.5, 600, 1.2, False)]) is None  # nothing lower to try


def test_a_busy_program_is_measured_apart_from_the_run(monkeypatch):
    """A process busy before the run (a busy loop) is the machine's load, not the run's; the
    run's own processes are not, even where they are busier."""
    hz = 100
    monkeypatch.setattr(cost_bench.os, "sysconf", lambda name: hz)
    readings = iter([{1: ("loop", 0, 0), 2: ("idle", 5, 5), os.getpid(): ("me", 0, 0)},
                     {1: ("loop", 95, 5), 2: ("idle", 5, 6), os.getpid(): ("me", 50, 50)}])
    monkeypatch.setattr(cost_bench, "_procs", lambda: next(readings))
    monkeypatch.setattr(cost_bench.time, "sleep", lambda s: None)
    busy = cost_bench.background()
    assert busy == {1}  # one core's worth: the loop; pid 2 used 1% of one; this process is left out
    before = {1: ("loop", 100, 0), 3: ("agent", 0, 0)}
    after = {1: ("loop", 150, 0), 3: ("agent", 180, 20)}  # over 2 s: the loop a quarter of a core
    assert cost_bench._background_cores(busy, before, after, 2.0) == pytest.approx(0.25)
