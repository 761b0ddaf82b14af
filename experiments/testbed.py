"""The session every experiment shares: a running emulation, the host agents, the fault
injector, a CPU sampler and the run's transport parameters, handed down to both the agents and
the switch data plane.

    with Testbed(fabric, workdir, seed=1) as bed:
        flow = bed.flow("mrc", "h0", "h1")
        flow.start(5.0)
        bed.faults.cut_link("p0l0-p0s0")
        ...

Scenarios, the demo and the `mrclab` command use it; everything it starts is stopped when the
block ends, however it ends.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from endpoints.host.control import AgentClient
from endpoints.protocol.config import TransportConfig
from experiments import fidelity
from experiments.faults import FaultInjector
from experiments.flows import AgentFlow, TcpFlow
from topologies import hostnet
from topologies.emulation import Emulation
from topologies.model import Fabric

REPO = Path(__file__).resolve().parent.parent
AGENT_TRANSPORTS = frozenset({"mrc", "roce", "spray"})  # run by the host agents
FIRST_TCP_PORT = 5201


def transport_overrides(config: TransportConfig) -> dict:
    """The parameters of `config` that differ from the defaults: what the agents are told
    (an agent derives what is left unset, such as the RTT target floor, from the fabric)."""
    default = TransportConfig()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(default, f.name)}


def start_agents(em: Emulation, hosts: Iterable[str], workdir: Path, seed: int,
                 transport: dict | None = None) -> dict[str, AgentClient]:
    """One agent process per host (`python -m endpoints.host.agent`), connected to."""
    clients = {}
    for host in hosts:
        control = str(workdir / f"{host}.sock")
        settings = {"host": host, "fabric": em.fabric.params.as_dict(), "control": control,
                    "trace": str(workdir / f"{host}-trace.jsonl"), "seed": seed,
                    "transport": transport or {}}
        config = workdir / f"agent-{host}.json"
        config.write_text(json.dumps(settings))
        log = open(workdir / f"agent-{host}.log", "w")
        em.popen(host, [sys.executable, "-m", "endpoints.host.agent", "--config", str(config)],
                 stdout=log, stderr=log, cwd=str(REPO))
        clients[host] = AgentClient(control)
    wait_for_agents(clients, lambda host: workdir / f"agent-{host}.log")
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


class Testbed:
    """An emulated fabric ready for traffic. Use as a context manager."""

    def __init__(self, fabric: Fabric, workdir: Path, seed: int = 1,
                 transport: TransportConfig | None = None, datapath: str = "auto",
                 detect_ms: float = 900.0, dataplane: str = "auto") -> None:
        self.fabric = fabric
        self.workdir = Path(workdir)
        self.seed = seed
        self.transport = transport or TransportConfig()
        self.em = Emulation(fabric, self.workdir, datapath=datapath, detect_ms=detect_ms,
                            dataplane_mode=dataplane, transport=self.transport)
        self.cpu = fidelity.CpuSampler()
        self.faults = FaultInjector(self.em)
        self.agents: dict[str, AgentClient] = {}
        self._mptcp = False
        self._qpn = 0
        self._port = FIRST_TCP_PORT - 1

    # ----- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self.em.__enter__()
        try:
            self.cpu.__enter__()
        except BaseException:
            self.em.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop everything: faults cleared, agents' channels closed, sampler and emulation
        stopped (which kills every process started in a host)."""
        try:
            self.faults.close()
            for client in self.agents.values():
                client.close()
        finally:
            try:
                self.cpu.__exit__()
            finally:
                self.em.stop()

    def prepare(self, transports: Iterable[str]) -> None:
        """Start what `transports` need before any of them is measured: the agents on every
        host, MPTCP endpoints on every host."""
        wanted = set(transports)
        if wanted & AGENT_TRANSPORTS and not self.agents:
            self.agents = start_agents(self.em, [h.name for h in self.fabric.hosts], self.workdir,
                                       self.seed, transport_overrides(self.transport))
        if "mptcp" in wanted and not self._mptcp:
            for host in self.fabric.hosts:
                hostnet.configure_mptcp(self.fabric, host, self.em.pid(host.name))
            self._mptcp = True

    # ----- traffic --------------------------------------------------------------------------
    def flow(self, transport: str, src: str, dst: str) -> AgentFlow | TcpFlow:
        """A long-lived flow of `transport` from host `src` to host `dst`, ready to start."""
        self.prepare([transport])
        if transport in ("tcp", "mptcp"):
            self._port += 1
            return TcpFlow(self.em, self.workdir, transport, src, dst, self._port)
        self._qpn += 1
        return AgentFlow(self.agents, transport, src, dst, self._qpn)

    def agent_flow(self, transport: str, src: str, dst: str) -> AgentFlow:
        """A flow of one of the agents' transports (mrc, roce, spray)."""
        if transport not in AGENT_TRANSPORTS:
            raise ValueError(f"{transport} is not run by the agents: use one of {sorted(AGENT_TRANSPORTS)}")
        flow = self.flow(transport, src, dst)
        assert isinstance(flow, AgentFlow)
        return flow

    def agent_counters(self, host: str) -> dict:
        """The agent's own counters (malformed input, send failures by errno), if it runs."""
        if host not in self.agents:
            return {}
        stats = self.agents[host].call("agent_stats")
        return {k: stats[k] for k in ("counters", "raw_send_dropped", "send_errors", "backlog")
                if k in stats}
