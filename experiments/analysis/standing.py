"""When the fabric's queues stood: the moment a loaded run's cost per packet changes.

The default permutation loads every spine link at its rate (a non-blocking fabric, every host
sending at its NIC's rate), so each such queue is critically loaded: it has no level to settle
at and wanders up until it reaches the data plane's ECN threshold, 3-12 s into a run on the
2-core VMs (at 5-15 Mbit/s; not sooner at the faster rates: a random walk's time). From then
on the senders see most packets marked (the window and the EVs react, the receivers
acknowledge a marked packet at once), and the agents' cost per delivered packet is 1.4-2 times
what it was before (docs/experiments.md, "Standing queues"). A measurement of
what a run costs must read that state, not only the calm start.

Read from the agents' traces: every sender's `cc` records carry its ECN fraction (an EWMA);
a sender's queue stood once that fraction passed `ECN_STANDING`, and the run's queues stood
when half of its senders' had (a flow whose path never leaves its leaf never sees one).
The cost bench (experiments/tools/cost_bench.py) splits a run there into its calm and
standing-queue phases (`phases`) and reads what a packet cost in each (`standing_cost`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from experiments.analysis import metrics

ECN_STANDING = 0.5  # a sender's ECN fraction above this: the queue on its paths stands marked
STANDING_SETTLE_S = 1.0  # after the queues stood: the senders' windows and EVs have reacted
MIN_WINDOW_S = 2.0  # the shortest standing phase read
MIN_CALM_S = 1.0  # ... and calm one: at 10 Mbit/s the queues may stand 3 s into the flow
# The agents' process at this share of its core, or the machine (the run, other programs and
# steal) at this share of its cores: what the standing phase needed was capped, its ratio a floor
# (a CI rehearsal with a busy loop: OVS's standing phase took the one free core, 1.03 of 2 with
# the loop, and read 1.1 times the calm cost).
SATURATED_CORES = 0.9


def sender_onset(lines: Iterable[str]) -> float | None:
    """The first `cc` record's time (CLOCK_MONOTONIC) whose ECN fraction passed
    `ECN_STANDING` in one agent's trace lines; None when none did.

    >>> sender_onset(['{"event": "cc", "t": 1.0, "ecn_frac": 0.1}',
    ...               '{"event": "rtt", "t": 1.5}', '{"event": "cc", "t": 2.0, "ecn_frac": 0.7}'])
    2.0
    >>> sender_onset(['{"event": "cc", "t": 1.0, "ecn_frac": 0.5}']) is None
    True
    """
    for line in lines:
        if '"cc"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by the run's end
        if record.get("event") == "cc" and record.get("ecn_frac", 0.0) > ECN_STANDING:
            return float(record["t"])
    return None


def run_onset(onsets: list[float | None]) -> float | None:
    """When half of the senders' queues stood (their onsets, None: never); None when fewer
    than half did.

    >>> run_onset([5.0, 6.0, None, 5.5])
    5.5
    >>> run_onset([5.0, None, None, None]) is None
    True
    """
    if not onsets:
        return None
    ordered = sorted(float("inf") if t is None else t for t in onsets)
    t = ordered[(len(ordered) + 1) // 2 - 1]
    return None if t == float("inf") else t


def onset(traces: Path) -> float | None:
    """`run_onset` over the sending agents' traces in a run's traces folder (h*-trace.jsonl;
    an agent with no `cc` record sent nothing and is left out)."""
    onsets: list[float | None] = []
    for path in sorted(traces.glob("*-trace.jsonl")):
        with path.open() as f:
            text = f.read()
        if '"cc"' not in text:  # no cc record (the lines' spacing is the encoder's)
            continue
        onsets.append(sender_onset(text.splitlines()))
    return run_onset(onsets)


# ----- what a run cost before and after (experiments/tools/cost_bench.py) ----------------------

def phases(times: Sequence[float], calm_from: float,
           onset: float | None) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """The indices (first, last) into a run's sample `times` of its calm phase (from
    `calm_from`, the flows warm, to the queues' `onset`, when it spans at least `MIN_CALM_S`)
    and of its standing-queue phase (from `STANDING_SETTLE_S` after the onset to the end, at
    least `MIN_WINDOW_S`).

    >>> t = [float(x) for x in range(15)]
    >>> phases(t, 1.5, 6.2)
    ((2, 6), (8, 14))
    >>> phases(t, 1.5, None), phases(t, 1.5, 12.5), phases(t, 1.5, 2.9)
    (((2, 14), None), ((2, 12), None), (None, (4, 14)))
    """
    def span(t0: float, t1: float, least: float) -> tuple[int, int] | None:
        idx = [i for i, t in enumerate(times) if t0 <= t <= t1]
        if not idx or times[idx[-1]] - times[idx[0]] < least:
            return None
        return idx[0], idx[-1]

    end = times[-1]
    calm = span(calm_from, end if onset is None else onset, MIN_CALM_S)
    standing = None if onset is None else span(onset + STANDING_SETTLE_S, end, MIN_WINDOW_S)
    return calm, standing


def window_pps(goodput: list[tuple[float, float]], t0: float, t1: float, payload: int) -> float:
    """Data packets/s delivered between two CLOCK_MONOTONIC times, from the run's goodput bins
    ((bin start, Mbit/s)); 0.0 when no bin falls in the window.

    >>> window_pps([(0.0, 8.0), (1.0, 16.0), (2.0, 16.0)], 0.5, 2.5, 1000)
    2000.0
    """
    return metrics.mean([mbps for t, mbps in goodput if t0 <= t < t1]) * 1e6 / 8 / payload


def standing_cost(runs: list[dict[str, Any]], cores: int | None = None) -> dict[str, Any] | None:
    """What the standing-queue phase costs against the calm one, per delivered packet: the mean
    ratio of the whole machine's busy cores and of the agents' process over the runs that saw
    both (capacity.standing_factors reads it); None when none did. `saturated`: in a standing
    phase the agents' process was at its ceiling or the machine's `cores` (default: this
    machine's) were nearly all busy, so the ratio is a floor.

    >>> calm = {"busy_cores": 0.5, "agents_process_cores": 0.4, "delivered_data_pps": 1000}
    >>> stood = {"busy_cores": 0.8, "agents_process_cores": 0.7, "delivered_data_pps": 800}
    >>> both = {"link_mbps": 10, "queues_stood_s": 6.0, "phases": {"calm": calm, "standing_queues": stood}}
    >>> got = standing_cost([both, {"phases": {"calm": calm}}], cores=2)
    >>> got["busy_cores"], got["agents_process_cores"], got["measured_at_mbps"], got["saturated"]
    (2.0, 2.187, [10], False)
    >>> standing_cost([both], cores=1)["saturated"]  # 0.8 of 1 core: under `SATURATED_CORES`
    False
    >>> busy = {**stood, "background_cores": 1.0}  # with a busy loop: 1.8 of 2 cores taken
    >>> standing_cost([{**both, "phases": {"calm": calm, "standing_queues": busy}}], cores=2)["saturated"]
    True
    """
    seen = [r for r in runs if {"calm", "standing_queues"} <= set(r.get("phases", {}))]
    ratios = []
    for r in seen:
        c, s = r["phases"]["calm"], r["phases"]["standing_queues"]
        if min(c["busy_cores"], c["agents_process_cores"], c["delivered_data_pps"],
               s["delivered_data_pps"]) <= 0:
            continue
        ratios.append([(s[k] / s["delivered_data_pps"]) / (c[k] / c["delivered_data_pps"])
                       for k in ("busy_cores", "agents_process_cores")])
    if not ratios:
        return None
    full = SATURATED_CORES * (cores or os.cpu_count() or 1)

    def saturated(s: dict[str, Any]) -> bool:
        taken = s["busy_cores"] + s.get("background_cores", 0.0) + s.get("steal_cores", 0.0)
        return float(s["agents_process_cores"]) >= SATURATED_CORES or taken >= full

    return {"busy_cores": round(metrics.mean([r[0] for r in ratios]), 3),
            "agents_process_cores": round(metrics.mean([r[1] for r in ratios]), 3),
            "measured_at_mbps": [r["link_mbps"] for r in seen],
            "stood_after_s": [r["queues_stood_s"] for r in seen],
            "saturated": any(saturated(r["phases"]["standing_queues"]) for r in seen)}
