"""The experiment scenarios: what each one runs, its defaults, and the checks on its options.

Every scenario runs every requested transport on the same emulated fabric, one after another
(so no transport's traffic or CPU share measures another's), with the same fault timeline
relative to its own start. Options are checked against the fabric model before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from experiments.flows import TRANSPORTS
from topologies.model import Fabric, FabricError, FabricParams


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "fault" | "permutation" | "incast" | "collective"
    title: str
    fabric: FabricParams
    duration: float
    fault_at: float | None = None
    fault_end: float | None = None
    transports: tuple[str, ...] = TRANSPORTS


# Defaults chosen to stay faithful on a 2-core VM with the userspace OVS datapath: 10 Mbit/s
# links, 1 KB payloads (~1.2k packets/s per link), few enough concurrent flows that CPU idle
# stays above the fidelity floor (see docs/experiments.md for the measurements).
SMALL = FabricParams(planes=4, leaves=2, spines=3, hosts_per_leaf=1, link_mbps=10.0)
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("link-failure", "fault", "T0-T1 link cut during a long transfer, then restored",
             SMALL, 7.0, 2.5, 5.0),
    Scenario("switch-failure", "fault", "a spine (T1) stops forwarding, ports up, then returns",
             SMALL, 7.0, 2.5, 5.0),
    Scenario("link-flap", "fault", "a T0-T1 link flapping at a set rate",
             SMALL, 8.0, 2.0, 7.0),
    Scenario("lossy-link", "fault", "random drop with probability p on one T0-T1 link",
             SMALL, 7.0, 2.5, 6.5),
    Scenario("permutation", "permutation", "every host sends to another (seeded permutation)",
             FabricParams(planes=2, leaves=2, spines=3, hosts_per_leaf=3, link_mbps=10.0), 5.0),
    Scenario("incast", "incast", "N senders to one receiver, plus a victim flow sharing its leaf",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=4, link_mbps=10.0), 7.0,
             2.5, 6.5),
    Scenario("collective", "collective", "ring all-reduce steps, with and without a link cut",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0), 0.0,
             transports=("mrc", "roce", "spray")),
)}


@dataclass(frozen=True)
class Options:
    """What `mrclab run` was asked for, after defaults are filled in from the scenario."""
    scenario: Scenario
    fabric: FabricParams
    transports: tuple[str, ...]
    duration: float
    fault_at: float | None
    fault_end: float | None
    detect_ms: float = 900.0
    seed: int = 1
    link: str | None = None  # fault target; None: the link the flow's plane-0 traffic uses
    switch: str | None = None
    loss: float = 0.2
    flaps_per_min: float = 60.0
    down_ms: float = 300.0
    senders: int = 6
    steps: int = 20
    step_kb: int = 64
    datapath: str = "auto"
    dataplane: str = "auto"  # switch egress: auto (eBPF where it loads) | ebpf | droptail
    same_target: bool = False  # fault the first transport's link for all (the demo's comparison)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("transports", "duration", "fault_at", "fault_end",
                                             "detect_ms", "seed", "link", "switch", "datapath",
                                             "dataplane")}
        kind, name = self.scenario.kind, self.scenario.name
        if name == "lossy-link":
            out["loss"] = self.loss
        if name == "link-flap":
            out.update(flaps_per_min=self.flaps_per_min, down_ms=self.down_ms)
        if kind == "incast":
            out["senders"] = self.senders
        if kind == "collective":
            out.update(steps=self.steps, step_kb=self.step_kb)
        out["transports"] = list(self.transports)
        return out


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise FabricError(f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)}") from None


def parse_transports(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return default
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TRANSPORTS]
    if unknown or not names:
        raise FabricError(f"unknown transport(s) {unknown or text!r}: choose from {', '.join(TRANSPORTS)}")
    return names


def validate(opts: Options) -> Options:
    """Check every option against the fabric before anything starts; return it completed."""
    sc, fabric = opts.scenario, Fabric(opts.fabric)
    p = opts.fabric
    if sc.kind == "collective" and set(opts.transports) & {"tcp", "mptcp"}:
        raise FabricError("collective runs on the agents' transports only (mrc, roce, spray): "
                          "drop tcp/mptcp from --transports")
    if not 0.0 <= opts.loss <= 1.0:
        raise FabricError(f"--loss must be a probability in [0, 1], got {opts.loss}")
    if sc.kind in ("fault", "incast"):
        if p.leaves < 2 or p.spines < 2:
            raise FabricError(f"{sc.name} needs 2+ leaves and 2+ spines (somewhere to reroute): "
                              f"pass --leaves 2 --spines 2")
        if not (opts.fault_at and opts.fault_end and 0 < opts.fault_at < opts.fault_end < opts.duration):
            raise FabricError("need 0 < --fault-at < --fault-end < --duration")
    if opts.duration <= 0 and sc.kind != "collective":
        raise FabricError(f"--duration must be > 0, got {opts.duration}")
    if opts.link is not None:
        link = fabric.link(opts.link)  # FabricError naming the valid forms
        if link.kind != "fabric":
            raise FabricError(f"{opts.link} is a host link: faults apply to T0-T1 links like p0l0-p0s1")
    if opts.switch is not None:
        sw = fabric.switch(opts.switch)
        if sw.tier != "T1":
            raise FabricError(f"{opts.switch} is a leaf (T0): switch-failure takes a spine like p0s1")
    flap_ok = 0 < opts.flaps_per_min <= 600 and 0 < opts.down_ms < 60_000 / opts.flaps_per_min
    if sc.name == "link-flap" and not flap_ok:
        raise FabricError("--flaps-per-min must be in (0, 600] and --down-ms shorter than one flap period")
    hosts = len(fabric.hosts)
    if sc.kind == "incast" and not 1 <= opts.senders <= hosts - 3:
        raise FabricError(f"incast needs a receiver, a victim pair and the senders: at most "
                          f"{hosts - 3} senders on {hosts} hosts, got {opts.senders}")
    if sc.kind == "permutation" and hosts < 2:
        raise FabricError("permutation needs 2+ hosts")
    if sc.kind == "collective" and (hosts < 2 or opts.steps < 2 or not 1 <= opts.step_kb <= 65536):
        raise FabricError("collective needs 2+ hosts, --steps 2 or more and --step-kb in 1..65536")
    if not 0 < opts.detect_ms <= 60_000:
        raise FabricError(f"--detect-ms must be in (0, 60000], got {opts.detect_ms}")
    return opts


def default_options(name: str, **overrides: object) -> Options:
    sc = scenario(name)
    base = Options(sc, sc.fabric, sc.transports, sc.duration, sc.fault_at, sc.fault_end)
    return validate(replace(base, **overrides))  # type: ignore[arg-type]
