"""Lab 3's checker: the lab's own permutation run (results/lab-03/, made by RUN: no other
run overwrites it) is there and faithful, then each answer function against the numbers the
checker reads from that same run, and on made-up runs whose numbers tell the usual mistakes
apart (a flow at exactly 3/4 of the fair share, a transport whose slowest flow wins while its
average loses, a capacity that is not the link rate times the flows)."""

from __future__ import annotations

import copy
import json
import math
import os
import random
from pathlib import Path
from typing import Any

from labs.checker import Check, CheckFailed, Context, Lab

REPO = Path(__file__).resolve().parents[2]
OUT = "results/lab-03"  # the lab's own run: an ordinary `mrclab run permutation` writes elsewhere
RUN = ("sudo make experiment-permutation ARGS=\"--planes 1 --link-mbps 5 --transports roce,spray "
       f"--duration 4 --out {OUT}\"")
TRANSPORTS = ("roce", "spray")


def results() -> Path:
    """The run to check: results/lab-03 (or $LAB_RESULTS, for a run kept elsewhere)."""
    return Path(os.environ.get("LAB_RESULTS", REPO / OUT))


def summary(ctx: Context) -> dict[str, Any]:
    if "summary" not in ctx.shared:
        path = results() / "summary.json"
        if not path.exists():
            where = path.parent.relative_to(REPO) if path.parent.is_relative_to(REPO) else path.parent
            raise CheckFailed(f"no run in {where}/: run `{RUN}` first (about a minute)")
        ctx.shared["summary"] = json.loads(path.read_text())
    return ctx.shared["summary"]  # type: ignore[no-any-return]


def run_present(ctx: Context) -> str:
    s = summary(ctx)
    if s.get("scenario") != "permutation":
        raise CheckFailed(f"{results()} holds a {s.get('scenario')} run, not a permutation: run "
                          f"`{RUN}`")
    missing = [t for t in TRANSPORTS if t not in s.get("transports", {})]
    if missing:
        raise CheckFailed(f"the run has no {', '.join(missing)}: run `{RUN}`")
    if s["fabric"]["planes"] != 1:
        raise CheckFailed(f"the run used {s['fabric']['planes']} planes: ECMP and spraying are "
                          f"compared on one plane: run `{RUN}`")
    f = s["fabric"]
    return (f"a permutation of {f['leaves'] * f['hosts_per_leaf']} hosts, {f['spines']} spines, "
            f"{f['link_mbps']:g} Mbit/s links, seed {s['seed']}, {s['switch_backend']} switches")


def run_faithful(ctx: Context) -> str:
    s = summary(ctx)
    if not s["fidelity"]["faithful"]:
        raise CheckFailed("the run is not faithful: " + "; ".join(s["fidelity"]["problems"]))
    bad = [t for t in TRANSPORTS if not s["transports"][t]["data_ok"]]
    if bad:
        raise CheckFailed(f"{', '.join(bad)} delivered wrong bytes")
    return "the emulation kept its link rates and CPU headroom; every byte arrived intact"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


# Made-up runs (the real run's summary with other flow goodputs and capacities): numbers a
# single run rarely has, chosen so that each usual mistake gives another answer. 8 flows over
# 40 Mbit/s: a fair share of 5, so 3.75 is exactly 3/4 of it (not starved).
TRICKY = [
    {"roce": ([9.0, 3.5, 3.75, 8.25, 2.0, 6.5, 4.0, 3.0], 40.0),  # the worst flow and the best:
     "spray": ([4.25, 4.5, 3.75, 5.0, 4.75, 4.0, 5.5, 3.875], 40.0)},  # spray's tail, roce's top
    {"roce": ([4.5, 4.25, 4.0, 3.75, 4.75, 5.0], 27.0),  # roce's slowest wins, spray's average
     "spray": ([9.0, 1.5, 6.0, 8.5, 3.75, 7.0], 27.0)},  # and best are higher; 27/6 is no integer
]
MADE_UP = 30  # random ones after the tricky ones


def _made_up(run: dict[str, Any]) -> list[dict[str, Any]]:
    rng = random.Random(3)
    figures = list(TRICKY)
    while len(figures) < len(TRICKY) + MADE_UP:
        n = rng.choice((4, 6, 8))
        capacity = rng.choice((4, 5, 10)) * n * rng.choice((0.5, 0.75, 1.0))
        figures.append({t: ([rng.randrange(1, 13) * capacity / n / 8 for _ in range(n)], capacity)
                        for t in TRANSPORTS})
    out = []
    for fig in figures:
        s = copy.deepcopy(run)
        for t, (goodputs, capacity) in fig.items():
            s["transports"][t]["flow_goodput_mbps"] = list(goodputs)
            s["transports"][t]["capacity_mbps"] = capacity
        out.append(s)
    return out


def _runs(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """(what, summary): the real run, then the made-up ones."""
    s = summary(ctx)
    return [("the run", s)] + [("a made-up run", m) for m in _made_up(s)]


def _numbers(s: dict[str, Any], t: str) -> str:
    fig = s["transports"][t]
    return (f"{t}'s flows {fig['flow_goodput_mbps']} Mbit/s, capacity_mbps "
            f"{fig['capacity_mbps']:g}")


def goodputs(ctx: Context) -> str:
    answers = ctx.module("answers")
    for what, s in _runs(ctx):
        for t in TRANSPORTS:
            want = s["transports"][t]["flow_goodput_mbps"]
            got = answers.flow_goodputs(s, t)
            if len(got) != len(want) or not all(_close(a, b) for a, b in zip(got, want, strict=True)):
                raise CheckFailed(f"flow_goodputs(summary, {t!r}) is {got}, {what} says {want}, "
                                  f"flow by flow in its order")
    return "both transports' per-flow goodputs read right"


def cdf(ctx: Context) -> str:
    answers = ctx.module("answers")
    for values in ([3.0, 1.0, 2.0, 2.0], [5.5]):
        got = [tuple(p) for p in answers.cdf(list(values))]
        want = [(v, (i + 1) / len(values)) for i, v in enumerate(sorted(values))]
        if len(got) != len(want) or not all(_close(a[0], b[0]) and _close(a[1], b[1])
                                            for a, b in zip(got, want, strict=True)):
            raise CheckFailed(f"cdf({values}) is {got}, want {want}")
    return "the CDF is sorted and reaches 1.0"


def fair_and_starved(ctx: Context) -> str:
    answers = ctx.module("answers")
    parts = []
    for what, s in _runs(ctx):
        for t in TRANSPORTS:
            fig = s["transports"][t]
            share = fig["capacity_mbps"] / len(fig["flow_goodput_mbps"])
            got = answers.fair_share(s, t)
            if not _close(got, share):
                raise CheckFailed(f"fair_share(summary, {t!r}) is {got}, want {share:.3f}: "
                                  f"capacity_mbps {fig['capacity_mbps']:g} over "
                                  f"{len(fig['flow_goodput_mbps'])} flows ({what}) (TODO 3)")
            want = sum(1 for g in fig["flow_goodput_mbps"] if g < 0.75 * share)
            n = answers.starved(s, t)
            if n != want:
                raise CheckFailed(f"starved(summary, {t!r}) is {n}; {what} has {want} flows under "
                                  f"3/4 of {share:g} Mbit/s = {0.75 * share:g} ({_numbers(s, t)}) "
                                  f"(TODO 4)")
            if what == "the run":
                parts.append(f"{t} {want} starved")
    return f"fair share right; flows under 3/4 of it: {', '.join(parts)}"


def better_tail(ctx: Context) -> str:
    answers = ctx.module("answers")
    message = "the run's slowest flows tie: either answer; the made-up runs' answers are right"
    for what, s in _runs(ctx):
        worst = {t: min(s["transports"][t]["flow_goodput_mbps"]) for t in TRANSPORTS}
        if worst["roce"] == worst["spray"]:
            continue  # a tie: either answer
        want = max(TRANSPORTS, key=lambda t: worst[t])
        got = answers.better_tail(s)
        if got != want:
            raise CheckFailed(f"better_tail says {got!r}; in {what} the slowest flows got "
                              + ", ".join(f"{t} {w:g}" for t, w in worst.items()) + " Mbit/s"
                              + ("" if what == "the run" else
                                 f" ({'; '.join(_numbers(s, t) for t in TRANSPORTS)})"))
        if what == "the run":
            message = f"{want}'s slowest flow did better (" + ", ".join(
                f"{t} {w:.2f}" for t, w in worst.items()) + " Mbit/s)"
    return message


LAB = Lab(__file__, "Spraying vs ECMP", files=("answers.py",), checks=[
    Check("run-present", run_present,
          f"the run takes about a minute and needs root: `{RUN}` writes {OUT}/, which no other "
          f"run touches"),
    Check("run-faithful", run_faithful,
          f"rerun on an idle machine, nothing else using the CPU: `{RUN}`",
          needs=("run-present",)),
    Check("flow-goodputs", goodputs, "TODO 1: summary['transports'][transport]['flow_goodput_mbps']",
          needs=("run-present",)),
    Check("cdf", cdf, "TODO 2: sort, then pair the i-th value (from 1) with i / n"),
    Check("fair-share-and-starved", fair_and_starved,
          "TODOs 3-4: capacity_mbps / number of flows; count goodputs below 0.75 of it",
          needs=("flow-goodputs",)),
    Check("better-tail", better_tail, "TODO 5: compare min(flow_goodputs(...)) of roce and spray",
          needs=("flow-goodputs",)),
])
