"""`mrclab demo`: the link-failure scenario told as one story. A long single-path ECMP transfer
(`roce`, the RoCE-like go-back-N baseline) and a long MRC transfer between hosts on different
leaves, each facing the same cut of the T0-T1 link the baseline's flow hashed onto, then its
restore. The summary is the scenario's, figures and names unchanged, with a few additions.

The two run one after the other on the same fabric (experiments/runner.py), so neither's
goodput measures the other's traffic; both curves share one time axis: seconds since each
transfer started. The baseline runs first, because the link to cut is the one its hashed flow
uses (found from the leaf's port counters, not guessed); MRC then faces that same link.
Results go to a staging folder and into place only when complete, so an interrupted run
leaves the previous results/demo untouched.
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import metrics
from experiments.runner import Run, run_scenario
from experiments.scenarios import SCENARIOS, Options, check, failure, schema
from experiments.scenarios.base import DEFAULT_FABRIC
from topologies import files
from topologies.model import DEFAULT_DETECT_MS, Fabric, FabricError

DEMO_FABRIC = DEFAULT_FABRIC  # the default fabric (scenarios/base.py): 12 paths per host pair
# The baseline first: the link to cut is the one its hashed flow uses, and MRC faces the same.
DEMO_TRANSPORTS = ("roce", "mrc")
DESCRIPTIONS = {"roce": "go-back-N, one ECMP-hashed path on plane 0",
                "mrc": "MRC, sprayed over every path of every plane"}
SCENARIO = "link-failure"  # whose summary, figures and report columns the demo's are


def run_demo(fabric: Fabric, out: Path, duration: float = 8.0, cut_at: float = 3.0,
             restore_at: float = 6.0, detect_ms: float = DEFAULT_DETECT_MS, seed: int = 1,
             datapath: str = "auto", quiet: bool = False, dataplane: str = "auto",
             switch: str = "auto", servers: tuple[str, ...] = ()) -> dict:
    if fabric.params.leaves < 2 or fabric.params.spines < 2:
        raise FabricError("the demo needs 2+ leaves (hosts on different leaves) and 2+ spines "
                          "(so the baseline has somewhere to reroute): pass --leaves 2 --spines 2")
    opts = check(Options(SCENARIOS[SCENARIO], fabric.params, DEMO_TRANSPORTS, duration,
                         cut_at, restore_at, detect_ms=detect_ms, seed=seed, datapath=datapath,
                         dataplane=dataplane, switch_backend=switch, servers=servers,
                         same_target=True))  # the same checks as `run`
    say = (lambda m: None) if quiet else (lambda m: print(f"[demo] {m}", flush=True))
    summary = run_scenario(opts, out, say, finish=_demo_view)
    if not quiet:
        print(format_table(summary, out))
    return summary


def _demo_view(run: Run, summary: dict, staging: Path) -> None:
    """What the demo adds to the link-failure scenario's summary, whose figures it keeps as they
    are: `failure` (the link and when, on each transfer's own clock), `ok`, the fidelity at a
    glance, goodput.csv and recovery.png with both curves."""
    from experiments.analysis.plots import plot_recovery

    transports = summary["transports"]
    for name, t in transports.items():
        t["transport"] = DESCRIPTIONS[name]
    cuts = {e["transport"]: e for e in summary["faults"] if e["action"] == "cut"}
    restores = {e["transport"]: e for e in summary["faults"] if e["action"] == "restore"}
    first_cut, first_restore = cuts[DEMO_TRANSPORTS[0]], restores[DEMO_TRANSPORTS[0]]
    summary["failure"] = {"link": first_cut["target"], "at_s": round(first_cut["t"], 3),
                          "restored_at_s": round(first_restore["t"], 3),
                          "per_transport": {t: {"at_s": round(cuts[t]["t"], 3),
                                                "restored_at_s": round(restores[t]["t"], 3)}
                                            for t in cuts}}
    fid = summary["fidelity"]
    idles = [v["cpu_idle_min_pct"] for v in fid["per_transport"].values()
             if v["cpu_idle_min_pct"] is not None]
    fid["cpu_idle_min_pct"] = min(idles) if idles else None
    p10 = [v["cpu_idle_p10_pct"] for v in fid["per_transport"].values()
           if v["cpu_idle_p10_pct"] is not None]
    fid["cpu_idle_p10_pct"] = min(p10) if p10 else None
    fid["link_mbps_achieved"] = fid["per_transport"].get("mrc", {}).get("link_mbps_achieved")
    fid["link_measured"] = "the MRC receiver's plane-0 link, before the cut"
    summary["scenario"] = "demo"
    summary["ok"] = bool(schema.data_ok(summary) and failure.recovered(transports["mrc"])
                         and "controller_died" not in summary)
    curves = {t: run.record.curves[t] for t in ("mrc", "roce")}
    n = min(len(c) for c in curves.values())
    files.write_text(staging / "goodput.csv", "t_s,mrc_mbps,roce_mbps\n" + "".join(
        f"{i * metrics.BIN_S:.2f},{curves['mrc'][i]:.3f},{curves['roce'][i]:.3f}\n" for i in range(n)))
    plot_recovery(staging / "recovery.png", curves, metrics.BIN_S, summary, failure.legend)


def format_table(summary: dict, out: Path) -> str:
    rows = [("transport", *failure.TABLE_HEADER)]
    rows += [(name, *failure.table_cells(t)) for name, t in summary["transports"].items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    f = summary["failure"]
    fid = summary["fidelity"]
    lines.insert(0, f"cut {f['link']} at {f['at_s']} s, restored at {f['restored_at_s']} s (each transfer's "
                    f"own clock); baseline routing delay {summary['routing']['detect_ms']:.0f} ms")
    lines.append(f"fidelity: CPU idle min {fid['cpu_idle_min_pct']}% (10th percentile "
                 f"{fid['cpu_idle_p10_pct']}%), link {fid['link_mbps_achieved']}"
                 f"/{fid['link_mbps_configured']} Mbit/s"
                 + ("" if fid["faithful"] else "  NOT FAITHFUL: " + "; ".join(fid["problems"]))
                 + ("  disturbed: " + "; ".join(fid["disturbed"])
                    if fid.get("disturbed") and not fid["faithful"] else "")
                 + ("  warning: " + "; ".join(fid["warnings"]) if fid.get("warnings") else ""))
    lines.append(f"results: {out}/summary.json, {out}/recovery.png")
    return "\n".join(lines)
