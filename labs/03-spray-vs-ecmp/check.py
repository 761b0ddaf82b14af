"""Lab 3's checker: the student's permutation run is there and faithful, then each answer
function against the numbers the checker reads from that same run."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from labs.checker import Check, CheckFailed, Context, Lab

REPO = Path(__file__).resolve().parents[2]
RUN = "make experiment-permutation ARGS=\"--planes 1 --link-mbps 5 --transports roce,spray --duration 4\""
TRANSPORTS = ("roce", "spray")


def results() -> Path:
    """The run to check: results/permutation (or $LAB_RESULTS, for a run kept elsewhere)."""
    return Path(os.environ.get("LAB_RESULTS", REPO / "results" / "permutation"))


def summary(ctx: Context) -> dict[str, Any]:
    if "summary" not in ctx.shared:
        path = results() / "summary.json"
        if not path.exists():
            where = path.parent.relative_to(REPO) if path.parent.is_relative_to(REPO) else path.parent
            raise CheckFailed(f"no run in {where}/: run `{RUN}` first")
        ctx.shared["summary"] = json.loads(path.read_text())
    return ctx.shared["summary"]  # type: ignore[no-any-return]


def run_present(ctx: Context) -> str:
    s = summary(ctx)
    if s.get("scenario") != "permutation":
        raise CheckFailed(f"{results()} holds a {s.get('scenario')} run, not a permutation")
    missing = [t for t in TRANSPORTS if t not in s.get("transports", {})]
    if missing:
        raise CheckFailed(f"the run has no {', '.join(missing)}: run `{RUN}`")
    if s["fabric"]["planes"] != 1:
        raise CheckFailed(f"the run used {s['fabric']['planes']} planes: ECMP and spraying are "
                          f"compared on one plane (--planes 1)")
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


def goodputs(ctx: Context) -> str:
    s, answers = summary(ctx), ctx.module("answers")
    for t in TRANSPORTS:
        want = s["transports"][t]["flow_goodput_mbps"]
        got = answers.flow_goodputs(s, t)
        if len(got) != len(want) or not all(_close(a, b) for a, b in zip(got, want, strict=True)):
            raise CheckFailed(f"flow_goodputs(summary, {t!r}) is {got}, the run says {want}")
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
    s, answers = summary(ctx), ctx.module("answers")
    parts = []
    for t in TRANSPORTS:
        fig = s["transports"][t]
        share = fig["capacity_mbps"] / len(fig["flow_goodput_mbps"])
        got = answers.fair_share(s, t)
        if not _close(got, share):
            raise CheckFailed(f"fair_share(summary, {t!r}) is {got}, want {share:.3f} "
                              f"(capacity_mbps {fig['capacity_mbps']} over "
                              f"{len(fig['flow_goodput_mbps'])} flows)")
        want = sum(1 for g in fig["flow_goodput_mbps"] if g < 0.75 * share)
        n = answers.starved(s, t)
        if n != want:
            raise CheckFailed(f"starved(summary, {t!r}) is {n}; the run has {want} flows under "
                              f"3/4 of {share:.2f} Mbit/s")
        parts.append(f"{t} {want} starved")
    return f"fair share right; flows under 3/4 of it: {', '.join(parts)}"


def better_tail(ctx: Context) -> str:
    s, answers = summary(ctx), ctx.module("answers")
    worst = {t: min(s["transports"][t]["flow_goodput_mbps"]) for t in TRANSPORTS}
    want = max(TRANSPORTS, key=lambda t: worst[t])
    got = answers.better_tail(s)
    if got != want:
        raise CheckFailed(f"better_tail says {got!r}; in this run the slowest flows got "
                          + ", ".join(f"{t} {w:.2f}" for t, w in worst.items()) + " Mbit/s")
    return f"{want}'s slowest flow did better (" + ", ".join(
        f"{t} {w:.2f}" for t, w in worst.items()) + " Mbit/s)"


LAB = Lab(__file__, "Spraying vs ECMP", files=("answers.py",), checks=[
    Check("run-present", run_present,
          "the run takes about a minute and needs root; it writes results/permutation/"),
    Check("run-faithful", run_faithful,
          "rerun on an idle machine: nothing else should use the CPU during the run",
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
