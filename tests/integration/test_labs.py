"""The labs that need the emulation, run as a student runs them (root): every README command
with the emulation (the reference solutions' full checks, lab 3's permutation run, `make lab`)
runs as written and prints what its README shows (tests/labs_readme.py); then the untouched
skeleton of lab 3 fails the checks it must fail on that same run. One emulation per command,
nothing left behind."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("number", [1, 2, 4, 5, 6, 7])
def test_fabric_lab_solution(number: int) -> None:
    """The reference solution passes every check, the emulated one included (labs 4-7: the
    product's scenario with the solution in every host agent; a run the machine's load made
    unfaithful is a SKIP that says so, never a FAIL)."""
    cmd = _command(f"make check-lab N={number} SOLUTION=1")
    res = labs_readme.run(cmd, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    labs_readme.check_output(cmd, res)
    assert_nothing_left()
    if number >= 4:  # the run is kept, and says whose code ran in the agents
        summary = json.loads((labs_readme.ROOT / "results" / f"lab-0{number}-solution" /
                              "summary.json").read_text())
        replaced = summary["config"]["replace"]
        assert replaced and all("/solution/" in r["file"] and len(r["sha256"]) == 64
                                for r in replaced.values())


def test_spray_vs_ecmp_lab() -> None:
    """Lab 3 on one real run: the README's command makes it; the reference solution passes
    every check of its answers on it, the skeleton fails them. `run-faithful` reports the run's
    own fidelity verdict, which a loaded machine spoils (CPU headroom): the check must agree
    with the run, whichever it is."""
    run = next(c for c in ALL if c.command.startswith("make experiment-permutation"))
    res = labs_readme.run(run, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert_nothing_left()
    summary = json.loads((labs_readme.ROOT / "results" / "lab-03" / "summary.json").read_text())
    faithful = "PASS" if summary["fidelity"]["faithful"] else "FAIL"
    cmd = _command("make check-lab N=3 SOLUTION=1")
    res = labs_readme.run(cmd, timeout=60)
    assert (res.returncode == 0) == (faithful == "PASS"), res.stdout
    got = labs_readme.checker_lines(res.stdout.splitlines(), loose=True)
    assert f"{faithful} run-faithful" in got, res.stdout

    def answers(lines: list[str]) -> list[str]:  # what does not depend on the machine's load
        return [line for line in lines[:-1] if not line.endswith(" run-faithful")]

    assert answers(got) == answers(labs_readme.checker_lines(cmd.shown, loose=True)), res.stdout
    assert all(line.startswith("PASS") for line in answers(got))
    # The skeleton on the same run: the run's checks as above, every answer fails or waits.
    res = labs_readme.run(labs_readme.Command(cmd.readme, "make check-lab N=3", ()), timeout=60)
    assert res.returncode != 0
    assert labs_readme.checker_lines(res.stdout.splitlines(), loose=True)[:-1] == [
        "PASS run-present", f"{faithful} run-faithful", "FAIL flow-goodputs", "FAIL cdf",
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
    # Mininet prints a host command's output through its log (stderr without a terminal).
    counts = [int(n) for n in re.findall(r"^(\d+)\s*$", res.stdout + res.stderr, re.M)]
    assert counts and counts[-1] >= 1, res.stdout + res.stderr  # h3's plane-1 NIC got it
    assert_nothing_left()


def test_mrc_on_the_wire_lab() -> None:
    """Lab 8 on its own capture: the README's command makes it (an incast's receiver, trimming
    then drop-tail); the reference solution passes every check on it, counting what that
    capture holds, and the skeleton fails every TODO's."""
    run = next(c for c in ALL if c.command.startswith("make experiment-incast"))
    res = labs_readme.run(run, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert_nothing_left()
    assert (labs_readme.ROOT / "results" / "lab-08" / "h5.pcap").stat().st_size > 0
    cmd = _command("make check-lab N=8 SOLUTION=1")
    res = labs_readme.run(cmd, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    labs_readme.check_output(cmd, res)
    res = labs_readme.run(labs_readme.Command(cmd.readme, "make check-lab N=8", ()), timeout=300)
    assert res.returncode != 0
    got = labs_readme.checker_lines(res.stdout.splitlines(), loose=True)[:-1]
    assert got[:2] == ["PASS capture-present", "PASS own-parser"], res.stdout
    assert got[2:] and all(line.startswith("FAIL ") for line in got[2:]), res.stdout
