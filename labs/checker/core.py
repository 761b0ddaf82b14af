"""The checker framework every lab's `check.py` uses: a lab is a list of `Check`s run in order
over the student's files (or the reference solution's), each ending PASS, FAIL or SKIP with one
friendly line and, on failure, a hint. Student code that raises becomes a FAIL naming the
exception and the student's own file:line, never a traceback.

    from labs.checker import Check, CheckFailed, Lab

    def uSIDs(ctx):
        carrier = ctx.module("carrier")
        if carrier.usid(1, 0, 0) != 0x1400:
            raise CheckFailed(f"usid(leaf, plane 0, index 0) is {carrier.usid(1, 0, 0):#x}")
        return "every uSID of the fabric is right"

    LAB = Lab(__file__, "Paths and micro-SIDs", files=("carrier.py",),
              checks=[Check("usid-numbers", uSIDs, "a uSID is [plane+1:4][role:2][index:10]")])
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from labs.checker import student

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


class CheckFailed(Exception):
    """Raised by a check: the message says what is wrong, in one line."""


class Skipped(Exception):
    """Raised by a check that cannot run here (no root for an emulation): the message says why."""


@dataclass(frozen=True)
class Check:
    name: str  # short, stable, named by the CI test that proves the check can fail
    run: Callable[[Context], str | None]  # returns what passed (one line) or raises CheckFailed
    hint: str  # shown on failure: where to look, what the concept says
    needs: tuple[str, ...] = ()  # checks that must pass first (else this one is skipped)
    emulated: bool = False  # needs root and the emulation (skipped with --no-emulation)


@dataclass
class Verdict:
    name: str
    status: str
    detail: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass
class Context:
    """What a check gets: the student's modules (or the solution's), the lab's folder, and
    resources the lab's checks share (one emulation per lab, closed at the end)."""
    lab_dir: Path
    source_dir: Path  # the lab folder (student), its solution/, or a submission being graded
    solution: bool
    results_dir: Path | None = None  # where an emulated run is kept (None: results/lab-NN/)
    shared: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)
    _modules: dict[str, ModuleType] = field(default_factory=dict)

    def module(self, name: str) -> ModuleType:
        """The student's `name`.py (the solution's with --solution), loaded once per run."""
        if name not in self._modules:
            self._modules[name] = student.load(self.source_dir / f"{name}.py", self.lab_dir)
        return self._modules[name]

    def path(self, name: str) -> Path:
        """A file the student edits (an answers file), from the solution with --solution."""
        return self.source_dir / name

    def close(self) -> None:
        while self.closers:
            self.closers.pop()()


@dataclass(frozen=True)
class Lab:
    check_file: str  # the lab's check.py (`__file__`): the lab folder is its parent
    title: str
    files: tuple[str, ...]  # what the student edits, relative to the lab folder
    checks: Sequence[Check]

    @property
    def folder(self) -> Path:
        return Path(self.check_file).resolve().parent

    def run(self, solution: bool = False, emulation: bool = True, source: Path | None = None,
            results: Path | None = None, on_check: Callable[[Check], None] | None = None,
            on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
        """Every check in order. `source`: check the files in that folder (a submission being
        graded, a mutant) instead of the lab folder's or solution/'s; `results`: keep an
        emulated run there; `on_check` is called as each check starts, `on_verdict` with its
        verdict as soon as it is known (grading watches the time each check takes)."""
        if source is None:
            source = self.folder / "solution" if solution else self.folder
        ctx = Context(self.folder, source, solution, results)
        verdicts: dict[str, Verdict] = {}
        try:
            for check in self.checks:
                if on_check is not None:
                    on_check(check)
                verdicts[check.name] = self._one(check, ctx, verdicts, emulation)
                if on_verdict is not None:
                    on_verdict(verdicts[check.name])
        finally:
            ctx.close()
        return list(verdicts.values())

    def _one(self, check: Check, ctx: Context, done: dict[str, Verdict], emulation: bool) -> Verdict:
        blocked = [n for n in check.needs if done.get(n) is None or done[n].status != PASS]
        if blocked:
            return Verdict(check.name, SKIP, f"needs {', '.join(blocked)} to pass first")
        if check.emulated and not emulation:
            return Verdict(check.name, SKIP, "needs the emulation (run without --no-emulation)")
        try:
            detail = check.run(ctx) or "ok"
        except CheckFailed as exc:
            return Verdict(check.name, FAIL, str(exc), check.hint)
        except Skipped as exc:
            return Verdict(check.name, SKIP, str(exc))
        except Exception as exc:  # noqa: BLE001 - student code may raise anything: say where
            return Verdict(check.name, FAIL, student.describe(exc, ctx.source_dir), check.hint)
        return Verdict(check.name, PASS, detail)


def report(lab: Lab, verdicts: list[Verdict], solution: bool, out: Any = None) -> None:
    """The verdict per check, then a summary line: short, friendly, no traceback."""
    out = out or sys.stdout
    whose = "the reference solution" if solution else "your files"
    out.write(f"{lab.folder.name}: {lab.title} (checking {whose})\n")
    for v in verdicts:
        out.write(f"  {v.status}  {v.name}: {v.detail}\n")
        if v.status == FAIL and v.hint:
            out.write(f"        hint: {v.hint}\n")
    failed = [v.name for v in verdicts if v.status == FAIL]
    skipped = [v.name for v in verdicts if v.status == SKIP]
    passed = len(verdicts) - len(failed) - len(skipped)
    if failed:
        out.write(f"{passed} of {len(verdicts)} checks pass; to fix: {', '.join(failed)}\n")
    elif skipped:
        out.write(f"{passed} of {len(verdicts)} checks pass, {len(skipped)} skipped\n")
    else:
        out.write(f"all {len(verdicts)} checks pass\n")
    out.flush()


def verdict_json(lab: Lab, verdicts: list[Verdict], solution: bool) -> str:
    return json.dumps({"lab": lab.folder.name, "solution": solution,
                       "passed": all(v.status != FAIL for v in verdicts),
                       "checks": [v.as_dict() for v in verdicts]}, indent=1)


def internal_error(exc: BaseException) -> str:
    """A bug in a checker (not in student code) still ends in one line, with where."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"checker error{where}: {type(exc).__name__}: {exc}"


# Lab discovery: the labs/NN-name folders and each one's check.py, loaded as a module.
LABS = Path(__file__).resolve().parent.parent


class BadLab(Exception):
    """No such lab: the message lists the real ones."""


def lab_dirs() -> dict[int, Path]:
    """{N: labs/NN-name} for every lab folder with a check.py."""
    out = {}
    for d in sorted(LABS.iterdir()):
        number = d.name.split("-", 1)[0]
        if d.is_dir() and number.isdigit() and (d / "check.py").exists():
            out[int(number)] = d
    return out


def find(number: str) -> Lab:
    labs = lab_dirs()
    known = ", ".join(f"{n} ({d.name})" for n, d in labs.items())
    if not number.isdigit() or int(number) not in labs:
        raise BadLab(f"no lab {number!r}: N is a lab folder's number, one of {known}")
    path = labs[int(number)] / "check.py"
    spec = importlib.util.spec_from_file_location(f"lab_check_{int(number):02d}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.LAB
