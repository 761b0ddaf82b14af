"""The Python API: a running fabric with its host agents, faults to inject, flows to open, live
statistics, captures and plots. The `mrclab` scenarios, the demo and the interactive CLI use
exactly this; docs/api.md documents it.

    from topologies.model import build
    from experiments.api.testbed import Testbed

    with Testbed(build(planes=4, leaves=2, spines=2), seed=1) as bed:
        flow = bed.flow("mrc", "h0", "h2")
        flow.start(nbytes=20 << 20)
        bed.faults.cut_link("p0l0-p0s0")
        ...

Everything it starts is stopped when the block ends, however it ends.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from endpoints.host import overrides
from endpoints.host.control import AgentClient
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig, with_overrides
from experiments.analysis import fidelity
from experiments.analysis.transports import BASELINE_PLANE, TRANSPORTS, check_agent_processes
from experiments.api.capture import Capture
from experiments.api.faults import FaultInjector
from experiments.api.flows import AgentFlow, Flow, TcpFlow
from experiments.outdir import REPO
from topologies.face import Emulator, emulator, private_dir
from topologies.model import DEFAULT_DETECT_MS, Fabric, FabricError, Route
from topologies.preflight import EmulationError
from topologies.runctx import RunContext

AGENT_TRANSPORTS = frozenset({"mrc", "roce", "spray"})  # run by the host agents
FIRST_TCP_PORT = 5200  # TCP/MPTCP flow N listens on FIRST_TCP_PORT + N


def transport_overrides(config: TransportConfig, base: TransportConfig | None = None) -> dict:
    """The parameters of `config` that differ from `base` (the defaults): what the agents are
    told (an agent derives what is left unset, such as the RTT target floor, from the fabric)."""
    base = base or TransportConfig()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(base, f.name)}


def start_agents(em: Emulator, hosts: Iterable[str], workdir: Path, seed: int,
                 transport: dict | None = None, packet_log: int = 0,
                 procs: dict[str, subprocess.Popen] | None = None,
                 replace: Iterable[overrides.Replacement] = (), processes: str = "shared",
                 logs: dict[str, Path] | None = None) -> dict[str, AgentClient]:
    """Every host's agent (`python -m endpoints.host.agent`), connected to; each is handed its
    host's path table and what it must know of the fabric (`Emulator.agent_settings`) in
    its settings. `processes`:
    "shared", one process runs them all, each agent made inside its host's namespace
    (endpoints/host/shared.py: a third less CPU per packet than a process each, docs/
    experiments.md, "What a run costs"), or "per-host", a process in each host. Each host's
    process is put in `procs` and its log in `logs` (by host) when given. `packet_log`: each
    agent logs the first N datagrams it sends and receives in its trace. `replace`: code in
    the product's place at named override points (endpoints/host/overrides.py), in every
    agent; each agent is asked what it loaded, and must answer with the same files."""
    check_agent_processes(processes)
    hosts = list(hosts)
    clients, configs = {}, {}
    replace = overrides.check(replace)
    for host in hosts:
        control = str(workdir / f"{host}.sock")
        facts = em.agent_settings(host)
        settings = {"control": control,
                    "trace": str(workdir / f"{host}-trace.jsonl"), "seed": seed,
                    "transport": transport or {}, "packet_log": packet_log, **facts}
        if processes == "shared":
            settings["netns"] = f"/proc/{em.pid(host)}/ns/net"
        if replace:
            settings["replace"] = overrides.as_settings(replace)
        configs[host] = workdir / f"agent-{host}.json"
        configs[host].write_text(json.dumps(settings))
        clients[host] = AgentClient(control)
    groups = [hosts] if processes == "shared" else [[host] for host in hosts]
    log_of = {}
    for group in groups:
        log_path = workdir / ("agents.log" if processes == "shared" else f"agent-{group[0]}.log")
        argv = [sys.executable, "-m", "endpoints.host.agent"]
        for host in group:
            argv += ["--config", str(configs[host])]
        with open(log_path, "w") as log:
            proc = em.popen(group[0], argv, stdout=log, stderr=log, cwd=str(REPO))
        for host in group:
            log_of[host] = log_path
            if procs is not None:
                procs[host] = proc
    if logs is not None:
        logs.update(log_of)
    wait_for_agents(clients, log_of.__getitem__)
    if replace:
        want = overrides.provenance(replace)
        for host, client in clients.items():
            got = client.call("ping").get("replaced")
            if got != want:
                raise EmulationError(f"the agent on {host} runs {got} at the override points, "
                                     f"not {want}: a file changed while the agents started")
    return clients


def wait_for_agents(clients: dict[str, AgentClient], log_of: Callable[[str], Path],
                    error: type[Exception] = RuntimeError) -> None:
    """Connect to every started agent; one that does not answer within 20 s raises `error`
    with the tail of its log."""
    for host, client in clients.items():
        try:
            client.connect(wait=20)
        except TimeoutError as exc:
            log = log_of(host).read_text()[-800:]
            raise error(f"agent on {host} did not start: {log}") from exc


def describe_switches(em: Emulator) -> str:
    """The switch backend in a few words, for progress lines; with `auto`, which backend this
    machine does not run and why."""
    fell_back = "; not " in em.switch_choice
    return (f"{em.switch_backend} switches" + (f", {em.datapath} datapath" if em.datapath else "")
            + (f"; {em.switch_choice}" if fell_back else ""))


class PathState(NamedTuple):
    """One source route between two hosts, and whether the faults injected so far leave it up."""
    route: Route  # EV, plane, spine, uSID carrier address, links crossed
    up: bool
    why: str  # what is wrong with it ("" when up): a cut link, a failed switch, a lossy link


class Testbed:
    """An emulated fabric ready for traffic. Use as a context manager (or `start()` and
    `close()`).

    fabric: what to emulate (`topologies.model.build(...)`).
    workdir: where agents keep their sockets, logs and traces; None: a private temporary
        folder, removed at `close()`.
    seed: every random choice of the agents derives from it.
    transport: the run's transport parameters, for the agents and the switches' thresholds.
    switch: the switch backend, auto (the fastest this machine runs), ovs or linux.
    datapath, dataplane, detect_ms: as `mrclab run --datapath/--dataplane/--detect-ms`.
    packet_log: each agent logs the first N datagrams it sends and receives in its trace
        (`<host>-trace.jsonl`, event "packet"), to check a capture against; 0: none.
    replace: code to run in the agents in the product's place, at named override points
        (`overrides.Replacement`s or `POINT=FILE:NAME` texts; endpoints/host/overrides.py),
        checked here; `provenance` records what was replaced, with each file's SHA-256.
    servers: split the fabric over machines, the head (this one) first: hosts here, each
        plane's switches on a server after it, over ssh (docs/cluster.md); () runs it all here.
    agents: "shared", every host's agent in one process (the default: a third less CPU per
        packet), or "per-host", a process in each host (`start_agents`).
    """

    def __init__(self, fabric: Fabric, workdir: Path | str | None = None, seed: int = 1,
                 transport: TransportConfig | None = None, datapath: str = "auto",
                 detect_ms: float = DEFAULT_DETECT_MS, dataplane: str = "auto", switch: str = "auto",
                 packet_log: int = 0,
                 replace: Iterable[overrides.Replacement | str] = (),
                 servers: Iterable[str] = (), agents: str = "shared") -> None:
        self.agent_processes = check_agent_processes(agents)
        self.fabric = fabric
        self.replace = overrides.check(r if isinstance(r, overrides.Replacement) else
                                       overrides.parse(r) for r in replace)
        self.provenance = overrides.provenance(self.replace)  # {} for the product's own code
        self._own_workdir = workdir is None
        self.workdir = private_dir("mrclab-testbed-") if workdir is None else Path(workdir)
        self.seed = seed
        if isinstance(packet_log, bool) or not isinstance(packet_log, int) or packet_log < 0:
            raise FabricError(f"packet_log must be a whole number >= 0, got {packet_log!r}")
        self.packet_log = packet_log
        self.transport = transport or TransportConfig()
        # The emulator through its face (topologies/face.py): all this API asks of it.
        self.em = emulator(fabric, self.workdir, tuple(servers), datapath=datapath,
                           detect_ms=detect_ms, dataplane_mode=dataplane,
                           transport=self.transport, switch=switch, ecmp_seed=seed)
        self.cpu = fidelity.CpuSampler(forwarding_pids=self.em.forwarding_pids,
                                       remote=self.em.remote_cpu_commands,
                                       agent_pids=self._agent_pids)
        self.faults = FaultInjector(self.em)
        self.agents: dict[str, AgentClient] = {}
        self.flows: list[Flow] = []  # every flow opened, in order; flow N is flows[N - 1]
        self.captures: list[Capture] = []
        self.t0 = 0.0  # CLOCK_MONOTONIC when the fabric was up: the origin of `plot`'s time axis
        self.agent_procs: dict[str, subprocess.Popen] = {}  # by host (shared: the same for all)
        self.agent_logs: dict[str, Path] = {}  # by host
        self._mptcp = False
        self._sampling = False
        self._qpns: dict[str, set[int]] = {}  # host -> QPNs opened on it
        self._run = RunContext()  # the run lock, held between start and close

    # ----- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Bring the fabric up: controller, switches, hosts, links, the switches' data plane.
        A failure tears down whatever had started, then raises."""
        # The run lock first (the emulation joins it), so that a folder of our own is
        # registered with the run: after a kill -9 the next run or `mrclab clean` removes it
        # with everything else (a folder given to us is not ours).
        try:
            self._run.enter()
        except BaseException:  # another run holds the machine: nothing of ours to leave
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        if self._own_workdir:
            self._run.register(self.workdir)
        try:
            self.em.start()
            self.cpu.__enter__()
            self._sampling = True
        except BaseException:
            try:
                self.em.stop()  # what had started (nothing else had yet)
                if self._own_workdir:
                    shutil.rmtree(self.workdir, ignore_errors=True)
            finally:
                self._run.leave()
            raise
        self._show_baseline_addresses()
        self.t0 = time.monotonic()

    def close(self) -> None:
        """Stop everything: captures, flapping and loss rules, the agents' channels, the
        sampler and the emulation (which kills every process started in a host). Idempotent."""
        try:
            for capture in self.captures:
                capture.stop()
            self.faults.close()
            for client in self.agents.values():
                client.close()
        finally:
            try:
                if self._sampling:
                    self._sampling = False
                    self.cpu.__exit__()
            finally:
                try:
                    self.em.stop()
                    if self._own_workdir:
                        shutil.rmtree(self.workdir, ignore_errors=True)
                finally:
                    self._run.leave()

    @property
    def net(self):  # -> mininet.net.Mininet
        """The Mininet network: `bed.net["h0"].cmd("ip -6 addr")`, Mininet's own CLI."""
        return self.em.net

    def _show_baseline_addresses(self) -> None:
        """Mininet's hosts report each NIC's baseline IPv6 address (they have no IPv4), so
        Mininet's own `pingall`, `dump` and name substitution use the baseline routes."""
        for host in self.fabric.hosts:
            node = self.em.net[host.name]
            for nic in host.nics:
                intf = node.intf(nic.ifname)
                intf.ip, intf.prefixLen = str(nic.addr), 64

    def prepare(self, transports: Iterable[str]) -> None:
        """Start what `transports` need before any of them is measured: the agents on every
        host, MPTCP endpoints on every host."""
        wanted = set(transports)
        if wanted & AGENT_TRANSPORTS and not self.agents:
            self.agents = start_agents(self.em, [h.name for h in self.fabric.hosts], self.workdir,
                                       self.seed, transport_overrides(self.transport),
                                       self.packet_log, self.agent_procs, self.replace,
                                       self.agent_processes, self.agent_logs)
        if "mptcp" in wanted and not self._mptcp:
            for host in self.fabric.hosts:
                self.em.configure_mptcp(host.name)
            self._mptcp = True

    def cpu_headroom(self, since: float = 0.0) -> dict[str, Any]:
        """The CPU side of fidelity since `since` (monotonic s): the 10th percentile of the
        machine's idle share and whether it stayed above the floor a faithful run needs
        (fidelity.CPU_IDLE_FLOOR_PCT): a script checks it before trusting its figures. Where
        another program kept a core busy, the verdict reads the headroom (fidelity's module
        docstring), also returned."""
        p10 = self.cpu.low_idle(since)
        out: dict[str, Any] = {"cpu_idle_p10_pct": None if p10 is None else round(p10, 1)}
        if self.cpu.background:  # another program was busy: what it took the run could have had
            p10 = self.cpu.low_headroom(since)
            out["cpu_headroom_p10_pct"] = p10
        out["faithful"] = p10 is None or p10 >= fidelity.CPU_IDLE_FLOOR_PCT
        return out

    # ----- liveness -------------------------------------------------------------------------
    def check_alive(self) -> None:
        """EmulationError, one line naming the host and the tail of its log, if an agent
        died. A dead controller is not raised here (`em.controller_death()` has it): the
        switches keep their tables, only the baseline's routing stops reacting, and the run's
        summary says so and is marked not faithful."""
        dead = self.dead_agents()
        if dead:
            raise EmulationError(dead[0])

    def dead_agents(self) -> list[str]:
        """One line per agents' process that died: its hosts, its exit status and its log's
        last lines."""
        hosts_of: dict[int, list[str]] = {}
        procs: dict[int, subprocess.Popen] = {}
        for host, proc in self.agent_procs.items():
            hosts_of.setdefault(proc.pid, []).append(host)
            procs[proc.pid] = proc
        out = []
        for pid, hosts in hosts_of.items():
            proc = procs[pid]
            if proc.poll() is not None:
                log = self.agent_logs.get(hosts[0], self.workdir / f"agent-{hosts[0]}.log")
                try:
                    tail = " | ".join(log.read_text().strip().splitlines()[-3:])[-300:]
                except OSError:
                    tail = ""
                who = f"agent on {hosts[0]}" if len(hosts) == 1 else \
                    f"the agents of {', '.join(hosts)} (one process)"
                out.append(f"{who} died (exit status {proc.returncode})"
                           + (f": {tail}" if tail else f": see {log}"))
        return out

    def _agent_pids(self) -> list[int]:
        """The agents' processes that run now (for the CPU sampler)."""
        return sorted({p.pid for p in self.agent_procs.values() if p.poll() is None})

    def deaths(self) -> list[str]:
        """What died while the fabric ran, one line each: the controller (the switches keep
        their tables, but the baseline's routing no longer reacts to faults) and any agent.
        Empty while everything lives. The interactive console reports each once."""
        out = []
        died = self.em.controller_death()
        if died is not None:
            out.append(f"the controller died (exit status {died[1]}): the switches keep their "
                       f"tables, but the baseline's routing no longer reacts to faults; see "
                       f"{self.workdir / 'controller.log'}")
        return out + self.dead_agents()

    # ----- traffic --------------------------------------------------------------------------
    def flow(self, transport: str, src: str, dst: str,
             config: TransportConfig | None = None, plane: int = BASELINE_PLANE, entropy: int = 0) -> Flow:
        """A flow of `transport` (mrc, roce, spray, tcp, mptcp) from host `src` to host `dst`,
        ready to `start`. `config`: this QP's own transport parameters (agent transports only;
        the fabric-wide ones, such as mtu_payload, stay the testbed's); `plane`, `entropy`: a
        RoCE QP's plane and ECMP hash share (AgentFlow: one of N QPs of a host pair)."""
        if transport not in TRANSPORTS:
            raise FabricError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
        self.fabric.routes(src, dst)  # FabricError for an unknown host or src == dst
        overrides = {}
        if config is not None:
            if transport not in AGENT_TRANSPORTS:
                raise FabricError(f"{transport} is the kernel's: transport parameters apply to "
                                  f"{', '.join(sorted(AGENT_TRANSPORTS))}")
            overrides = transport_overrides(config, self.transport)
            with_overrides(self.transport, overrides, per_qp=True)  # ValueError names the problem
        self.prepare([transport])
        number = len(self.flows) + 1
        flow: Flow
        if transport in ("tcp", "mptcp"):
            flow = TcpFlow(self.em, self.workdir, transport, src, dst, FIRST_TCP_PORT + number,
                           number=number)
        else:
            # A random QPN and initial PSN; the cores' seed comes from the run's seed and the
            # flow's number, not from the QPN: a run is as reproducible as with QPNs 1, 2, 3.
            qpn, psn = self._new_qp(src, dst)
            flow = AgentFlow(self.agents, transport, src, dst, qpn, config=overrides,
                             trace=self.workdir / f"{src}-trace.jsonl", psn=psn,
                             seed=self.seed * 1_000_003 + number, number=number, plane=plane,
                             entropy=entropy)
        self.flows.append(flow)
        return flow

    def _new_qp(self, src: str, dst: str) -> tuple[int, int]:
        """A QPN used on neither host and an initial PSN, both random (not seeded): an
        off-path forger must guess both, 48 bits, to land a datagram in the QP's window."""
        used = self._qpns.setdefault(src, set()) | self._qpns.setdefault(dst, set())
        qpn = secrets.randbelow(wire.QPN_MASK) + 1
        while qpn in used:
            qpn = secrets.randbelow(wire.QPN_MASK) + 1
        self._qpns[src].add(qpn)
        self._qpns[dst].add(qpn)
        return qpn, secrets.randbelow(wire.PSN_MASK + 1)

    def paths(self, src: str, dst: str) -> list[PathState]:
        """Every source route from `src` to `dst` (the EVs an MRC QP sprays over), each with
        whether the faults injected so far leave it up."""
        faults = self.faults.active()
        failed, down, lossy = set(faults["failed_switches"]), set(faults["down_links"]), faults["lossy"]
        out = []
        for route in self.fabric.routes(src, dst):
            switches = {end for name in route.links
                        for end in (self.fabric.link(name).a, self.fabric.link(name).b)}
            why = [f"{n} cut" for n in route.links if n in down]
            why += [f"{s} failed" for s in sorted(switches & failed)]
            lossy_here = [f"{n} loses {lossy[n]:g}" for n in route.links if n in lossy]
            out.append(PathState(route, not why, ", ".join(why + lossy_here)))
        return out

    def agent_flow(self, transport: str, src: str, dst: str,
                   config: TransportConfig | None = None, plane: int = BASELINE_PLANE,
                   entropy: int = 0) -> AgentFlow:
        """A flow of one of the agents' transports (mrc, roce, spray)."""
        if transport not in AGENT_TRANSPORTS:
            raise ValueError(f"{transport} is not run by the agents: use one of {sorted(AGENT_TRANSPORTS)}")
        flow = self.flow(transport, src, dst, config, plane, entropy)
        assert isinstance(flow, AgentFlow)
        return flow

    def agent_counters(self, host: str) -> dict:
        """The agent's own counters (malformed input, send failures by errno), if it runs."""
        if host not in self.agents:
            return {}
        stats = self.agents[host].call("agent_stats")
        keys = ("counters", "send_dropped", "send_errors", "backlog", "backlog_overflow")
        return {k: stats[k] for k in keys if k in stats}

    # ----- observation ----------------------------------------------------------------------
    def capture(self, target: str, path: Path | str, snaplen: int = 0) -> Capture:
        """Start writing a pcap of `target`: a host (every NIC), a host NIC (h0-eth1) or a
        switch port (p0l0-eth3). `capture.stop()` ends it (so does `close()`)."""
        capture = Capture(self.em, target, Path(path), snaplen, self.workdir)
        capture.start()
        self.captures.append(capture)
        return capture

    def plot(self, path: Path | str, flows: Iterable[Flow] | None = None) -> Path:
        """A PNG of the flows so far (every flow by default): goodput over time since the
        fabric came up, the faults injected, and each MRC/spray QP's EV states."""
        from experiments.analysis import plots  # matplotlib only when there is something to draw

        chosen = list(self.flows if flows is None else flows)
        if not chosen:
            raise FabricError("no flow to plot yet: start one first")
        now = time.monotonic()
        panels = []
        for flow in chosen:
            changes: list[list] = []
            evs: list[tuple[int, str]] = []
            if isinstance(flow, AgentFlow) and flow.transport in ("mrc", "spray"):
                changes, ev_list = flow.ev_history()
                label = {r.ev: f"{r.ev:#x} {r.label}" for r in self.fabric.routes(flow.src, flow.dst)}
                evs = [(ev, label.get(ev, f"{ev:#x}")) for ev in ev_list]
            panels.append(plots.FlowPanel(f"{flow.number} {flow.transport} {flow.src}->{flow.dst}",
                                          flow.transport, flow.goodput(), changes, evs))
        faults = [{**e, "t": e["t"] - self.t0} for e in self.faults.timeline]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)  # results/NAME/...: made if need be
        plots.plot_session(path, panels, self.t0, now - self.t0, faults, self.fabric.params.as_dict())
        return path
