"""`mrclab run NAME`: run a scenario (experiments/scenarios/) and write its results.

Orchestration only: the testbed up, each transport in turn through the scenario's kind, the
summary, the files. results/NAME/ gets summary.json (configuration, seed, software versions,
fidelity, and per transport the scenario's figures), timeseries.csv (goodput per 10 ms bin per
transport), PNG plots (cc.png: every congestion signal of MRC's QPs, or the first transport's
when MRC did not run, with the host and switch queues; cc-LABEL.png for the others), the
traces (the agents' events, the queue samples of topologies/queuesampler.py), and with
`--capture` a pcap per target (TARGET.pcap, the whole run: every transport in turn).
Everything is written to a staging folder and moved into place only when complete, so an
interrupted run leaves the previous results untouched.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import outdir
from experiments.analysis import calibration, capacity, fidelity, metrics
from experiments.api.flows import AgentFlow, ev_timeline
from experiments.api.testbed import Testbed, describe_switches
from experiments.outdir import REPO, RESULTS
from experiments.scenarios import schema
from experiments.scenarios.base import Options, Record, Scenario
from topologies import files, queuesampler, switches
from topologies.face import whole
from topologies.model import Fabric, FabricParams
from topologies.runctx import RunContext

MEASURED_CAPACITY = RESULTS / "bench" / "dataplane.json"  # `make bench`, this machine
REFERENCE_CAPACITY = REPO / "experiments" / "reference" / "dataplane.json"
Progress = Callable[[str], None]


@dataclass
class Run:
    """One scenario run: what was asked, and what it measured."""
    opts: Options
    record: Record


def assess_load(opts: Options, backend: str, free_cores: float | None = None) -> dict:
    """What the run asks of the switches and the agents against what `backend` carries
    faithfully (experiments/analysis/capacity.py): this machine's calibration and `make bench` where it
    has them, the committed reference otherwise; the agents count on `free_cores` (default:
    every core)."""
    args, kwargs = _capacity_args(opts, backend, free_cores)
    cal = kwargs["calibration"]
    out = capacity.assess(*args, **kwargs)
    # which calibration the figures came from (the summary records it)
    out["calibration"] = None if cal is None else {
        k: cal.get(k) for k in ("fixed_cores", "marginal_us_per_packet", "idle", "fingerprint",
                                "fabric", "seed", "reference", "agents")}
    return out


def faithful_link_mbps(opts: Options, backend: str, free_cores: float | None = None,
                       ceiling: float | None = None) -> float:
    """The fastest link rate (at most `ceiling`) at which the run fits what this machine carries
    faithfully (`--link-mbps auto`; the scenario's own rate as `ceiling` when none is given)."""
    args, kwargs = _capacity_args(opts, backend, free_cores)
    return capacity.faithful_rate(*args, **kwargs, ceiling=ceiling)


_LoadArgs = tuple[str, FabricParams, int, int, dict[str, Any], dict[str, Any]]


def _capacity_args(opts: Options, backend: str,
                   free_cores: float | None) -> tuple[_LoadArgs, dict[str, Any]]:
    """What capacity.assess and capacity.faithful_rate both take for this run: the offered load,
    the measured and reference figures, the cores the agents count on (default: every core),
    the calibration, the agents' mode, the split run's servers, the scenario's agent cost,
    whether its queues stand and how long it runs."""
    load = opts.scenario.kind.capacity_terms(opts, Fabric(opts.fabric))
    args = (backend, opts.fabric, load.pop("busy_senders"), load.pop("mtu_payload"),
            files.read_json(MEASURED_CAPACITY), files.read_json(REFERENCE_CAPACITY))
    kwargs = {"agent_cores": os.cpu_count() or 1 if free_cores is None else free_cores,
              "calibration": calibration.effective(backend), "agents": opts.agents,
              "servers": None if opts.servers_forwarding is None else dict(opts.servers_forwarding),
              **load}
    return args, kwargs


def server_figures(opts: Options, backend: str, say: Progress) -> dict | None:
    """A split run's servers' forwarding figures (topologies/server_calibration.py: each one's
    own calibration, made there once if missing, or else the head's figure for as many planes);
    None for a run on one machine."""
    from topologies import placement, server_calibration

    split = placement.place(Fabric(opts.fabric), opts.servers) if opts.servers else None
    if split is None or not split.split:
        return None
    cals = server_calibration.forwarding(split, backend, say)
    measured, reference = files.read_json(MEASURED_CAPACITY), files.read_json(REFERENCE_CAPACITY)
    return server_calibration.figures(split, cals, lambda planes: capacity.head_figure(
        backend, opts.fabric, planes, measured, reference)["packet_hops_per_s"])


def run_free_cores(opts: Options) -> float:
    """The free cores the run's load check counts on: those read as the run was set up
    (`--link-mbps auto`), or read now (the Python API, a rate given)."""
    return calibration.free_cores() if opts.free_cores is None else opts.free_cores


def execute(opts: Options, workdir: Path, say: Progress) -> tuple[Record, dict]:
    """Every variant of every transport on one testbed: (what was measured, run facts). Says
    before the fabric starts when the switches cannot carry the offered load faithfully."""
    kind, record = opts.scenario.kind, Record()
    fabric = Fabric(opts.fabric)
    backend = switches.resolve(opts.switch_backend)
    free = run_free_cores(opts)
    load = assess_load(opts, backend, free)
    if not load["within"]:
        say(f"warning: at {opts.fabric.link_mbps:g} Mbit/s this run {capacity.describe(load)}: "
            f"expect the switches or the agents, not the links, to set the pace (--link-mbps "
            f"{faithful_link_mbps(opts, load['backend'], free):g} fits; "
            f"--link-mbps auto picks it)")
    with Testbed(fabric, workdir, seed=opts.seed, datapath=opts.datapath, detect_ms=opts.detect_ms,
                 dataplane=opts.dataplane, switch=opts.switch_backend,
                 packet_log=opts.packet_log, replace=opts.replace, servers=opts.servers,
                 transport=opts.transport(), agents=opts.agents) as bed:
        em = whole(bed.em)  # the switches' counters, the data plane, timings
        say(f"fabric up in {em.setup_seconds:.1f} s ({len(fabric.switches)} switches, "
            f"{describe_switches(em)})")
        if opts.replace:
            say("agents run replaced code: " + ", ".join(f"{r.point} = {r.name} from {r.file}"
                                                         for r in opts.replace))
        captures = [bed.capture(target, workdir / f"{target}.pcap") for target in opts.capture]
        bed.prepare(opts.transports)
        sampled, sampling = 0.0, {}
        # The agents sample their own host NICs (their `host` trace lines, the NIC pacer's reads):
        # the runner samples hosts only when no agent runs (TCP and MPTCP alone).
        host_interval = None if bed.agents else queuesampler.HOST_INTERVAL_S
        with queuesampler.QueueSampler(em, workdir, host_interval=host_interval) as sampler:
            for transport, trim in kind.variants(opts, bed):
                label = transport if trim is None else f"{transport}{'' if trim else '-droptail'}"
                if trim is not None:
                    em.set_trimming(trim)
                say(f"{label}: running")
                first, started = len(bed.flows), time.monotonic()
                sampler.active.set()  # only while a transport runs: its queues, not the gaps
                try:
                    kind.run(bed, opts, transport, label, record)
                except OSError:  # the agents' channels included (ConnectionError, timeouts)
                    bed.check_alive()  # a dead agent: one line naming it rather than a traceback
                    raise
                finally:
                    sampler.active.clear()
                    ended = time.monotonic()
                    sampled += ended - started
                    sampling[label] = [round(started, 4), round(ended, 4)]
                bed.check_alive()
                # the QP number the agents trace (random per QP); a TCP flow's number otherwise
                record.qps[label] = [[f.src, f.dst, getattr(f, "qpn", f.number), f.transport]
                                     for f in bed.flows[first:]]
                record.echoes[label] = _echo_counts(bed.flows[first:])
                say(f"{label}: {_brief(opts.scenario, record.transports[label])}")
        bed.check_alive()
        info = {"setup_seconds": round(em.setup_seconds, 2), "datapath": em.datapath,
                "switches": em.switch_info(), "capacity": load,
                "dataplane": {**em.dataplane_info, "totals": fidelity.dataplane_totals(em)},
                "controller_events": em.controller_events(),  # a split fabric's servers' merged
                "traces": {"windows": {lb: [round(a, 4), round(b, 4)]
                                       for lb, (a, b) in record.windows.items()},
                           "sampling": sampling, "qps": record.qps,
                           "queue_sampler": sampler.cost(sampled)}}
        if captures:
            info["captures"] = {c.target: {"file": f"{c.target}.pcap", "packets": c.stop()}
                                for c in captures}
        death = em.controller_death()
        if death is not None:
            info["controller_died"] = _when(record, death)
    died = info.get("controller_died")
    fid = _fidelity(opts, record, bed.cpu, em.datapath, died if isinstance(died, dict) else None)
    if not load["within"]:
        fid["warnings"].append(f"the offered load may exceed what the switches or the agents carry "
                               f"faithfully: "
                               f"this run {capacity.describe(load)}")
    info["fidelity"] = fid
    return record, info


def _echo_counts(flows: list) -> tuple[int, int]:
    """(SACKs whose echo gave no RTT sample, SACKs) over the MRC and spray senders among
    `flows` (their result, read once; a flow closed unread counts nothing)."""
    unusable = sacks = 0
    for f in flows:
        if not isinstance(f, AgentFlow) or f.transport == "roce" or (f.closed and f.final is None):
            continue
        stats = f.result().detail.get("sender_stats", {})
        unusable += int(stats.get("rtt_unusable", 0))
        sacks += int(stats.get("sacks", 0))
    return unusable, sacks


def _when(record: Record, death: tuple[float, int]) -> dict:
    """Where in the run the controller died: the transport whose run it fell in (or the last
    one before it) and the seconds since that transport started."""
    t, code = death
    label, start = "", 0.0
    for name, (t0, _) in record.windows.items():
        if t0 <= t:
            label, start = name, t0
    return {"transport": label, "t": round(t - start, 2), "exit_status": code}


def failure_line(summary: dict, out: Path) -> str | None:
    """The one line a run that completed but cannot be trusted ends with, or None."""
    died = summary.get("controller_died")
    if died is None:
        return None
    return (f"controller died at {died['t']} s into {died['transport'] or 'the run'} (exit status "
            f"{died['exit_status']}): see {out / 'traces' / 'controller.log'}; the results are "
            f"marked not faithful")


def _brief(scenario: Scenario, t: dict) -> str:
    """A transport's progress line: the scenario's brief figures and data_ok, `name=never`
    rather than None for a figure whose absence is news."""
    return metrics.headline(t, (*scenario.brief, schema.DATA_OK), sep="=", never=scenario.never)


def run_scenario(opts: Options, out: Path, progress: Progress = print,
                 finish: Callable[[Run, dict, Path], None] | None = None) -> dict:
    """Run, then write results/NAME atomically; returns the summary. `finish(run, summary,
    staging)` may add to the summary and the folder before it is moved into place."""
    out = outdir.check(out)  # before anything starts: mrclab replaces only its own results
    # The lock first (the Testbed and its emulation join it): taking it removes what a killed
    # run left, its folders included, and the folders made below are registered so that a
    # kill -9 leaves them to the next run; they are removed when the run ends, however it ends.
    with RunContext() as hold:
        out.parent.mkdir(parents=True, exist_ok=True)
        workdir = hold.folder(f"mrclab-{opts.scenario.name}-")
        staging = hold.folder(f".{out.name}-", parent=out.parent)
        staging.chmod(0o755)
        record, info = execute(opts, workdir, progress)
        run = Run(opts, record)
        summary = _summarise(run, info)
        _write(run, summary, staging, workdir)
        if finish is not None:
            finish(run, summary, staging)
            files.write_json(staging / "summary.json", summary)
        outdir.replace(staging, out)
        return summary


def _fidelity(opts: Options, record: Record, cpu: fidelity.CpuSampler, datapath: str,
              controller_died: dict | None = None) -> dict:
    problems: list[str] = []  # the numbers do not mean what they say
    if controller_died is not None:
        problems.append(f"the controller died {controller_died['t']} s into "
                        f"{controller_died['transport'] or 'the run'}: the baseline's routing "
                        f"plane stopped reacting (see traces/controller.log)")
    warnings: list[str] = []  # at the edge: the links still kept their rate
    disturbed: list[str] = []  # the machine under the run lost CPU to its host (steal)
    per_transport = {}
    for transport, (t0, t1) in record.windows.items():
        idle, headroom = cpu.low_idle(t0, t1), cpu.low_headroom(t0, t1)
        rate = record.link_rates.get(transport)
        ovs, agents = cpu.ovs_busy(t0, t1), cpu.agents_busy(t0, t1)
        entry: dict[str, Any] = {"cpu_idle_min_pct": cpu.min_idle(t0, t1), "cpu_idle_p10_pct": idle,
                 "cpu_idle_mean_pct": cpu.mean_idle(t0, t1), "switch_cpu_p90_pct": ovs,
                 "agents_cpu_p90_pct": agents}
        if cpu.background:  # another program was busy: the verdict reads the headroom
            entry.update({"cpu_headroom_p10_pct": headroom, "background_processes": len(cpu.background)})
            idle = headroom
        if ovs is not None and ovs > fidelity.OVS_BUSY_CEILING_PCT:
            warnings.append(f"{transport}: a forwarding process (ovs-vswitchd) used {ovs}% of a "
                            f"core for 10% of the run (> {fidelity.OVS_BUSY_CEILING_PCT}%): the "
                            f"switches, not the links, may set the pace")
        if agents is not None and agents > fidelity.AGENTS_BUSY_CEILING_PCT:
            problems.append(f"{transport}: the agents' process used {agents}% of a core for 10% of "
                            f"the run (> {fidelity.AGENTS_BUSY_CEILING_PCT}%): the agents, not the "
                            f"links, set the pace")
        parts = record.link_parts.get(transport, [])
        if rate is not None:
            entry["link_mbps_achieved"] = rate
        if parts:
            entry["link_mbps_parts"] = parts
        steal = cpu.steal(t0, t1)
        if steal is not None:
            entry.update({"cpu_steal_mean_pct": steal[0], "cpu_steal_max_pct": steal[1]})
            if steal[1] >= fidelity.STEAL_DISTURBED_PCT:
                disturbed.append(f"{transport}: the hypervisor took up to {steal[1]}% of the VM's CPU "
                                 f"in a {cpu.interval:g} s window (steal, {steal[0]}% on average; "
                                 f">= {fidelity.STEAL_DISTURBED_PCT:g}%)")
        servers = {}
        for name in cpu.servers:  # a split fabric's other machines, where its switches forward
            seen = cpu.server_idle(name, t0, t1)
            if seen is None:
                warnings.append(f"{transport}: server {name}'s CPU was not sampled (its /proc/stat "
                                f"did not arrive over ssh)")
                continue
            servers[name] = {"cpu_idle_p10_pct": seen[0], "cpu_idle_mean_pct": seen[1], "samples": seen[2]}
            if cpu.servers[name].same_machine:  # this machine: the head's verdict judges it
                servers[name]["same_machine"] = True
            elif seen[0] < fidelity.CPU_IDLE_FLOOR_PCT:
                problems.append(f"{transport}: server {name}'s CPU idle was below {seen[0]}% for 10% "
                                f"of the run (< {fidelity.CPU_IDLE_FLOOR_PCT}%)")
        if servers:
            entry["servers"] = servers
        per_transport[transport] = entry
        if idle is not None and idle < fidelity.CPU_IDLE_FLOOR_PCT:
            what = "CPU idle (with what other programs' busy processes took)" if cpu.background \
                else "CPU idle"
            problems.append(f"{transport}: {what} was below {idle}% for 10% of the run "
                            f"(< {fidelity.CPU_IDLE_FLOOR_PCT}%)")
        short = fidelity.link_problem(transport, rate, opts.fabric.link_mbps, parts)
        if short is not None:
            problems.append(short)
        unusable, sacks = record.echoes.get(transport, (0, 0))
        if sacks:
            entry["sacks_echo_unusable"] = [unusable, sacks]  # of the MRC and spray senders'
        blind = fidelity.echo_problem(transport, unusable, sacks)
        if blind is not None:
            problems.append(blind)
    wmem = int(Path("/proc/sys/net/core/wmem_default").read_text())
    if datapath == "user" and wmem < fidelity.OVS_SEND_BUFFER:  # the ovs backend raises it
        problems.append(f"net.core.wmem_default is {wmem}: OVS's packet socket drops frames silently "
                        f"when queues build (the ovs backend could not raise it)")
    return {"link_mbps_configured": opts.fabric.link_mbps, "per_transport": per_transport,
            "faithful": not problems, "problems": problems, "warnings": warnings,
            "disturbed": disturbed}


def _summarise(run: Run, info: dict) -> dict:
    opts, record = run.opts, run.record
    return {
        outdir.RESULT_MARKER: outdir.RESULT_FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "scenario": opts.scenario.name,
        "title": opts.scenario.title,
        "fabric": opts.fabric.as_dict(),
        "config": {**opts.as_dict(), "setup_seconds": info["setup_seconds"],
                   "datapath": info["datapath"]},
        "switch_backend": info["switches"]["switch_backend"],
        "switches": info["switches"],
        "capacity": info["capacity"],
        "seed": opts.seed,
        "software": fidelity.software_versions(),
        "dataplane": info["dataplane"],
        "routing": {"detect_ms": opts.detect_ms,
                    "controller_events": _relative_events(opts, record, info["controller_events"])},
        "faults": record.timeline,
        "transports": record.transports,
        "fidelity": info["fidelity"],
        "traces": info["traces"],
        **({"captures": info["captures"]} if "captures" in info else {}),
        **({"controller_died": info["controller_died"]} if "controller_died" in info else {}),
    }


def _relative_events(opts: Options, record: Record, events: list[dict]) -> list[dict]:
    """Controller events, each stamped with the transport whose run it fell in and its time
    since that transport's start (the time axis of every plot)."""
    out = []
    for event in events:
        for transport, (t0, t1) in record.windows.items():
            if t0 <= event["t"] <= t1 + opts.detect_ms / 1000 + 1.0:
                out.append({**event, "t": round(event["t"] - t0, 3), "transport": transport})
                break
    return out


def _write(run: Run, summary: dict, staging: Path, workdir: Path) -> None:
    record = run.record
    names = list(record.curves)
    n = max((len(c) for c in record.curves.values()), default=0)
    rows = ["t_s," + ",".join(f"{name}_mbps" for name in names)]
    for i in range(n):
        rows.append(f"{i * metrics.BIN_S:.2f}," + ",".join(
            f"{record.curves[name][i]:.3f}" if i < len(record.curves[name]) else "" for name in names))
    files.write_text(staging / "timeseries.csv", "\n".join(rows) + "\n")
    traces = staging / "traces"
    traces.mkdir()
    for item in sorted(workdir.glob("*.jsonl")) + sorted(workdir.glob("*.log")):
        shutil.copy(item, traces / item.name)
    for target in run.opts.capture:
        shutil.move(str(workdir / f"{target}.pcap"), str(staging / f"{target}.pcap"))
    timelines = {t: ev_timeline(workdir / f"{host}-trace.jsonl", qpn)
                 for t, (host, qpn) in record.ev_traces.items() if t in ("mrc", "spray")}
    summary_path_state = {t: {"ev_state_changes": len(v)} for t, v in timelines.items()}
    if summary_path_state:
        summary["path_state"] = summary_path_state
    files.write_json(staging / "summary.json", summary)
    from experiments.analysis import ccplot, plots  # matplotlib: only when there is something to draw

    plots.plot_scenario(staging, summary, record.curves, record.windows, timelines,
                        run.opts.scenario.headline)
    run.opts.scenario.kind.plot(staging, summary)
    ccplot.plot_run(staging, summary)
