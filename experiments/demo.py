"""`mrclab demo`: a long MRC transfer and a long single-path ECMP (go-back-N) transfer, each between
two hosts on different leaves (h0 -> h3 and h1 -> h2 on the default fabric: same leaves, own NICs,
so neither flow's goodput measures the other's queue); the T0-T1 link the baseline's path uses is
cut, then restored. With one host per leaf both transfers share one pair.

The baseline's link is found, not guessed: after a warm-up the runner reads the source leaf's
uplink counters on the baseline's plane and picks the uplink carrying the extra (hashed) flow.
Results are written to a temporary folder and moved into place only when complete, so an
interrupted run leaves the previous results/demo untouched.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from experiments import fidelity, metrics
from experiments.agents import start_agents
from topologies.emulation import Emulation
from topologies.model import Fabric, FabricError, FabricParams

# 3 spines: after one uplink is cut, the two left carry both flows' plane-0 traffic.
DEMO_FABRIC = FabricParams(planes=4, leaves=2, spines=3, hosts_per_leaf=2, link_mbps=10.0)
MSG_BYTES = 1 << 20
BASELINE_PLANE = 0
MRC_QPN, GBN_QPN = 1, 2
WARMUP_S = 1.0  # excluded from the pre-cut goodput level


def demo_pairs(fabric: Fabric) -> dict[str, tuple[str, str]]:
    """(src, dst) per transport: both from the first leaf to the last one."""
    hpl = fabric.params.hosts_per_leaf
    first = [h.name for h in fabric.hosts if h.leaf_index == 0]
    last = [h.name for h in fabric.hosts if h.leaf_index == fabric.params.leaves - 1]
    if hpl == 1:
        return {"mrc": (first[0], last[0]), "baseline": (first[0], last[0])}
    return {"mrc": (first[0], last[-1]), "baseline": (first[1], last[-2])}


def _pick_baseline_link(fabric: Fabric, src: str, before: dict, after: dict) -> str:
    leaf = fabric.leaf(BASELINE_PLANE, fabric.host(src).leaf_index)
    first_uplink = fabric.params.hosts_per_leaf + 1
    best, best_pkts = None, -1
    for spine in range(fabric.params.spines):
        port = first_uplink + spine
        pkts = after.get(port, {}).get("tx_pkts", 0) - before.get(port, {}).get("tx_pkts", 0)
        if pkts > best_pkts:
            best, best_pkts = f"{leaf.name}-{fabric.spine(BASELINE_PLANE, spine).name}", pkts
    assert best is not None
    return best


def _transport_summary(name: str, stats_recv: dict, stats_send: dict, t0_bin: int, n_bins: int,
                       cut_i: int, restore_i: int, capacity_before: float,
                       capacity_after: float) -> tuple[dict, list[float]]:
    bins = {int(k): v for k, v in stats_recv["bins"].items()}
    mbps = metrics.series(bins, t0_bin, n_bins)
    warm = round(WARMUP_S / metrics.BIN_S)
    before = metrics.mean(mbps[warm:cut_i])
    scale = capacity_after / capacity_before if capacity_before else 0.0
    target = metrics.THRESHOLD * before * scale
    recovery = metrics.recovery_ms(mbps, cut_i, target, restore_i)
    tail = round(1.0 / metrics.BIN_S)
    sent, got = stats_send["digests"], stats_recv["digests"]
    data_ok = bool(got) and all(sent.get(msn) == digest for msn, digest in got.items())
    summary = {
        "recovery_ms": recovery,
        "stall_ms": metrics.longest_stall_ms(mbps, warm, restore_i),
        "goodput_before_mbps": round(before, 2),
        "goodput_after_mbps": round(metrics.mean(mbps[max(cut_i, restore_i - tail):restore_i]), 2),
        "goodput_restored_mbps": round(metrics.mean(mbps[-tail:]), 2),
        "recovery_target_mbps": round(target, 2),
        "bytes_delivered": stats_recv.get("bytes_delivered", 0),
        "messages_completed": len(got),
        "data_ok": data_ok,
        "sender_stats": stats_send.get("stats", {}),
        "receiver_stats": stats_recv.get("stats", {}),
    }
    if "ev_states" in stats_send:
        states = stats_send["ev_states"]
        summary["ev_states_at_end"] = {s: sum(1 for v in states.values() if v == s)
                                       for s in sorted(set(states.values()))}
    return summary, mbps


def run_demo(fabric: Fabric, out: Path, duration: float = 8.0, cut_at: float = 3.0,
             restore_at: float = 6.0, detect_ms: float = 900.0, seed: int = 1,
             datapath: str = "auto", quiet: bool = False, dataplane: str = "auto") -> dict:
    if fabric.params.leaves < 2 or fabric.params.spines < 2:
        raise FabricError("the demo needs 2+ leaves (hosts on different leaves) and 2+ spines "
                          "(so the baseline has somewhere to reroute): pass --leaves 2 --spines 2")
    pairs = demo_pairs(fabric)
    workdir = Path(tempfile.mkdtemp(prefix="mrclab-demo-"))
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; results are for everyone to read
    try:
        return _run(fabric, out, staging, workdir, pairs, duration, cut_at, restore_at,
                    detect_ms, seed, datapath, quiet, dataplane)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _run(fabric: Fabric, out: Path, staging: Path, workdir: Path,
         pairs: dict[str, tuple[str, str]], duration: float, cut_at: float, restore_at: float,
         detect_ms: float, seed: int, datapath: str, quiet: bool, dataplane: str) -> dict:
    qpns = {"mrc": MRC_QPN, "baseline": GBN_QPN}
    kinds = {"mrc": "mrc", "baseline": "gbn"}
    hosts = sorted({h for pair in pairs.values() for h in pair}, key=lambda n: int(n[1:]))
    with Emulation(fabric, workdir, datapath=datapath, detect_ms=detect_ms,
                   dataplane_mode=dataplane) as em, \
            fidelity.CpuSampler() as cpu:
        agents = start_agents(em, hosts, workdir, seed)
        for name, (src, dst) in pairs.items():
            qpn = qpns[name]
            agents[dst].call("open", qpn=qpn, peer=src, peer_qpn=qpn, transport=kinds[name],
                             role="recv", plane=BASELINE_PLANE)
            agents[src].call("open", qpn=qpn, peer=dst, peer_qpn=qpn, transport=kinds[name],
                             role="send", plane=BASELINE_PLANE)
        base_src, base_dst = pairs["baseline"]
        leaf = fabric.leaf(BASELINE_PLANE, fabric.host(base_src).leaf_index).name
        t0 = time.monotonic()
        for name, (src, _dst) in pairs.items():
            agents[src].call("stream", qpn=qpns[name], msg_bytes=MSG_BYTES, seconds=duration)
        time.sleep(0.3)
        counters_before = fidelity.port_counters(leaf)
        time.sleep(max(cut_at - 0.6 - (time.monotonic() - t0), 0.2))
        counters_after = fidelity.port_counters(leaf)
        cut_link = _pick_baseline_link(fabric, base_src, counters_before, counters_after)
        dst = pairs["mrc"][1]
        dst_leaf = fabric.leaf(BASELINE_PLANE, fabric.host(dst).leaf_index).name
        rx_before = fidelity.port_counters(dst_leaf)
        rx_t0 = time.monotonic()
        time.sleep(max(t0 + cut_at - time.monotonic(), 0))
        rx_after = fidelity.port_counters(dst_leaf)
        rx_window = time.monotonic() - rx_t0
        cut_time = em.set_link(cut_link, up=False)
        time.sleep(max(t0 + restore_at - time.monotonic(), 0))
        restore_time = em.set_link(cut_link, up=True)
        time.sleep(max(t0 + duration - time.monotonic(), 0) + 0.5)  # let the tail drain
        stats = {}
        for name, (src, dst) in pairs.items():
            stats[name] = (agents[src].call("stats", qpn=qpns[name]),
                           agents[dst].call("stats", qpn=qpns[name]))
        agent_counters = {host: agents[host].call("agent_stats") for host in hosts}
        for client in agents.values():
            client.close()
        events_path = em.events_path
        controller_events = [json.loads(line) for line in events_path.read_text().splitlines()]
        setup_seconds = em.setup_seconds
        datapath_used = em.datapath
        dataplane_block = {**em.dataplane_info, "totals": fidelity.dataplane_totals(em)}
    # Agents stopped with the emulation (SIGTERM: they close their traces); keep the traces
    # and logs beside the summary so plots and people can dig into what the transports did.
    traces = staging / "traces"
    traces.mkdir()
    for item in sorted(workdir.glob("*-trace.jsonl")) + sorted(workdir.glob("*.log")):
        shutil.copy(item, traces / item.name)
    idle_min = cpu.min_idle(t0, t0 + duration)
    idle_mean = cpu.mean_idle(t0, t0 + duration)

    bin_of = lambda t: int(t / metrics.BIN_S)  # noqa: E731
    t0_bin = bin_of(t0)
    n_bins = round(duration / metrics.BIN_S)
    cut_i, restore_i = bin_of(cut_time) - t0_bin, bin_of(restore_time) - t0_bin
    down = frozenset({cut_link})
    transports, curves = {}, {}
    for name, planes in (("mrc", None), ("baseline", (BASELINE_PLANE,))):
        src, dst = pairs[name]
        cap_before = fabric.path_capacity_mbps(src, dst, planes=planes)
        cap_after = fabric.path_capacity_mbps(src, dst, down, planes=planes)
        send_stats, recv_stats = stats[name]
        summary, mbps = _transport_summary(name, recv_stats, send_stats, t0_bin,
                                           n_bins, cut_i, restore_i, cap_before, cap_after)
        summary["capacity_mbps"] = {"before": cap_before, "after_cut": cap_after}
        summary["hosts"] = {"src": src, "dst": dst}
        if "congestion" in send_stats:
            summary["congestion_at_end"] = send_stats["congestion"]
        transports[name] = summary
        curves[name] = mbps
    transports["baseline"]["transport"] = "go-back-N, one ECMP-hashed path on plane 0"
    transports["mrc"]["transport"] = "MRC, sprayed over every path of every plane"

    # Fidelity: the receiver's NIC links on the baseline plane are the saturated ones.
    dst = pairs["mrc"][1]
    dst_port = fabric.host(dst).nics[BASELINE_PLANE].leaf_port
    tx_bytes = rx_after.get(dst_port, {}).get("tx_bytes", 0) - rx_before.get(dst_port, {}).get("tx_bytes", 0)
    achieved = tx_bytes * 8 / rx_window / 1e6 if rx_window > 0 else 0.0
    configured = fabric.params.link_mbps
    fidelity_block = {
        "cpu_idle_min_pct": idle_min, "cpu_idle_mean_pct": idle_mean,
        "link_mbps_configured": configured,
        "link_mbps_achieved": round(achieved, 2),
        "link_rate_ratio": round(achieved / configured, 3) if configured else None,
        "link_measured": f"{dst_leaf} port {dst_port} -> {dst} (MRC's receiver, plane "
                         f"{BASELINE_PLANE}, the second before the cut)",
        "agent_counters": agent_counters,
    }
    problems = []
    if idle_min is not None and idle_min < fidelity.CPU_IDLE_FLOOR_PCT:
        problems.append(f"CPU idle fell to {idle_min}% (< {fidelity.CPU_IDLE_FLOOR_PCT}%)")
    ratio = fidelity_block["link_rate_ratio"]
    if ratio is not None and ratio < fidelity.LINK_RATE_FLOOR:
        problems.append(f"the saturated link reached only {achieved:.1f} of {configured} Mbit/s")
    fidelity_block["faithful"] = not problems
    fidelity_block["problems"] = problems

    summary = {
        "scenario": "demo",
        "fabric": fabric.params.as_dict(),
        "failure": {"link": cut_link, "at_s": round(cut_time - t0, 3),
                    "restored_at_s": round(restore_time - t0, 3)},
        "routing": {"detect_ms": detect_ms, "controller_events": [
            {**e, "t": round(e["t"] - t0, 3)} for e in controller_events]},
        "config": {"duration_s": duration, "cut_at_s": cut_at, "restore_at_s": restore_at,
                   "message_bytes": MSG_BYTES, "bin_ms": metrics.BIN_S * 1000,
                   "datapath": datapath_used, "setup_seconds": round(setup_seconds, 2)},
        "dataplane": dataplane_block,
        "seed": seed,
        "software": fidelity.software_versions(),
        "transports": transports,
        "fidelity": fidelity_block,
    }
    mrc, base = transports["mrc"], transports["baseline"]
    summary["ok"] = bool(mrc["data_ok"] and base["data_ok"] and mrc["recovery_ms"] is not None)

    from experiments.plots import plot_recovery
    (staging / "summary.json").write_text(json.dumps(summary, indent=2))
    (staging / "goodput.csv").write_text(
        "t_s,mrc_mbps,baseline_mbps\n" + "".join(
            f"{i * metrics.BIN_S:.2f},{curves['mrc'][i]:.3f},{curves['baseline'][i]:.3f}\n"
            for i in range(n_bins)))
    plot_recovery(staging / "recovery.png", curves, metrics.BIN_S, summary)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        shutil.rmtree(out)
    shutil.move(str(staging), str(out))
    if not quiet:
        print(format_table(summary, out))
    return summary


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
    lines.insert(0, f"cut {f['link']} at {f['at_s']} s, restored at {f['restored_at_s']} s; "
                    f"baseline routing delay {summary['routing']['detect_ms']:.0f} ms")
    lines.append(f"fidelity: CPU idle min {fid['cpu_idle_min_pct']}%, link {fid['link_mbps_achieved']}"
                 f"/{fid['link_mbps_configured']} Mbit/s"
                 + ("" if fid["faithful"] else "  WARNING: " + "; ".join(fid["problems"])))
    lines.append(f"results: {out}/summary.json, {out}/recovery.png")
    return "\n".join(lines)
