"""The commands of the labs' READMEs and the output they show, for the tests that run them
(tests/unit/labs/test_readmes.py without the emulation, tests/integration/test_labs.py with it).

A README's ```console blocks hold `$ command` lines, each followed by the output it shows. The
tests run each command as written, from the repository's top, and compare the checker's lines
(one per check, then the summary line) with the ones shown: exactly, or, in a README whose
numbers are measured ("your numbers will differ"), the status and name of each check only. The
checks that measure a real emulated run (MEASURED) are compared by status and name in every
README; such a check may be SKIPPED when the run was not faithful (a loaded machine: the check
says so), which stands for the PASS shown."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "labs"
_BLOCK = re.compile(r"^[ \t]*```console\n(.*?)^[ \t]*```", re.M | re.S)
_VERDICT = re.compile(r"^  (PASS|FAIL|SKIP)  ([\w-]+): ")
_SUMMARY = re.compile(r"^(all \d+ checks pass|\d+ of \d+ checks pass.*)$")
# Emulated checks whose lines carry numbers measured on the real fabric (labs 4-7).
MEASURED = frozenset({"real-link-cut", "real-incast", "real-permutation", "real-port-failure"})
UNFAITHFUL = "was not faithful"  # what a check skipped for the machine's load says


@dataclass(frozen=True)
class Command:
    readme: Path
    command: str
    shown: tuple[str, ...]  # the output lines the README shows under it

    @property
    def measured(self) -> bool:
        return "your numbers will differ" in self.readme.read_text()

    def __str__(self) -> str:
        return f"{self.readme.relative_to(ROOT)}: $ {self.command}"


def commands() -> list[Command]:
    out = []
    for readme in sorted(LABS.glob("*/README.md")):
        for block in _BLOCK.findall(readme.read_text()):
            current: list[str] | None = None
            for line in block.splitlines():
                if line.lstrip().startswith("$ "):
                    current = []
                    out.append((readme, line.lstrip()[2:], current))
                elif current is not None:
                    current.append(line)
    return [Command(r, c, tuple(shown)) for r, c, shown in out]


def checker_lines(lines: list[str] | tuple[str, ...], loose: bool) -> list[str]:
    keep = []
    for line in lines:
        m = _VERDICT.match(line)
        if m:
            status, name = m.groups()
            if status == "SKIP" and name in MEASURED and UNFAITHFUL in line:
                status = "PASS"  # the machine was busy: no verdict on the code
            keep.append(f"{status} {name}" if loose or name in MEASURED else line)
        elif _SUMMARY.match(line):
            keep.append(line)
    return keep


def run(cmd: Command, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd.command], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def check_output(cmd: Command, res: subprocess.CompletedProcess) -> None:
    """The checker lines the command printed are the ones its README shows."""
    got = checker_lines(res.stdout.splitlines(), cmd.measured)
    want = checker_lines(cmd.shown, cmd.measured)
    if any(UNFAITHFUL in line for line in res.stdout.splitlines()):  # its summary counts a skip
        got, want = got[:-1], want[:-1]
    assert got == want, f"{cmd}\nREADME shows:\n" + "\n".join(want) + "\nreal:\n" + "\n".join(got)
