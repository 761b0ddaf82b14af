"""`python -m labs.checker check N [--solution] [--json FILE] [--no-emulation]` runs lab N's
checker (what `make check-lab N=.. [SOLUTION=1]` calls); `python -m labs.checker start N` sets
lab N up and drops into its environment (`make lab N=..`); `python -m labs.checker grade N DIR`
checks a class's submissions (labs/checker/grade.py); `python -m labs.checker mutants N` shows
which check catches each of lab N's plausible wrong answers (labs/checker/mutants.py);
`python -m labs.checker list`."""

from __future__ import annotations

import argparse
import code
import os
import sys
import tempfile
from pathlib import Path

from labs.checker.core import FAIL, LABS, BadLab, find, internal_error, lab_dirs, report, verdict_json
from labs.checker.student import StudentFileError, load

REPO = LABS.parent


def check(args: argparse.Namespace) -> int:
    lab = find(args.lab)
    try:
        verdicts = lab.run(solution=args.solution, emulation=not args.no_emulation)
    except Exception as exc:  # noqa: BLE001 - a checker bug still gets one line, not a traceback
        print(internal_error(exc), file=sys.stderr)
        return 3
    report(lab, verdicts, args.solution)
    if args.json:
        Path(args.json).write_text(verdict_json(lab, verdicts, args.solution) + "\n")
    return 1 if any(v.status == FAIL for v in verdicts) else 0


def start(args: argparse.Namespace) -> int:
    lab = find(args.lab)
    folder = lab.folder.relative_to(REPO)
    editor = os.environ.get("EDITOR", "your editor")
    print(f"Lab {args.lab}: {lab.title}")
    print(f"  read    {folder}/README.md")
    edit = " ".join(f"{folder}/{f}" for f in lab.files)
    print(f"  edit    {edit}   (e.g. {editor} {folder}/{lab.files[0]})")
    print(f"  check   make check-lab N={args.lab}")
    module = sys.modules[f"lab_check_{int(args.lab):02d}"]
    if getattr(module, "RUN", None):  # a lab that checks a run of its own: the command making it
        print(f"  run     {module.RUN}")
    env = getattr(module, "ENVIRONMENT", None)
    if env and env[0] == "cli":
        if os.geteuid() != 0:
            print(f"the lab's fabric needs root: sudo make lab N={args.lab}", file=sys.stderr)
            return 2
        print(f"  fabric  mrclab cli {' '.join(env[1:])}   (`exit` leaves it)")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "experiments.cli", "cli", *env[1:]])
    names: dict[str, object] = {"lab": lab}
    for f in lab.files:
        if f.endswith(".py"):
            try:
                names[Path(f).stem] = load(lab.folder / f, lab.folder)
            except StudentFileError as exc:
                print(f"  note    {exc}")
    print(f"  python  a Python prompt with {', '.join(n for n in names if n != 'lab')} loaded "
          f"(Ctrl-D leaves it)")
    sys.stdout.flush()
    code.interact(banner="", local=names, exitmsg="")
    return 0


def show_mutants(args: argparse.Namespace) -> int:
    """Each mutant of lab N and the first check that fails it with a hint or line naming the
    mutant's TODO (no emulation), as CI requires; exit 1 when one is not caught so."""
    from labs.checker import mutants

    lab = find(args.lab)
    escaped = 0
    for m in mutants.load(lab):
        with tempfile.TemporaryDirectory(prefix="mrclab-mutant-") as tmp:
            verdicts = lab.run(emulation=False, source=m.write(lab, Path(tmp)))
        failed = [v for v in verdicts if v.status == FAIL]
        named = [v for v in failed if m.todo in mutants.todos_named(f"{v.hint} {v.detail}")]
        escaped += not named
        caught = (f"{named[0].name}: {named[0].detail}" if named else
                  f"NOT CAUGHT: fails {', '.join(v.name for v in failed)}, no hint names TODO "
                  f"{m.todo}" if failed else "NOT CAUGHT: passes every check")
        print(f"TODO {m.todo}  {m.name} ({m.mistake})\n        {caught}")
    return 1 if escaped else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.checker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run a lab's checker")
    c.add_argument("lab", help="the lab's number (its folder's NN)")
    c.add_argument("--solution", action="store_true", help="check the reference solution")
    c.add_argument("--json", default=None, metavar="FILE", help="also write the verdicts as JSON")
    c.add_argument("--no-emulation", action="store_true", help="skip the checks that need root")
    s = sub.add_parser("start", help="set a lab up and drop into its environment")
    s.add_argument("lab")
    g = sub.add_parser("grade", help="check every submission in DIR (one folder or .py file per "
                                     "student): a CSV and a Markdown table")
    g.add_argument("lab")
    g.add_argument("dir", help="one folder (the lab's files) or one .py file per student")
    g.add_argument("--no-emulation", action="store_true", help="skip the checks that need root")
    g.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds a check without the emulation may take (default 30)")
    g.add_argument("--emulation-timeout", type=float, default=300.0, metavar="S",
                   help="seconds a check that runs the emulation may take (default 300)")
    g.add_argument("--out", default=None, metavar="DIR",
                   help="where grades.csv, grades.md (and the emulated runs) go "
                        "(default results/grades-lab-NN)")
    m = sub.add_parser("mutants", help="which check catches each of a lab's wrong answers")
    m.add_argument("lab")
    sub.add_parser("list", help="the labs")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for n, d in lab_dirs().items():
                print(f"{n}  {d.name}")
            return 0
        if args.command == "grade":
            from labs.checker import grade

            return grade.grade(args, find(args.lab))
        if args.command == "mutants":
            return show_mutants(args)
        return check(args) if args.command == "check" else start(args)
    except BadLab as exc:
        print(exc, file=sys.stderr)
        return 2
    except BrokenPipeError:  # `make check-lab N=1 | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
