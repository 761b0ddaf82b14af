"""The simulated network set-ups the protocol labs share: the product's sender and receiver
cores (or a lab's subclasses of them) over `experiments.simnet`, with the student's part put in
place for the length of one run. Deterministic: the same seed gives the same run."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from endpoints.host.goodput import BIN_S, bin_of
from endpoints.protocol import sender as sender_module
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.core import Core
from endpoints.protocol.events import Event, EvState
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.simnet import (
    SimFabric,
    SimLink,
    SimPath,
    Simulation,
    TransferResult,
    run_transfer,
    sim_fabric,
)
from labs.checker.student import replacing
from topologies import shaping
from topologies.dataplane import ports
from topologies.model import Fabric


@contextmanager
def evset_class(cls: type | None) -> Iterator[None]:
    """Senders made inside the block build their EV set from `cls` (None: the product's)."""
    if cls is None:
        yield
        return
    with replacing(sender_module, "EvSet", cls):
        yield


@contextmanager
def nscc_class(cls: type | None) -> Iterator[None]:
    """Senders made inside the block run `cls` as their congestion control (None: the product's)."""
    if cls is None:
        yield
        return
    with replacing(sender_module, "Nscc", cls):
        yield


@dataclass
class Transfer:
    net: SimFabric
    messages: list[bytes]
    result: TransferResult
    sender: Any
    receiver: Any

    @property
    def exact(self) -> bool:
        return [data for _, data in self.result.completed] == self.messages

    def ev_changes(self, new: str) -> list[EvState]:
        return [e for e in self.result.sender_events if isinstance(e, EvState) and e.new == new]

    def mbps(self, start: float, end: float) -> float:
        """Goodput delivered in [start, end) of simulated time, Mbit/s."""
        got = sum(v for k, v in self.result.bins.items() if bin_of(start) <= k < bin_of(end))
        return got * 8 / max(end - start, BIN_S) / 1e6


def transfer(net: SimFabric, sizes: Sequence[int], seed: int = 1, until: float = 30.0,
             config: TransportConfig | None = None, evset: type | None = None,
             sender_cls: type = MrcSender, receiver_cls: type = MrcReceiver) -> Transfer:
    """One QP carries messages of `sizes` bytes over `net`, posted at t=0."""
    config = config or TransportConfig()
    messages = [random.Random(seed * 1000 + i).randbytes(n) for i, n in enumerate(sizes)]
    with evset_class(evset):
        snd = sender_cls(1, 2, net.evs, config, seed)
    rcv = receiver_cls(2, 1, net.evs, config, seed)
    result = run_transfer(Simulation(seed), snd, rcv, net.fwd, net.rev, messages, until)
    return Transfer(net, messages, result, snd, rcv)


def cut_uplink(planes: int = 2, spines: int = 2, cut: tuple[float, float] = (0.5, 1.0)) -> SimFabric:
    """Paths like the fabric's between two hosts, with plane 0's uplink to spine 0 down during
    `cut` (simulated seconds): the path of EV `ev_value(0, 0)` dies, then heals."""
    net = sim_fabric(planes=planes, spines=spines)
    net.links[("up", 0, 0)].down = [cut]
    return net


# ----- a whole Clos with switch ports that mark and trim (labs 5 and 6) ---------------------------
@dataclass
class PortLink(SimLink):
    """A simulated link that is a switch's egress port when `trim_bytes` is set: CE-marks data
    above `mark_bytes` of backlog (never on a `last_hop`, as the switch program), trims data
    above `trim_bytes` (the headers go on, TRIMMED_LASTHOP on a last hop), drops above
    `queue_bytes`; the thresholds the emulated switches use (topologies/dataplane/ports.py).
    Control packets and trimmed headers take the strict-priority class, as the switches' HTB
    gives them: they wait only for each other; queued data waits for them."""
    mark_bytes: int | None = None
    trim_bytes: int | None = None
    last_hop: bool = False
    marked: int = 0
    trimmed: int = 0
    max_backlog: int = 0  # bytes: the deepest backlog a data packet found
    ctrl_busy_until: float = 0.0  # the strict-priority class: control and trimmed headers
    # (time, backlog bytes a data packet found, trimmed there) for every data packet: queue
    # figures over a window of the run
    log: list[tuple[float, int, bool]] = field(default_factory=list)

    def window(self, start: float, end: float) -> list[tuple[float, int, bool]]:
        return [entry for entry in self.log if start <= entry[0] < end]


class PortNetwork(Simulation):
    """`Simulation` over PortLinks: a datagram arrives with its CE mark, trimmed where a port
    trimmed it."""

    def transmit_port(self, path: SimPath, packet: bytes, deliver: Callable[[bytes, bool], None]) -> None:
        t, ce = self.now, False
        for link in path.links:
            assert isinstance(link, PortLink)
            if link.is_down(t):
                link.dropped += 1
                return
            size = len(packet) + wire.FRAME_OVERHEAD
            backlog = max(0.0, link.busy_until - t) * (link.rate_bps or 0) / 8
            data = packet[0] <= wire.DATA_OPCODE_MAX and not packet[wire.FLAGS_OFF] & wire.F_TRIMMED
            if data:
                link.max_backlog = max(link.max_backlog, int(backlog))
            if data and link.trim_bytes is not None and backlog + size > link.trim_bytes:
                link.log.append((t, int(backlog), True))
                packet = wire.trimmed(packet, link.last_hop)
                size = len(packet) + wire.FRAME_OVERHEAD
                link.trimmed += 1
                data = False
            elif data and backlog + size > link.queue_bytes:
                link.dropped += 1
                return
            if data:
                link.log.append((t, int(backlog), False))
            if data and link.mark_bytes is not None and not link.last_hop and \
                    backlog + size > link.mark_bytes:
                ce = True
                link.marked += 1
            if link.rate_bps:
                ser = size * 8 / link.rate_bps
                if data:
                    link.busy_until = max(t, link.busy_until) + ser
                    t = link.busy_until
                else:
                    link.ctrl_busy_until = max(t, link.ctrl_busy_until) + ser
                    link.busy_until = max(t, link.busy_until) + ser
                    t = link.ctrl_busy_until
            t += link.delay
            link.carried += 1
        self.schedule(t, lambda: deliver(packet, ce))

    def add_endpoint(self, core: Core, routes: Mapping[int, SimPath],
                     peer: Callable[[], Core]) -> None:
        def send(ev: int, payload: bytes) -> None:
            target = peer()

            def arrive(p: bytes, ce: bool) -> None:
                target.on_datagram(p, ev, self.now, ce)

            self.transmit_port(routes[ev], payload, arrive)
        self.endpoints.append((core, send))


@dataclass
class Qp:
    src: str
    dst: str
    sender: Any
    receiver: Any
    messages: list[bytes]
    completed: list[tuple[int, bytes]]
    sender_events: list[Event]
    bins: dict[int, int]
    end: float | None = None  # simulated time its last message completed

    @property
    def exact(self) -> bool:
        return [data for _, data in self.completed] == self.messages

    def mbps(self, start: float, end: float) -> float:
        """Goodput delivered in [start, end) of simulated time, Mbit/s."""
        got = sum(v for k, v in self.bins.items() if bin_of(start) <= k < bin_of(end))
        return got * 8 / (end - start) / 1e6

    def benched(self) -> list[EvState]:
        return [e for e in self.sender_events if isinstance(e, EvState) and e.new == "ASSUMED_BAD"]


@dataclass
class ClosRun:
    qps: list[Qp]
    links: dict[tuple[str, str], PortLink]
    end: float


def clos_run(fabric: Fabric, flows: Sequence[tuple[str, str, Sequence[int]]], seed: int = 1,
             until: float = 30.0, config: TransportConfig | None = None,
             sender_cls: type = MrcSender, receiver_cls: type = MrcReceiver,
             trim: bool = True, starts: Sequence[float] = (), cc_cls: type | None = None,
             delay: float = 0.0003) -> ClosRun:
    """Every (src, dst, message sizes) flow as one QP over the fabric's own paths, posted at
    t=0 (or at `starts[i]`), switch ports with the emulation's thresholds (`trim` False:
    drop-tail, marks only), hosts' NICs with a deep queue; until every message completes or
    `until`. `cc_cls`: the senders' congestion control in place of the product's Nscc; `delay`:
    every hop's propagation delay, s."""
    # What an agent derives from the fabric (RTT target, window ceiling, loss-timer floor, SACK
    # timer), these ports marking ECN; parameters the caller set differently from the defaults stay.
    config = config or TransportConfig()
    config = config.for_fabric(fabric.params.link_mbps, fabric.params.planes, ecn=True,
                               keep=[k for k, v in config.as_dict().items()
                                     if v != getattr(TransportConfig(), k)])
    th = ports.default_thresholds(shaping.SWITCH_QUEUE_PACKETS, config)
    rate = fabric.params.link_mbps * 1e6
    frame = wire.frame_bytes(config.mtu_payload)
    links: dict[tuple[str, str], PortLink] = {}

    def link(name: str, direction: str) -> PortLink:
        if (name, direction) not in links:
            from_host = direction == "up" and fabric.link(name).kind == "host"
            links[(name, direction)] = PortLink(
                rate, delay, queue_bytes=(shaping.HOST_QUEUE_PACKETS if from_host else
                                           shaping.SWITCH_QUEUE_PACKETS) * frame,
                mark_bytes=None if from_host else th.mark_bytes,
                trim_bytes=None if from_host or not trim else th.trim_bytes,
                last_hop=fabric.link(name).kind == "host" and direction == "down")
        return links[(name, direction)]

    def paths(src: str, dst: str) -> tuple[list[EvInfo], dict[int, SimPath]]:
        evs, out = [], {}
        for route in fabric.routes(src, dst):
            half = len(route.links) // 2
            hops = [link(n, "up") for n in route.links[:half]] + [link(n, "down") for n in route.links[half:]]
            evs.append(EvInfo(route.ev, route.plane))
            out[route.ev] = SimPath(hops)
        return evs, out

    sim = PortNetwork(seed)
    qps: list[Qp] = []
    for i, (src, dst, sizes) in enumerate(flows):
        fwd_evs, fwd = paths(src, dst)
        rev_evs, rev = paths(dst, src)
        with nscc_class(cc_cls):
            snd = sender_cls(2 * i + 1, 2 * i + 2, fwd_evs, config, seed + i)
        rcv = receiver_cls(2 * i + 2, 2 * i + 1, rev_evs, config, seed + i)
        sim.add_pair(snd, rcv, fwd, rev)
        messages = [random.Random(seed * 1000 + 100 * i + k).randbytes(n) for k, n in enumerate(sizes)]
        start = starts[i] if i < len(starts) else 0.0

        def post(snd: Any = snd, messages: list[bytes] = messages, start: float = start) -> None:
            for m in messages:
                snd.send_message(m, start)
        if start > 0:
            sim.schedule(start, post)
        else:
            post()
        qps.append(Qp(src, dst, snd, rcv, messages, [], [], {}))
    delivered = [0] * len(qps)

    def tick(now: float) -> None:
        for i, qp in enumerate(qps):
            done = qp.receiver.take_completed()
            if done:
                qp.completed += done
                if len(qp.completed) == len(qp.messages):
                    qp.end = now
            qp.sender_events += qp.sender.take_events()
            qp.receiver.take_events()
            got = qp.receiver.bytes_delivered
            if got != delivered[i]:
                qp.bins[bin_of(now)] = qp.bins.get(bin_of(now), 0) + got - delivered[i]
                delivered[i] = got

    end = sim.run(until, stop=lambda: all(qp.end is not None for qp in qps), on_tick=tick)
    return ClosRun(qps, links, end)
