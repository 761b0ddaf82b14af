"""A whole multi-plane Clos on the simulated network (experiments/sim/simnet.py), built from the
fabric model: every host's NIC per plane (one queue shared by the host's QPs' data and its
receivers' SACKs, as the emulated host qdisc), leaf uplinks, spine downlinks and the leaf ports
facing hosts, with the switches' MRC rules (ECN mark, trim, strict-priority control class at the
data plane's thresholds) and HTB's token bucket. The permutation and incast scenarios run over
the same sans-IO cores the agents run, with the same pairs (experiments/api/traffic.py), in
seconds of CPU and deterministically.

Every emulator fault that misleads the congestion signals can be switched on (`ClosModel`): a
host NIC with no control class, senders that do not pace to their NIC, HTB charging a trimmed
header a full frame. The root-cause regression tests (tests/unit/experiments/test_simclos.py)
run each with and without the mechanism that answers it.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from endpoints.host.goodput import BIN_S, bin_of
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import CwndDec, EvBad, Event, EvSkip
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.nicpacer import NicPacer
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.api import traffic
from experiments.scenarios.ecnbalance import GOODPUT_OF_CEILING, SETTLE_S, capacity_mbps, share_on
from experiments.scenarios.schema import A_SHARED_SHARE_AFTER, GOODPUT_FRACTION
from experiments.sim.simnet import SimLink, SimPath, Simulation
from topologies.model import Fabric, FabricParams, build, ev_plane, fair_share_mbps
from topologies.shaping import BURST_BYTES, HOST_QUEUE_PACKETS, SWITCH_QUEUE_PACKETS

LINK_DELAY = 0.0001  # s per hop: veth and the emulator's forwarding, idle


@dataclass(frozen=True)
class ClosModel:
    params: FabricParams = field(default_factory=lambda: FabricParams(
        planes=2, leaves=2, spines=3, hosts_per_leaf=3, link_mbps=10.0))
    trimming: bool = True  # False: the switches drop instead (marks stay)
    # The emulator's faults and the mechanisms that answer them, switchable to show what each
    # is worth (P1, I1: the root causes' labels in docs/history.md):
    host_priority: bool = True  # control packets ahead of data at the host NIC (P1)
    nic_pacing: bool = True  # senders build a packet only when their NIC port can take it (P1)
    trim_charges_full: bool = False  # HTB charging a trimmed header a full frame (I1)
    link_delay: float = LINK_DELAY  # s per hop (longer: a larger bandwidth-delay product)


@dataclass
class Flow:
    src: str
    dst: str
    snd: MrcSender
    rcv: MrcReceiver
    start: float
    end: float
    bins: collections.Counter[int] = field(default_factory=collections.Counter)
    last: int = 0
    events: list[Event] = field(default_factory=list)


@dataclass
class ClosRun:
    model: ClosModel
    fabric: Fabric
    config: TransportConfig
    flows: list[Flow]
    links: dict[tuple[str, str], SimLink]
    # (kind, link name) -> [(t, data backlog bytes)], every `sample_s` (run's `watch`)
    queues: dict[tuple[str, str], list[tuple[float, int]]] = field(default_factory=dict)

    def goodput_mbps(self, flow: Flow, t0: float, t1: float) -> float:
        got = sum(v for k, v in flow.bins.items() if t0 <= k * BIN_S < t1)
        return got * 8 / (t1 - t0) / 1e6

    def summary(self) -> dict[str, Any]:
        """Counts over the whole run: window decreases, EV skips and benchings by cause,
        timeouts, and what the switches marked, trimmed and dropped."""
        dec: collections.Counter[str] = collections.Counter()
        skips: collections.Counter[str] = collections.Counter()
        bad: collections.Counter[str] = collections.Counter()
        for f in self.flows:
            for e in f.events:
                if isinstance(e, CwndDec):
                    dec[e.cause] += 1
                elif isinstance(e, EvSkip):
                    skips[e.cause] += 1
                elif isinstance(e, EvBad):
                    bad[e.rule] += 1
        links = self.links.values()
        return {"decreases": dict(dec), "skips": dict(skips), "benched": dict(bad),
                "timeouts": sum(f.snd.stats["timeouts"] for f in self.flows),
                "marked": sum(lk.marked for lk in links), "trimmed": sum(lk.trimmed for lk in links),
                "dropped": sum(lk.dropped for lk in links)}

    def nic_backlog_max(self) -> int:
        """Bytes: the deepest data backlog any host NIC queue held."""
        return max(lk.max_backlog for (kind, _), lk in self.links.items() if kind == "nic")


class Clos:
    """The simulated links of a fabric, one per direction of each model link."""

    def __init__(self, model: ClosModel, config: TransportConfig) -> None:
        self.model = model
        self.fabric = build(model.params)
        self.links: dict[tuple[str, str], SimLink] = {}
        frame = wire.frame_bytes(config.mtu_payload)
        rate = model.params.link_mbps * 1e6
        mark, trim = config.ecn_mark_frames * frame, config.trim_queue_frames * frame
        # The emulated links' queues and HTB burst (topologies/shaping.py).
        common: dict[str, Any] = {"rate_bps": rate, "delay": model.link_delay, "burst_bytes": BURST_BYTES}
        self._nic = {**common, "queue_bytes": HOST_QUEUE_PACKETS * frame, "priority": model.host_priority}
        self._port = {**common, "queue_bytes": SWITCH_QUEUE_PACKETS * frame, "mark_bytes": mark,
                      "trim_bytes": trim if model.trimming else None, "priority": True,
                      "trim_charges_full": model.trim_charges_full}

    def link(self, kind: str, name: str) -> SimLink:
        key = (kind, name)
        if key not in self.links:
            if kind == "nic":
                self.links[key] = SimLink(**self._nic)
            else:
                self.links[key] = SimLink(**self._port, last_hop=kind == "port")
        return self.links[key]

    def paths(self, src: str, dst: str) -> tuple[list[EvInfo], dict[int, SimPath]]:
        """The model's routes src -> dst, EV numbered as the agents number them."""
        evs, routes = [], {}
        for r in self.fabric.routes(src, dst):
            hops = [self.link("nic", r.links[0])]
            if r.spine is not None:
                hops += [self.link("up", r.links[1]), self.link("down", r.links[2])]
            hops.append(self.link("port", r.links[-1]))
            evs.append(EvInfo(r.ev, r.plane))
            routes[r.ev] = SimPath(hops)
        return evs, routes


def config_for(model: ClosModel, **overrides: Any) -> TransportConfig:
    """The transport config an agent would run with on this fabric, with `overrides`."""
    p = model.params
    base = TransportConfig().for_fabric(p.link_mbps, p.planes, ecn=True, keep=overrides)
    return replace(base, **overrides)


def run(model: ClosModel, pairs: list[tuple[str, str, float, float]], config: TransportConfig,
        seed: int = 1, msg_bytes: int = 256 * 1024, until: float | None = None,
        hook: Callable[[float, list[Flow]], None] | None = None,
        cores: tuple[type[MrcSender], type[MrcReceiver]] = (MrcSender, MrcReceiver),
        watch: tuple[tuple[str, str], ...] = (), sample_s: float = 0.001,
        down: dict[str, list[tuple[float, float]]] | None = None) -> ClosRun:
    """Each (src, dst, start, end) streams messages of `msg_bytes` from start to end.
    `cores`: the sender and receiver classes (replaceable.cores: code at the product's named
    override points); `watch`: links ((kind, name) as in `ClosRun.links`) whose backlog is
    sampled every `sample_s`; `down`: T0-T1 links (the model's names) down, both ways, over
    [start, end) intervals."""
    sender_cls, receiver_cls = cores
    sim = Simulation(seed)
    clos = Clos(model, config)
    p = model.params
    frame = wire.frame_bytes(config.mtu_payload)
    pacers = {h.name: NicPacer(p.planes, p.link_mbps * 1e6, frame) for h in clos.fabric.hosts}
    flows = []
    for i, (src, dst, t0, t1) in enumerate(pairs):
        qpn = i + 1
        evs, fwd = clos.paths(src, dst)
        revs, rev = clos.paths(dst, src)
        qp_seed = seed * 1_000_003 + qpn
        snd = sender_cls(qpn, qpn, evs, config, qp_seed, pacer=pacers[src] if model.nic_pacing else None)
        rcv = receiver_cls(qpn, qpn, revs, config, qp_seed)
        sim.add_pair(snd, rcv, fwd, rev)
        if model.nic_pacing:
            # Control packets use the NIC too: the pacer must count them (data is charged by
            # the sender itself), as the agent does.
            for k, host in ((-2, src), (-1, dst)):
                core, send = sim.endpoints[k]

                def charged(ev: int, payload: bytes, send: Callable[[int, bytes], None] = send,
                            pacer: NicPacer = pacers[host]) -> None:
                    if payload[0] > wire.DATA_OPCODE_MAX:
                        pacer.charge(ev_plane(ev), len(payload) + wire.FRAME_OVERHEAD, sim.now)
                    send(ev, payload)
                sim.endpoints[k] = (core, charged)
        flows.append(Flow(src, dst, snd, rcv, t0, t1))
    for (kind, name), link in clos.links.items():
        if down and kind in ("up", "down") and name in down:
            link.down.extend(down[name])
    end = until if until is not None else max(pr[3] for pr in pairs) + 0.5
    payload = random.Random(seed).randbytes(msg_bytes)
    queues: dict[tuple[str, str], list[tuple[float, int]]] = {key: [] for key in watch}
    next_sample = [0.0]

    def tick(now: float) -> None:
        if queues and now >= next_sample[0]:
            next_sample[0] = now + sample_s
            for key, samples in queues.items():
                samples.append((now, clos.links[key].backlog_bytes(now)))
        for f in flows:
            if f.start <= now < f.end:
                while f.snd.unsent_messages < 2:
                    f.snd.send_message(payload, now)
            delivered = f.rcv.bytes_delivered
            if delivered != f.last:
                f.bins[bin_of(now)] += delivered - f.last
                f.last = delivered
            if f.snd.events:
                f.events += f.snd.take_events()
            if f.rcv.events:
                f.events += f.rcv.take_events()
            f.rcv.take_completed()
            f.snd.take_completed()
        if hook is not None:
            hook(now, flows)

    sim.run(end, on_tick=tick)
    return ClosRun(model, clos.fabric, config, flows, clos.links, queues)


def permutation(model: ClosModel, seed: int = 1, duration: float = 3.0, warm: float = 1.0,
                **overrides: Any) -> dict[str, Any]:
    """The permutation scenario: every host streams to `traffic.derangement(hosts, seed)`.
    Fractions are of what the fabric can carry for the permutation (max-min fair)."""
    fabric = build(model.params)
    names = [h.name for h in fabric.hosts]
    perm = traffic.derangement(names, seed)
    res = run(model, [(s, d, 0.0, duration) for s, d in perm.items()], config_for(model, **overrides),
              seed=seed, until=duration + 0.3)
    fair = fair_share_mbps(fabric, list(perm.items()), model.params.planes)
    goodput = [res.goodput_mbps(f, warm, duration) for f in res.flows]
    fractions = [g / fair[(f.src, f.dst)] for g, f in zip(goodput, res.flows, strict=True)]
    return {**res.summary(), "fraction": round(sum(goodput) / sum(fair.values()), 3),
            "min": round(min(fractions), 3), "run": res}


def incast(model: ClosModel, senders: int, seed: int = 1, duration: float = 4.0, start: float = 1.5,
           end: float = 3.5, settle: float = 0.3, **overrides: Any) -> dict[str, Any]:
    """The incast scenario's roles (`traffic.incast_roles`): the crowd streams into the receiver
    from `start` to `end`, the victim flow runs all along."""
    fabric = build(model.params)
    crowd, receiver, (vsrc, vdst) = traffic.incast_roles([h.name for h in fabric.hosts], senders)
    pairs = [(vsrc, vdst, 0.0, duration)] + [(s, receiver, start, end) for s in crowd]
    res = run(model, pairs, config_for(model, **overrides), seed=seed, until=duration + 0.3)
    victim, *rest = res.flows
    alone = res.goodput_mbps(victim, 0.5, start)
    during = res.goodput_mbps(victim, start + settle, end)
    link = model.params.planes * model.params.link_mbps
    return {**res.summary(), "victim_fraction": round(during / alone, 3) if alone else 0.0,
            "crowd_fraction": round(sum(res.goodput_mbps(f, start, end) for f in rest) / link, 3),
            "run": res}


def ecn_balance(model: ClosModel, force_at: float = 2.0, duration: float = 5.0, seed: int = 1,
                cores: tuple[type[MrcSender], type[MrcReceiver]] = (MrcSender, MrcReceiver),
                **overrides: Any) -> dict[str, Any]:
    """The ecn-balance scenario (the paper's Fig. 14): A = first host -> first host of the last
    leaf, B = second host -> second host of the last leaf; at `force_at` B keeps only its path
    over plane 0, spine 0 (a path A also sprays over). What the fabric can then carry for them:
    B's one path plus A's NIC over its other paths."""
    fabric = build(model.params)
    hosts = [h.name for h in fabric.hosts]
    last = [h.name for h in fabric.hosts if h.leaf_index == model.params.leaves - 1]
    pairs = [(hosts[0], last[0], 0.0, duration), (hosts[1], last[1], 0.0, duration)]
    keep = next(r.ev for r in fabric.routes(hosts[1], last[1]) if r.plane == 0 and r.spine == 0)
    a_shared = next(r.ev for r in fabric.routes(hosts[0], last[0]) if r.plane == 0 and r.spine == 0)
    forced: list[float] = []
    settled = force_at + SETTLE_S  # what the scenario measures after the force
    a_bytes: dict[float, dict[int, int]] = {}  # A's payload bytes per EV once settled, at the end

    def hook(now: float, flows: list[Flow]) -> None:
        if now >= force_at and not forced:
            forced.append(now)
            b = flows[1].snd
            for ev in list(b.evs.state):
                if ev != keep:
                    b.deny_ev(ev)
        for t in (settled, duration):
            if now >= t and t not in a_bytes:
                a_bytes[t] = dict(flows[0].snd.ev_bytes)

    res = run(model, pairs, config_for(model, **overrides), seed=seed, until=duration + 0.3, hook=hook,
              cores=cores)
    fa, fb = res.flows
    _, cap = capacity_mbps(model.params)
    a, b = res.goodput_mbps(fa, settled, duration), res.goodput_mbps(fb, settled, duration)
    top = wire.payload_ceiling(res.config.mtu_payload, None, encapsulated=False)  # simulated frames
    return {**res.summary(), "a_after": round(a, 2), "b_after": round(b, 2),
            GOODPUT_FRACTION: round((a + b) / cap, 3),
            GOODPUT_OF_CEILING: round((a + b) / cap / top, 3),
            A_SHARED_SHARE_AFTER: share_on(sorted(a_bytes.items()), a_shared, settled, duration),
            "run": res}


def flap_together(model: ClosModel, count: int = 8, seed: int = 1, start: float = 2.0,
                  flaps: int = 4, period: float = 1.0, down_s: float = 0.3,
                  **overrides: Any) -> dict[str, Any]:
    """The flap-together scenario (the paper's Fig. 9d): one flow from the first host to the last
    while `count` T0-T1 links (drawn by `seed`, as `mrclab run flap-together` draws them) go
    down together for `down_s` once every `period`, `flaps` times from `start`. `flap_bins`:
    goodput in the 200 ms bin each flap begins in over the steady goodput of the second before
    the first (the flows' capacity never drops: no plane loses its last path on the default
    fabric with one host per leaf)."""
    fabric = build(model.params)
    links = [ln.name for ln in fabric.links if ln.kind != "host"]
    random.Random(seed).shuffle(links)
    times = [(start + i * period, start + i * period + down_s) for i in range(flaps)]
    hosts = [h.name for h in fabric.hosts]
    end = start + flaps * period
    res = run(model, [(hosts[0], hosts[-1], 0.0, end)], config_for(model, **overrides), seed=seed,
              until=end + 0.2, down={name: list(times) for name in links[:count]})
    flow, = res.flows
    steady = res.goodput_mbps(flow, start - 1.0, start)
    bins = [res.goodput_mbps(flow, t, t + 0.2) / steady for t, _ in times]
    return {**res.summary(), "steady_mbps": round(steady, 2), "flap_bins": [round(b, 3) for b in bins],
            "run": res}
