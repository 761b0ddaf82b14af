"""The labs' README commands that need no emulation, run as written: their output is the one the
README shows (tests/labs_readme.py). The rest run in tests/integration/test_labs.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import labs_readme

ROOT_LABS = (1, 2, 3, 4, 5, 6, 7, 8)  # their solutions' checks use the emulation or a run of their own


def _needs_root(cmd: labs_readme.Command) -> bool:
    lab = int(cmd.readme.parent.name.split("-")[0])
    return "experiment-" in cmd.command or "make lab " in cmd.command or \
        ("SOLUTION=1" in cmd.command and lab in ROOT_LABS)


PURE = [c for c in labs_readme.commands() if not _needs_root(c)]


def test_every_readme_shows_its_commands() -> None:
    readmes = {c.readme.parent.name for c in labs_readme.commands()}
    assert readmes == {p.parent.name for p in labs_readme.LABS.glob("*/check.py")}
    assert PURE


@pytest.mark.parametrize("cmd", PURE, ids=str)
def test_readme_command(cmd: labs_readme.Command, tmp_path: Path) -> None:
    # Lab 3's checker reads a run: none here (an empty folder), as before a student's first run.
    env = {**os.environ, "LAB_RESULTS": str(tmp_path)}
    res = labs_readme.run(cmd, env=env, timeout=120)
    assert "Traceback" not in res.stdout + res.stderr
    labs_readme.check_output(cmd, res)


def _prompt_lines(readme: Path, prompt: str) -> list[str]:
    return [line[len(prompt):] for line in readme.read_text().splitlines() if line.startswith(prompt)]


# The READMEs that type something at a Python prompt (the others have nothing to run there).
PROMPTED = [r for r in sorted(labs_readme.LABS.glob("*/README.md")) if _prompt_lines(r, ">>> ")]


def test_some_readmes_type_at_a_python_prompt() -> None:
    assert PROMPTED  # else the test below would run nothing


@pytest.mark.parametrize("readme", PROMPTED, ids=lambda p: p.parent.name)
def test_make_lab_python_prompt(readme: Path) -> None:
    """`make lab N=..` of a lab with no fabric opens a Python prompt with the student's file
    loaded: the README's `>>>` lines run there as shown (no exception)."""
    lines = _prompt_lines(readme, ">>> ")
    number = int(readme.parent.name.split("-")[0])
    res = subprocess.run(["make", "lab", f"N={number}"], cwd=labs_readme.ROOT, text=True,
                         input="\n".join(lines) + "\n", capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-2000:]
    assert f"Lab {number}:" in res.stdout and "python  a Python prompt" in res.stdout
