"""Every checker tells right from almost right: each lab's plausible wrong answers
(labs/NN-name/mutants.toml, labs/checker/mutants.py), at least three per TODO, each fail at
least one check that needs no emulation, with a hint or a line naming the TODO the mistake is
in. A mutant that passes means a check to strengthen, not a mutant to drop."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.checker import mutants
from labs.checker.core import FAIL, find, lab_dirs
from tests.unit.labs.test_labs import fake_results, needs_tshark

PER_TODO = 3
ALL = [(n, m) for n in sorted(lab_dirs()) for m in mutants.load(find(str(n)))]


@pytest.fixture(autouse=True)
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    fake_results(run)
    monkeypatch.setenv("LAB_RESULTS", str(run))


@pytest.mark.parametrize("number", sorted(lab_dirs()))
def test_every_todo_has_its_mutants(number: int) -> None:
    lab = find(str(number))
    from labs.checker import gaps

    todos = {(f, n) for f in lab.files for n in gaps.gaps((lab.folder / "solution" / f).read_text())}
    got: dict[tuple[str, int], int] = {}
    for m in mutants.load(lab):
        got[m.file, m.todo] = got.get((m.file, m.todo), 0) + 1
    assert set(got) <= todos, "a mutant names a TODO the lab has not"
    short = {f"{f} TODO {n}": got.get((f, n), 0) for f, n in sorted(todos) if got.get((f, n), 0) < PER_TODO}
    assert not short, f"lab {number}: fewer than {PER_TODO} mutants for {short}"


@pytest.mark.parametrize(("number", "mutant"), ALL, ids=[f"lab{n}-{m.name}" for n, m in ALL])
def test_mutant_fails_a_check_that_names_its_todo(number: int, mutant: mutants.Mutant,
                                                   tmp_path: Path) -> None:
    needs_tshark(number)
    lab = find(str(number))
    text = mutant.text(lab)
    assert text != (lab.folder / "solution" / mutant.file).read_text(), "the mutant is the solution"
    compile(text, mutant.file, "exec")  # a wrong answer, not a syntax error
    verdicts = lab.run(emulation=False, source=mutant.write(lab, tmp_path / "student"))
    failed = [v for v in verdicts if v.status == FAIL]
    assert failed, f"every check passed {mutant.name} ({mutant.mistake}): strengthen the checker"
    named = [v for v in failed if mutant.todo in mutants.todos_named(f"{v.hint} {v.detail}")]
    assert named, (f"{mutant.name} fails {[v.name for v in failed]}, but no hint names TODO "
                   f"{mutant.todo}: {[v.hint for v in failed]}")
    for v in failed:  # one friendly line, never a traceback
        assert "\n" not in v.detail and "Traceback" not in v.detail


def test_todos_named() -> None:
    assert mutants.todos_named("TODO 1: sort") == {1}
    assert mutants.todos_named("TODOs 1, 3, 4: find a spare") == {1, 3, 4}
    assert mutants.todos_named("TODOs 2-4: one /48") == {2, 3, 4}
    assert mutants.todos_named("NotImplementedError: TODO 2 and TODO 3") == {2, 3}
    assert mutants.todos_named("no todo here") == set()


def test_mutants_command_shows_what_catches_each(capsys: pytest.CaptureFixture[str]) -> None:
    from labs.checker.__main__ import main

    assert main(["mutants", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if line.startswith("TODO ")]
    assert len(heads) == len(mutants.load(find("2"))) and not any("NOT CAUGHT" in line for line in lines)
