"""`make experiment`: every scenario of the registry (or those named), for one seed or several,
each through `mrclab run` in turn, with a progress line before each run (what runs now, how many
are done and left, about how long is left) and results/sweep.json recording which folder holds
which seed, which `mrclab docs --from results` reads to show median (min-max) over the seeds.

    python -m experiments.sweep [--seeds "1 2 3 4 5"] [--scenarios a,b] [-- RUN OPTIONS...]

The first seed's run of a scenario goes to results/NAME (what `mrclab report` and the plots
show), every other seed's to results/spread/NAME/seed-S. A run that fails (exit 1: data not
intact, a dead controller) is recorded and the sweep goes on; a mistake in the options (exit 2)
stops it at once, as it would stop every run. A run waits, saying so, while another mrclab run
holds the emulation (`wait_for_emulation`). Exit status: 0 when every run succeeded, 1 when
one failed, 2 on a mistake, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from experiments.outdir import RESULTS
from experiments.scenarios import SCENARIOS
from experiments.scenarios.base import TAIL_S
from topologies import cleanup, files

INDEX = "sweep.json"
SETUP_S = 12.0  # a run's fabric start-up and teardown, about (docs/architecture.md's costs)
GAP_S = 1.5  # per transport: its agents' start, the routing plane's settling, the summary


@dataclass(frozen=True)
class Step:
    scenario: str
    seed: int
    out: str  # relative to the results folder

    def argv(self, results: Path, extra: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", "experiments.cli", "run", self.scenario, "--seed",
                str(self.seed), "--out", str(results / self.out), *extra]


def plan(scenarios: Sequence[str], seeds: Sequence[int]) -> list[Step]:
    """Seed by seed, every scenario in the registry's order: an interrupted sweep has every
    scenario at the first seeds rather than every seed of the first scenarios."""
    return [Step(name, seed, name if i == 0 else f"spread/{name}/seed-{seed}")
            for i, seed in enumerate(seeds) for name in scenarios]


def expected_seconds(scenario: str) -> float:
    """About how long one run of `scenario` takes with its defaults (the progress line's
    estimate before any run has been timed)."""
    sc = SCENARIOS[scenario]
    per_transport = (sc.duration if sc.kind.timed else 6.0) + TAIL_S + GAP_S + 0.9  # + detect_ms
    return SETUP_S + per_transport * len(sc.transports)


class Timed(Protocol):
    """A step whose time is estimated by its scenario's (`expected_seconds`)."""

    @property
    def scenario(self) -> str: ...


def remaining_seconds(steps: Sequence[Timed], done: int, elapsed: float) -> float:
    """The time left after `done` steps took `elapsed` seconds: what is left at the pace seen
    so far (the expected times scaled by how the finished runs compared with theirs)."""
    expected_done = sum(expected_seconds(s.scenario) for s in steps[:done])
    pace = elapsed / expected_done if done and expected_done > 0 else 1.0
    return pace * sum(expected_seconds(s.scenario) for s in steps[done:])


def duration_text(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{seconds:.0f} s" if seconds < 90 else f"{minutes // 60} h {minutes % 60:02d} min" \
        if minutes >= 60 else f"{minutes} min"


def progress_line(steps: Sequence[Step], index: int, elapsed: float, failed: int = 0) -> str:
    """The line before step `index` starts."""
    step = steps[index]
    left = len(steps) - index - 1
    seeds = len({s.seed for s in steps})
    seed = f" seed {step.seed}" if seeds > 1 else ""
    fails = f", {failed} failed" if failed else ""
    return (f"=== [{index + 1}/{len(steps)}] {step.scenario}{seed} -> results/{step.out}: "
            f"{index} done{fails}, {left} after this one, about "
            f"{duration_text(remaining_seconds(steps, index, elapsed))} left")


Runner = Callable[[list[str]], int]


def wait_for_emulation(poll_s: float = 1.0, say: Callable[[str], None] = print) -> None:
    """Before a suite's next run: while another mrclab run holds the emulation (someone's `mrclab
    run`, a calibration that `make setup` started between two of the suite's runs), wait for it
    to end, saying so once, rather than have the run refused and the suite stop."""
    said = False
    while True:
        try:
            if cleanup.lock_free():
                return
        except OSError:
            return  # not root: the run itself says what is wrong
        if not said:
            say(f"=== waiting for the emulation, the next run starts when it is free (Ctrl-C stops "
                f"here): {cleanup.busy_message(cleanup.holder())}")
            said = True
        time.sleep(poll_s)


def run_one(argv: list[str]) -> int:
    """One `mrclab run` of a suite (this sweep's, `mrclab paper`'s), once the emulation is free;
    its exit status (130: interrupted while waiting)."""
    try:
        wait_for_emulation()
    except KeyboardInterrupt:
        return 130
    return subprocess.run(argv).returncode


def sweep(steps: Sequence[Step], results: Path, extra: Sequence[str] = (), run: Runner = run_one,
          say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic) -> int:
    """Run every step, recording each in results/sweep.json as it ends; the exit status."""
    records: list[dict] = []
    index = {"seeds": sorted({s.seed for s in steps}), "extra": list(extra), "runs": records}
    t0 = clock()
    failed = 0
    for i, step in enumerate(steps):
        say(progress_line(steps, i, clock() - t0, failed))
        started = clock()
        status = run(step.argv(results, extra))
        records.append({"scenario": step.scenario, "seed": step.seed, "out": step.out,
                        "status": status, "seconds": round(clock() - started, 1)})
        results.mkdir(parents=True, exist_ok=True)
        files.write_json(results / INDEX, index)
        if status == 2:
            say(f"=== stopped: `mrclab run {step.scenario}` refused its options (above)")
            return 2
        if status in (130, -2):
            say("=== interrupted")
            return 130
        if status != 0:
            failed += 1
    bad = [f"{r['scenario']} seed {r['seed']}" for r in records if r["status"] != 0]
    say(f"=== {len(steps)} runs in {duration_text(clock() - t0)}"
        + (f"; failed: {', '.join(bad)}" if bad else ", every one ok"))
    return 1 if bad else 0


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers like \"1 2 3\", got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected distinct seeds >= 0 like \"1 2 3\", got {text!r}")
    return seeds


def split_run_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(this command's arguments, the `mrclab run` options after `--` for every run)."""
    args = list(argv)
    if "--" not in args:
        return args, []
    return args[:args.index("--")], args[args.index("--") + 1:]


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = split_run_options(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=_seeds, default=[1], help="seeds, e.g. \"1 2 3 4 5\" (default: 1)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated scenarios (default: every one in the registry)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="(default: results/)")
    opts = parser.parse_args(args)
    names = [n.strip() for n in opts.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        print(f"sweep: error: unknown scenario(s) {', '.join(unknown) or repr(opts.scenarios)}: "
              f"choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    try:
        return sweep(plan(names, opts.seeds), opts.results, extra)
    except KeyboardInterrupt:
        print("=== interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
