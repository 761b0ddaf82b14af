"""Loss on one EV (kind "ev-loss", the MRC paper's Figs. 12-13): one long flow over a small EV
set; at --fault-at one of its active EVs starts dropping --loss of its packets (the default 20%)
until --fault-end. MRC must bench that EV (ASSUMED_BAD) at once, put its plane's backup in its
place, and keep its goodput.

An EV is one path here: a uSID list through one spine of one plane. The lossy EV is found, not
guessed: at the fault, the sender's EV set (the agent's `evs`) names its active EVs, and the
first active one of plane `LOSSY_PLANE` is chosen (`choose_ev`); the loss is an nftables rule on
the egress of its source leaf's uplink to its spine, one way only, so with one host per leaf
nothing but that EV's data and probes crosses it. The paper's set, 2 EVs per plane with one
active and one backup, is `--param active_fraction=0.5 --param backup_min_paths=2` on the
default fabric (8 planes x 2 spines).

Figures: how long after the packet it judged lost was sent the sender benched the EV (its
trace's `ev_bad` age), in its smoothed RTTs then, beside the time from the loss's start (which
adds the wait for the first drop) and the spacing of the EV's packets (path-order detection
needs a later packet on the same EV: at emulated rates an EV carries a packet every few ms
where a round trip takes about one); which EV took its place (a backup of its plane that
carried no data before and does after), goodput during the loss over before, and every EV's
state over time, drawn as ev_states.png: EV on the y axis, colour the state. Everything but
the choice of the lossy EV comes from the sender agent's trace, each change at its own time:
`ev_state` (GOOD, SKIP, ASSUMED_BAD), `ev_active` (joined or left the active set), `ev_bad`
(the bench's rule and the lost packet's age) and `ev_load` (packets per EV per 50 ms).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from endpoints.host.paths import SOURCE_ROUTED
from experiments.analysis import metrics
from experiments.api import traffic
from experiments.api.flows import finish
from experiments.api.testbed import Testbed
from experiments.scenarios.base import (
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
    Figures,
    Row,
    ms,
    num,
)
from topologies.model import Fabric, FabricError, FabricParams, Route

LOSSY_PLANE = 0
# The paper's EV set: 2 per plane x 8 planes. Here 8 planes x 2 spines, one host per leaf (the
# fewest hosts: the flow's two), links at half the default rate so that the host's 8 ports
# carry what the default fabric's 4 do (the agents' packet rate, not the links, is this VM's
# limit; `mrclab run` lowers it further where even that is not faithful).
FABRIC = FabricParams(planes=8, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
# Colour categories of an EV at a sample: its state, GOOD split by whether it carries data.
ACTIVE, BACKUP = "ACTIVE", "BACKUP"
CATEGORIES = (ACTIVE, BACKUP, "SKIP", "ASSUMED_BAD", "DENIED")

Record_ = Mapping[str, Any]  # one trace record of the sender's QP, `t` from the flow's start


# The headline and checked figures' keys: their one spelling, which every reader imports.
LOST_AGE_MS: Final = "lost_age_ms"
BENCH_RTTS: Final = "bench_rtts"
EV_GAP_MS: Final = "ev_gap_ms"


class EvLossFigures(Figures, total=False):
    """One transport's figures in ev-loss."""
    src: str
    dst: str
    ev: int  # the lossy EV
    ev_label: str  # its path, p0/s1
    link: str  # the link whose egress dropped
    backup_ev: int | None  # the EV of its plane that took its place
    backup_label: str | None
    backup_packets_before: int | None  # data packets the backup carried before the loss (none: a backup)
    backup_packets_during: int | None  # ... and while the loss lasted
    bad_after_ms: float | None  # from the loss's start to the EV's ASSUMED_BAD; None: never benched
    bench_rule: str | None  # the sender's rule that benched it: sack (path order), dark or rto
    lost_age_ms: float | None  # from sending the packet judged lost to the bench
    srtt_ms: float | None  # the sender's smoothed RTT just before the loss
    bench_rtts: float | None  # lost_age_ms in srtt_ms
    ev_gap_ms: float | None  # mean spacing of the EV's data packets before the loss
    dropped: int  # packets the loss rule dropped
    goodput_before_mbps: float
    goodput_during_mbps: float
    goodput_fraction: float | None
    evs: dict[str, str]  # EV (hex) -> its path's label, in the plot's order
    ev_bands: dict[str, list[list]]  # EV (hex) -> [t0, t1, category] from the flow's start (trace)
    sender_stats: dict[str, int]
    receiver_stats: dict[str, int]


def category(state: str, active: bool) -> str:
    """An EV's colour: GOOD split into ACTIVE (in the active set) and BACKUP; other states as
    they are."""
    if state == "GOOD":
        return ACTIVE if active else BACKUP
    return state


def choose_ev(rows: Sequence[Mapping[str, Any]], routes: Sequence[Route], plane: int) -> Route | None:
    """The route of the first active EV of `plane` in use (GOOD, or skipped for an ECN echo) in
    a sender's `evs` rows, the lowest spine first; None when the plane has none."""
    active = {r["ev"] for r in rows if r["active"] and r["state"] in ("GOOD", "SKIP")}
    return next((r for r in sorted(routes, key=lambda r: (r.plane, r.spine or 0))
                 if r.plane == plane and r.ev in active), None)


def bands(records: Sequence[Record_], t_end: float) -> dict[int, list[list]]:
    """Each EV's [t0, t1, category] spans from the sender's trace: its `ev_state` (state) and
    `ev_active` (role) records, every change at its own time, the last span until `t_end`,
    equal neighbours merged. An EV's first span starts at its first record (its starting
    role, written at the QP's first send)."""
    now: dict[int, list] = {}  # ev -> [state, active]
    points: dict[int, list[tuple[float, str]]] = {}  # ev -> (t, category from t)
    for r in sorted((r for r in records if r.get("event") in ("ev_state", "ev_active")),
                    key=lambda r: r["t"]):
        cur = now.setdefault(r["ev"], ["GOOD", False])
        if r["event"] == "ev_state":
            cur[0] = r["new"]
        else:
            cur[1] = bool(r["active"])
        cat, pts = category(cur[0], cur[1]), points.setdefault(r["ev"], [])
        if pts and pts[-1][0] == r["t"]:
            pts.pop()  # records of one instant (a bench and the role it costs): the last holds
        if not pts or pts[-1][1] != cat:
            pts.append((r["t"], cat))
    # (+ 0.0: a first send a hair before the flow's start is 0.0, not -0.0)
    return {ev: [[round(t, 3) + 0.0, round(pts[i + 1][0] if i + 1 < len(pts) else t_end, 3), cat]
                 for i, (t, cat) in enumerate(pts)] for ev, pts in points.items()}


def packets_between(records: Sequence[Record_], ev: int, t_from: float, t_to: float) -> int:
    """Data packets the sender sent on `ev` in the `ev_load` intervals ending in (t_from, t_to]."""
    key = str(ev)
    return sum(r["sent"].get(key, 0) for r in records
               if r.get("event") == "ev_load" and t_from < r["t"] <= t_to)


def packet_gap_ms(records: Sequence[Record_], ev: int, t_from: float, t_to: float) -> float | None:
    """The mean spacing of `ev`'s data packets over [t_from, t_to] (its `ev_load` counts); None
    when it sent nothing there."""
    packets = packets_between(records, ev, t_from, t_to)
    return round((t_to - t_from) * 1000 / packets, 2) if packets else None


def backup_taken(records: Sequence[Record_], plane_of: Mapping[int, int], lossy: int,
                 fault_t: float) -> int | None:
    """The EV of `lossy`'s plane that was out of the active set at `fault_t` and joined it
    later (its `ev_active` records): the backup that took the lossy EV's place (None: none
    did, or the trace holds no role from before the fault)."""
    plane = plane_of[lossy]
    role: dict[int, bool] = {}
    for r in sorted((r for r in records if r.get("event") == "ev_active"), key=lambda r: r["t"]):
        ev = r["ev"]
        if r["t"] < fault_t:
            role[ev] = bool(r["active"])
        elif r["active"] and ev != lossy and plane_of.get(ev) == plane and role.get(ev) is False:
            return int(ev)
    return None


def first_bench(records: Iterable[Mapping[str, Any]], ev: int, since: float) -> Mapping[str, Any] | None:
    """The first `ev_bad` trace record of `ev` at or after `since` (t, rule, seq, age), or None."""
    return min((r for r in records if r.get("event") == "ev_bad" and r.get("ev") == ev and r["t"] >= since),
               key=lambda r: r["t"], default=None)


def first_bad(changes: Sequence[Sequence[Any]], ev: int, since: float) -> float | None:
    """The first time at or after `since` that `ev` went ASSUMED_BAD, from [t, ev, old, new]."""
    return min((c[0] for c in changes if c[1] == ev and c[3] == "ASSUMED_BAD" and c[0] >= since),
               default=None)


class EvLoss(Kind):
    name = "ev-loss"
    options = frozenset({"duration", "fault_at", "fault_end", "loss"})

    def check(self, opts: Options, fabric: Fabric) -> None:
        check_fault_window(opts, fabric)
        if opts.fault_at is not None and opts.fault_at <= WARMUP_S:
            raise FabricError(f"ev-loss needs --fault-at > {WARMUP_S} (the flow's warm-up)")
        other = [t for t in opts.transports if t not in SOURCE_ROUTED]
        if other:
            raise FabricError(f"ev-loss makes one of a flow's EVs lossy: transports "
                              f"{', '.join(SOURCE_ROUTED)} only, not {', '.join(other)}")
        if fabric.params.hosts_per_leaf != 1:
            raise FabricError("ev-loss needs --hosts-per-leaf 1: then only the lossy EV crosses "
                              "the link that drops")

    def option_fields(self, opts: Options) -> dict:
        return {"loss": opts.loss}

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, faults = bed.fabric, bed.faults
        fault_at, fault_end = fault_window(opts)
        src, dst = traffic.cross_leaf_pair(fabric)
        routes = fabric.routes(src, dst)
        flow = bed.agent_flow(transport, src, dst)
        chosen: Route | None = None
        link, srtt_ms, loss_t, end_t = "", None, None, None
        first = len(faults.timeline)
        t0 = time.monotonic()
        flow.start(opts.duration)
        sleep_until(t0 + fault_at)
        # The one control call of the run: which EVs are active now (the lossy one is one of
        # them) and the smoothed RTT the bench is measured in; every EV's state over time is
        # read from the sender's trace afterwards, each change at its own time.
        reply = flow.evs()
        srtt_ms = reply.get("congestion", {}).get("srtt_ms")
        chosen = choose_ev(reply["rows"], routes, LOSSY_PLANE)
        if chosen is None:
            raise RuntimeError(f"{transport} has no active EV in use on plane {LOSSY_PLANE}")
        link = chosen.links[1]  # the source leaf's uplink to the EV's spine
        loss_t = faults.set_loss(link, opts.loss, from_switch=link.split("-")[0]) - t0
        sleep_until(t0 + fault_end)
        faults.clear_loss(link)
        end_t = time.monotonic() - t0
        sleep_until(t0 + opts.duration + TAIL_S)
        (result,) = finish([flow])
        events = [{**e, "t": e["t"] - t0} for e in faults.timeline[first:]]
        record.timeline += [{**e, "transport": label} for e in events]
        record.windows[label] = (t0, t0 + opts.duration)
        n = round(opts.duration / metrics.BIN_S)
        mbps = metrics.series(result.bins, int(t0 / metrics.BIN_S), n)
        record.curves[label] = mbps
        before = metrics.mean(mbps[round(WARMUP_S / metrics.BIN_S):round(loss_t / metrics.BIN_S)])
        during = metrics.mean(mbps[round(loss_t / metrics.BIN_S):round(end_t / metrics.BIN_S)])
        records = _trace(flow.trace, flow.qpn, t0)
        changes = [[r["t"], r["ev"], r["old"], r["new"]] for r in records if r.get("event") == "ev_state"]
        bad_t = first_bad(changes, chosen.ev, loss_t)
        bench = first_bench(records, chosen.ev, loss_t)
        gap_ms = packet_gap_ms(records, chosen.ev, WARMUP_S, loss_t)
        age_ms = None if bench is None else round(bench["age"] * 1000, 2)
        plane_of = {r.ev: r.plane for r in routes}
        backup = backup_taken(records, plane_of, chosen.ev, loss_t)
        label_of = {r.ev: r.label for r in routes}
        ev_bands = bands(records, opts.duration)
        order = sorted((ev for ev in plane_of if ev in ev_bands), key=lambda ev: (plane_of[ev], label_of[ev]))
        dropped: dict[str, int] = next((e.get("dropped", {}) for e in events
                                        if e["action"] == "loss_cleared"), {})
        bad_ms = None if bad_t is None else round((bad_t - loss_t) * 1000, 1)
        record.transports[label] = {
            "src": src, "dst": dst, "ev": chosen.ev, "ev_label": chosen.label, "link": link,
            "backup_ev": backup, "backup_label": None if backup is None else label_of[backup],
            "backup_packets_before": None if backup is None else
            packets_between(records, backup, WARMUP_S, loss_t),
            "backup_packets_during": None if backup is None else
            packets_between(records, backup, loss_t, end_t),
            "bad_after_ms": bad_ms, "bench_rule": None if bench is None else bench["rule"],
            LOST_AGE_MS: age_ms, "srtt_ms": srtt_ms,
            BENCH_RTTS: None if age_ms is None or not srtt_ms else round(age_ms / srtt_ms, 2),
            EV_GAP_MS: gap_ms,
            "dropped": sum(dropped.values()),
            GOODPUT_BEFORE_MBPS: round(before, 2), GOODPUT_DURING_MBPS: round(during, 2),
            GOODPUT_FRACTION: round(during / before, 3) if before else None,
            "evs": {f"{ev:#x}": label_of[ev] for ev in order},
            "ev_bands": {f"{ev:#x}": ev_bands[ev] for ev in order},
            DATA_OK: result.data_ok and result.delivered,
            **result.detail,
        }
        record.keep_trace(label, flow)

    def plot(self, folder: Path, summary: dict) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [n for n, t in summary["transports"].items() if t.get("ev_bands")]
        if not names:
            return
        fig, axes = plt.subplots(len(names), 1, figsize=(10, 3.6 * len(names)), squeeze=False)
        for ax, name in zip(axes[:, 0], names, strict=True):
            draw_ev_bands(ax, summary["transports"][name])
            for e in summary["faults"]:
                if e.get("transport") == name:
                    ax.axvline(e["t"], color="black", linestyle="--", linewidth=0.8)
            ax.set_title(f"{name}: per-EV state ({EV_LEGEND}); dashed: loss on/off", fontsize=8, loc="left")
        axes[-1, 0].set_xlabel("time since the transport's start (s)")
        fig.tight_layout()
        fig.savefig(folder / "ev_states.png", dpi=90)
        plt.close(fig)


def _trace(path: Path | None, qpn: int, t0: float) -> list[dict]:
    """QP `qpn`'s records of an agent trace, times from `t0`."""
    out = []
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the last line may still be being written
            if rec.get("qpn") == qpn and "t" in rec:
                out.append({**rec, "t": rec["t"] - t0})
    return out


EV_COLOURS = {ACTIVE: "#2ca02c", BACKUP: "#c7e9c0", "SKIP": "#ffbf00", "ASSUMED_BAD": "#d62728",
              "DENIED": "#444444"}
EV_LEGEND = "dark green active, pale green backup, amber SKIP, red ASSUMED_BAD"


def draw_ev_bands(ax: Any, figures: Mapping[str, Any]) -> None:
    """One row per EV of `figures["evs"]` (its path's label on the y axis, the lossy one
    marked), coloured by its category over time (Fig. 13's shape)."""
    evs = list(figures["evs"])
    for row, ev in enumerate(evs):
        for t0, t1, cat in figures["ev_bands"].get(ev, []):
            ax.hlines(row, t0, t1, color=EV_COLOURS.get(cat, "grey"), linewidth=6)
    lossy = f"{figures['ev']:#x}"
    ax.set_yticks(range(len(evs)), [f"{figures['evs'][ev]}{' (lossy)' if ev == lossy else ''}"
                                    for ev in evs], fontsize=6)
    ax.set_ylim(-0.7, len(evs) - 0.3)
    ax.set_ylabel("EV (path)", fontsize=8)


SCENARIOS = (
    Scenario("ev-loss", EvLoss(), "one active EV of a small EV set drops a share of its packets "
             "(the MRC paper's Figs. 12-13)", FABRIC, 7.0, 2.5, 5.5, transports=("mrc",),
             figures_type=EvLossFigures,
             figures=(LOST_AGE_MS, BENCH_RTTS, EV_GAP_MS, GOODPUT_FRACTION, DATA_OK),
             brief=(LOST_AGE_MS, GOODPUT_FRACTION), never={LOST_AGE_MS: "never benched"},
             row=Row("ev-loss p=0.2: lost packet's age at the bench ms / goodput fraction",
                     lambda t, _: f"{ms(t.get(LOST_AGE_MS))} / {num(t.get(GOODPUT_FRACTION))}")),
)
