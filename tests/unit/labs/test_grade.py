"""Grading a class (`python -m labs.checker grade N DIR`, labs/checker/grade.py): a folder with
the solution, the skeleton, a mutant, a syntax error and an endless loop gets the right verdict
per student and per check, in a CSV and a Markdown table; the broken submissions fail their own
checks, never the grading run; no temporary folder or process is left behind. Lab 3 (no
emulation; its run faked as in test_labs.py), so it is fast; the time limit is generous."""

from __future__ import annotations

import csv
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from labs.checker import grade, mutants
from labs.checker.__main__ import main
from labs.checker.core import find
from tests.unit.labs.test_labs import FAKE_RUN, SKELETON

LIMIT = "10"  # s per check: the endless loop's cost; the real checks take well under a second
CHECKS = list(SKELETON[3])


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(FAKE_RUN))
    monkeypatch.setenv("LAB_RESULTS", str(run))  # the submissions' subprocesses inherit it
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where grading's temporary folders go
    return tmp_path


def _class(root: Path) -> Path:
    lab = find("3")
    solution = (lab.folder / "solution" / "answers.py").read_text()
    folder = root / "class"
    (folder / "alice").mkdir(parents=True)  # a folder with the lab's file
    (folder / "alice" / "answers.py").write_text(solution)
    (folder / "bob.py").write_text((lab.folder / "answers.py").read_text())  # the skeleton
    wrong = next(m for m in mutants.load(lab) if m.name == "tail-always-spray")
    (folder / "carol.py").write_text(wrong.text(lab))
    (folder / "dave.py").write_text(solution.replace("ordered = sorted(values)", "ordered = sorted(values"))
    (folder / "erin.py").write_text(solution.replace(
        "ordered = sorted(values)", "while True:\n        pass"))
    (folder / "frank").mkdir()  # a folder without the lab's file
    (folder / "notes.txt").write_text("not a submission")
    return folder


def test_grading_a_class(tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp / "grades"
    assert main(["grade", "3", str(_class(tmp)), "--no-emulation", "--timeout", LIMIT,
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[6/6] frank" in printed and "erin: 3 of 6 checks pass" in printed
    rows = list(csv.DictReader((out / "grades.csv").open()))
    got = {(r["student"], r["check"]): r for r in rows}
    status = {s: [got[s, c]["status"] for c in CHECKS] for s in ("alice", "bob", "carol", "dave",
                                                                 "erin", "frank")}
    assert status == {
        "alice": ["PASS"] * 6,
        "bob": list(SKELETON[3].values()),
        "carol": ["PASS"] * 5 + ["FAIL"],
        "dave": ["PASS", "PASS", "FAIL", "FAIL", "SKIP", "SKIP"],
        "erin": ["PASS", "PASS", "PASS", "FAIL", "FAIL", "FAIL"],
        "frank": ["FAIL"] * 6,
    }
    # Every FAIL carries its line and the check's hint; a PASS no hint.
    for r in rows:
        assert (r["status"] == "FAIL") == bool(r["hint"]), r
    assert "TODO 5" in got["carol", "better-tail"]["hint"]
    assert "syntax error" in got["dave", "cdf"]["detail"]
    assert "time limit of 10 s" in got["erin", "cdf"]["detail"]
    assert got["erin", "better-tail"]["detail"].startswith("not run: ")
    assert "answers.py missing" in got["frank", "run-present"]["detail"]
    table = (out / "grades.md").read_text()
    assert "| alice | 6 of 6 | PASS | PASS | PASS | PASS | PASS | PASS |" in table
    assert "| erin | 3 of 6 | PASS | PASS | PASS | FAIL | FAIL | FAIL |" in table
    assert "### carol" in table and "### alice" not in table
    # Nothing left behind: no temporary folder, no checker process.
    assert list((tmp / "scratch").iterdir()) == []
    left = subprocess.run(["pgrep", "-f", str(tmp / "scratch")], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_submissions_are_folders_and_python_files(tmp_path: Path) -> None:
    for name in ("b.py", "a", ".hidden", "__pycache__", "readme.md", "a.py"):
        path = tmp_path / name
        path.mkdir() if "." not in name or name.startswith(".") else path.write_text("")
    assert [(s, p.name) for s, p in grade.submissions(tmp_path)] == [
        ("a", "a"), ("a.py", "a.py"), ("b", "b.py")]


def test_bad_folders_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", "3", str(tmp_path / "nowhere")]) == 2
    assert main(["grade", "3", str(tmp_path)]) == 2  # empty
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no folder" in err[0] and "no submission" in err[1]
