"""The labs that need the emulation, run as a student runs them (root): every README command
with the emulation (the reference solutions' full checks, lab 3's permutation run, `make lab`)
runs as written and prints what its README shows (tests/labs_readme.py); then the untouched
skeleton of lab 3 fails the checks it must fail on that same run. One emulation per command,
nothing left behind."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests import labs_readme
from tests.integration.helpers import assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")
ALL = labs_readme.commands()


def _command(text: str) -> labs_readme.Command:
    found = [c for c in ALL if c.command == text]
    assert found, f"no README shows `{text}`"
    return found[0]


@pytest.mark.parametrize("number", [1, 2])
def test_fabric_lab_solution(number: int) -> None:
    cmd = _command(f"make check-lab N={number} SOLUTION=1")
    res = labs_readme.run(cmd, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    labs_readme.check_output(cmd, res)
    assert_nothing_left()


def test_spray_vs_ecmp_lab() -> None:
    run = next(c for c in ALL if c.command.startswith("make experiment-permutation"))
    res = labs_readme.run(run, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert_nothing_left()
    cmd = _command("make check-lab N=3 SOLUTION=1")
    res = labs_readme.run(cmd, timeout=60)
    assert res.returncode == 0, res.stdout
    labs_readme.check_output(cmd, res)
    # The skeleton on the same run: the run's checks pass, every answer fails or waits.
    res = labs_readme.run(labs_readme.Command(cmd.readme, "make check-lab N=3", ()), timeout=60)
    assert res.returncode != 0
    assert labs_readme.checker_lines(res.stdout.splitlines(), loose=True) == [
        "PASS run-present", "PASS run-faithful", "FAIL flow-goodputs", "FAIL cdf",
        "SKIP fair-share-and-starved", "SKIP better-tail"]


def test_make_lab_drops_into_the_fabric_cli() -> None:
    """`make lab N=1` drops into the lab's CLI, where the README's `mrclab>` lines (one datagram
    along a path by hand, then the destination NIC's counter) run as shown."""
    readme = labs_readme.LABS / "01-paths-usids" / "README.md"
    typed = [line[len("mrclab> "):] for line in readme.read_text().splitlines()
             if line.startswith("mrclab> ")]
    assert len(typed) == 2
    res = subprocess.run(["make", "lab", "N=1"], cwd=labs_readme.ROOT, input="\n".join(typed) + "\n",
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert "Lab 1: Paths and micro-SIDs" in res.stdout and "mrclab cli --planes 2" in res.stdout
    counts = [int(n) for n in re.findall(r"^(\d+)\s*$", res.stdout, re.M)]
    assert counts and counts[-1] >= 1, res.stdout  # h3's plane-1 NIC got the datagram
    assert_nothing_left()
