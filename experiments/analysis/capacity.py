"""What a run asks of the switches, and whether its backend carries it faithfully (pure).

A run's load, in packet-hops per second: every host that sends at once (the scenario kind's
`busy_senders`) can fill each of its NICs, one per plane, at the link rate; every packet crosses
up to `HOPS` switches; SACKs, NACKs and probes add `CONTROL_SHARE`. An upper bound: congestion
control and the agents' own CPU keep real runs below it.

The capacity of a switch backend is the data-plane benchmark's figure (`make bench`:
results/bench/dataplane.json, experiments/tools/dataplane_bench.py) for the smallest measured
fabric with at least the run's switch ports (per-port costs dominate in OVS), or the largest
measured one; where this machine has no figure for the backend, a committed conservative
reference (experiments/reference/dataplane.json). The benchmark feeds the switches from a C
sender and leaves them both cores; a run's agents (Python) need CPU on the same cores, so only
`FAITHFUL_SHARE` of the figure is counted on.

The agents are the other bound: Python processes on the same cores, they send a run's data
packets one or two per wake-up (paced at the link rate), which costs far more CPU per packet than
the streaming agent bench shows. `AGENT_DATA_PPS_PER_CORE` is what a run's agents together sent
faithfully on each backend per core of this 2-core VM (docs/experiments.md), counted on the
cores the switches leave them: a userspace switch (OVS) takes about a core per loaded instance
whatever the rate, the benchmark's `forwarding_cores`, while kernel routers forward in the
agents' own softirq (already in the per-core figure). A run whose busy senders would send more
says so too, and `--link-mbps auto` keeps under both bounds.

Where this machine has a calibration of its own (experiments/analysis/calibration.py: the cost
benchmark's short form, `make setup`), it replaces the per-core figures for the backend it was
measured on: a run then costs what the machine spent with no data moving (per host NIC port)
plus, along the runs it measured (`cost_points`), what the packets cost, and fits while that
stays within `AUTO_CPU_SHARE` of the cores free when it starts (`agent_cores`). Not the fit's
straight line: the cost per packet falls as the rate grows (fewer wake-ups per packet), so the
line's intercept is several times the idle cost (0.32 against 0.05 of a core) and, on a machine
with a core taken by another program, left a faithful rate for nothing but 1 Mbit/s. In the
default permutation, 52% of the cores busy on average left the 10th percentile of idle at 37%,
and 65% busy left it at 15%, near the fidelity floor (10%): 60% keeps a run above the floor on
a machine up to about 15% slower than when it was calibrated.

A committed figure (the per-core figures, the committed cost reference) was measured on one VM of
the kind this project is tested on, and VMs of that kind differ by a third in speed: it counts on
one `SPREAD` times slower, so that a default it picks holds on any of them (CI's OVS runs at the
rate the per-core figures picked for a faster VM filled 86% of a link, and idled 7.7% at p10).
This machine's own calibration needs no such margin: `AUTO_CPU_SHARE` covers its own noise.

A fabric split over servers (`--servers`, topologies/placement.py) forwards each plane on the
server that carries it, the head forwarding nothing: the switches' bound is then each server's
(`server_bounds`), its load the run's share of its planes (every busy sender fills one NIC per
plane alike), its figure the forwarding calibration measured there (`mrclab`'s dataplane bench
in its short form, topologies/server_calibration.py), or the head's figure for as many planes where
a server has none.

Backends are only names here: any backend the benchmark measured (`--switch` names) plugs in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from endpoints.protocol import wire
from topologies.model import FabricParams

HOPS = 3  # leaf, spine, leaf
CONTROL_SHARE = 0.1  # SACKs, NACKs and probes per data packet, at most
FAITHFUL_SHARE = 0.5
# The agents' share of the machine never counts as less than this many cores, however many the
# switches took in the benchmark (8 loaded OVS instances took 1.5 of 2).
MIN_AGENT_CORES = 0.25
# Data packets/s a run's agents together send faithfully, per core the switches leave them,
# measured with the default permutation (8 agents, 2 planes) on the 2-core VM. linux: faithful
# at 20 Mbit/s (9.5k data packets/s, CPU idle p10 24%), not at 40 (19k, 0%). ovs: faithful at 5
# Mbit/s (2.4k), not at 10 (4.8k, CPU idle p10 4%) on the ~1 core its ovs-vswitchd leaves: less
# per core than on kernel routers, as the OVS processes take more than the benchmark's
# forwarding_cores (their handler and revalidator threads, ovsdb-server, the controller). A
# backend not listed gets the lowest figure.
AGENT_DATA_PPS_PER_CORE = {"linux": 4800, "ovs": 2350}
# How much slower than the VM a committed figure was measured on another VM of its kind may be.
SPREAD = 4 / 3
# With a calibration: the share of the free cores the predicted whole-machine CPU may take.
AUTO_CPU_SHARE = 0.6
# ... and of one core, the predicted CPU of the process that runs every host's agent
# (endpoints/host/shared.py): one thread, late past about nine tenths of a core for a tenth of
# a run (fidelity.AGENTS_BUSY_CEILING_PCT). Its 90th percentile over 0.25 s windows runs well
# above its mean: the default permutation predicted at 0.69 of a core read 65-90% (one run in
# three past the ceiling), predicted at 0.58 read 56-61% (three runs; docs/history.md,
# 2026-12-02). The rest of the core is the margin for a machine a little slower than at
# calibration.
AGENTS_PROCESS_SHARE = 0.6
# What a scenario whose fabric runs critically loaded for long (`Kind.queues_stand`:
# the default permutation) costs per data packet once its queues stood, against its calm start,
# the whole machine's and the agents' process's (experiments/analysis/standing.py): a calibration
# measures it (`standing_queues`); this is the figure for one that did not (an earlier form, the
# committed reference) or whose standing phase was saturated (standing.standing_cost: its
# ratio a floor). Measured on the 2-core VM, kernel routers, 2026-12-02: 1.82 and 1.84 at
# 10 Mbit/s (queues stood 6 s in).
STANDING_COST = (1.8, 1.8)
# ... and when they may have stood: this many seconds into the flow, the earliest seen (onsets
# of 3.2-12.5 s at 5-15 Mbit/s on 2-core VMs, kernel routers and OVS, 2026-12-02/03; none
# within 8 s twice at 15 Mbit/s: a random walk's, not earlier at faster rates). A run that
# ends sooner never pays the cost.
STANDING_ONSET_S = 3.0
# A process per host (`--agents per-host`) costs the whole machine this many times what one
# process for them all does at the same rate (the default permutation on kernel routers, 2-core
# VM, 5-20 Mbit/s: 1.5-1.7 times); a calibration measures the default.
PER_HOST_COST = 1.5
# Rates `--link-mbps auto` chooses from (Mbit/s), fastest first: steps of at most about a
# third below 50, where a run's rate is most often set by the machine, not the scenario.
LADDER = (1000.0, 400.0, 200.0, 100.0, 50.0, 40.0, 30.0, 20.0, 15.0, 10.0, 8.0, 6.0, 5.0, 4.0,
          3.0, 2.0, 1.0)


def agent_pps_per_core(backend: str) -> int:
    """What `backend`'s agents send faithfully per core they have on any VM of the kind
    (`AGENT_DATA_PPS_PER_CORE`, measured on one of them, over `SPREAD`)."""
    return round(AGENT_DATA_PPS_PER_CORE.get(backend, min(AGENT_DATA_PPS_PER_CORE.values())) / SPREAD)


def _frames_per_s(params: FabricParams, busy_senders: int, mtu_payload: int) -> float:
    """Full data frames per second `busy_senders` hosts send filling every NIC."""
    return busy_senders * params.planes * params.link_mbps * 1e6 / 8 / wire.frame_bytes(mtu_payload)


def load(params: FabricParams, busy_senders: int, mtu_payload: int) -> float:
    """Packet-hops per second a run needs at most: `busy_senders` hosts filling every NIC."""
    return _frames_per_s(params, busy_senders, mtu_payload) * HOPS * (1 + CONTROL_SHARE)


def agent_load(params: FabricParams, busy_senders: int, mtu_payload: int) -> float:
    """Data packets per second the run's agents send at most: `busy_senders` filling every NIC."""
    return _frames_per_s(params, busy_senders, mtu_payload)


def host_ports(params: FabricParams) -> int:
    """Host NIC ports: one per host per plane (what the agents' fixed cost grows with)."""
    return params.planes * params.leaves * params.hosts_per_leaf


def cost_points(cal: dict[str, Any], params: FabricParams) -> list[tuple[float, float]]:
    """(data packets/s, cores) the whole machine spends on a run of `params`, by this machine's
    calibration: (0, what it spends with no data moving) and each faithful run it measured (all
    its runs if none was), cores never falling as packets grow. The part with no data moving
    grows with host NIC ports (the agents' idle loops, timers and probes), the rest with the
    packets. A calibration with no idle reading (made before it was taken) gives its fit's line
    instead: fixed cores, plus its marginal cost per packet (where the fixed part came out
    negative, none fixed and the dearest packet it measured). The committed reference
    (`"reference"`, measured on another VM) costs `SPREAD` times more."""
    scale = host_ports(params) / host_ports(FabricParams.from_dict(cal["fabric"]))
    slower = SPREAD if cal.get("reference") else 1.0
    idle = (cal.get("idle") or {}).get("fabric_and_agents_cores")
    if idle is None:
        fixed, marginal = float(cal["fixed_cores"]), float(cal["marginal_us_per_packet"]) * 1e-6
        if fixed < 0 or marginal <= 0:
            fixed, marginal = 0.0, max(r["busy_cores"] / r["delivered_data_pps"] for r in cal["runs"])
        return [(0.0, slower * fixed * scale), (1.0, slower * (fixed * scale + marginal))]
    runs = [r for r in cal["runs"] if r.get("faithful", True)] or list(cal["runs"])
    return _from_idle(float(idle), scale, runs, "busy_cores", slower)


def _from_idle(idle: float, scale: float, runs: list[dict[str, Any]], key: str,
               slower: float = 1.0) -> list[tuple[float, float]]:
    """(0, `idle` scaled) then, by data packets/s, each run's `key` cores with its idle part
    scaled the same way, never falling as packets grow; all times `slower`."""
    points, top = [(0.0, slower * idle * scale)], slower * idle * scale
    for r in sorted(runs, key=lambda r: r["delivered_data_pps"]):
        if r["delivered_data_pps"] > points[-1][0]:
            top = max(top, slower * (idle * scale + float(r[key]) - idle))
            points.append((float(r["delivered_data_pps"]), top))
    return points


def agents_process_points(cal: dict[str, Any], params: FabricParams) -> list[tuple[float, float]] | None:
    """(data packets/s, cores) the process of every host's agent spends, as `cost_points` has the
    machine's: from what the agents spend with no data moving (scaled by host NIC ports)
    through each faithful run's busiest agents' process; None for a calibration that did not
    read it (made with a process per host, or before it was read)."""
    runs = [r for r in cal.get("runs", []) if r.get("agents_process_cores") is not None]
    if not runs or cal.get("agents", "per-host") != "shared":
        return None
    runs = [r for r in runs if r.get("faithful", True)] or runs
    idle = cal.get("idle") or {}
    base = max(float(idle.get("fabric_and_agents_cores", 0.0)) - float(idle.get("fabric_cores", 0.0)), 0.0)
    scale = host_ports(params) / host_ports(FabricParams.from_dict(cal["fabric"]))
    points = _from_idle(base, scale, runs, "agents_process_cores")
    return points if len(points) > 1 else None


def queues_stood(duration: float | None) -> bool:
    """Whether a run of `duration` seconds (None: open-ended) lasts past `STANDING_ONSET_S`.

    >>> queues_stood(8.0), queues_stood(2.0), queues_stood(None)
    (True, False, True)
    """
    return duration is None or duration > STANDING_ONSET_S


def standing_factors(cal: dict[str, Any] | None) -> tuple[float, float]:
    """(whole machine, agents' process): what a packet costs once the queues stood, against the
    calibration's calm runs; `STANDING_COST` where the calibration has no unsaturated reading.

    >>> standing_factors(None)
    (1.8, 1.8)
    >>> standing_factors({"standing_queues": {"busy_cores": 1.5, "agents_process_cores": 1.6,
    ...                                       "saturated": False}})
    (1.5, 1.6)
    >>> standing_factors({"standing_queues": {"busy_cores": 1.5, "agents_process_cores": 1.9,
    ...                                       "saturated": True}})
    (1.8, 1.9)
    """
    measured = (cal or {}).get("standing_queues")
    if not measured:
        return STANDING_COST
    got = (float(measured["busy_cores"]), float(measured["agents_process_cores"]))
    if measured.get("saturated"):
        return (max(got[0], STANDING_COST[0]), max(got[1], STANDING_COST[1]))
    return got


def cores_for(points: list[tuple[float, float]], pps: float) -> float:
    """Cores at `pps` data packets/s along `cost_points`: straight between the measured points,
    and past the last on the line from no data through it (the cost per packet falls as the
    rate grows, so that line errs on the dear side)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if pps <= x1:
            return y0 + (y1 - y0) * (pps - x0) / (x1 - x0)
    (x0, y0), (xn, yn) = points[0], points[-1]
    return yn + (yn - y0) / (xn - x0) * (pps - xn) if xn > x0 else y0


def pps_for(points: list[tuple[float, float]], cores: float) -> float:
    """The most data packets/s whose cost (`cores_for`) stays within `cores`."""
    if cores < points[0][1]:
        return 0.0
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if cores <= y1:
            return x1 if y1 == y0 else x0 + (x1 - x0) * (cores - y0) / (y1 - y0)
    (x0, y0), (xn, yn) = points[0], points[-1]
    return xn + (cores - yn) * (xn - x0) / (yn - y0) if yn > y0 else float("inf")


def server_load(params: FabricParams, busy_senders: int, mtu_payload: int, planes: int) -> float:
    """Packet-hops/s the switches of `planes` of the fabric's planes carry at most: every busy
    sender fills each of its NICs, one per plane, so the load splits evenly over the planes."""
    return load(params, busy_senders, mtu_payload) * planes / params.planes


def server_bounds(params: FabricParams, busy_senders: int, mtu_payload: int,
                  servers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per server of a split run, `servers[name]` ({"planes": [...], "packet_hops_per_s": its
    forwarding figure, ...}) with "needed_packet_hops_per_s" (its planes' share of the load),
    "faithful_packet_hops_per_s" (`FAITHFUL_SHARE` of its figure: the calibration fed its
    switches from a sender on the same cores, but not through the VXLAN tunnels every host
    link adds there, one encapsulation and one decapsulation per path beside three hops) and
    "within". A server without planes carries nothing; one with a figure of 0 (nothing known)
    counts as within, as `assess` does for an unknown backend."""
    out = {}
    for name, s in servers.items():
        needed = server_load(params, busy_senders, mtu_payload, len(s["planes"]))
        faithful = float(s.get("packet_hops_per_s") or 0) * FAITHFUL_SHARE
        out[name] = {**s, "needed_packet_hops_per_s": round(needed),
                     "faithful_packet_hops_per_s": round(faithful),
                     "within": not s["planes"] or not faithful or needed <= faithful}
    return out


def head_figure(backend: str, params: FabricParams, planes: int, measured: dict[str, Any],
                reference: dict[str, Any]) -> dict[str, Any]:
    """The head's figure (`capacity`) for a server carrying `planes` of `params`' planes: what a
    server without a forwarding calibration of its own counts on."""
    return capacity(backend, replace(params, planes=max(planes, 1)), measured, reference)


def switch_ports(params: FabricParams) -> int:
    """Switch-side interfaces: one per host NIC, two per T0-T1 link."""
    return params.planes * params.leaves * (params.hosts_per_leaf + 2 * params.spines)


def capacity(backend: str, params: FabricParams, measured: dict[str, Any],
             reference: dict[str, Any]) -> dict[str, Any]:
    """{"packet_hops_per_s", "forwarding_cores", "shape", "source"}: the backend's benchmark
    figure for the smallest fabric with at least the run's switch ports (the largest if none
    has), measured here if possible, and the cores its forwarding processes took (0: forwarding
    in the kernel's softirq); 0 with source "none" if nothing is known about the backend."""
    ports = switch_ports(params)
    for source, table in (("measured", measured), ("reference", reference)):
        shapes = table.get(backend)
        if not isinstance(shapes, dict):
            continue
        known = sorted((switch_ports(FabricParams.from_dict(r["fabric"])), name, r)
                       for name, r in shapes.items()
                       if isinstance(r, dict) and r.get("packet_hops_per_s") and "fabric" in r)
        if known:
            _, name, r = next((k for k in known if k[0] >= ports), known[-1])
            return {"packet_hops_per_s": int(r["packet_hops_per_s"]),
                    "forwarding_cores": float(r.get("forwarding_cores") or 0.0), "shape": name,
                    "source": source}
    return {"packet_hops_per_s": 0, "forwarding_cores": 0.0, "shape": None, "source": "none"}


def assess(backend: str, params: FabricParams, busy_senders: int, mtu_payload: int,
           measured: dict[str, Any], reference: dict[str, Any],
           agent_cores: float | None = None,
           calibration: dict[str, Any] | None = None, agents: str = "shared",
           servers: dict[str, dict[str, Any]] | None = None, agent_cost: float = 1.0,
           queues_stand: bool = False, duration: float | None = None) -> dict[str, Any]:
    """Whether the run fits: capacity's keys and "backend", "busy_senders",
    "needed_packet_hops_per_s", "faithful_packet_hops_per_s", "switches_within", "within". A
    backend nothing is known about counts as within (source "none" says so). With
    `agent_cores` (the machine's cores), the agents' bound too, on the cores the switches leave
    them: "agent_cores", "agent_data_pps_needed", "agent_data_pps_faithful", "agents_within";
    with a `calibration` of this backend (experiments/analysis/calibration.py), the agents' bound is
    this machine's: "calibrated" True and "cores_needed", "cores_allowed", and for `agents`
    "shared" (every host's agent in one process) that process's too, one core at most:
    "agents_process_cores_needed", "agents_process_cores_allowed". With `servers` (a split run:
    the servers' forwarding figures, `server_bounds`), the switches' bound is theirs: "servers"
    with each one's, "switches_within" when every one fits. `agent_cost`: the agents' CPU per
    data packet against the calibration's (a scenario kind's `agent_cost`); `queues_stand`: the
    scenario's queues stand once it has run a while (`queues_stood` within `duration` seconds),
    each packet then costing `standing_factors` times the calibration's (its calm runs);
    "standing_factors" says by how much where it applied."""
    cap = capacity(backend, params, measured, reference)
    faithful = cap["packet_hops_per_s"] * FAITHFUL_SHARE
    needed = load(params, busy_senders, mtu_payload)
    out = {"backend": backend, "busy_senders": busy_senders,
           "needed_packet_hops_per_s": round(needed), "faithful_packet_hops_per_s": round(faithful),
           "switches_within": cap["source"] == "none" or needed <= faithful, **cap}
    if servers:  # the head forwards nothing: each server bounds its own planes
        out["servers"] = server_bounds(params, busy_senders, mtu_payload, servers)
        out["switches_within"] = all(s["within"] for s in out["servers"].values())
    out["within"] = out["switches_within"]
    if agent_cores is not None:
        agents_need = agent_load(params, busy_senders, mtu_payload) * agent_cost
        cal = calibration if calibration is not None and calibration.get("backend") == backend \
            else None
        # A calibration read the whole machine, the switches' own processes included: its agents
        # count on every free core. Otherwise they get what the switches' forwarding leaves.
        cores = agent_cores if cal is not None else \
            max(agent_cores - cap["forwarding_cores"], MIN_AGENT_CORES)
        stands = queues_stand and queues_stood(duration)
        machine_factor, process_factor = standing_factors(cal) if stands else (1.0, 1.0)
        if stands:
            out["standing_factors"] = [machine_factor, process_factor]
        if cal is not None:
            allowed = cores * AUTO_CPU_SHARE
            points = [(x, y * machine_factor) for x, y in cost_points(cal, params)]
            if agents != "shared" and cal.get("agents") == "shared":
                points = [(x, y * PER_HOST_COST) for x, y in points]
            cores_needed = cores_for(points, agents_need)
            agents_faithful = round(min(pps_for(points, allowed), 1e9))
            within = cores_needed <= allowed
            process = agents_process_points(cal, params) if agents == "shared" else None
            if process is not None:  # one thread for every agent: one core, whatever is free
                process = [(x, y * process_factor) for x, y in process]
                process_needed = cores_for(process, agents_need)
                out.update({"agents_process_cores_needed": round(process_needed, 2),
                            "agents_process_cores_allowed": AGENTS_PROCESS_SHARE})
                agents_faithful = min(agents_faithful,
                                      round(min(pps_for(process, AGENTS_PROCESS_SHARE), 1e9)))
                within = within and process_needed <= AGENTS_PROCESS_SHARE
            out.update({"calibrated": True, "cores_needed": round(cores_needed, 2),
                        "cores_allowed": round(allowed, 2), "agents_within": within,
                        # the committed reference (calibration.effective), not this machine's own
                        "calibration_is_reference": bool(cal.get("reference"))})
        else:
            agents_faithful = round(agent_pps_per_core(backend) * cores / machine_factor)
            out.update({"calibrated": False, "agents_within": agents_need <= agents_faithful})
        # agent_data_pps_needed counts each packet `agent_cost` times (the calibration's packets)
        out.update({"agent_cost": agent_cost, "agent_cores": round(cores, 2),
                    "agent_data_pps_needed": round(agents_need),
                    "agent_data_pps_faithful": agents_faithful})
        out["within"] = out["switches_within"] and out["agents_within"]
    return out


def faithful_rate(backend: str, params: FabricParams, busy_senders: int, mtu_payload: int,
                  measured: dict[str, Any], reference: dict[str, Any],
                  agent_cores: float | None = None, calibration: dict[str, Any] | None = None,
                  ceiling: float | None = None, agents: str = "shared",
                  servers: dict[str, dict[str, Any]] | None = None, agent_cost: float = 1.0,
                  queues_stand: bool = False, duration: float | None = None) -> float:
    """The fastest rate of `LADDER` (at most `ceiling`) at which the run fits (the slowest if
    none does); with `servers`, on each server of a split run too."""
    for rate in LADDER:
        if ceiling is not None and rate > ceiling:
            continue
        if assess(backend, replace(params, link_mbps=rate), busy_senders, mtu_payload,
                  measured, reference, agent_cores, calibration, agents, servers,
                  agent_cost, queues_stand, duration)["within"]:
            return rate
    return LADDER[-1]


def describe(a: dict[str, Any]) -> str:
    """One line: what the run needs against what its backend carries (or, where the switches
    would carry it, against what the agents send faithfully)."""
    if a.get("agents_within") is False and a.get("switches_within", True) and a.get("calibrated"):
        whose = "the committed cost reference: this machine has no calibration of its own, " \
            "`make setup` makes one" if a.get("calibration_is_reference") else "this machine's calibration"
        process = a.get("agents_process_cores_needed")
        if process is not None and process > a["agents_process_cores_allowed"] and \
                a["cores_needed"] <= a["cores_allowed"]:
            return (f"needs about {process:g} of a core for the process that runs every host's "
                    f"agent ({a['agent_data_pps_needed']:,} data packets/s, by {whose}); "
                    f"{a['agents_process_cores_allowed']:g} is what a faithful run may take of "
                    f"its one core")
        return (f"needs about {a['cores_needed']:g} cores of this machine for its agents and "
                f"switches ({a['agent_data_pps_needed']:,} data packets/s, by {whose}); "
                f"{a['cores_allowed']:g} is what a faithful run may take of the "
                f"{a['agent_cores']:g} free")
    if a.get("agents_within") is False and a.get("switches_within", True):
        return (f"has its agents send up to {a['agent_data_pps_needed']:,} data packets/s; "
                f"{a['agent_data_pps_faithful']:,} is what they send faithfully on the "
                f"{a['agent_cores']:g} cores the {a['backend']} switches leave them "
                f"({agent_pps_per_core(a['backend']):,} per core)")
    over = [(n, s) for n, s in (a.get("servers") or {}).items() if not s["within"]]
    if over:
        name, s = over[0]
        whose = "its own calibration" if s.get("source") == "calibrated" else "the head's figure"
        return (f"needs up to {s['needed_packet_hops_per_s']:,} packet-hops/s of server {name} "
                f"(planes {','.join(map(str, s['planes']))}); it forwards "
                f"{s['faithful_packet_hops_per_s']:,} faithfully ({FAITHFUL_SHARE:.0%} of the "
                f"{int(s['packet_hops_per_s']):,} of {whose})")
    if a["source"] == "none":
        return (f"needs up to {a['needed_packet_hops_per_s']:,} packet-hops/s; the capacity of the "
                f"{a['backend']} switches is unknown here (run `make bench`)")
    where = "measured here" if a["source"] == "measured" else "committed reference, not measured here"
    return (f"needs up to {a['needed_packet_hops_per_s']:,} packet-hops/s; the {a['backend']} "
            f"switches carry {a['faithful_packet_hops_per_s']:,} faithfully ({FAITHFUL_SHARE:.0%} of "
            f"the {a['packet_hops_per_s']:,} benchmarked on the {a['shape']} fabric, {where})")
