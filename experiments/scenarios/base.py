"""What every scenario is made of: its definition (`Scenario`), the options a run was asked for
(`Options`), the checks every option gets, the `Kind` a scenario module implements, and the
`Record` a run fills in.

Every scenario runs every requested transport on the same emulated fabric, one after another
(so no transport's traffic or CPU share measures another's), with the same fault timeline
relative to its own start. Options are checked against the fabric model before anything starts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from endpoints.host import overrides
from endpoints.protocol.config import TransportConfig, with_overrides
from experiments.analysis import metrics
from experiments.analysis.transports import TRANSPORTS
from experiments.api import capture
from experiments.api.flows import AgentFlow, Flow
from experiments.api.testbed import Testbed
from experiments.scenarios.schema import DATA_OK, Checks, Figures, Row
from topologies.model import DEFAULT_DETECT_MS, Fabric, FabricError, FabricParams, check_number

# Every scenario's link rate unless one is asked for, and the demo's: what the default switch
# backend (`--switch auto`: kernel routers) and the Python agents carry faithfully on a 2-core
# VM in the busiest default scenario, the permutation (8 hosts x 2 planes: 9.5k data packets/s,
# CPU idle p10 24%; at 40 Mbit/s 0%). The OVS backend carries less (its ovs-vswitchd takes a
# core): a run says so before it starts, and `--link-mbps auto` picks what fits (docs/experiments.md).
DEFAULT_LINK_MBPS = 20.0
# The default fabric: what `mrclab demo`, `mrclab cli` and `mrclab check-fabric` start and the
# fault scenarios run on, README's "default fabric" (one home: every command takes it from
# here). 4 planes x 3 spines: 12 paths per host pair; after one uplink is cut, plane 0 still has
# two. One flow at a time over 4 planes, 4 KB payloads: few enough packets that CPU idle stays
# far above the fidelity floor on a 2-core VM, on both backends (docs/experiments.md).
DEFAULT_FABRIC = FabricParams(planes=4, leaves=2, spines=3, hosts_per_leaf=1, link_mbps=DEFAULT_LINK_MBPS)
WARMUP_S = 0.5  # the start of every flow not counted as its steady state
TAIL_S = 0.6  # after a flow's duration: its last packets drain before it is read


class Kind:
    """One kind of scenario (a module under experiments/scenarios/ provides one): its option
    checks, how it runs one transport, and its own plots. Subclasses override what they need."""

    name = ""
    timed = True  # runs for --duration (collective runs a number of steps instead)
    # The scenario-specific options (Options fields) this kind uses; any other one given is
    # refused rather than silently ignored. `takes` may add per-scenario ones.
    options: frozenset[str] = frozenset()
    # True: the run loads the fabric's links at exactly their rate for long (every host at its
    # NICs' rate across a fabric that carries just that), so its queues wander up to the ECN
    # threshold and stand there a few seconds in, and each packet then costs the agents more
    # (experiments/analysis/standing.py); `--link-mbps auto` counts that cost
    # (capacity.standing_factors).
    queues_stand = False

    def takes(self, scenario: str) -> frozenset[str]:
        """The scenario-specific options scenario `scenario` of this kind uses."""
        return self.options

    def check(self, opts: Options, fabric: Fabric) -> None:
        """Raise FabricError, naming the option and the fix, for options this kind refuses."""

    def option_fields(self, opts: Options) -> dict:
        """The options of this kind recorded in a summary's `config`, beyond the shared ones."""
        return {}

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        """How many hosts' worth of NICs carry data at once, each filled at the link rate: what
        the run asks of the switches and the agents (experiments/analysis/capacity.py). One flow at a
        time unless a kind says otherwise."""
        return 1

    def agent_cost(self, opts: Options) -> float:
        """The agents' CPU per data packet against the calibration's (the default permutation,
        one QP each way per host), for the capacity's agents' bound."""
        return 1.0

    def capacity_terms(self, opts: Options, fabric: Fabric) -> dict[str, Any]:
        """What capacity.assess and capacity.faithful_rate take from this kind for a run of
        `opts` (the runner's check and auto, and the docs' table of auto's picks, from one home):
        the hosts' worth of NICs busy, the payload per packet, the agents' cost, whether the
        queues stand and for how long the run lasts (None: not a timed run)."""
        return {"busy_senders": self.busy_senders(opts, fabric),
                "mtu_payload": opts.transport().mtu_payload, "agent_cost": self.agent_cost(opts),
                "queues_stand": self.queues_stand, "duration": opts.duration if self.timed else None}

    def variants(self, opts: Options, bed: Testbed) -> list[tuple[str, bool | None]]:
        """(transport, switch trimming) runs; None leaves the data plane as set up."""
        return [(t, None) for t in opts.transports]

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        """Measure `transport` once, filling `record` under `label`."""
        raise NotImplementedError

    def plot(self, folder: Path, summary: dict) -> None:
        """Plots of this kind beyond the goodput and path-state ones every run has."""


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: Kind
    title: str
    fabric: FabricParams
    duration: float
    fault_at: float | None = None
    fault_end: float | None = None
    transports: tuple[str, ...] = TRANSPORTS
    # Its results (schema.py), declared here so that no command keeps a list of its own:
    figures_type: type = Figures  # what it records per transport
    figures: tuple[str, ...] = (DATA_OK,)  # the headline figures: the report's columns
    brief: tuple[str, ...] = ()  # what a progress line and a plot title show (then data_ok)
    # Figures whose missing value is news (no recovery came): the words a headline gives it.
    never: Mapping[str, str] = field(default_factory=dict, compare=False)
    row: Row | None = None  # its row in the docs' results table
    # `mrclab validate`'s run of it (options over its defaults) and the figures checked.
    quick: Mapping[str, object] | None = field(default=None, compare=False)
    checks: Checks = field(default_factory=dict, compare=False)

    def headline(self, figures: Mapping[str, object], sep: str = " ") -> str:
        """A transport's brief figures in words, or as `name=value` with `sep="="`."""
        return metrics.headline(figures, self.brief, sep, self.never)


@dataclass(frozen=True)
class Options:
    """What `mrclab run` was asked for, after defaults are filled in from the scenario."""
    scenario: Scenario
    fabric: FabricParams
    transports: tuple[str, ...]
    duration: float
    fault_at: float | None
    fault_end: float | None
    detect_ms: float = DEFAULT_DETECT_MS
    seed: int = 1
    link: str | None = None  # fault target; None: the link the flow's plane-0 traffic uses
    fail_switch: str | None = None  # switch-failure's target (a spine), t0-failure's (a leaf)
    loss: float = 0.2
    flaps_per_min: float = 60.0
    down_ms: float = 300.0
    fault_count: int = 0  # a fault schedule's links (0: the scenario's default; schedule.py)
    fault_every: float = 1.0  # s between a fault schedule's steps
    senders: int = 7  # incast: the paper's 7:1
    steps: int = 20
    step_kb: int = 64
    qps: tuple[int, ...] = (1,)  # allreduce: RoCE's QPs per host pair, one sweep per count
    datapath: str = "auto"
    dataplane: str = "auto"  # switch egress: auto (eBPF where it loads) | ebpf | droptail
    switch_backend: str = "auto"  # auto | ovs | linux (topologies/switches/)
    same_target: bool = False  # fault the first transport's link for all (the demo's comparison)
    capture: tuple[str, ...] = ()  # pcap targets (hosts, host NICs, switch ports), whole run
    packet_log: int = 0  # datagrams each agent logs in its trace (to check a capture against)
    # Code in the product's place in every agent, at named override points (a lab's student
    # code): recorded in the summary's config with each file's SHA-256.
    replace: tuple[overrides.Replacement, ...] = ()
    # NIC-port status in the MRC agents (endpoints/protocol/portstatus.py); False: each EV of a
    # plane whose port died fails on its own (the MRC paper's case without it).
    port_status: bool = True
    servers: tuple[str, ...] = ()  # a split fabric's machines, the head first (docs/cluster.md)
    agents: str = "shared"  # the hosts' agents in one process, or "per-host" (api/testbed.py)
    # Transport parameters over TransportConfig's defaults (`--param NAME=VALUE`, as `mrclab
    # cli` takes them): e.g. the EV set's size and active/backup split (Fig. 12's 16 EVs).
    params: tuple[tuple[str, bool | int | float], ...] = ()
    given: frozenset[str] = frozenset()  # the fields the user set (checked against the kind's)
    # The machine's free cores, read once as the run was set up (`--link-mbps auto` sized it on
    # them) and reused by the load check; None: the run reads them as it starts.
    free_cores: float | None = None
    # A split run's servers' forwarding figures, read once as it was set up (runner.server_figures:
    # capacity.server_bounds takes them); None: none read (one machine, or a rate given).
    servers_forwarding: Mapping[str, Any] | None = field(default=None, compare=False)

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("transports", "duration", "fault_at", "fault_end",
                                             "detect_ms", "seed", "link", "fail_switch",
                                             "switch_backend", "datapath", "dataplane",
                                             "agents")}
        out.update(self.scenario.kind.option_fields(self))
        out["transports"] = list(self.transports)
        if self.capture:
            out.update(capture=list(self.capture), packet_log=self.packet_log)
        if self.replace:
            out["replace"] = overrides.provenance(self.replace)
        if not self.port_status:
            out["port_status"] = False
        if self.params:
            out["params"] = dict(self.params)
        return out

    def transport(self) -> TransportConfig:
        """The agents' transport parameters: the defaults, port status as asked, `params` over them."""
        return with_overrides(TransportConfig(port_status=self.port_status), dict(self.params))


@dataclass
class Record:
    """What a run measured, per transport label (a transport, or e.g. `mrc-droptail`)."""
    transports: dict[str, dict] = field(default_factory=dict)  # label -> headline figures
    curves: dict[str, list[float]] = field(default_factory=dict)  # label -> Mbit/s per bin
    windows: dict[str, tuple[float, float]] = field(default_factory=dict)  # label -> monotonic
    timeline: list[dict] = field(default_factory=list)  # faults, relative to their label's start
    ev_traces: dict[str, tuple[str, int]] = field(default_factory=dict)  # label -> (host, qpn)
    link_rates: dict[str, float] = field(default_factory=dict)  # label -> Mbit/s achieved
    link_parts: dict[str, list[float]] = field(default_factory=dict)  # the same, per part
    qps: dict[str, list[list]] = field(default_factory=dict)  # label -> [src, dst, qpn, transport]
    # label -> (SACKs whose echo gave no RTT sample, SACKs) over its MRC and spray senders
    echoes: dict[str, tuple[int, int]] = field(default_factory=dict)
    first_target: str | None = None  # the first transport's fault target (same_target)

    def keep_trace(self, label: str, flow: Flow) -> None:
        """Plot this flow's per-EV state (an agent flow's sender trace)."""
        if isinstance(flow, AgentFlow):
            self.ev_traces[label] = (flow.src, flow.qpn)


def sleep_until(t: float) -> None:
    time.sleep(max(t - time.monotonic(), 0.0))


# Options every scenario takes; the rest belong to kinds (Kind.options).
SHARED_OPTIONS = frozenset({"transports", "seed", "datapath", "dataplane", "switch_backend", "fabric",
                            "capture", "packet_log", "replace", "port_status", "params",
                            "servers"})
MAX_DURATION_S = 3600.0  # one transport's traffic; longer runs are not what a testbed run is for
MAX_STEPS = 1000  # collective ring steps per phase (each a full ring exchange)
MAX_QPS = 64  # allreduce: RoCE QPs per host pair (the paper's most is 16)
MAX_SEED = 2**63 - 1
MAX_PACKET_LOG = 1_000_000  # datagrams each agent logs each way (a trace line each)


def flag(option: str) -> str:
    """The command-line flag of an Options field."""
    return "--" + option.replace("_", "-")


def check(opts: Options) -> Options:
    """Check every option before anything starts, in one place: each number through the one
    validator (finite, in range, whole where it must be), options that do not apply to the
    scenario, the fabric, then the kind's own checks. Returns the options."""
    sc, fabric = opts.scenario, Fabric(opts.fabric)
    foreign = sorted(opts.given - SHARED_OPTIONS - sc.kind.takes(sc.name))
    if foreign:
        raise FabricError(f"{flag(foreign[0])} does not apply to the {sc.name} scenario: drop it")
    if len(set(opts.transports)) != len(opts.transports):
        raise FabricError(f"--transports lists a transport twice: {','.join(opts.transports)}")
    if sc.kind.timed:
        check_number("--duration", opts.duration, 0, MAX_DURATION_S, lo_open=True)
    for name in ("fault_at", "fault_end"):
        if getattr(opts, name) is not None:
            check_number(flag(name), getattr(opts, name), 0, MAX_DURATION_S)
    check_number("--detect-ms", opts.detect_ms, 0, 60_000, lo_open=True)
    check_number("--seed", opts.seed, 0, MAX_SEED, integral=True)
    check_number("--loss", opts.loss, 0, 1)
    check_number("--flaps-per-min", opts.flaps_per_min, 0, 600, lo_open=True)
    check_number("--down-ms", opts.down_ms, 0, 60_000, lo_open=True)
    check_number("--senders", opts.senders, 1, 65536, integral=True)  # incast: also vs the hosts
    check_number("--steps", opts.steps, 2, MAX_STEPS, integral=True)
    check_number("--step-kb", opts.step_kb, 1, 65536, integral=True)
    for n in opts.qps:
        check_number("--qps", n, 1, MAX_QPS, integral=True)
    if not opts.qps or len(set(opts.qps)) != len(opts.qps):
        raise FabricError(f"--qps takes distinct QP counts like 1,4,16, got {opts.qps}")
    if opts.link is not None:
        fabric.link(opts.link)  # FabricError naming the valid forms; the kind checks which kind
    if opts.fail_switch is not None:
        fabric.switch(opts.fail_switch)  # FabricError naming the valid forms; the kind checks the tier
    try:
        opts.transport()
    except ValueError as exc:
        raise FabricError(f"--param {exc}") from None
    for target in opts.capture:
        capture.resolve(fabric, target)  # FabricError naming the forms a target takes
    if len(set(opts.capture)) != len(opts.capture):
        raise FabricError(f"--capture names a target twice: {','.join(opts.capture)}")
    check_number("--packet-log", opts.packet_log, 0, MAX_PACKET_LOG, integral=True)
    overrides.check(opts.replace)  # OverrideError: one line naming the point or the file
    sc.kind.check(opts, fabric)
    return opts


def fault_window(opts: Options) -> tuple[float, float]:
    """(fault_at, fault_end) of options `check_fault_window` accepted."""
    if opts.fault_at is None or opts.fault_end is None:
        raise FabricError(f"{opts.scenario.name} needs --fault-at and --fault-end")
    return opts.fault_at, opts.fault_end


def check_fault_window(opts: Options, fabric: Fabric) -> None:
    """A fault (or an incast) needs somewhere to reroute and a window inside the run."""
    p = fabric.params
    if p.leaves < 2 or p.spines < 2:
        raise FabricError(f"{opts.scenario.name} needs 2+ leaves and 2+ spines (somewhere to "
                          f"reroute): pass --leaves 2 --spines 2")
    if not (opts.fault_at and opts.fault_end and 0 < opts.fault_at < opts.fault_end < opts.duration):
        raise FabricError("need 0 < --fault-at < --fault-end < --duration")
