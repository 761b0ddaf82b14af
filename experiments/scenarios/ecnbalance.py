"""ECN load balancing (kind "ecn-balance", the MRC paper's Fig. 14): two flows spray over
their paths; at --fault-at the second is forced onto one path (plane 0, spine 0: every other
EV DENIED, the agent's `restrict`), a path the first one also sprays over. ECN on that path
must move the first flow's load off it with no loss of goodput. Figures: the flows' goodput
from SETTLE_S after the force over what the fabric can carry for them then (of the links' rate,
and of the most of it that can be payload), the same before the force, each flow's rate, and
the share of the first flow's data still sent on the shared path; ev_load.png draws each
flow's data per EV over time (polled from the senders)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final, NamedTuple

from endpoints.host.paths import SOURCE_ROUTED
from endpoints.protocol import wire
from experiments.analysis import fidelity, metrics
from experiments.api.flows import finish
from experiments.api.testbed import Testbed
from experiments.scenarios.base import (
    DEFAULT_LINK_MBPS,
    TAIL_S,
    WARMUP_S,
    Kind,
    Options,
    Record,
    Scenario,
    sleep_until,
)
from experiments.scenarios.schema import (
    A_SHARED_SHARE_AFTER,
    DATA_OK,
    GOODPUT_FRACTION,
    IS_TRUE,
    Figures,
    Row,
    at_most,
    num,
    within,
)
from topologies.face import whole
from topologies.model import Fabric, FabricError, FabricParams

SHARED = (0, 0)  # (plane, spine) of the path the second flow is forced onto
SETTLE_S = 0.5  # after the force: the first flow's skips have moved its load by then
POLL_S = 0.05  # per-EV load sampling period (two control calls per period)
# A flow with an EV set to restrict: the source-routed transports.
AGENT_TRANSPORTS = SOURCE_ROUTED


# The headline and checked figures' keys: their one spelling, which every reader imports.
GOODPUT_FRACTION_BEFORE: Final = "goodput_fraction_before"
# The pair's goodput after the force over the most of the links' rate that can be payload (one-way
# flows: full frames, encapsulated, no SACKs on the forward links): the measure of "no dip" that
# the paper's line-rate flows and Fig. 20's permutation use (`wire.payload_ceiling`).
GOODPUT_OF_CEILING: Final = "goodput_of_ceiling"


class EcnBalanceFigures(Figures, total=False):
    """One transport's figures in ecn-balance."""
    flows: dict[str, list[str]]  # a, b -> [src, dst]
    goodput_fraction: float  # both flows' goodput after the force over what the fabric carries
    goodput_fraction_before: float
    payload_ceiling: float  # the most of the links' rate that can be payload, one-way
    goodput_of_ceiling: float  # goodput_fraction over payload_ceiling
    a_mbps_after: float
    b_mbps_after: float
    capacity_mbps: dict[str, float]  # before, after
    a_shared_share_before: float | None  # the first flow's data sent on the shared path
    a_shared_share_after: float | None
    shared_ev: dict[str, int]
    b_kept: list[int]  # the second flow's EVs left after the force
    forced_at_s: float | None
    a_sender: dict[str, int]
    b_sender: dict[str, int]
    switch_ports: dict[str, Any]


class Roles(NamedTuple):
    a: tuple[str, str]  # the first flow: sprays all along
    b: tuple[str, str]  # the second: forced onto the shared path


def roles(fabric: Fabric) -> Roles:
    """Both senders on the first leaf, both receivers on the last: the flows share every
    uplink of the first leaf and every downlink into the last, nothing else."""
    first = [h.name for h in fabric.hosts if h.leaf_index == 0]
    last = [h.name for h in fabric.hosts if h.leaf_index == fabric.params.leaves - 1]
    return Roles((first[0], last[0]), (first[1], last[1]))


def capacity_mbps(params: FabricParams) -> tuple[float, float]:
    """(before, after) the force: what the fabric can carry for the two flows.

    Before: both NICs, up to the first leaf's uplinks. After: the second flow's one path
    (a link), plus the first flow's NIC up to its other paths' links; the first flow then
    carries nothing on the shared path."""
    link, nic = params.link_mbps, params.planes * params.link_mbps
    paths = params.planes * params.spines
    return min(2 * nic, paths * link), link + min(nic, (paths - 1) * link)


def per_ev_mbps(samples: list[tuple[float, dict[int, int]]]) -> list[tuple[float, dict[int, float]]]:
    """Cumulative bytes sent per EV, sampled at times t -> Mbit/s per EV over each period
    (stamped at its end)."""
    out = []
    for (t0, b0), (t1, b1) in zip(samples, samples[1:], strict=False):
        dt = t1 - t0
        if dt > 0:
            out.append((t1, {ev: (b1[ev] - b0.get(ev, 0)) * 8 / dt / 1e6 for ev in b1}))
    return out


def share_on(samples: list[tuple[float, dict[int, int]]], ev: int, t_from: float,
             t_to: float) -> float | None:
    """The fraction of the bytes sent between `t_from` and `t_to` that went on `ev`."""
    inside = [(t, b) for t, b in samples if t_from <= t <= t_to]
    if len(inside) < 2:
        return None
    (_, first), (_, last) = inside[0], inside[-1]
    total = sum(last.values()) - sum(first.values())
    return round((last.get(ev, 0) - first.get(ev, 0)) / total, 3) if total > 0 else None


class EcnBalance(Kind):
    name = "ecn-balance"
    options = frozenset({"duration", "fault_at"})

    def check(self, opts: Options, fabric: Fabric) -> None:
        p = fabric.params
        if p.leaves < 2 or p.spines < 2 or p.hosts_per_leaf < 2:
            raise FabricError("ecn-balance needs 2+ leaves, 2+ spines and 2+ hosts per leaf "
                              "(two flows between two leaves, another path to move to)")
        if opts.fault_at is None or not 0 < opts.fault_at < opts.duration - SETTLE_S:
            raise FabricError(f"ecn-balance needs 0 < --fault-at (when the second flow is forced "
                              f"onto the shared path) < --duration - {SETTLE_S}")
        if WARMUP_S >= opts.fault_at:
            raise FabricError(f"ecn-balance needs --fault-at > {WARMUP_S} (the flows' warm-up)")
        other = [t for t in opts.transports if t not in AGENT_TRANSPORTS]
        if other:
            raise FabricError(f"ecn-balance forces a flow onto one of its EVs: transports "
                              f"{', '.join(AGENT_TRANSPORTS)} only, not {', '.join(other)}")

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        return 2  # both flows, each filling its NICs

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, em = bed.fabric, whole(bed.em)
        assert opts.fault_at is not None
        (asrc, adst), (bsrc, bdst) = roles(fabric)
        a, b = bed.agent_flow(transport, asrc, adst), bed.agent_flow(transport, bsrc, bdst)
        shared = {f: next(r.ev for r in fabric.routes(f.src, f.dst) if (r.plane, r.spine) == SHARED)
                  for f in (a, b)}
        if em.dataplane is not None:
            em.dataplane.reset()
        loads: dict[str, list[tuple[float, dict[int, int]]]] = {"a": [], "b": []}
        t0 = time.monotonic()
        a.start(opts.duration)
        b.start(opts.duration)
        force_t, forced_at, kept = t0 + opts.fault_at, None, []
        polls = (t0 + i * POLL_S for i in range(round(opts.duration / POLL_S) + 1))
        for tick in polls:
            if forced_at is None and force_t <= tick:
                sleep_until(force_t)  # on time, not at the next poll
                kept = b.restrict([SHARED])
                forced_at = time.monotonic() - t0
                record.timeline.append({"t": forced_at, "action": "force_shared_path",
                                        "transport": label, "target": f"{b.src}->{b.dst}",
                                        "keep": f"plane {SHARED[0]} spine {SHARED[1]}", "evs": kept})
            sleep_until(tick)
            for key, flow in (("a", a), ("b", b)):
                rows = flow.evs()["rows"]
                loads[key].append((time.monotonic() - t0, {r["ev"]: r["bytes_sent"] for r in rows}))
        sleep_until(t0 + opts.duration + TAIL_S)
        ra, rb = finish([a, b])
        n = round(opts.duration / metrics.BIN_S)
        ma = metrics.series(ra.bins, int(t0 / metrics.BIN_S), n)
        mb = metrics.series(rb.bins, int(t0 / metrics.BIN_S), n)
        force = round(opts.fault_at / metrics.BIN_S)
        after = slice(force + round(SETTLE_S / metrics.BIN_S), n)
        before = slice(round(WARMUP_S / metrics.BIN_S), force)
        cap_before, cap_after = capacity_mbps(fabric.params)
        a_after, b_after = metrics.mean(ma[after]), metrics.mean(mb[after])
        top = wire.payload_ceiling(bed.transport.mtu_payload, None, label in SOURCE_ROUTED)
        record.curves[label] = [x + y for x, y in zip(ma, mb, strict=True)]
        record.windows[label] = (t0, t0 + opts.duration)
        end = opts.duration
        record.transports[label] = {
            "flows": {"a": [a.src, a.dst], "b": [b.src, b.dst]},
            GOODPUT_FRACTION: round((a_after + b_after) / cap_after, 3),
            "payload_ceiling": round(top, 4),
            GOODPUT_OF_CEILING: round((a_after + b_after) / cap_after / top, 3),
            GOODPUT_FRACTION_BEFORE: round((metrics.mean(ma[before]) + metrics.mean(mb[before]))
                                             / cap_before, 3),
            "a_mbps_after": round(a_after, 2), "b_mbps_after": round(b_after, 2),
            "capacity_mbps": {"before": cap_before, "after": cap_after},
            "a_shared_share_before": share_on(loads["a"], shared[a], WARMUP_S, opts.fault_at),
            A_SHARED_SHARE_AFTER: share_on(loads["a"], shared[a], opts.fault_at + SETTLE_S, end),
            "shared_ev": {"a": shared[a], "b": shared[b]}, "b_kept": kept,
            "forced_at_s": None if forced_at is None else round(forced_at, 3),
            "a_sender": {k: v for k, v in ra.detail.get("sender_stats", {}).items() if v},
            "b_sender": {k: v for k, v in rb.detail.get("sender_stats", {}).items() if v},
            "switch_ports": fidelity.dataplane_totals(em),
            DATA_OK: ra.data_ok and rb.data_ok,
        }
        with open(bed.workdir / f"ev-load-{label}.jsonl", "w") as fh:
            for key in ("a", "b"):
                for t, sent in loads[key]:
                    fh.write(json.dumps({"flow": key, "t": round(t, 4),
                                         "bytes_sent": {str(ev): v for ev, v in sent.items()}}) + "\n")
        record.keep_trace(label, a)

    def plot(self, folder: Path, summary: dict) -> None:
        plot_ev_load(folder, summary)


def read_ev_load(path: Path) -> dict[str, list[tuple[float, dict[int, int]]]]:
    out: dict[str, list[tuple[float, dict[int, int]]]] = {"a": [], "b": []}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            out[rec["flow"]].append((rec["t"], {int(ev): v for ev, v in rec["bytes_sent"].items()}))
    return out


def plot_ev_load(folder: Path, summary: dict) -> None:
    """ev_load.png: per transport, each flow's data per EV over time (stacked, Mbit/s); the
    shared path hatched, the force dashed."""
    from experiments.analysis.plots import fabric_label, fidelity_stamp, pyplot  # matplotlib: only when drawn

    labels = list(summary["transports"])
    fabric = Fabric(FabricParams.from_dict(summary["fabric"]))
    fig, axes = pyplot.subplots(2 * len(labels), 1, figsize=(10, 2.6 * 2 * len(labels) + 0.6), dpi=90,
                             sharex=True, squeeze=False)
    for i, label in enumerate(labels):
        figs = summary["transports"][label]
        loads = read_ev_load(folder / "traces" / f"ev-load-{label}.jsonl")
        for j, key in enumerate(("a", "b")):
            ax = axes[2 * i + j, 0]
            src, dst = figs["flows"][key]
            names = {r.ev: r.label for r in fabric.routes(src, dst)}
            series = per_ev_mbps(loads[key])
            if not series:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="grey")
                continue
            evs = sorted({ev for _, v in series for ev in v})
            t = [s for s, _ in series]
            stacks = ax.stackplot(t, *[[v.get(ev, 0.0) for _, v in series] for ev in evs],
                                  labels=[names.get(ev, f"{ev:#x}") for ev in evs], alpha=0.85)
            for ev, poly in zip(evs, stacks, strict=True):
                if ev == figs["shared_ev"][key]:
                    poly.set_hatch("//")
                    poly.set_label(f"{names.get(ev)} (shared)")
            for event in summary["faults"]:
                if event.get("transport") == label:
                    ax.axvline(event["t"], color="black", ls="--", lw=1)
            share = figs.get(A_SHARED_SHARE_AFTER) if key == "a" else None
            note = f"; shared path's share after the force {share}" if share is not None else ""
            ax.set_title(f"{label} flow {key.upper()} {src}->{dst}: data sent per path (Mbit/s, "
                         f"stacked){note}", fontsize=8, loc="left")
            ax.set_ylabel("Mbit/s", fontsize=8)
            ax.legend(fontsize=7, loc="upper right", ncol=4)
            ax.grid(alpha=0.3)
    fidelity_stamp(axes[0, 0], summary)
    fig.suptitle(f"ecn-balance: the second flow forced onto plane {SHARED[0]} spine {SHARED[1]} "
                 f"(dashed); {fabric_label(summary)}, seed {summary['seed']}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the transport started")
    fig.tight_layout()
    fig.savefig(folder / "ev_load.png")
    pyplot.close(fig)


SCENARIOS = (
    Scenario("ecn-balance", EcnBalance(), "a second flow forced onto one of the first flow's "
             "paths: ECN moves the first flow's load off it (the MRC paper's Fig. 14)",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=DEFAULT_LINK_MBPS), 8.0,
             3.0, None, transports=("mrc", "spray"), figures_type=EcnBalanceFigures,
             figures=(GOODPUT_FRACTION, GOODPUT_OF_CEILING, GOODPUT_FRACTION_BEFORE,
                      A_SHARED_SHARE_AFTER, DATA_OK), brief=(GOODPUT_FRACTION,),
             row=Row("ecn-balance: goodput fraction after the force / first flow's share left on "
                     "the shared path",
                     lambda t, _: f"{num(t.get(GOODPUT_FRACTION))} / {num(t.get(A_SHARED_SHARE_AFTER))}"),
             quick={"transports": ("mrc",), "duration": 6.0, "fault_at": 2.5},
             # spray, which cannot move its load, leaves 1/4 of it on the shared path (0.80 of
             # capacity)
             checks={"mrc": {GOODPUT_FRACTION: within(0.04),
                             A_SHARED_SHARE_AFTER: at_most(0.05), DATA_OK: IS_TRUE}}),
)
