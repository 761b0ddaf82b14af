"""`make experiment` with several seeds, without running anything: the plan (registry order,
where each seed's results go), the progress line (what runs, how many are left, time left at
the pace seen so far), results/sweep.json, and the tables' median (min-max) made from it; the
single-run reference still renders as before."""

from __future__ import annotations

import json

from experiments import docs_gen, sweep
from experiments.scenarios import SCENARIOS


def test_the_plan_runs_every_registry_scenario_per_seed_first_seed_in_results_name():
    steps = sweep.plan(list(SCENARIOS), [1, 2, 3])
    assert len(steps) == 3 * len(SCENARIOS) and "ecn-balance" in {s.scenario for s in steps}
    assert [s.scenario for s in steps[:len(SCENARIOS)]] == list(SCENARIOS)
    assert steps[0].out == "link-failure" and steps[len(SCENARIOS)].out == "spread/link-failure/seed-2"
    argv = steps[1].argv(sweep.RESULTS, ["--switch", "ovs"])
    assert argv[1:] == ["-m", "experiments.cli", "run", "switch-failure", "--seed", "1", "--out",
                        str(sweep.RESULTS / "switch-failure"), "--switch", "ovs"]


def test_the_progress_line_says_what_runs_what_is_left_and_how_long():
    steps = sweep.plan(["lossy-link", "permutation"], [1, 2])
    first = sweep.progress_line(steps, 0, 0.0)
    assert first.startswith("=== [1/4] lossy-link seed 1 -> results/lossy-link: 0 done, 3 after this one")
    assert "about" in first and "left" in first
    # Twice as slow as expected so far: what is left is expected twice as long.
    done = sweep.expected_seconds("lossy-link") * 2
    assert sweep.remaining_seconds(steps, 1, done) == 2 * sum(
        sweep.expected_seconds(s.scenario) for s in steps[1:])
    assert ", 1 failed," in sweep.progress_line(steps, 2, 100.0, failed=1)


def test_a_sweep_records_each_run_goes_on_past_a_failed_one_and_stops_on_a_mistake(tmp_path):
    steps = sweep.plan(["lossy-link", "incast"], [1, 2])
    said, ran = [], []
    statuses = iter([0, 1, 0, 0])
    status = sweep.sweep(steps, tmp_path, ["--loss", "20%"],
                         run=lambda argv: ran.append(argv) or next(statuses), say=said.append,
                         clock=iter(range(100)).__next__)
    assert status == 1 and len(ran) == 4 and ran[0][-2:] == ["--loss", "20%"]
    index = json.loads((tmp_path / sweep.INDEX).read_text())
    assert index["seeds"] == [1, 2] and [r["status"] for r in index["runs"]] == [0, 1, 0, 0]
    assert said[-1].startswith("=== 4 runs in") and "failed: incast seed 1" in said[-1]
    said.clear()
    assert sweep.sweep(steps, tmp_path, run=lambda argv: 2, say=said.append) == 2
    assert "refused its options" in said[-1] and len(said) == 2  # stopped after the first


def _summary(name: str, seed: int, mrc: float, roce: float | None, faithful: bool = True) -> dict:
    return {"scenario": name, "seed": seed, "fabric": {"planes": 4, "leaves": 2, "spines": 3,
                                                       "hosts_per_leaf": 1, "link_mbps": 20.0},
            "software": {}, "switches": {"switch_backend": "linux"}, "dataplane": {"mode": "ebpf"},
            "routing": {"detect_ms": 900.0}, "fidelity": {"faithful": faithful},
            "transports": {"mrc": {"goodput_fraction": mrc, "data_ok": True},
                           "roce": {"goodput_fraction": roce, "recovery_ms": roce, "data_ok": True}}}


def test_tables_show_median_and_range_over_seeds(tmp_path):
    runs = []
    for seed, (mrc, roce) in zip((1, 2, 3), ((0.954, 0.5), (0.93, None), (0.96, 0.7)), strict=True):
        out = "lossy-link" if seed == 1 else f"spread/lossy-link/seed-{seed}"
        (tmp_path / out).mkdir(parents=True)
        (tmp_path / out / "summary.json").write_text(json.dumps(_summary("lossy-link", seed, mrc, roce)))
        runs.append({"scenario": "lossy-link", "seed": seed, "out": out, "status": 0})
    (tmp_path / "spread" / "lossy-link" / "seed-9").mkdir()  # a stale seed the sweep did not run
    (tmp_path / "spread" / "lossy-link" / "seed-9" / "summary.json").write_text(
        json.dumps(_summary("lossy-link", 9, 0.1, 0.1, faithful=False)))
    (tmp_path / "sweep.json").write_text(json.dumps({"seeds": [1, 2, 3], "runs": runs}))
    reference = docs_gen.reference_from_results(tmp_path)
    entry = reference["lossy-link"]
    assert [r["seed"] for r in entry["runs"]] == [1, 2, 3] and entry["faithful"] is True
    assert entry["transports"]["mrc"]["goodput_fraction"] == 0.954  # the first seed's, as before
    table = docs_gen.results_table(reference)
    assert "median (min-max) over 3 seeds" in table
    row = next(line for line in table.splitlines() if line.startswith("| lossy-link"))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[0] == "0.954 (0.93-0.96)"
    assert cells[1] == "0.6 (0.5-0.7), never in 1 of 3"
    assert "Every byte correct" in table and "Every run was faithful." in table


def test_a_single_run_reference_renders_as_before_and_says_no_spread_yet():
    # The committed reference with each scenario's first seed only: plain figures, no spread.
    single = {name: {k: v for k, v in entry.items() if k != "runs"}
              for name, entry in docs_gen.load_reference().items()}
    table = docs_gen.results_table(single)
    seed = single["permutation"]["seed"]
    assert table.startswith(f"One run per scenario (seed {seed}): no run-to-run spread measured yet")
    perm = single["permutation"]["transports"]
    row = f"| permutation: throughput fraction | {perm['mrc']['throughput_fraction']:g} | " \
          f"{perm['roce']['throughput_fraction']:g} |"
    assert row in table and "(" not in table.split("| permutation")[1].splitlines()[0]


def test_every_registry_scenario_has_a_table_row():
    assert docs_gen.SCENARIOS == tuple(SCENARIOS) and set(docs_gen.ROWS) == set(SCENARIOS)


def test_a_suites_next_run_waits_for_the_emulation_another_run_holds(monkeypatch):
    """A run of someone else (or a calibration) holding the emulation between two of a suite's
    runs: the suite waits, saying so once, instead of having its run refused and stopping;
    Ctrl-C while it waits is an interrupted suite (130), with no run started."""
    from topologies import cleanup
    free = iter([False, False, True])
    said: list[str] = []
    started: list[list[str]] = []
    monkeypatch.setattr(cleanup, "lock_free", lambda directory=None: next(free))
    monkeypatch.setattr(cleanup, "holder", lambda directory=None: {"pid": 4242})
    monkeypatch.setattr(sweep.time, "sleep", lambda s: None)
    sweep.wait_for_emulation(say=said.append)
    assert len(said) == 1 and "pid 4242" in said[0] and "waiting" in said[0]

    class Done:
        returncode = 0

    monkeypatch.setattr(sweep.subprocess, "run", lambda argv: started.append(argv) or Done())
    monkeypatch.setattr(cleanup, "lock_free", lambda directory=None: True)
    assert sweep.run_one(["mrclab", "run", "x"]) == 0 and started == [["mrclab", "run", "x"]]

    def interrupted(directory=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cleanup, "lock_free", interrupted)
    assert sweep.run_one(["mrclab", "run", "y"]) == 130 and len(started) == 1


def test_the_paper_runs_its_figures_through_the_same_waiting_step():
    import inspect

    from experiments.paper import command
    assert inspect.signature(command.run).parameters["runner"].default is sweep.run_one
    assert inspect.signature(sweep.sweep).parameters["run"].default is sweep.run_one
