"""Collective (kind "collective"): ring all-reduce steps, each host writing a chunk to its right
neighbour; a step ends when every neighbour has it. Two phases: no fault, then a link cut at
the phase's first step and restored at its middle (the leaf-0 uplink the ring's plane-0
traffic used most). Figures: step time percentiles per phase, steps that timed out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

from experiments.analysis import metrics
from experiments.analysis.transports import BASELINE_PLANE
from experiments.api import traffic
from experiments.api.flows import AgentFlow, finish
from experiments.api.testbed import Testbed
from experiments.scenarios.base import DEFAULT_LINK_MBPS, Kind, Options, Record, Scenario
from experiments.scenarios.failure import busiest_uplink
from experiments.scenarios.schema import DATA_OK, Figures, Row, ms
from topologies.face import whole
from topologies.model import Fabric, FabricError, FabricParams

STEP_LIMIT_S = 15.0  # a step not done by then counts as timed out


# The headline figures' keys: their one spelling, which every reader imports. The fault phase's,
# and the fault-free phase's, which are the same keys with NO_FAULT after them.
STEP_TIME_P50_MS: Final = "step_time_p50_ms"
STEP_TIME_P99_MS: Final = "step_time_p99_ms"
STEPS_TIMED_OUT: Final = "steps_timed_out"
NO_FAULT: Final = "_no_fault"
STEP_TIME_P50_MS_NO_FAULT: Final = STEP_TIME_P50_MS + NO_FAULT
STEP_TIME_P99_MS_NO_FAULT: Final = STEP_TIME_P99_MS + NO_FAULT


class CollectiveFigures(Figures, total=False):
    """One transport's figures in the collective: per phase, the fault phase's unsuffixed."""
    ring: list[str]
    step_bytes: int
    cut: str  # the link cut in the fault phase
    step_time_p50_ms: float | None  # None: no step completed
    step_time_p99_ms: float | None
    step_times_ms: list[float | None]  # None: the step timed out
    steps_timed_out: int
    step_time_p50_ms_no_fault: float | None
    step_time_p99_ms_no_fault: float | None
    step_times_ms_no_fault: list[float | None]
    steps_timed_out_no_fault: int


class Collective(Kind):
    name = "collective"
    timed = False
    options = frozenset({"steps", "step_kb", "link", "detect_ms"})

    def check(self, opts: Options, fabric: Fabric) -> None:
        if set(opts.transports) & {"tcp", "mptcp"}:
            raise FabricError("collective runs on the agents' transports only (mrc, roce, spray): "
                              "drop tcp/mptcp from --transports")
        if len(fabric.hosts) < 2 or opts.steps < 2 or not 1 <= opts.step_kb <= 65536:
            raise FabricError("collective needs 2+ hosts, --steps 2 or more and --step-kb in 1..65536")

    def option_fields(self, opts: Options) -> dict:
        return {"steps": opts.steps, "step_kb": opts.step_kb}

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        return len(fabric.hosts)

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, faults = bed.fabric, bed.faults
        names = [h.name for h in fabric.hosts]
        ring = [bed.agent_flow(transport, src, dst) for src, dst in traffic.ring(names)]
        leaf = fabric.leaf(BASELINE_PLANE, 0).name
        phases: dict[str, list[float | None]] = {}
        first = len(faults.timeline)
        t_start = time.monotonic()
        done = 0
        link = opts.link or ""
        before = whole(bed.em).port_counters(leaf)
        for phase in ("no_fault", "fault"):
            times: list[float | None] = []
            if phase == "fault" and not link:
                # The uplink leaf 0's ring traffic used most in the fault-free phase: for the
                # single-path transports, the one their hashed flow rides.
                link, _ = busiest_uplink(bed, names[0], before, whole(bed.em).port_counters(leaf))
            for step in range(opts.steps):
                if phase == "fault" and step == 0:
                    faults.cut_link(link)
                if phase == "fault" and step == opts.steps // 2:
                    faults.restore_link(link)
                times.append(_step(ring, done + 1, opts.step_kb * 1024))
                done += 1
            phases[phase] = times
        results = finish(ring)
        t_end = time.monotonic()
        record.curves[label] = metrics.total_goodput((r.bins for r in results), t_start, t_end)
        record.windows[label] = (t_start, t_end)
        record.timeline += [{**e, "t": e["t"] - t_start, "transport": label}
                            for e in faults.timeline[first:]]
        out: dict = {"ring": names, "step_bytes": opts.step_kb * 1024, "cut": link,
                     # Every ring step moves data over every link of the ring: all must deliver.
                     DATA_OK: all(r.data_ok and r.delivered for r in results)}
        for phase, times in phases.items():
            ok = sorted(t for t in times if t is not None)
            suffix = "" if phase == "fault" else NO_FAULT
            out[STEP_TIME_P50_MS + suffix] = round(metrics.percentile(ok, 50) * 1000, 1) if ok else None
            out[STEP_TIME_P99_MS + suffix] = round(metrics.percentile(ok, 99) * 1000, 1) if ok else None
            out[f"step_times_ms{suffix}"] = [None if t is None else round(t * 1000, 1) for t in times]
            out[STEPS_TIMED_OUT + suffix] = sum(1 for t in times if t is None)
        record.transports[label] = out
        record.keep_trace(label, ring[0])
        time.sleep(opts.detect_ms / 1000 + 0.3)

    def plot(self, folder: Path, summary: dict) -> None:
        from experiments.analysis import plots  # matplotlib: only when there is something to draw

        plots.plot_cdf(folder / "cdf.png", summary, "ring step time (ms)",
                       lambda t: [(t.get("step_times_ms_no_fault", []), "-", "no fault"),
                                  (t.get("step_times_ms", []), "--", "link cut")])


def _step(ring: list[AgentFlow], target: int, nbytes: int, limit: float = STEP_LIMIT_S) -> float | None:
    """One ring step: every host writes `nbytes` to its right neighbour; the step ends when
    every neighbour has it (message `target` complete everywhere). Seconds, None if it took
    longer than `limit`."""
    start = time.monotonic()
    for f in ring:
        f.write(nbytes)
    pending = list(ring)
    while pending:
        pending = [f for f in pending if f.completed() < target]
        if time.monotonic() - start > limit:
            return None
        if pending:
            time.sleep(0.001)
    return time.monotonic() - start


SCENARIOS = (
    Scenario("collective", Collective(), "ring all-reduce steps, with and without a link cut",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=DEFAULT_LINK_MBPS), 0.0,
             transports=("mrc", "roce", "spray"), figures_type=CollectiveFigures,
             figures=(STEP_TIME_P50_MS_NO_FAULT, STEP_TIME_P99_MS_NO_FAULT, STEP_TIME_P50_MS,
                      STEP_TIME_P99_MS, STEPS_TIMED_OUT, DATA_OK),
             brief=(STEP_TIME_P50_MS, STEP_TIME_P99_MS),
             row=Row("collective: step p99 ms, no fault / cut",
                     lambda t, _: f"{ms(t.get(STEP_TIME_P99_MS_NO_FAULT))} / "
                                  f"{ms(t.get(STEP_TIME_P99_MS))}")),
)
