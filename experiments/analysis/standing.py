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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

ECN_STANDING = 0.5  # a sender's ECN fraction above this: the queue on its paths stands marked


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
        if '"event": "cc"' not in text:
            continue
        onsets.append(sender_onset(text.splitlines()))
    return run_onset(onsets)
