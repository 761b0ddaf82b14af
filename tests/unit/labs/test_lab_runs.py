"""Each lab's run is its own: lab 3 reads results/lab-03/, which the command its README and
`make lab N=3` give writes, never results/permutation/, which any ordinary
`mrclab run permutation` overwrites; every failure about the run says exactly what to run. The
emulated labs (4-6) keep their run in results/lab-NN[-solution]/, or where a grading run says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labs.checker import fabric
from labs.checker.core import FAIL, PASS, Context, find
from tests.unit.labs.test_labs import FAKE_RUN

ROOT = Path(__file__).resolve().parents[3]


def _lab3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # -> (Lab, check module)
    monkeypatch.delenv("LAB_RESULTS", raising=False)
    lab = find("3")
    module = sys.modules["lab_check_03"]
    monkeypatch.setattr(module, "REPO", tmp_path)  # a repository of its own: results/ in tmp
    return lab, module


def _write(path: Path, summary: dict) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary))


def test_lab3_command_writes_the_labs_own_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_RESULTS", raising=False)
    find("3")
    module = sys.modules["lab_check_03"]
    assert module.OUT == "results/lab-03" and module.RUN.endswith('--out results/lab-03"')
    assert module.results() == ROOT / "results" / "lab-03"
    readme = (ROOT / "labs" / "03-spray-vs-ecmp" / "README.md").read_text()
    assert module.RUN.removeprefix("sudo ") in readme  # the README's command is the checker's


def test_an_ordinary_permutation_run_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: `mrclab run permutation` with its defaults (2 planes, every transport)
    leaves results/permutation/; the solution's check neither reads it nor fails on it."""
    lab, module = _lab3(tmp_path, monkeypatch)
    ordinary = {**FAKE_RUN, "fabric": {**FAKE_RUN["fabric"], "planes": 2}}
    _write(tmp_path / "results" / "permutation", ordinary)
    verdicts = {v.name: v for v in lab.run(solution=True, emulation=False)}
    present = verdicts["run-present"]
    assert present.status == FAIL and "results/lab-03/" in present.detail
    assert module.RUN in present.detail and module.RUN in present.hint  # exactly what to run
    _write(tmp_path / "results" / "lab-03", FAKE_RUN)
    assert all(v.status == PASS for v in lab.run(solution=True, emulation=False))


@pytest.mark.parametrize("problem", ["planes", "scenario", "transport", "unfaithful"])
def test_every_failure_about_the_run_says_what_to_run(problem: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lab, module = _lab3(tmp_path, monkeypatch)
    run = json.loads(json.dumps(FAKE_RUN))
    if problem == "planes":
        run["fabric"]["planes"] = 2
    elif problem == "scenario":
        run["scenario"] = "incast"
    elif problem == "transport":
        del run["transports"]["spray"]
    else:
        run["fidelity"] = {"faithful": False, "problems": ["CPU idle below 3%"]}
    _write(tmp_path / "results" / "lab-03", run)
    failed = [v for v in lab.run(solution=True, emulation=False) if v.status == FAIL]
    assert [v.name for v in failed] == ["run-faithful" if problem == "unfaithful" else "run-present"]
    assert module.RUN in failed[0].hint
    if problem != "unfaithful":
        assert module.RUN in failed[0].detail


def test_make_lab_3_prints_the_run_command() -> None:
    find("3")
    module = sys.modules["lab_check_03"]
    res = subprocess.run([sys.executable, "-m", "labs.checker", "start", "3"], cwd=ROOT, input="",
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"  run     {module.RUN}" in res.stdout.splitlines()


def test_emulated_runs_are_kept_per_lab_or_where_grading_says(tmp_path: Path) -> None:
    lab = find("4")
    student = Context(lab.folder, lab.folder, False)
    solution = Context(lab.folder, lab.folder / "solution", True)
    graded = Context(lab.folder, tmp_path, False, tmp_path / "runs" / "alice")
    assert fabric.run_dir(student) == ROOT / "results" / "lab-04"
    assert fabric.run_dir(solution) == ROOT / "results" / "lab-04-solution"
    assert fabric.run_dir(graded) == tmp_path / "runs" / "alice"
    assert fabric.rerun(student) == "sudo make check-lab N=4"
    assert fabric.rerun(solution) == "sudo make check-lab N=4 SOLUTION=1"


def test_no_root_says_the_exact_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from labs.checker.core import Skipped

    monkeypatch.setattr(fabric.os, "geteuid", lambda: 1000)
    lab = find("5")
    with pytest.raises(Skipped, match=r"sudo make check-lab N=5 SOLUTION=1"):
        fabric.scenario_run(Context(lab.folder, lab.folder / "solution", True), "incast", {})


def test_a_failed_emulated_check_names_its_run_and_a_busy_machine() -> None:
    """Labs 4, 5 and 7 fail an emulated check through one helper: the line names the run's
    folder and, on an unfaithful run, that the machine may be to blame; it fails either way."""
    from labs.checker.core import CheckFailed

    faithful = {"_out": "results/lab-04", "fidelity": {"faithful": True, "problems": []}}
    with pytest.raises(CheckFailed) as caught:
        fabric.fail(faithful, "EV 0x1 was not back")
    assert str(caught.value) == "EV 0x1 was not back (the run: results/lab-04)"
    busy = {"_out": "results/lab-05", "_rerun": "sudo make check-lab N=5",
            "fidelity": {"faithful": False, "problems": ["idle 2% of a core"]}}
    with pytest.raises(CheckFailed) as caught:
        fabric.fail(busy, "no trims")
    assert str(caught.value).startswith("no trims (the run: results/lab-05); but the emulated run "
                                        "in results/lab-05 was not faithful (idle 2% of a core)")
    assert "`sudo make check-lab N=5` again" in str(caught.value)


def test_lab8_reads_its_own_capture_and_says_what_to_run(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Lab 8 reads results/lab-08/<receiver>.pcap, which its README's command writes; without
    it, or with a capture of something else, the failure names that command."""
    monkeypatch.delenv("LAB_RESULTS", raising=False)
    lab = find("8")
    module = sys.modules["lab_check_08"]
    assert module.OUT == "results/lab-08" and module.RUN.endswith(f'--out {module.OUT}"')
    assert f"--capture {module.RECEIVER} " in module.RUN
    readme = (ROOT / "labs" / "08-mrc-on-the-wire" / "README.md").read_text()
    assert module.RUN.removeprefix("sudo ") in readme
    monkeypatch.setattr(module, "REPO", tmp_path)
    present = lab.run(solution=True, emulation=False)[0]
    assert present.status == FAIL and module.RUN in present.detail and module.RUN in present.hint
    from labs.checker import pcapfile

    run = tmp_path / "results" / "lab-08"
    run.mkdir(parents=True)
    pcapfile.write(run / f"{module.RECEIVER}.pcap", [ip for _, ip in module.made_up_packets()[-6:]])
    present = lab.run(solution=True, emulation=False)[0]  # no MRC in it: not the lab's incast
    assert present.status == FAIL and module.RUN in present.detail, present
