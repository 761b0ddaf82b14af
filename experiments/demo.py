"""`mrclab demo`: the link-failure scenario told as one story. A long single-path ECMP transfer
(the RoCE-like go-back-N baseline) and a long MRC transfer between hosts on different leaves,
each facing the same cut of the T0-T1 link the baseline's flow hashed onto, then its restore.

The two run one after the other on the same fabric (experiments/runner.py), so neither's
goodput measures the other's traffic; both curves share one time axis: seconds since each
transfer started. The baseline runs first, because the link to cut is the one its hashed flow
uses (found from the leaf's port counters, not guessed); MRC then faces that same link.
Results go to a staging folder and into place only when complete, so an interrupted run
leaves the previous results/demo untouched.
"""

from __future__ import annotations

from pathlib import Path

from experiments import metrics
from experiments.runner import Run, run_scenario
from experiments.scenarios import SCENARIOS, Options
from topologies.model import Fabric, FabricError, FabricParams

# 4 planes x 3 spines: 12 paths per host pair; after one uplink is cut, plane 0 still has two.
DEMO_FABRIC = FabricParams(planes=4, leaves=2, spines=3, hosts_per_leaf=1, link_mbps=10.0)
NAMES = {"roce": "baseline", "mrc": "mrc"}  # runner transport -> name in the demo's summary
FIGURES = ("recovery_ms", "stall_ms", "goodput_before_mbps", "goodput_after_mbps", "data_ok")


def run_demo(fabric: Fabric, out: Path, duration: float = 8.0, cut_at: float = 3.0,
             restore_at: float = 6.0, detect_ms: float = 900.0, seed: int = 1,
             datapath: str = "auto", quiet: bool = False, dataplane: str = "auto") -> dict:
    if fabric.params.leaves < 2 or fabric.params.spines < 2:
        raise FabricError("the demo needs 2+ leaves (hosts on different leaves) and 2+ spines "
                          "(so the baseline has somewhere to reroute): pass --leaves 2 --spines 2")
    opts = Options(SCENARIOS["link-failure"], fabric.params, ("roce", "mrc"), duration, cut_at,
                   restore_at, detect_ms=detect_ms, seed=seed, datapath=datapath,
                   dataplane=dataplane, same_target=True)
    say = (lambda m: None) if quiet else (lambda m: print(f"[demo] {m}", flush=True))
    summary = run_scenario(opts, out, say, finish=_demo_view)
    if not quiet:
        print(format_table(summary, out))
    return summary


def _demo_view(run: Run, summary: dict, staging: Path) -> None:
    """The demo's contract on top of the scenario summary: `failure`, transports named mrc and
    baseline, goodput before/after, recovery.png with both curves, goodput.csv."""
    from experiments.plots import plot_recovery

    transports = {NAMES[t]: v for t, v in summary["transports"].items()}
    for name, t in transports.items():
        t["goodput_restored_mbps"] = t.get("goodput_after_mbps")  # after the restore
        t["goodput_after_mbps"] = t["goodput_during_mbps"]  # after the cut, while the link is down
        t["transport"] = ("go-back-N, one ECMP-hashed path on plane 0" if name == "baseline"
                          else "MRC, sprayed over every path of every plane")
    summary["transports"] = transports
    cuts = {e["transport"]: e for e in summary["faults"] if e["action"] == "cut"}
    restores = {e["transport"]: e for e in summary["faults"] if e["action"] == "restore"}
    base_cut, base_restore = cuts["roce"], restores["roce"]
    summary["failure"] = {"link": base_cut["target"], "at_s": round(base_cut["t"], 3),
                          "restored_at_s": round(base_restore["t"], 3),
                          "per_transport": {NAMES[t]: {"at_s": round(cuts[t]["t"], 3),
                                                       "restored_at_s": round(restores[t]["t"], 3)}
                                            for t in cuts}}
    summary["routing"]["controller_events"] = [
        {**e, "transport": NAMES.get(e["transport"], e["transport"])}
        for e in summary["routing"]["controller_events"]]
    fid = summary["fidelity"]
    idles = [v["cpu_idle_min_pct"] for v in fid["per_transport"].values()
             if v["cpu_idle_min_pct"] is not None]
    fid["cpu_idle_min_pct"] = min(idles) if idles else None
    p10 = [v["cpu_idle_p10_pct"] for v in fid["per_transport"].values()
           if v["cpu_idle_p10_pct"] is not None]
    fid["cpu_idle_p10_pct"] = min(p10) if p10 else None
    fid["link_mbps_achieved"] = fid["per_transport"].get("mrc", {}).get("link_mbps_achieved")
    fid["link_measured"] = "the MRC receiver's plane-0 link, before the cut"
    fid["per_transport"] = {NAMES[t]: v for t, v in fid["per_transport"].items()}
    summary["scenario"] = "demo"
    mrc = transports["mrc"]
    summary["ok"] = bool(mrc["data_ok"] and transports["baseline"]["data_ok"]
                         and mrc["recovery_ms"] is not None)
    curves = {NAMES[t]: run.record.curves[t] for t in ("mrc", "roce")}
    n = min(len(c) for c in curves.values())
    (staging / "goodput.csv").write_text("t_s,mrc_mbps,baseline_mbps\n" + "".join(
        f"{i * metrics.BIN_S:.2f},{curves['mrc'][i]:.3f},{curves['baseline'][i]:.3f}\n" for i in range(n)))
    plot_recovery(staging / "recovery.png", curves, metrics.BIN_S, summary)


def format_table(summary: dict, out: Path) -> str:
    rows = [("transport", "recovery ms", "stall ms", "before Mb/s", "after Mb/s", "data ok")]
    for name, t in summary["transports"].items():
        rec = "never" if t["recovery_ms"] is None else f"{t['recovery_ms']:.0f}"
        rows.append((name, rec, f"{t['stall_ms']:.0f}", f"{t['goodput_before_mbps']:.1f}",
                     f"{t['goodput_after_mbps']:.1f}", "yes" if t["data_ok"] else "NO"))
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
                 + ("  warning: " + "; ".join(fid["warnings"]) if fid.get("warnings") else ""))
    lines.append(f"results: {out}/summary.json, {out}/recovery.png")
    return "\n".join(lines)
