"""Fault schedules (kind "schedule"): one long flow across the fabric while many T0-T1 links
fail at set times, as the MRC paper's Figs. 9c, 9d and 19 did, judged bin by bin against what
the fabric could still carry.

* link-cascade: `--fault-count` T0-T1 links (default 20; never the flow's last path in a plane)
  go down one every `--fault-every` s from `--fault-at`, in a seeded order, and stay down (Fig. 9c);
* flap-together: `--fault-count` T0-T1 links (default 8) flap together, `--flaps-per-min` times
  a minute for `--down-ms` each, from `--fault-at` to `--fault-end` (Fig. 9d);
* uplink-failures: the sending leaf's uplinks go down one every `--fault-every` s, plane by
  plane, then come back one by one in the same order (Fig. 19);
* port-flaps: the sender's NIC ports on half its planes (`--fault-count` ports) flap together,
  as `flap-together`'s links do, from `--fault-at` to `--fault-end` (Fig. 9b: 4 of 8).

The schedule (`plan`) is made from the fabric model before the flow starts and recorded, each
fault as applied, in the summary's `faults`. Figures: the goodput in 200 ms bins (the paper's
bandwidth samples) against the fabric's remaining path capacity in the same bins
(`Fabric.path_capacity_mbps` with the links down, time-weighted), scaled by the share of its
capacity the transport carried before the first fault; `worst_bin_fraction` is the lowest of
those ratios, `bins_within` the share of bins at 90% or more (the paper's "within 10% of the
remaining capacity").
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Final

from experiments.analysis import metrics
from experiments.analysis.transports import planes_used
from experiments.api import traffic
from experiments.api.flows import finish
from experiments.api.testbed import Testbed
from experiments.scenarios.base import (
    DEFAULT_FABRIC,
    TAIL_S,
    WARMUP_S,
    Kind,
    Options,
    Record,
    Scenario,
    check_fault_window,
    fault_window,
    sleep_until,
)
from experiments.scenarios.schema import DATA_OK, GOODPUT_BEFORE_MBPS, STALL_MS, Figures, Row, num
from topologies.model import Fabric, FabricError, check_number

SAMPLE_S = 0.2  # the paper's bandwidth samples (Fig. 9c)
WITHIN = 0.9  # "within 10% of the remaining capacity"
# --fault-count 0 means these; uplink-failures: two planes' uplinks of the sending leaf (as the
# paper took 3 of a T0's 4 uplinks: the capacity steps down twice, then back up twice).
DEFAULT_COUNT = {"link-cascade": 20, "flap-together": 8}
FLAPPING = ("flap-together", "port-flaps")


def _count(opts: Options, fabric: Fabric) -> int:
    return opts.fault_count or DEFAULT_COUNT.get(opts.scenario.name, 2 * fabric.params.spines)


@dataclass(frozen=True)
class Fault:
    t: float  # s after the flow starts
    action: str  # "cut" or "restore"
    link: str


# The headline and checked figures' keys: their one spelling, which every reader imports.
WORST_BIN_FRACTION: Final = "worst_bin_fraction"
BINS_WITHIN: Final = "bins_within"


class ScheduleFigures(Figures, total=False):
    """One transport's figures under a fault schedule."""
    src: str
    dst: str
    delivered: bool
    goodput_before_mbps: float
    efficiency: float  # goodput before the first fault over the path capacity then
    worst_bin_fraction: float | None  # lowest bin goodput / (efficiency x remaining capacity)
    bins_within: float | None  # share of bins at WITHIN or more
    stall_ms: float
    faults_applied: int
    bins_mbps: list[float]  # goodput per SAMPLE_S bin from the flow's start
    capacity_mbps: list[float]  # remaining path capacity per bin


def t0t1_links(fabric: Fabric) -> list[str]:
    return [ln.name for ln in fabric.links if ln.kind != "host"]


def _receiver(fabric: Fabric) -> str:
    return traffic.cross_leaf_pair(fabric)[1]


def plan(opts: Options, fabric: Fabric, src: str) -> list[Fault]:
    """The schedule of `opts.scenario` on `fabric`, for a flow from `src`."""
    name, start = opts.scenario.name, opts.fault_at or 0.0
    end = fault_window(opts)[1] if name in FLAPPING else opts.duration
    count, every = _count(opts, fabric), opts.fault_every
    if name == "uplink-failures":
        leaf_of = {fabric.leaf(p, fabric.host(src).leaf_index).name for p in range(fabric.params.planes)}
        uplinks = [ln.name for ln in fabric.links if ln.kind != "host" and ln.name.split("-")[0] in leaf_of]
        uplinks = uplinks[:count]
        downs = [Fault(start + i * every, "cut", link) for i, link in enumerate(uplinks)]
        back = start + len(uplinks) * every
        return downs + [Fault(back + i * every, "restore", link) for i, link in enumerate(uplinks)]
    links = t0t1_links(fabric)
    random.Random(opts.seed).shuffle(links)
    if name == "link-cascade":
        # Never the flow's last path in a plane: a cascade that cuts a plane off measures the
        # plane's loss, not how MRC rides the failures (the paper's fabric had hundreds of links).
        dst = _receiver(fabric)
        chosen: list[str] = []
        for link in links:
            plane = int(link[1:link.index("l")])
            cut = frozenset(chosen + [link])
            if len(chosen) < count and fabric.path_capacity_mbps(src, dst, cut, planes=(plane,)) > 0:
                chosen.append(link)
        return [Fault(start + i * every, "cut", link) for i, link in enumerate(chosen)]
    # flap-together, port-flaps
    if name == "port-flaps":
        ports = [ln.name for ln in fabric.links_of(src) if ln.kind == "host"]
        chosen = ports[:opts.fault_count or max(len(ports) // 2, 1)]
    else:
        chosen = links[:count]
    period, down = 60.0 / opts.flaps_per_min, opts.down_ms / 1000
    out: list[Fault] = []
    t = start
    while t + down <= end:
        out += [Fault(t, "cut", link) for link in chosen]
        out += [Fault(t + down, "restore", link) for link in chosen]
        t += period
    return out


def capacity_bins(fabric: Fabric, src: str, dst: str, planes: tuple[int, ...],
                  applied: list[tuple[float, str, str]], n_bins: int) -> list[float]:
    """The path capacity src -> dst in each SAMPLE_S bin, time-weighted over the bin, given the
    faults as applied ((t, action, link), t from the flow's start)."""
    events = sorted(applied)
    out = []
    for b in range(n_bins):
        lo, hi = b * SAMPLE_S, (b + 1) * SAMPLE_S
        cuts = [lo] + [t for t, _, _ in events if lo < t < hi] + [hi]
        total = 0.0
        for a, z in zip(cuts, cuts[1:], strict=False):
            down: set[str] = set()
            for t, action, link in events:
                if t <= a:
                    if action == "cut":
                        down.add(link)
                    else:
                        down.discard(link)
            total += (z - a) * fabric.path_capacity_mbps(src, dst, frozenset(down), planes=planes)
        out.append(round(total / SAMPLE_S, 3))
    return out


def judge_bins(goodput: list[float], capacity: list[float], efficiency: float,
               first: int) -> tuple[float | None, float | None]:
    """(worst ratio, share of bins within WITHIN) over the bins from `first` on, of goodput to
    efficiency x remaining capacity; bins with no capacity left are not judged."""
    ratios = [g / (efficiency * c) for g, c in zip(goodput[first:], capacity[first:], strict=False)
              if c > 0 and efficiency > 0]
    if not ratios:
        return None, None
    return round(min(ratios), 3), round(sum(r >= WITHIN for r in ratios) / len(ratios), 3)


class Schedule(Kind):
    name = "schedule"
    options = frozenset({"duration", "fault_at", "fault_end", "fault_count", "fault_every", "detect_ms"})
    OWN = {"flap-together": {"flaps_per_min", "down_ms"}, "port-flaps": {"flaps_per_min", "down_ms"}}

    def takes(self, scenario: str) -> frozenset[str]:
        return self.options | self.OWN.get(scenario, set())

    def check(self, opts: Options, fabric: Fabric) -> None:
        if opts.scenario.name in FLAPPING:
            check_fault_window(opts, fabric)
        elif fabric.params.leaves < 2 or fabric.params.spines < 2:
            check_fault_window(opts, fabric)  # its words: somewhere to reroute
        elif not (opts.fault_at and 0 < opts.fault_at < opts.duration):
            raise FabricError("need 0 < --fault-at < --duration")
        elif opts.fault_end is not None:
            raise FabricError(f"--fault-end does not apply to {opts.scenario.name}: its faults follow "
                              f"one another every --fault-every s from --fault-at")
        check_number("--fault-every", opts.fault_every, 0.05, 60)
        check_number("--fault-count", opts.fault_count, 0, len(t0t1_links(fabric)), integral=True)
        if opts.scenario.name in FLAPPING and not opts.down_ms < 60_000 / opts.flaps_per_min:
            raise FabricError("--down-ms must be shorter than one flap period (60000 / --flaps-per-min)")
        src, _ = traffic.cross_leaf_pair(fabric)
        last = max((f.t for f in plan(opts, fabric, src)), default=0.0)
        if last >= opts.duration:
            raise FabricError(f"the schedule's last fault comes {last:g} s after the flow starts, at or "
                              f"after its end: give --duration more than {last:g} or --fault-every less")

    def option_fields(self, opts: Options) -> dict:
        out = {"fault_count": _count(opts, Fabric(opts.fabric)), "fault_every": opts.fault_every}
        if opts.scenario.name in FLAPPING:
            out.update({"flaps_per_min": opts.flaps_per_min, "down_ms": opts.down_ms})
        return out

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, faults = bed.fabric, bed.faults
        src, dst = traffic.cross_leaf_pair(fabric)
        schedule = plan(opts, fabric, src)
        flow = bed.flow(transport, src, dst)
        first = len(faults.timeline)
        t0 = time.monotonic()
        flow.start(opts.duration)
        for fault in schedule:
            sleep_until(t0 + fault.t)
            (faults.cut_link if fault.action == "cut" else faults.restore_link)(fault.link)
        sleep_until(t0 + opts.duration + TAIL_S)
        (result,) = finish([flow])
        for link in {f.link for f in schedule if f.action == "cut"} & set(faults.active()["down_links"]):
            faults.restore_link(link)  # the cascade's links: back before the next transport
        events = [{**e, "t": e["t"] - t0} for e in faults.timeline[first:]]
        applied = [(e["t"], e["action"], e["target"]) for e in events  # during the flow: not the
                   if e["action"] in ("cut", "restore") and e["t"] <= opts.duration]  # clean-up
        record.windows[label] = (t0, t0 + opts.duration)
        record.timeline += [{**e, "transport": label} for e in events]
        n = round(opts.duration / metrics.BIN_S)
        mbps = metrics.series(result.bins, int(t0 / metrics.BIN_S), n)
        record.curves[label] = mbps
        per = round(SAMPLE_S / metrics.BIN_S)
        bins = [round(metrics.mean(mbps[i:i + per]), 3) for i in range(0, n - per + 1, per)]
        planes = planes_used(transport, fabric.params.planes)
        capacity = capacity_bins(fabric, src, dst, planes, applied, len(bins))
        first_fault = schedule[0].t if schedule else opts.duration
        warm, fault_bin = round(WARMUP_S / SAMPLE_S), int(first_fault / SAMPLE_S)
        before = metrics.mean(bins[warm:fault_bin]) if fault_bin > warm else 0.0
        efficiency = before / capacity[warm] if capacity and capacity[warm] else 0.0
        worst, within = judge_bins(bins, capacity, efficiency, fault_bin)
        record.transports[label] = {
            "src": src, "dst": dst, DATA_OK: result.data_ok and result.delivered,
            "delivered": result.delivered, GOODPUT_BEFORE_MBPS: round(before, 2),
            "efficiency": round(efficiency, 3), WORST_BIN_FRACTION: worst, BINS_WITHIN: within,
            STALL_MS: metrics.longest_stall_ms(mbps, round(first_fault / metrics.BIN_S)),
            "faults_applied": len(applied), "bins_mbps": bins, "capacity_mbps": capacity,
            **result.detail}
        record.keep_trace(label, flow)
        time.sleep(opts.detect_ms / 1000 + 0.3)  # the baseline's routes back before the next


KIND = Schedule()
BRIEF = (WORST_BIN_FRACTION, BINS_WITHIN, STALL_MS)
FIGURES = (GOODPUT_BEFORE_MBPS, WORST_BIN_FRACTION, BINS_WITHIN, STALL_MS, DATA_OK)
ROW = ("worst 200 ms bin / share within 10% of capacity",
       lambda t, _: f"{num(t.get(WORST_BIN_FRACTION))} / {num(t.get(BINS_WITHIN))}")
SCENARIOS = (
    Scenario("link-cascade", KIND, "T0-T1 links down one every second, in a seeded order, staying down",
             DEFAULT_FABRIC, 20.0, 2.0, None, ("mrc", "roce"), figures_type=ScheduleFigures,
             figures=FIGURES, brief=BRIEF, row=Row(f"link-cascade: {ROW[0]}", ROW[1])),
    Scenario("flap-together", KIND, "T0-T1 links flapping together", DEFAULT_FABRIC, 9.0, 2.0, 8.0,
             ("mrc", "roce"), figures_type=ScheduleFigures, figures=FIGURES, brief=BRIEF,
             row=Row(f"flap-together: {ROW[0]}", ROW[1])),
    Scenario("port-flaps", KIND, "the sender's NIC ports on half its planes flapping together",
             DEFAULT_FABRIC, 9.0, 2.0, 8.0, ("mrc", "roce"), figures_type=ScheduleFigures,
             figures=FIGURES, brief=BRIEF, row=Row(f"port-flaps: {ROW[0]}", ROW[1])),
    Scenario("uplink-failures", KIND, "the sending leaf's uplinks down one by one, then back one by one",
             DEFAULT_FABRIC, 15.0, 1.5, None, ("mrc", "roce"), figures_type=ScheduleFigures,
             figures=FIGURES, brief=BRIEF, row=Row(f"uplink-failures: {ROW[0]}", ROW[1])),
)
