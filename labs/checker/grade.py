"""Grading a class: `python -m labs.checker grade N DIR` checks every submission in DIR (one
folder or one .py file per student, named after the student) with lab N's checker, one at a
time, and writes DIR's verdicts as a CSV (student, check, status, detail, hint: one row per
check) and a Markdown table (a row per student, a column per check, then each failure's line
and hint).

Each submission runs in a subprocess of its own, in a temporary folder holding a copy of its
files, with a time limit per check (`--timeout`, `--emulation-timeout` for a check that runs the
emulation): a syntax error, an exception, an endless loop or a submission that ends the process
fails its own checks, never the grading run. The subprocess reports each check as it starts and
ends; one over its limit is stopped (SIGTERM, which closes its emulation, then SIGKILL for its
whole process group), and after an emulated one `mrclab clean` removes what a killed run
leaves. The temporary folders go when each submission is done, whatever happened.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.checker.core import FAIL, PASS, Check, Lab, Verdict, find, internal_error

REPO = Path(__file__).resolve().parents[2]
POLL = 0.05  # s between looks at a running submission
GRACE_PURE, GRACE_EMULATED = 3.0, 30.0  # s a stopped checker gets to close its emulation


@dataclass
class Graded:
    student: str
    verdicts: list[Verdict]
    seconds: float
    note: str = ""  # what went wrong with the submission as a whole (a time limit, a crash)

    @property
    def passed(self) -> int:
        return sum(1 for v in self.verdicts if v.status == PASS)


@dataclass
class Limits:
    pure: float  # s per check that needs no emulation (and for the checker to start)
    emulated: float  # s per check that runs the emulation
    emulation: bool = True
    runs: Path | None = None  # where each student's emulated run is kept (runs/<student>/)
    log: list[str] = field(default_factory=list)


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, path) for every folder and .py file in `folder`, by name; hidden entries and
    caches left out."""
    out: list[tuple[str, Path]] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")) or not (entry.is_dir() or entry.suffix == ".py"):
            continue
        name = entry.name if entry.is_dir() else entry.stem
        taken = {student for student, _ in out}
        out.append((entry.name if name in taken else name, entry))  # alice/ and alice.py
    return out


def stage(lab: Lab, submission: Path, into: Path) -> str | None:
    """The submission's copy of the lab's files in `into`; what is wrong with it, or None. A
    single file stands for the lab's one file; a folder gives the files by their names."""
    into.mkdir(parents=True)
    if submission.is_file():
        if len(lab.files) != 1:
            return f"a single file cannot stand for the lab's {len(lab.files)} files"
        shutil.copyfile(submission, into / lab.files[0])
        return None
    missing = []
    for name in lab.files:
        if (submission / name).is_file():
            shutil.copyfile(submission / name, into / name)
        else:
            missing.append(name)
    return f"{', '.join(missing)} missing from the submission" if missing else None


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the checker (its handler closes the emulation), then SIGKILL to its group."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Whatever the submission started and left in the checker's process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _events(path: Path, done: int) -> tuple[list[dict[str, Any]], int]:
    """The checker's complete report lines after byte `done`, and where they end."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], done
    end = data.rfind(b"\n") + 1
    if end <= done:
        return [], done
    return [json.loads(line) for line in data[done:end].splitlines() if line.strip()], end


def _tail(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1][:200] if lines else ""


def grade_one(number: int, lab: Lab, student: str, submission: Path, limits: Limits) -> Graded:
    """One submission, checked in a subprocess of its own; the temporary folder and every
    process it started are gone when this returns."""
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="mrclab-grade-"))
    try:
        problem = stage(lab, submission, tmp / "files")
        if problem is not None:
            return Graded(student, [Verdict(c.name, FAIL, problem, c.hint) for c in lab.checks],
                          time.monotonic() - started, problem)
        report, output = tmp / "report.jsonl", tmp / "output.txt"
        cmd = [sys.executable, "-m", "labs.checker.grade", "--child", str(number),
               str(tmp / "files"), str(report)]
        if not limits.emulation:
            cmd.append("--no-emulation")
        if limits.runs is not None:
            cmd += ["--runs", str(limits.runs / student)]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        with output.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                verdicts, note = _watch(proc, lab, report, output, limits)
            finally:
                if proc.poll() is None:
                    _stop(proc, GRACE_PURE)
                _kill_group(proc)
        return Graded(student, verdicts, time.monotonic() - started, note)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _watch(proc: subprocess.Popen[bytes], lab: Lab, report: Path, output: Path,
           limits: Limits) -> tuple[list[Verdict], str]:
    """Follow the checker's report, stop it when a check runs over its limit; every check's
    verdict (those it never reached fail, saying why)."""
    checks = {c.name: c for c in lab.checks}
    verdicts: dict[str, Verdict] = {}
    current: Check | None = None
    deadline = time.monotonic() + limits.pure  # the checker's own start
    done, note = 0, ""
    while True:
        exited = proc.poll() is not None
        events, done = _events(report, done)
        for e in events:
            if "start" in e:
                current = checks[e["start"]]
                limit = limits.emulated if current.emulated and limits.emulation else limits.pure
                deadline = time.monotonic() + limit
            else:
                verdicts[e["name"]] = Verdict(e["name"], e["status"], e["detail"], e["hint"])
                current = None
                deadline = time.monotonic() + limits.pure  # until the next check starts
        if exited:
            break
        if time.monotonic() > deadline:
            emulated = current is not None and current.emulated and limits.emulation
            limit = limits.emulated if emulated else limits.pure
            what = f"check {current.name}" if current else "the checker"
            why = ("a machine too busy? --emulation-timeout gives it longer" if emulated else
                   "an endless loop?")
            note = f"{what} ran over its time limit of {limit:g} s ({why}): stopped"
            _stop(proc, GRACE_EMULATED if emulated else GRACE_PURE)
            if emulated:
                _clean(limits)
            if current is not None:
                verdicts[current.name] = Verdict(current.name, FAIL, note, current.hint)
            break
        time.sleep(POLL)
    if not note and len(verdicts) < len(checks):
        code = proc.returncode
        note = (f"the checker's process ended (exit code {code}) before every check had run"
                + (f": {_tail(output)}" if _tail(output) else ""))
    out = []
    for c in lab.checks:
        out.append(verdicts.get(c.name) or Verdict(c.name, FAIL, f"not run: {note}", c.hint))
    return out, note


def _clean(limits: Limits) -> None:
    """What a stopped emulation left behind (bridges, interfaces, agents): `mrclab clean`."""
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    limits.log.append(f"mrclab clean after a stopped emulation: exit {res.returncode}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_csv(path: Path, graded: list[Graded]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "check", "status", "detail", "hint"])
        for g in graded:
            for v in g.verdicts:
                w.writerow([g.student, v.name, v.status, v.detail, v.hint if v.status == FAIL else ""])


def write_markdown(path: Path, lab: Lab, graded: list[Graded], source: Path, emulation: bool) -> None:
    names = [c.name for c in lab.checks]
    lines = [f"# {lab.folder.name}: {lab.title}, graded", "",
             f"{len(graded)} submissions from `{source}`"
             + ("" if emulation else "; without the emulation (--no-emulation): its checks SKIP")
             + ".", "",
             "| student | passed | " + " | ".join(f"`{n}`" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for g in graded:
        cells = [v.status for v in g.verdicts]
        lines.append(f"| {_cell(g.student)} | {g.passed} of {len(cells)} | " + " | ".join(cells) + " |")
    failed = [g for g in graded if any(v.status == FAIL for v in g.verdicts)]
    if failed:
        lines += ["", "## What failed", ""]
    for g in failed:
        lines += [f"### {g.student}", ""] + ([f"{g.note}", ""] if g.note else [])
        for v in g.verdicts:
            if v.status == FAIL:
                lines.append(f"- `{v.name}`: {v.detail}" + (f"  \n  hint: {v.hint}" if v.hint else ""))
        lines.append("")
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def grade(args: argparse.Namespace, lab: Lab) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        print(f"no folder {args.dir}: DIR holds one folder or .py file per student", file=sys.stderr)
        return 2
    todo = submissions(folder)
    if not todo:
        print(f"{args.dir} holds no submission: one folder or .py file per student", file=sys.stderr)
        return 2
    emulation = not args.no_emulation and any(c.emulated for c in lab.checks)
    if emulation and os.geteuid() != 0:
        print(f"lab {args.lab}'s emulated checks need root: sudo python -m labs.checker grade "
              f"{args.lab} {args.dir}, or --no-emulation", file=sys.stderr)
        return 2
    number = int(args.lab)
    out = Path(args.out) if args.out else REPO / "results" / f"grades-lab-{number:02d}"
    out.mkdir(parents=True, exist_ok=True)
    limits = Limits(args.timeout, args.emulation_timeout, emulation, out / "runs" if emulation else None)
    graded = []
    for i, (student, path) in enumerate(todo, 1):
        g = grade_one(number, lab, student, path, limits)
        graded.append(g)
        print(f"[{i}/{len(todo)}] {student}: {g.passed} of {len(g.verdicts)} checks pass "
              f"({g.seconds:.1f} s)" + (f"; {g.note}" if g.note else ""), flush=True)
    write_csv(out / "grades.csv", graded)
    write_markdown(out / "grades.md", lab, graded, folder, emulation)
    for line in limits.log:
        print(line)
    print(f"wrote {out / 'grades.csv'} and {out / 'grades.md'}")
    return 0


def child(argv: list[str]) -> int:
    """In the subprocess: run lab N on the staged files, one report line per check start and
    verdict, flushed at once (the grader watches them)."""
    parser = argparse.ArgumentParser(prog="labs.checker.grade --child")
    parser.add_argument("lab")
    parser.add_argument("source", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("--no-emulation", action="store_true")
    parser.add_argument("--runs", type=Path, default=None)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # unwinds: the emulation is closed
    lab = find(args.lab)
    with args.report.open("a") as f:
        def line(obj: dict[str, str]) -> None:
            f.write(json.dumps(obj) + "\n")
            f.flush()

        try:
            lab.run(emulation=not args.no_emulation, source=args.source, results=args.runs,
                    on_check=lambda c: line({"start": c.name}),
                    on_verdict=lambda v: line(v.as_dict()))
        except Exception as exc:  # noqa: BLE001 - a checker bug: one line, the grader says so
            print(internal_error(exc), file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2:]))
    sys.exit("usage: python -m labs.checker grade N DIR (see python -m labs.checker grade -h)")
