"""`mrclab paper [FIG ...] [--quick] [--out DIR] [-- RUN OPTIONS]`: the paper's figures in turn.

Every run of every figure named (all the expressible ones by default) goes through `mrclab run`
into results/paper/<fig>/run-N-<scenario>/, with a progress line before each (what runs now, how
many are done and left, about how long is left); once a figure's runs are done its folder gets
its plot, CSV and verdict, and at the end index.md and index.html list every figure of the
paper. A figure already settled by an earlier invocation stays on the index. A run waits, saying
so, while another mrclab run holds the emulation. Exit status: 0 when
every run ran (whatever the verdicts: a result that contradicts the paper is a finding, said on
the page), 1 when a run failed, 2 on a mistake, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments import sweep
from experiments.outdir import RESULTS
from experiments.paper import page
from experiments.paper.figures import BY_KEY, FIGURES, Figure, Run
from topologies import files

PAPER = RESULTS / "paper"


@dataclass(frozen=True)
class Step:
    figure: Figure
    index: int
    run: Run

    @property
    def scenario(self) -> str:  # what sweep's time estimate reads
        return self.run.scenario

    def argv(self, results: Path, quick: bool, extra: Sequence[str]) -> list[str]:
        out = results / self.figure.key / page.run_folder(self.figure, self.index, self.run)
        return [sys.executable, "-m", "experiments.cli", "run", self.run.scenario, *self.run.args,
                *(self.run.quick if quick else ()), "--out", str(out), *extra]


def plan(figures: Sequence[Figure]) -> list[Step]:
    return [Step(f, i, r) for f in figures for i, r in enumerate(f.runs)]


def choose(names: Sequence[str]) -> list[Figure]:
    """The figures named (every expressible one when none is); ValueError, one line, for a name
    that is not a figure or a figure the testbed cannot run yet."""
    if not names:
        return [f for f in FIGURES if f.expressible]
    chosen = []
    for name in names:
        figure = BY_KEY.get(name.lower())
        if figure is None:
            raise ValueError(f"unknown figure {name!r}: one of {', '.join(BY_KEY)}")
        if not figure.expressible:
            raise ValueError(f"{figure.key} ({figure.title}) cannot run here yet: it needs {figure.needs}")
        if figure not in chosen:
            chosen.append(figure)
    return chosen


def listing() -> str:
    return "\n".join(f"{f.key:6} {f.title}: " + (f"{len(f.runs)} run(s)" if f.expressible else
                                                   f"not expressible yet (needs {f.needs})")
                     for f in FIGURES)


Runner = Callable[[list[str]], int]


def _disturbed(out: Path) -> bool:
    """A run that was not faithful while the machine was disturbed (its host took the VM's CPU:
    experiments/analysis/fidelity.py STEAL_DISTURBED_PCT) measured that host, not the product:
    each figure's run gets one more go then, and the second stands whatever it says."""
    fid = files.read_json(out / "summary.json").get("fidelity") or {}
    return fid.get("faithful") is False and bool(fid.get("disturbed"))


def run(figures: Sequence[Figure], results: Path, quick: bool, extra: Sequence[str] = (),
        runner: Runner = sweep.run_one, say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic) -> int:
    steps = plan(figures)
    settled: dict[str, dict] = {}
    t0, failed, status = clock(), 0, 0
    for i, step in enumerate(steps):
        left = sweep.remaining_seconds(steps, i, clock() - t0)
        label = f" ({step.run.label})" if step.run.label else ""
        say(f"=== [{i + 1}/{len(steps)}] {step.figure.key}: {step.run.scenario}{label}: {i} done"
            f"{f', {failed} failed' if failed else ''}, {len(steps) - i - 1} after this one, about "
            f"{sweep.duration_text(left)} left")
        argv = step.argv(results, quick, extra)
        status = runner(argv)
        if status == 0 and _disturbed(Path(argv[argv.index("--out") + 1])):
            say(f"=== {step.figure.key}: not faithful while the hypervisor took the VM's CPU "
                f"(fidelity.disturbed): that run once more")
            status = runner(argv)
        if status == 2:
            say(f"=== stopped: `mrclab run {step.run.scenario}` refused its options (above)")
            break
        if status in (130, -2):
            say("=== interrupted")
            break
        failed += status != 0
        if step.index == len(step.figure.runs) - 1:  # the figure's last run: settle it
            s = page.settle(step.figure, results / step.figure.key)
            settled[step.figure.key] = s
            say(f"=== {step.figure.key}: {s['verdict']}: {s['measured']}")
    if settled or (results / "index.md").exists():
        md, html_path = page.index(results, settled)
        say(f"=== {len(settled)} figure(s) settled in {sweep.duration_text(clock() - t0)}; results: "
            f"{md}, {html_path}")
    if status == 2:
        return 2
    if status in (130, -2):
        return 130
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = sweep.split_run_options(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="mrclab paper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figures", nargs="*", metavar="FIG", help="fig9a, fig11, ... (default: every "
                        "figure that runs here; --list names them all)")
    parser.add_argument("--quick", action="store_true", help="each figure's shortened form")
    parser.add_argument("--out", type=Path, default=PAPER, help="(default: results/paper)")
    parser.add_argument("--list", action="store_true",
                        help="every figure of the paper and whether it runs here")
    ns = parser.parse_args(args)
    if ns.list:
        print(listing())
        return 0
    try:
        figures = choose(ns.figures)
        if ns.out.exists() and not ns.out.is_dir():
            raise ValueError(f"--out {ns.out} is a file, not a folder")
    except ValueError as exc:
        print(f"mrclab paper: error: {exc}", file=sys.stderr)
        return 2
    return run(figures, ns.out, ns.quick, extra)


if __name__ == "__main__":
    sys.exit(main())
