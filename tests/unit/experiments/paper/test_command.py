"""`mrclab paper`: which figures, in which order, with what progress; a failed run, a refused
one and a bad name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.paper import command
from experiments.paper.figures import BY_KEY, FIGURES, Figure


def test_figures_are_chosen_by_name_and_refused_in_one_line(monkeypatch):
    assert command.choose([]) == [f for f in FIGURES if f.expressible]
    assert [f.key for f in command.choose(["FIG20", "fig11", "fig20"])] == ["fig20", "fig11"]
    with pytest.raises(ValueError, match="unknown figure 'fig99': one of fig9a"):
        command.choose(["fig99"])
    # every figure of the paper runs here now; one that could not would be refused so
    lacking = Figure("fig99", "a figure", "the paper", "a claim", "", needs="a workload")
    monkeypatch.setitem(command.BY_KEY, "fig99", lacking)
    with pytest.raises(ValueError, match="fig99 .* cannot run here yet: it needs a workload"):
        command.choose(["fig99"])


def test_every_run_goes_to_its_figure_folder_quick_options_last(tmp_path):
    fig = BY_KEY["fig11"]
    (step,) = command.plan([fig])
    argv = step.argv(tmp_path, True, ["--switch", "linux"])
    assert argv[3:5] == ["run", "switch-failure"]
    assert argv[argv.index("--out") + 1] == str(tmp_path / "fig11" / "run-1-switch-failure")
    assert argv[-2:] == ["--switch", "linux"] and "--fault-at" in argv
    assert "--fault-at" not in step.argv(tmp_path, False, [])


def _fake_runner(results: Path, status_of: dict[str, int], disturbed: dict[str, int] | None = None):
    """Writes a fake faithful result where the run's out folder is, unless it 'fails'; the
    first `disturbed[scenario]` runs of a scenario are unfaithful while the host took the CPU."""
    calls: dict[str, int] = {}

    def run(argv: list[str]) -> int:
        scenario, out = argv[4], Path(argv[argv.index("--out") + 1])
        status = status_of.get(scenario, 0)
        calls[scenario] = calls.get(scenario, 0) + 1
        if status == 0:
            out.mkdir(parents=True, exist_ok=True)
            bad = calls[scenario] <= (disturbed or {}).get(scenario, 0)
            fidelity = {"faithful": not bad, "problems": ["mrc: the link carried 94%"] if bad else [],
                        "disturbed": ["mrc: the hypervisor took up to 30%"] if bad else []}
            mrc = {"goodput_before_mbps": 76.9, "goodput_during_mbps": 76.8, "stall_ms": 0,
                   "throughput_of_ceiling": 0.99, "throughput_fraction": 0.95, "flow_fraction_min": 0.95,
                   "flow_goodput_mbps": [9.5, 9.6]}
            roce = {**mrc, "stall_ms": 1000, "throughput_fraction": 0.5, "flow_fraction_min": 0.3}
            (out / "summary.json").write_text(json.dumps(
                {"transports": {"mrc": mrc, "roce": roce}, "fabric": {}, "faults": [],
                 "fidelity": fidelity}))
            (out / "timeseries.csv").write_text("t_s,mrc_mbps,roce_mbps\n0.00,76.0,19.0\n0.01,77.0,19.0\n")
        return status
    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_progress_then_a_verdict_per_figure_then_the_index(tmp_path):
    said: list[str] = []
    status = command.run([BY_KEY["fig11"], BY_KEY["fig20"]], tmp_path, True,
                         runner=_fake_runner(tmp_path, {}), say=said.append)
    assert status == 0
    assert said[0].startswith("=== [1/2] fig11: switch-failure: 0 done, 1 after this one, about ")
    assert said[1].startswith("=== fig11: reproduced: ")
    assert said[2].startswith("=== [2/2] fig20: permutation: 1 done, 0 after this one")
    assert said[-1].endswith(f"{tmp_path / 'index.md'}, {tmp_path / 'index.html'}")
    assert (tmp_path / "fig20" / "data.csv").read_text().splitlines()[0] == "flow,mrc_mbps,roce_mbps"


def test_a_failed_run_is_recorded_and_the_rest_goes_on_a_refused_one_stops_everything(tmp_path):
    said: list[str] = []
    assert command.run([BY_KEY["fig11"], BY_KEY["fig20"]], tmp_path / "a", True,
                       runner=_fake_runner(tmp_path, {"switch-failure": 1}), say=said.append) == 1
    assert any(line.startswith("=== fig11: did not run") for line in said)
    assert any(line.startswith("=== fig20: reproduced") for line in said)
    said.clear()
    assert command.run([BY_KEY["fig11"], BY_KEY["fig20"]], tmp_path / "b", True,
                       runner=_fake_runner(tmp_path, {"switch-failure": 2}), say=said.append) == 2
    assert said[-1].startswith("=== stopped") and not (tmp_path / "b").exists()  # nothing left behind


def test_the_command_line_says_what_is_wrong_in_one_line_and_exits_2():
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "paper", "fig99"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown figure" in done.stderr
    listing = subprocess.run([sys.executable, "-m", "experiments.cli", "paper", "--list"],
                             capture_output=True, text=True)
    assert listing.returncode == 0 and len(listing.stdout.splitlines()) == len(FIGURES)


def test_a_run_unfaithful_while_the_host_took_the_cpu_runs_once_more_and_the_second_stands(tmp_path):
    said: list[str] = []
    runner = _fake_runner(tmp_path, {}, disturbed={"switch-failure": 1})
    assert command.run([BY_KEY["fig11"]], tmp_path / "a", True, runner=runner, say=said.append) == 0
    assert runner.calls == {"switch-failure": 2}
    assert said[1] == ("=== fig11: not faithful while the hypervisor took the VM's CPU "
                       "(fidelity.disturbed): that run once more")
    assert said[2].startswith("=== fig11: reproduced")
    said.clear()
    runner = _fake_runner(tmp_path, {}, disturbed={"switch-failure": 2})
    assert command.run([BY_KEY["fig11"]], tmp_path / "b", True, runner=runner, say=said.append) == 0
    assert runner.calls == {"switch-failure": 2}  # once more, not twice
    assert said[2].startswith("=== fig11: not faithful")
