"""Fault scenarios (kind "fault"): one long flow between hosts on different leaves, and a fault
on its way: a T0-T1 link cut (link-failure), a spine that stops forwarding (switch-failure), a
link flapping (link-flap), random loss on a link (lossy-link), a host's NIC port cut
(port-failure) or flapping (port-flap), a leaf of one plane failing with every port
(t0-failure: `t0_links`).

The target is found, not guessed: during the warm-up the source leaf's plane-0 uplink counters
show which spine the flow's plane-0 traffic uses (`--link` / `--fail-switch` fix it instead).
A port scenario cuts the receiver's plane-0 NIC link (`--link h0-p0l0`: the sender's); a cut
or a flap may take any link, host links included (`--link`). A T0 failure takes the receiver's
plane-0 leaf (`--fail-switch p0l0`: another leaf) down as a whole: every link of it cut, so every
host under it loses carrier on that plane, as its NIC port on that plane going down (the MRC
paper's Fig. 10), and the uplinks go with it.
Figures: recovery and stall times, goodput before, during and after the fault.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any, Final

from experiments.analysis import fidelity, metrics
from experiments.analysis.transports import BASELINE_PLANE, planes_used
from experiments.api import traffic
from experiments.api.flows import FlowResult, finish
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
from experiments.scenarios.schema import (
    DATA_OK,
    GOODPUT_BEFORE_MBPS,
    GOODPUT_DURING_MBPS,
    GOODPUT_FRACTION,
    IS_TRUE,
    STALL_MS,
    Cells,
    Figures,
    Row,
    at_least,
    at_most,
    ms,
    num,
)
from topologies.face import whole
from topologies.model import Fabric, FabricError

# The default fabric (scenarios/base.py): one flow at a time over 4 planes, 4 KB payloads.
SMALL = DEFAULT_FABRIC
# The links' rate before the fault is read over at most its last `RATE_WINDOW_S`, from
# `RATE_START_S` at the earliest: past the transport's ramp where the fault comes late enough
# (a window from 0.3 s to a fault at 1.5 s counted MRC's ramp and read 84-88% of a full link).
RATE_START_S, RATE_WINDOW_S = 0.3, 1.0


def _sent_bytes(bed: Testbed, switch: str, port: int, start: float, end: float) -> list[tuple[float, int]]:
    """(monotonic s, tx bytes) of `switch`'s `port` at `fidelity.rate_parts` + 1 even instants
    from `start` to `end`, each stamped when its read returned (the fidelity check's window)."""
    seen, parts = [], fidelity.rate_parts(end - start)
    for k in range(parts + 1):
        sleep_until(start + (end - start) * k / parts)
        counters = whole(bed.em).port_counters(switch)
        seen.append((time.monotonic(), counters.get(port, {}).get("tx_bytes", 0)))
    return seen


def _mbps(a: tuple[float, int], b: tuple[float, int]) -> float:
    return round((b[1] - a[1]) * 8 / (b[0] - a[0]) / 1e6, 2) if b[0] > a[0] else 0.0


# The headline and checked figures' keys: their one spelling, which every reader imports.
RECOVERY_MS: Final = "recovery_ms"


class FaultFigures(Figures, total=False):
    """One transport's figures in a fault scenario (`fault_metrics`, then `Failure.run`)."""
    src: str
    dst: str
    recovery_ms: float | None  # None: goodput never came back to the target
    recovery_smoothing_ms: int  # the moving average the recovery was judged on
    stall_ms: float  # the longest run of empty bins from the fault to 1 s after its end
    delivered: bool
    goodput_before_mbps: float
    goodput_during_mbps: float
    goodput_after_mbps: float | None
    goodput_fraction: float | None  # during over before
    recovery_target_mbps: float
    capacity_mbps: dict[str, float]  # before, during
    bytes_delivered: int
    target: str
    uplink_tx_pkts_before_fault: dict[str, int]
    # from the agents' flows (experiments/api/flows.py), beside the kernel's `error`
    messages_acked: int
    messages_completed: int
    sender_stats: dict[str, int]
    receiver_stats: dict[str, int]
    ev_states_at_end: dict[str, int]
    congestion_at_end: dict[str, Any]
    error: str


FAILURE_FIGURES = (RECOVERY_MS, STALL_MS, GOODPUT_BEFORE_MBPS, GOODPUT_DURING_MBPS, DATA_OK)
BRIEF = (RECOVERY_MS, STALL_MS, GOODPUT_FRACTION)
NEVER = {RECOVERY_MS: "never recovered"}


def recovered(t: Mapping[str, Any]) -> bool:
    return t.get(RECOVERY_MS) is not None


def legend(t: Mapping[str, Any]) -> str:
    """A transport's recovery and stall, for a plot's legend."""
    rec = t[RECOVERY_MS]
    return f"recovery {'never' if rec is None else f'{rec:.0f} ms'}, stall {t[STALL_MS]:.0f} ms"


TABLE_HEADER = ("recovery ms", "stall ms", "before Mb/s", "during Mb/s", "data ok")


def table_cells(t: Mapping[str, Any]) -> tuple[str, ...]:
    """A transport's cells under TABLE_HEADER (the demo's table)."""
    rec = "never" if t[RECOVERY_MS] is None else f"{t[RECOVERY_MS]:.0f}"
    return (rec, f"{t[STALL_MS]:.0f}", f"{t[GOODPUT_BEFORE_MBPS]:.1f}",
            f"{t[GOODPUT_DURING_MBPS]:.1f}", "yes" if t[DATA_OK] else "NO")


def story(t: Mapping[str, Cells], detect_ms: object) -> str:
    """What the link-failure run showed, in one sentence (README's account of the demo), from
    its reference figures per transport."""
    mrc, roce = t["mrc"], t["roce"]
    return (f"MRC {num(mrc[GOODPUT_BEFORE_MBPS])} Mbit/s before the cut and "
            f"{num(mrc[GOODPUT_DURING_MBPS])} during it, recovery {ms(mrc[RECOVERY_MS])} ms, "
            f"longest run of empty 10 ms bins {ms(mrc[STALL_MS])} ms; the single-path baseline "
            f"(roce) stalls "
            f"{ms(roce[STALL_MS])} ms (the {ms(detect_ms)} ms "
            f"detection delay plus its retransmission timer), then runs at "
            f"{num(roce['goodput_after_mbps'])} Mbit/s on a surviving spine.\n")


def busiest_uplink(bed: Testbed, src: str, before: dict, after: dict) -> tuple[str, dict[str, int]]:
    """The plane-0 uplink of `src`'s leaf that carried the most packets between two counter
    readings of that leaf (the lowest spine on a tie), and the count per spine."""
    fabric = bed.fabric
    leaf = fabric.leaf(BASELINE_PLANE, fabric.host(src).leaf_index)
    first_uplink = fabric.params.hosts_per_leaf + 1
    counts = {s: after.get(first_uplink + s, {}).get("tx_pkts", 0)
              - before.get(first_uplink + s, {}).get("tx_pkts", 0)
              for s in range(fabric.params.spines)}
    spine = max(counts, key=lambda s: (counts[s], -s))
    per_spine = {fabric.spine(BASELINE_PLANE, s).name: n for s, n in counts.items()}
    return f"{leaf.name}-{fabric.spine(BASELINE_PLANE, spine).name}", per_spine


def t0_links(fabric: Fabric, leaf: str) -> list[str]:
    """Every link of leaf `leaf`, host links first: what a T0 failure takes down (a leaf that
    stops forwarding with its ports up would hide the failure from the hosts; a dead T0 does not)."""
    links = fabric.links_of(fabric.switch(leaf).name)
    return [ln.name for ln in sorted(links, key=lambda ln: ln.kind != "host")]


def receiver_leaf(fabric: Fabric, dst: str) -> str:
    """The plane-0 leaf of host `dst` (t0-failure's default target)."""
    return fabric.leaf(BASELINE_PLANE, fabric.host(dst).leaf_index).name


def receiver_port(fabric: Fabric, dst: str) -> str:
    """The plane-0 NIC link of host `dst` (a port scenario's default target)."""
    host = fabric.host(dst)
    return fabric.link(f"{dst}-{fabric.leaf(BASELINE_PLANE, host.leaf_index).name}").name


class Failure(Kind):
    name = "fault"
    options = frozenset({"duration", "fault_at", "fault_end", "detect_ms", "link"})
    OWN = {"switch-failure": {"fail_switch"}, "t0-failure": {"fail_switch"}, "lossy-link": {"loss"},
           "link-flap": {"flaps_per_min", "down_ms"}, "port-flap": {"flaps_per_min", "down_ms"}}

    def takes(self, scenario: str) -> frozenset[str]:
        return self.options | self.OWN.get(scenario, set())

    def check(self, opts: Options, fabric: Fabric) -> None:
        check_fault_window(opts, fabric)
        flap_ok = 0 < opts.flaps_per_min <= 600 and 0 < opts.down_ms < 60_000 / opts.flaps_per_min
        if opts.scenario.name in FLAPS and not flap_ok:
            raise FabricError("--flaps-per-min must be in (0, 600] and --down-ms shorter than one "
                              "flap period")
        if opts.fail_switch is not None:
            tier = fabric.switch(opts.fail_switch).tier
            if opts.scenario.name == "switch-failure" and tier != "T1":
                raise FabricError(f"{opts.fail_switch} is a leaf (T0): switch-failure takes a spine "
                                  f"like p0s1 (t0-failure takes a leaf)")
            if opts.scenario.name == "t0-failure" and tier != "T0":
                raise FabricError(f"{opts.fail_switch} is a spine (T1): t0-failure takes a leaf like "
                                  f"p0l1 (switch-failure takes a spine)")
        if opts.scenario.name == "t0-failure" and opts.link is not None:
            raise FabricError("--link does not apply to t0-failure: it takes a leaf, --fail-switch p0l1")
        kind = fabric.link(opts.link).kind if opts.link is not None else None
        if opts.scenario.name in PORT_SCENARIOS and kind not in (None, "host"):
            raise FabricError(f"{opts.link} is a T0-T1 link: {opts.scenario.name} cuts a host's "
                              f"NIC link like h0-p0l0 (link-failure takes T0-T1 links)")
        if opts.scenario.name == "lossy-link" and kind == "host":
            raise FabricError(f"{opts.link} is a host link: random loss applies to T0-T1 links "
                              f"like p0l0-p0s1")

    def option_fields(self, opts: Options) -> dict:
        name = opts.scenario.name
        if name == "lossy-link":
            return {"loss": opts.loss}
        if name in FLAPS:
            return {"flaps_per_min": opts.flaps_per_min, "down_ms": opts.down_ms}
        return {}

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, faults = bed.fabric, bed.faults
        fault_at, fault_end = fault_window(opts)
        src, dst = traffic.cross_leaf_pair(fabric)
        flow = bed.flow(transport, src, dst)
        leaf = fabric.leaf(BASELINE_PLANE, fabric.host(src).leaf_index).name
        dst_leaf = fabric.leaf(BASELINE_PLANE, fabric.host(dst).leaf_index).name
        dst_port = fabric.host(dst).nics[BASELINE_PLANE].leaf_port
        t0 = time.monotonic()
        flow.start(opts.duration)
        start = t0 + max(RATE_START_S, fault_at - 0.1 - RATE_WINDOW_S)
        sleep_until(start)
        before = whole(bed.em).port_counters(leaf)
        sent = _sent_bytes(bed, dst_leaf, dst_port, start, t0 + fault_at - 0.1)
        after = whole(bed.em).port_counters(leaf)
        record.link_rates[label] = _mbps(sent[0], sent[-1])
        if len(sent) > 2:
            record.link_parts[label] = [_mbps(a, b) for a, b in itertools.pairwise(sent)]
        uplink_counts: dict[str, int] = {}
        link = opts.link or record.first_target
        if link is None and opts.scenario.name in PORT_SCENARIOS:
            link = receiver_port(fabric, dst)
        if link is None and opts.scenario.name == "t0-failure":
            link = opts.fail_switch or receiver_leaf(fabric, dst)
        if link is None:
            link, uplink_counts = busiest_uplink(bed, src, before, after)
        if opts.same_target:
            record.first_target = link  # every later transport faces the same failed link
        name = opts.scenario.name
        down: frozenset[str]
        first = len(faults.timeline)
        if name == "switch-failure":
            switch = opts.fail_switch or link.split("-")[1]
            down = frozenset(ln.name for ln in fabric.links_of(switch))
            sleep_until(t0 + fault_at)
            faults.fail_switch(switch)
            sleep_until(t0 + fault_end)
            faults.restore_switch(switch)
        elif name == "t0-failure":
            cut = t0_links(fabric, link)
            down = frozenset(cut)
            sleep_until(t0 + fault_at)
            for each in cut:
                faults.cut_link(each)
            sleep_until(t0 + fault_end)
            for each in cut:
                faults.restore_link(each)
        elif name == "lossy-link":
            down = frozenset()
            sleep_until(t0 + fault_at)
            faults.set_loss(link, opts.loss)
            sleep_until(t0 + fault_end)
            faults.clear_loss(link)
        elif name in FLAPS:
            down = frozenset({link})
            period = 60.0 / opts.flaps_per_min
            t = fault_at
            while t + opts.down_ms / 1000 <= fault_end:
                sleep_until(t0 + t)
                faults.cut_link(link)
                sleep_until(t0 + t + opts.down_ms / 1000)
                faults.restore_link(link)
                t += period
        else:  # link-failure, port-failure
            down = frozenset({link})
            sleep_until(t0 + fault_at)
            faults.cut_link(link)
            sleep_until(t0 + fault_end)
            faults.restore_link(link)
        events = [{**e, "t": e["t"] - t0} for e in faults.timeline[first:]]  # the flow's clock
        sleep_until(t0 + opts.duration + TAIL_S)  # let the tail drain
        (result,) = finish([flow])
        record.windows[label] = (t0, t0 + opts.duration)
        record.timeline += [{**e, "transport": label} for e in events]
        figures = fault_metrics(opts, fabric, result, t0, events, down)
        record.curves[label] = figures.pop("curve")
        record.transports[label] = figures
        figures["target"] = link if name != "switch-failure" else events[0]["target"]
        # How the target was found: packets each plane-0 uplink of the source leaf carried
        # before the fault (the hashed flow's spine stands out).
        figures["uplink_tx_pkts_before_fault"] = uplink_counts
        record.keep_trace(label, flow)
        # Let the baseline routing plane converge back before the next transport starts.
        time.sleep(opts.detect_ms / 1000 + 0.3)


def fault_metrics(opts: Options, fabric: Fabric, res: FlowResult, t0: float, events: list[dict],
                  down: frozenset[str]) -> dict:
    """A fault run's figures from its goodput bins (and, under "curve", the Mbit/s series)."""
    n = round(opts.duration / metrics.BIN_S)
    mbps = metrics.series(res.bins, int(t0 / metrics.BIN_S), n)
    warm = round(WARMUP_S / metrics.BIN_S)
    fault_at, fault_end = fault_window(opts)
    fault_i = round(events[0]["t"] / metrics.BIN_S) if events else round(fault_at / metrics.BIN_S)
    end_i = round(events[-1]["t"] / metrics.BIN_S) if events else round(fault_end / metrics.BIN_S)
    before = metrics.mean(mbps[warm:fault_i])
    during = metrics.mean(mbps[fault_i:end_i])
    tail = mbps[end_i + round(0.5 / metrics.BIN_S):]
    after = metrics.mean(tail) if tail else None
    planes = planes_used(res.transport, fabric.params.planes)
    cap_before = fabric.path_capacity_mbps(res.src, res.dst, planes=planes)
    cap_after = fabric.path_capacity_mbps(res.src, res.dst, down, planes=planes)
    target = metrics.THRESHOLD * before * (cap_after / cap_before if cap_before else 0.0)
    width = metrics.steady_width(mbps, warm, fault_i, metrics.THRESHOLD * before) or 20
    return {
        "src": res.src, "dst": res.dst,
        # No goodput before the fault: nothing to recover to (not an instant recovery).
        RECOVERY_MS: metrics.recovery_ms(mbps, fault_i, target, end_i, width) if before > 0 else None,
        "recovery_smoothing_ms": round(width * metrics.BIN_S * 1000),
        STALL_MS: metrics.longest_stall_ms(mbps, fault_i, min(end_i + round(1 / metrics.BIN_S), n)),
        DATA_OK: res.data_ok and res.delivered,  # a long flow that delivered nothing failed
        "delivered": res.delivered,
        GOODPUT_BEFORE_MBPS: round(before, 2),
        GOODPUT_DURING_MBPS: round(during, 2),
        "goodput_after_mbps": None if after is None else round(after, 2),
        GOODPUT_FRACTION: round(during / before, 3) if before else None,
        "recovery_target_mbps": round(target, 2),
        "capacity_mbps": {"before": cap_before, "during": cap_after},
        "bytes_delivered": res.bytes_delivered,
        **res.detail,
        "curve": mbps,
    }


FLAPS = ("link-flap", "port-flap")
PORT_SCENARIOS = ("port-failure", "port-flap")
FAULT = Failure()
RECOVERY_ROW = ("recovery / stall ms", lambda t, _: f"{ms(t.get(RECOVERY_MS))} / {ms(t.get(STALL_MS))}")
FRACTION_ROW = ("goodput fraction / stall ms",
                lambda t, _: f"{num(t.get(GOODPUT_FRACTION))} / {ms(t.get(STALL_MS))}")
FLAP_FIGURES = (STALL_MS, GOODPUT_BEFORE_MBPS, GOODPUT_DURING_MBPS, GOODPUT_FRACTION, DATA_OK)
SCENARIOS = (
    Scenario("link-failure", FAULT, "T0-T1 link cut during a long transfer, then restored",
             SMALL, 7.0, 2.5, 5.0, figures_type=FaultFigures, figures=FAILURE_FIGURES, brief=BRIEF,
             never=NEVER, row=Row(f"link-failure: {RECOVERY_ROW[0]}", RECOVERY_ROW[1]),
             quick={"transports": ("mrc", "roce"), "duration": 5.0, "fault_at": 2.0, "fault_end": 3.5},
             checks={"mrc": {RECOVERY_MS: at_most(100.0), STALL_MS: at_most(50.0), DATA_OK: IS_TRUE},
                     "roce": {STALL_MS: at_least(800.0), DATA_OK: IS_TRUE}}),
    Scenario("switch-failure", FAULT, "a spine (T1) stops forwarding, ports up, then returns",
             SMALL, 7.0, 2.5, 5.0, figures_type=FaultFigures, figures=FAILURE_FIGURES, brief=BRIEF,
             never=NEVER, row=Row(f"switch-failure: {RECOVERY_ROW[0]}", RECOVERY_ROW[1])),
    Scenario("t0-failure", FAULT, "a leaf (T0) of one plane down with every port, then back",
             SMALL, 7.0, 2.5, 5.0, figures_type=FaultFigures,
             figures=(*FAILURE_FIGURES[:-1], GOODPUT_FRACTION, DATA_OK), brief=BRIEF, never=NEVER,
             row=Row(f"t0-failure: {FRACTION_ROW[0]}", FRACTION_ROW[1])),
    Scenario("link-flap", FAULT, "a T0-T1 link flapping at a set rate", SMALL, 8.0, 2.0, 7.0,
             figures_type=FaultFigures,
             figures=FLAP_FIGURES, brief=BRIEF, never=NEVER,
             row=Row(f"link-flap: {FRACTION_ROW[0]}", FRACTION_ROW[1])),
    Scenario("lossy-link", FAULT, "random drop with probability p on one T0-T1 link",
             SMALL, 7.0, 2.5, 6.5, figures_type=FaultFigures,
             figures=(GOODPUT_BEFORE_MBPS, GOODPUT_DURING_MBPS, GOODPUT_FRACTION, DATA_OK),
             brief=BRIEF, never=NEVER,
             row=Row("lossy-link p=0.2: goodput fraction", lambda t, _: num(t.get(GOODPUT_FRACTION))),
             quick={"transports": ("mrc",), "duration": 5.0, "fault_at": 2.0, "fault_end": 4.8,
                    "loss": 0.2},
             checks={"mrc": {GOODPUT_FRACTION: at_least(0.93), DATA_OK: IS_TRUE}}),
    Scenario("port-failure", FAULT, "a host's NIC port (its link to the leaf) cut, then restored",
             SMALL, 7.0, 2.5, 5.0, figures_type=FaultFigures, figures=FAILURE_FIGURES, brief=BRIEF,
             never=NEVER, row=Row(f"port-failure: {RECOVERY_ROW[0]}", RECOVERY_ROW[1])),
    Scenario("port-flap", FAULT, "a host's NIC port flapping at a set rate", SMALL, 8.0, 2.0, 7.0,
             figures_type=FaultFigures,
             figures=FLAP_FIGURES, brief=BRIEF, never=NEVER,
             row=Row(f"port-flap: {FRACTION_ROW[0]}", FRACTION_ROW[1])),
)
