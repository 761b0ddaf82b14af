"""`mrclab run NAME`: run a scenario (experiments/scenarios.py) and write its results.

results/NAME/ gets summary.json (configuration, seed, software versions, fidelity, and per
transport the scenario's figures), timeseries.csv (goodput per 10 ms bin per transport), PNG
plots, and the agents' traces. Everything is written to a staging folder and moved into place
only when complete, so an interrupted run leaves the previous results untouched.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from experiments import fidelity, metrics
from experiments.agents import start_agents
from experiments.faults import FaultInjector
from experiments.flows import BASELINE_PLANE, AgentFlow, FlowResult, TcpFlow, planes_used
from experiments.scenarios import Options
from topologies import hostnet
from topologies.emulation import Emulation
from topologies.model import Fabric, fair_share_mbps

WARMUP_S = 0.5
SATURATING = {"mrc", "spray", "tcp", "mptcp"}  # offer more than a link carries
Progress = Callable[[str], None]


def _sleep_until(t: float) -> None:
    time.sleep(max(t - time.monotonic(), 0.0))


class Run:
    """One scenario run: the emulation, agents and flows it needs, and what they measured."""

    def __init__(self, opts: Options, workdir: Path, progress: Progress) -> None:
        self.opts, self.workdir, self.say = opts, workdir, progress
        self.fabric = Fabric(opts.fabric)
        self.qpn = 0
        self.port = 5200
        self.timeline: list[dict] = []
        self.transports: dict[str, dict] = {}
        self.curves: dict[str, list[float]] = {}
        self.windows: dict[str, tuple[float, float]] = {}  # transport -> (t0, t_end) monotonic
        self.ev_traces: dict[str, tuple[str, int]] = {}  # transport -> (sender host, qpn)
        self.link_rates: dict[str, float] = {}
        self.first_target: str | None = None
        self.uplink_counts: dict[str, int] = {}
        self.controller_events: list[dict] = []

    # ----- flows ----------------------------------------------------------------------------
    def flow(self, transport: str, src: str, dst: str) -> AgentFlow | TcpFlow:
        if transport in ("tcp", "mptcp"):
            self.port += 1
            return TcpFlow(self.em, self.workdir, transport, src, dst, self.port)
        self.qpn += 1
        return AgentFlow(self.agents, transport, src, dst, self.qpn)

    def hosts_needed(self) -> list[str]:
        return [h.name for h in self.fabric.hosts]

    def execute(self) -> dict:
        opts = self.opts
        with Emulation(self.fabric, self.workdir, datapath=opts.datapath, detect_ms=opts.detect_ms,
                       dataplane_mode=opts.dataplane) as em, fidelity.CpuSampler() as cpu:
            self.em, self.cpu = em, cpu
            self.say(f"fabric up in {em.setup_seconds:.1f} s ({len(self.fabric.switches)} switches, "
                     f"{em.datapath} datapath)")
            hosts = self.hosts_needed()
            self.agents = {}
            if set(opts.transports) & {"mrc", "roce", "spray"}:
                self.agents = start_agents(em, hosts, self.workdir, opts.seed)
            if "mptcp" in opts.transports:
                for name in hosts:
                    hostnet.configure_mptcp(self.fabric, self.fabric.host(name), em.pid(name))
            injector = FaultInjector(em)
            try:
                kind = opts.scenario.kind
                runner = {"fault": self.run_fault, "permutation": self.run_permutation,
                          "incast": self.run_incast, "collective": self.run_collective}[kind]
                for transport, trim in self.variants():
                    label = transport if trim is None else f"{transport}{'' if trim else '-droptail'}"
                    if trim is not None:
                        em.set_trimming(trim)
                    self.say(f"{label}: running")
                    runner(transport, injector, label)
                    self.say(f"{label}: {_brief(self.transports[label])}")
            finally:
                injector.close()
                for client in self.agents.values():
                    client.close()
            setup_seconds, datapath = em.setup_seconds, em.datapath
            self.dataplane = {**em.dataplane_info, "totals": fidelity.dataplane_totals(em)}
            self.controller_events = [json.loads(line) for line in em.events_path.read_text().splitlines()]
        return {"setup_seconds": round(setup_seconds, 2), "datapath": datapath}

    def variants(self) -> list[tuple[str, bool | None]]:
        """(transport, trimming) runs: incast compares every transport with the switches
        trimming and as plain drop-tail, when the eBPF data plane runs; others run as set up."""
        if self.opts.scenario.kind == "incast" and self.em.dataplane is not None:
            return [(t, trim) for t in self.opts.transports for trim in (True, False)]
        return [(t, None) for t in self.opts.transports]

    # ----- fault scenarios ------------------------------------------------------------------
    def pair(self) -> tuple[str, str]:
        first = next(h for h in self.fabric.hosts if h.leaf_index == 0)
        last = next(h for h in reversed(self.fabric.hosts)
                    if h.leaf_index == self.fabric.params.leaves - 1)
        return first.name, last.name

    def _busiest_uplink(self, src: str, before: dict, after: dict) -> str:
        fabric = self.fabric
        leaf = fabric.leaf(BASELINE_PLANE, fabric.host(src).leaf_index)
        first_uplink = fabric.params.hosts_per_leaf + 1
        counts = {s: after.get(first_uplink + s, {}).get("tx_pkts", 0)
                  - before.get(first_uplink + s, {}).get("tx_pkts", 0)
                  for s in range(fabric.params.spines)}
        spine = max(counts, key=lambda s: (counts[s], -s))
        self.uplink_counts = {fabric.spine(BASELINE_PLANE, s).name: n for s, n in counts.items()}
        return f"{leaf.name}-{fabric.spine(BASELINE_PLANE, spine).name}"

    def run_fault(self, transport: str, faults: FaultInjector, label: str) -> None:
        opts, fabric = self.opts, self.fabric
        src, dst = self.pair()
        flow = self.flow(transport, src, dst)
        leaf = fabric.leaf(BASELINE_PLANE, fabric.host(src).leaf_index).name
        dst_leaf = fabric.leaf(BASELINE_PLANE, fabric.host(dst).leaf_index).name
        dst_port = fabric.host(dst).nics[BASELINE_PLANE].leaf_port
        t0 = time.monotonic()
        flow.start(opts.duration)
        _sleep_until(t0 + 0.3)
        before = fidelity.port_counters(leaf)
        rx_before, rx_t = fidelity.port_counters(dst_leaf), time.monotonic()
        _sleep_until(t0 + opts.fault_at - 0.1)
        after = fidelity.port_counters(leaf)
        rx_after, rx_dt = fidelity.port_counters(dst_leaf), time.monotonic() - rx_t
        tx = rx_after.get(dst_port, {}).get("tx_bytes", 0) - rx_before.get(dst_port, {}).get("tx_bytes", 0)
        self.link_rates[label] = round(tx * 8 / rx_dt / 1e6, 2) if rx_dt > 0 else 0.0
        link = opts.link or self.first_target or self._busiest_uplink(src, before, after)
        if opts.same_target:
            self.first_target = link  # every later transport faces the same failed link
        name = opts.scenario.name
        down: frozenset[str]
        events: list[dict] = []
        if name == "switch-failure":
            switch = opts.switch or link.split("-")[1]
            down = frozenset(ln.name for ln in fabric.links_of(switch))
            _sleep_until(t0 + opts.fault_at)
            events.append({"t": faults.fail_switch(switch) - t0, "action": "fail_switch", "target": switch})
            _sleep_until(t0 + opts.fault_end)
            events.append({"t": faults.restore_switch(switch) - t0, "action": "restore_switch",
                           "target": switch})
        elif name == "lossy-link":
            down = frozenset()
            _sleep_until(t0 + opts.fault_at)
            events.append({"t": faults.set_loss(link, opts.loss) - t0, "action": "loss", "target": link,
                           "probability": opts.loss})
            _sleep_until(t0 + opts.fault_end)
            dropped = faults.loss_counters()
            faults.clear_loss(link)
            events.append({"t": time.monotonic() - t0, "action": "loss_cleared", "target": link,
                           "dropped": dropped})
        elif name == "link-flap":
            down = frozenset({link})
            period = 60.0 / opts.flaps_per_min
            t = opts.fault_at
            while t + opts.down_ms / 1000 <= opts.fault_end:
                _sleep_until(t0 + t)
                events.append({"t": faults.cut_link(link) - t0, "action": "cut", "target": link})
                _sleep_until(t0 + t + opts.down_ms / 1000)
                events.append({"t": faults.restore_link(link) - t0, "action": "restore", "target": link})
                t += period
        else:  # link-failure
            down = frozenset({link})
            _sleep_until(t0 + opts.fault_at)
            events.append({"t": faults.cut_link(link) - t0, "action": "cut", "target": link})
            _sleep_until(t0 + opts.fault_end)
            events.append({"t": faults.restore_link(link) - t0, "action": "restore", "target": link})
        _sleep_until(t0 + opts.duration + 0.6)  # let the tail drain
        (result,) = _finish([flow])
        self.windows[label] = (t0, t0 + opts.duration)
        self.timeline += [{**e, "transport": label} for e in events]
        self.transports[label] = self.fault_metrics(result, t0, events, down, label)
        self.transports[label]["target"] = link if name != "switch-failure" else events[0]["target"]
        # How the target was found: packets each plane-0 uplink of the source leaf carried
        # before the fault (the hashed flow's spine stands out).
        self.transports[label]["uplink_tx_pkts_before_fault"] = dict(self.uplink_counts)
        self.uplink_counts = {}
        self._keep_trace(label, flow)
        # Let the baseline routing plane converge back before the next transport starts.
        time.sleep(opts.detect_ms / 1000 + 0.3)

    def fault_metrics(self, res: FlowResult, t0: float, events: list[dict],
                      down: frozenset[str], label: str) -> dict:
        opts, fabric = self.opts, self.fabric
        n = round(opts.duration / metrics.BIN_S)
        mbps = metrics.series(res.bins, int(t0 / metrics.BIN_S), n)
        self.curves[label] = mbps
        warm = round(WARMUP_S / metrics.BIN_S)
        fault_i = round(events[0]["t"] / metrics.BIN_S) if events else round(opts.fault_at / metrics.BIN_S)
        end_i = round(events[-1]["t"] / metrics.BIN_S) if events else round(opts.fault_end / metrics.BIN_S)
        before = metrics.mean(mbps[warm:fault_i])
        during = metrics.mean(mbps[fault_i:end_i])
        tail = mbps[end_i + round(0.5 / metrics.BIN_S):]
        after = metrics.mean(tail) if tail else None
        planes = planes_used(res.transport, fabric.params.planes)
        cap_before = fabric.path_capacity_mbps(res.src, res.dst, planes=planes)
        cap_after = fabric.path_capacity_mbps(res.src, res.dst, down, planes=planes)
        target = metrics.THRESHOLD * before * (cap_after / cap_before if cap_before else 0.0)
        width = metrics.steady_width(mbps, warm, fault_i, metrics.THRESHOLD * before) or 20
        out = {
            "src": res.src, "dst": res.dst,
            "recovery_ms": metrics.recovery_ms(mbps, fault_i, target, end_i, width),
            "recovery_smoothing_ms": round(width * metrics.BIN_S * 1000),
            "stall_ms": metrics.longest_stall_ms(mbps, fault_i, min(end_i + round(1 / metrics.BIN_S), n)),
            "data_ok": res.data_ok,
            "goodput_before_mbps": round(before, 2),
            "goodput_during_mbps": round(during, 2),
            "goodput_after_mbps": None if after is None else round(after, 2),
            "goodput_fraction": round(during / before, 3) if before else None,
            "recovery_target_mbps": round(target, 2),
            "capacity_mbps": {"before": cap_before, "during": cap_after},
            "bytes_delivered": res.bytes_delivered,
            **res.detail,
        }
        return out

    # ----- permutation ----------------------------------------------------------------------
    def run_permutation(self, transport: str, faults: FaultInjector, label: str) -> None:
        opts, fabric = self.opts, self.fabric
        names = [h.name for h in fabric.hosts]
        perm = derangement(names, opts.seed)
        flows = [self.flow(transport, src, perm[src]) for src in names]
        t0 = time.monotonic()
        for f in flows:
            f.start(opts.duration)
        _sleep_until(t0 + opts.duration + 0.6)
        results = _finish(flows)
        n = round(opts.duration / metrics.BIN_S)
        warm = round(1.0 / metrics.BIN_S)
        per_flow, total_curve = [], [0.0] * n
        for r in results:
            mbps = metrics.series(r.bins, int(t0 / metrics.BIN_S), n)
            total_curve = [a + b for a, b in zip(total_curve, mbps, strict=True)]
            per_flow.append(metrics.mean(mbps[warm:]))
        planes = len(planes_used(transport, fabric.params.planes))
        host_cap = planes * fabric.params.link_mbps
        # What the fabric can carry for this permutation on the planes the transport uses:
        # max-min fair over host NICs and leaf up/down links (oversubscription counted).
        fair = fair_share_mbps(fabric, list(perm.items()), planes)
        carry = sum(fair.values())
        fractions = [g / fair[(src, perm[src])] for g, src in zip(per_flow, names, strict=True)]
        self.curves[label] = total_curve
        self.windows[label] = (t0, t0 + opts.duration)
        self.transports[label] = {
            "throughput_fraction": round(sum(per_flow) / carry, 3),
            "throughput_mbps": round(sum(per_flow), 2),
            "capacity_mbps": round(carry, 2),
            "host_capacity_mbps": host_cap * len(names),
            "planes_used": planes,
            "flow_fraction_min": round(min(fractions), 3),
            "flow_fraction_mean": round(sum(fractions) / len(fractions), 3),
            "flow_goodput_mbps": [round(g, 2) for g in per_flow],
            "jain_fairness": round(jain(per_flow), 3),
            "data_ok": all(r.data_ok for r in results),
            "permutation": perm,
        }
        self._keep_trace(label, flows[0])

    # ----- incast ---------------------------------------------------------------------------
    def incast_roles(self) -> tuple[list[str], str, tuple[str, str]]:
        hosts = [h.name for h in self.fabric.hosts]
        receiver, victim_dst, victim_src = hosts[-1], hosts[-2], hosts[0]
        senders = [h for h in hosts if h not in (receiver, victim_dst, victim_src)][:self.opts.senders]
        return senders, receiver, (victim_src, victim_dst)

    def run_incast(self, transport: str, faults: FaultInjector, label: str) -> None:
        opts = self.opts
        senders, receiver, (vsrc, vdst) = self.incast_roles()
        victim = self.flow(transport, vsrc, vdst)
        crowd = [self.flow(transport, s, receiver) for s in senders]
        if self.em.dataplane is not None:
            self.em.dataplane.reset()
        t0 = time.monotonic()
        victim.start(opts.duration)
        _sleep_until(t0 + opts.fault_at)
        for f in crowd:
            f.start(opts.fault_end - opts.fault_at)
        self.timeline.append({"t": time.monotonic() - t0, "action": "incast_start", "transport": label,
                              "target": receiver, "senders": len(senders)})
        _sleep_until(t0 + opts.duration + 0.6)
        vres, *cres = _finish([victim, *crowd])
        n = round(opts.duration / metrics.BIN_S)
        vm = metrics.series(vres.bins, int(t0 / metrics.BIN_S), n)
        fa, fe = round(opts.fault_at / metrics.BIN_S), round(opts.fault_end / metrics.BIN_S)
        alone = metrics.mean(vm[round(WARMUP_S / metrics.BIN_S):fa])
        during = metrics.mean(vm[fa + round(0.3 / metrics.BIN_S):fe])
        crowd_mbps = sum(metrics.mean(metrics.series(r.bins, int(t0 / metrics.BIN_S), n)[fa:fe])
                         for r in cres)
        stats = [r.detail.get("sender_stats", {}) for r in cres]
        self.curves[label] = vm
        self.windows[label] = (t0, t0 + opts.duration)
        cap = len(planes_used(transport, self.fabric.params.planes)) * self.fabric.params.link_mbps
        self.transports[label] = {
            "victim": {"src": vsrc, "dst": vdst}, "receiver": receiver, "senders": senders,
            "victim_goodput_fraction": round(during / alone, 3) if alone else None,
            "victim_alone_mbps": round(alone, 2), "victim_during_mbps": round(during, 2),
            "incast_goodput_mbps": round(crowd_mbps, 2),
            "incast_fraction_of_receiver_link": round(crowd_mbps / cap, 3),
            "timeouts": sum(s.get("timeouts", 0) for s in stats),
            "evs_marked_bad": sum(s.get("bad_evs", 0) for s in stats),
            "data_ok": vres.data_ok and all(r.data_ok for r in cres),
            "switch_ports": fidelity.dataplane_totals(self.em),
            "victim_sender": {k: v for k, v in vres.detail.get("sender_stats", {}).items()
                              if k in ("lost", "retransmitted", "stranded_resent", "timeouts", "bad_evs",
                                       "trimmed_nacks", "ecn_echoes")},
            "victim_receiver": vres.detail.get("receiver_stats", {}),
            "victim_sender_agent": self._agent_counters(vsrc),
            "trimming": self.em.dataplane_info.get("trim") if self.em.dataplane is not None else None,
        }
        self._keep_trace(label, victim)

    # ----- collective -----------------------------------------------------------------------
    def run_collective(self, transport: str, faults: FaultInjector, label: str) -> None:
        opts, fabric = self.opts, self.fabric
        names = [h.name for h in fabric.hosts]
        ring = [self.flow(transport, names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
        leaf = fabric.leaf(BASELINE_PLANE, 0).name
        phases: dict[str, list[float | None]] = {}
        t_start = time.monotonic()
        done = 0
        link = opts.link
        before = fidelity.port_counters(leaf)
        for phase in ("no_fault", "fault"):
            times: list[float | None] = []
            if phase == "fault" and link is None:
                # The uplink leaf 0's ring traffic used most in the fault-free phase: for the
                # single-path transports, the one their hashed flow rides.
                link = self._busiest_uplink(names[0], before, fidelity.port_counters(leaf))
            for step in range(opts.steps):
                if phase == "fault" and step == 0:
                    self.timeline.append({"t": faults.cut_link(link) - t_start, "action": "cut",
                                          "target": link, "transport": label})
                if phase == "fault" and step == opts.steps // 2:
                    self.timeline.append({"t": faults.restore_link(link) - t_start, "action": "restore",
                                          "target": link, "transport": label})
                times.append(self._step(ring, done + 1))
                done += 1
            phases[phase] = times
        results = _finish(ring)
        t_end = time.monotonic()
        n = round((t_end - t_start) / metrics.BIN_S)
        total = [0.0] * n
        for r in results:
            total = [a + b for a, b in zip(total, metrics.series(r.bins, int(t_start / metrics.BIN_S), n),
                                           strict=True)]
        self.curves[label] = total
        self.windows[label] = (t_start, t_end)
        out: dict = {"ring": names, "step_bytes": opts.step_kb * 1024, "cut": link,
                     "data_ok": all(r.data_ok for r in results)}
        for phase, times in phases.items():
            ok = sorted(t for t in times if t is not None)
            suffix = "" if phase == "fault" else "_no_fault"
            out[f"step_time_p50_ms{suffix}"] = round(percentile(ok, 50) * 1000, 1) if ok else None
            out[f"step_time_p99_ms{suffix}"] = round(percentile(ok, 99) * 1000, 1) if ok else None
            out[f"step_times_ms{suffix}"] = [None if t is None else round(t * 1000, 1) for t in times]
            out[f"steps_timed_out{suffix}"] = sum(1 for t in times if t is None)
        self.transports[label] = out
        self._keep_trace(label, ring[0])
        time.sleep(opts.detect_ms / 1000 + 0.3)

    def _step(self, ring: list, target: int, limit: float = 15.0) -> float | None:
        """One ring step: every host writes a chunk to its right neighbour; the step ends when
        every neighbour has it (message `target` complete everywhere)."""
        start = time.monotonic()
        for f in ring:
            f.write(self.opts.step_kb * 1024)
        pending = list(ring)
        while pending:
            pending = [f for f in pending if f.completed() < target]
            if time.monotonic() - start > limit:
                return None
            if pending:
                time.sleep(0.001)
        return time.monotonic() - start

    # ----- bookkeeping ----------------------------------------------------------------------
    def _agent_counters(self, host: str) -> dict:
        """The agent's own counters (malformed input, send failures by errno), if it runs."""
        if host not in self.agents:
            return {}
        stats = self.agents[host].call("agent_stats")
        return {k: stats[k] for k in ("counters", "raw_send_dropped", "send_errors", "backlog")
                if k in stats}

    def _keep_trace(self, transport: str, flow: AgentFlow | TcpFlow) -> None:
        if isinstance(flow, AgentFlow):
            self.ev_traces[transport] = (flow.src, flow.qpn)


def _finish(flows: list[AgentFlow | TcpFlow]) -> list[FlowResult]:
    """Stop each flow, read what it measured, and close it (idle QPs would keep probing and
    load the next measurement)."""
    results = []
    for f in flows:
        f.stop()
        results.append(f.result())
        f.close()
    return results


def derangement(names: list[str], seed: int) -> dict[str, str]:
    """A seeded random permutation with no host sending to itself."""
    rng = random.Random(seed)
    while True:
        shuffled = names[:]
        rng.shuffle(shuffled)
        if all(a != b for a, b in zip(names, shuffled, strict=True)):
            return dict(zip(names, shuffled, strict=True))


def jain(values: list[float]) -> float:
    total = sum(values)
    return total * total / (len(values) * sum(v * v for v in values)) if total else 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        raise ValueError("no values")
    k = (len(sorted_values) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _brief(t: dict) -> str:
    keys = ("recovery_ms", "stall_ms", "goodput_fraction", "throughput_fraction",
            "victim_goodput_fraction", "step_time_p50_ms", "step_time_p99_ms", "data_ok")
    return ", ".join(f"{k}={t[k]}" for k in keys if k in t)


def ev_timeline(trace: Path, qpn: int) -> list[list]:
    """[t, ev, old, new] state changes of one QP from an agent trace."""
    if not trace.exists():
        return []
    out = []
    for line in trace.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec[0] == qpn and rec[1] == "ev_state":
            out.append(rec[2:6])
    return out


def run_scenario(opts: Options, out: Path, progress: Progress = print,
                 finish: Callable[[Run, dict, Path], None] | None = None) -> dict:
    """Run, then write results/NAME atomically; returns the summary. `finish(run, summary,
    staging)` may add to the summary and the folder before it is moved into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"mrclab-{opts.scenario.name}-"))
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    staging.chmod(0o755)
    try:
        run = Run(opts, workdir, progress)
        info = run.execute()
        summary = _summarise(run, info)
        _write(run, summary, staging, workdir)
        if finish is not None:
            finish(run, summary, staging)
            (staging / "summary.json").write_text(json.dumps(summary, indent=2))
        if out.exists():
            shutil.rmtree(out)
        shutil.move(str(staging), str(out))
        return summary
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _summarise(run: Run, info: dict) -> dict:
    opts = run.opts
    problems: list[str] = []  # the numbers do not mean what they say
    warnings: list[str] = []  # at the edge: the links still kept their rate
    per_transport = {}
    for transport, (t0, t1) in run.windows.items():
        idle = run.cpu.low_idle(t0, t1)
        rate = run.link_rates.get(transport)
        ovs = run.cpu.ovs_busy(t0, t1)
        entry = {"cpu_idle_min_pct": run.cpu.min_idle(t0, t1), "cpu_idle_p10_pct": idle,
                 "cpu_idle_mean_pct": run.cpu.mean_idle(t0, t1), "ovs_cpu_p90_pct": ovs}
        if ovs is not None and ovs > fidelity.OVS_BUSY_CEILING_PCT:
            warnings.append(f"{transport}: ovs-vswitchd used {ovs}% of a core for 10% of the run "
                            f"(> {fidelity.OVS_BUSY_CEILING_PCT}%): the switches, not the links, "
                            f"may set the pace")
        if rate is not None:
            entry["link_mbps_achieved"] = rate
        per_transport[transport] = entry
        if idle is not None and idle < fidelity.CPU_IDLE_FLOOR_PCT:
            problems.append(f"{transport}: CPU idle was below {idle}% for 10% of the run "
                            f"(< {fidelity.CPU_IDLE_FLOOR_PCT}%)")
        if rate is not None and transport in SATURATING and \
                rate < fidelity.LINK_RATE_FLOOR * opts.fabric.link_mbps:
            problems.append(f"{transport}: the receiver's plane-0 link carried {rate} of "
                            f"{opts.fabric.link_mbps} Mbit/s while it should have been full")
    wmem = int(Path("/proc/sys/net/core/wmem_default").read_text())
    if info.get("datapath") == "user" and wmem < fidelity.OVS_SEND_BUFFER:
        problems.append(f"net.core.wmem_default is {wmem}: OVS's packet socket drops frames silently "
                        f"when queues build; run `make setup` (raises it and restarts ovs-vswitchd)")
    return {
        "scenario": opts.scenario.name,
        "title": opts.scenario.title,
        "fabric": opts.fabric.as_dict(),
        "config": {**opts.as_dict(), **info},
        "seed": opts.seed,
        "software": fidelity.software_versions(),
        "dataplane": run.dataplane,
        "routing": {"detect_ms": opts.detect_ms, "controller_events": _relative_events(run)},
        "faults": run.timeline,
        "transports": run.transports,
        "fidelity": {"link_mbps_configured": opts.fabric.link_mbps, "per_transport": per_transport,
                     "faithful": not problems, "problems": problems, "warnings": warnings},
    }


def _relative_events(run: Run) -> list[dict]:
    """Controller events, each stamped with the transport whose run it fell in and its time
    since that transport's start (the time axis of every plot)."""
    out = []
    for event in run.controller_events:
        for transport, (t0, t1) in run.windows.items():
            if t0 <= event["t"] <= t1 + run.opts.detect_ms / 1000 + 1.0:
                out.append({**event, "t": round(event["t"] - t0, 3), "transport": transport})
                break
    return out


def _write(run: Run, summary: dict, staging: Path, workdir: Path) -> None:
    (staging / "summary.json").write_text(json.dumps(summary, indent=2))
    names = list(run.curves)
    n = max((len(c) for c in run.curves.values()), default=0)
    rows = ["t_s," + ",".join(f"{name}_mbps" for name in names)]
    for i in range(n):
        rows.append(f"{i * metrics.BIN_S:.2f}," + ",".join(
            f"{run.curves[name][i]:.3f}" if i < len(run.curves[name]) else "" for name in names))
    (staging / "timeseries.csv").write_text("\n".join(rows) + "\n")
    traces = staging / "traces"
    traces.mkdir()
    for item in sorted(workdir.glob("*-trace.jsonl")) + sorted(workdir.glob("*.log")):
        shutil.copy(item, traces / item.name)
    timelines = {t: ev_timeline(workdir / f"{host}-trace.jsonl", qpn)
                 for t, (host, qpn) in run.ev_traces.items() if t in ("mrc", "spray")}
    summary_path_state = {t: {"ev_state_changes": len(v)} for t, v in timelines.items()}
    if summary_path_state:
        summary["path_state"] = summary_path_state
        (staging / "summary.json").write_text(json.dumps(summary, indent=2))
    from experiments import plots  # matplotlib: imported only when there is something to draw

    plots.plot_scenario(staging, summary, run.curves, run.windows, timelines)
