"""A deterministic discrete-event network for the sans-IO cores: the same objects the agents run,
driven by simulated time instead of sockets. No root, no emulation: the unit tests and
examples/simulated_transfer.py run the transport on it.

A path is a list of links; a link has a rate (with a FIFO queue of bounded depth), a
propagation delay, random loss, duplication, jitter (which reorders), and down intervals. Links
can be shared between paths (a host NIC, a spine), so congestion and failures behave like
the fabric's. A link can also be an MRC switch port (the data plane's rules on its own
backlog: ECN mark, trim, a strict-priority control class), an HTB token bucket rather than a
serialising wire (as the emulated links are), and can charge a trimmed header a full frame (the
emulator before the header was re-injected). Everything random comes from one seeded
`random.Random`. `experiments/sim/simclos.py` builds a whole Clos from these links.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from endpoints.host.goodput import bin_of
from endpoints.protocol import wire
from endpoints.protocol.core import Core, ReceiverCore, SenderCore
from endpoints.protocol.events import Event
from endpoints.protocol.evset import EvInfo
from topologies.model import ev_value

TRIM_FULL_FIFO_FACTOR = 10  # the emulated switch FIFO's headroom over the program's queue


@dataclass
class SimLink:
    rate_bps: float | None = None  # None: infinitely fast
    delay: float = 0.0005
    loss: float = 0.0
    dup: float = 0.0
    jitter: float = 0.0
    queue_bytes: int = 64 * 1024
    down: list[tuple[float, float]] = field(default_factory=list)  # [start, end) intervals
    busy_until: float = 0.0
    dropped: int = 0
    carried: int = 0
    # An MRC switch port (topologies/dataplane/ rules, on this link's own backlog, this packet
    # included): CE-mark data above mark_bytes (never when last_hop: the last hop never marks),
    # trim MRC data above trim_bytes (the header goes on, TRIMMED_LASTHOP on a last hop).
    # None: a plain FIFO.
    mark_bytes: int | None = None
    trim_bytes: int | None = None
    last_hop: bool = False
    # Strict-priority control class: SACKs, NACKs, probes and trimmed headers wait only for each
    # other, not behind queued data (the switches' HTB 1:2 class). False: one FIFO.
    priority: bool = False
    # > 0: an HTB token bucket of this depth instead of a serialising wire: a packet leaves as
    # soon as the bucket holds its size (a lone packet crosses with no serialisation time).
    burst_bytes: int = 0
    # The emulator without the re-injection of trimmed headers: HTB takes a packet's length
    # before the eBPF program trims it, so a trimmed header costs the link a full frame, while
    # the program's own virtual queue (which decides marks and trims) counts the header. The real FIFO is then
    # `TRIM_FULL_FIFO_FACTOR` x queue_bytes deep (the emulated FIFO's headroom).
    trim_charges_full: bool = False
    vq_until: float = 0.0  # the program's virtual queue (trim_charges_full only)
    ctrl_busy_until: float = 0.0
    marked: int = 0
    trimmed: int = 0
    max_backlog: int = 0  # bytes, the deepest data backlog a packet found

    def backlog_bytes(self, t: float) -> int:
        return int(max(0.0, self.busy_until - t) * (self.rate_bps or 0) / 8)

    def is_down(self, t: float) -> bool:
        return any(start <= t < end for start, end in self.down)


@dataclass
class SimPath:
    links: Sequence[SimLink]


class Simulation:
    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._n = 0
        self.endpoints: list[tuple[Core, Callable[[int, bytes], None]]] = []

    def schedule(self, t: float, fn: Callable[[], None]) -> None:
        self._n += 1
        heapq.heappush(self._heap, (t, self._n, fn))

    def transmit(self, path: SimPath, packet: bytes, deliver: Callable[[bytes, bool], None]) -> None:
        """Send `packet` over `path`; `deliver(packet as it arrives, CE-marked)` later, unless a
        link drops it."""
        t = self.now
        ce = False
        for link in path.links:
            if link.is_down(t) or (link.loss and self.rng.random() < link.loss):
                link.dropped += 1
                return
            if link.rate_bps:
                out = self._queue(link, t, packet)
                if out is None:
                    link.dropped += 1
                    return
                t, packet, marked = out
                ce = ce or marked
            t += link.delay + (self.rng.random() * link.jitter if link.jitter else 0.0)
            link.carried += 1
        copies = 2 if any(lk.dup and self.rng.random() < lk.dup for lk in path.links) else 1
        for i in range(copies):
            self.schedule(t + i * 1e-6, lambda: deliver(packet, ce))

    @staticmethod
    def _queue(link: SimLink, t: float, packet: bytes) -> tuple[float, bytes, bool] | None:
        """A packet reaching a rated link at `t`: (when it leaves, the packet as it leaves,
        CE-marked here), or None if dropped."""
        rate = link.rate_bps
        assert rate
        size = len(packet) + wire.FRAME_OVERHEAD  # Ethernet + IPv6 + UDP headers on the wire
        data = packet[0] <= wire.DATA_OPCODE_MAX and not packet[wire.FLAGS_OFF] & wire.F_TRIMMED
        backlog = max(0.0, link.busy_until - t) * rate / 8
        if data:
            link.max_backlog = max(link.max_backlog, int(backlog))
        decide = backlog
        if link.trim_charges_full:
            decide = max(0.0, link.vq_until - t) * rate / 8  # the program's own queue model
        charged = size
        marked = False
        port = link.mark_bytes is not None or link.trim_bytes is not None  # counts this packet too
        if data and link.trim_bytes is not None and decide + size > link.trim_bytes \
                and len(packet) > wire.TRIM_KEEP:
            packet = wire.trimmed(packet, link.last_hop)
            data = False
            link.trimmed += 1
            size = len(packet) + wire.FRAME_OVERHEAD
            charged = charged if link.trim_charges_full else size
        elif data and decide + (size if port else 0) > link.queue_bytes:
            return None
        if data and link.mark_bytes is not None and not link.last_hop and decide + size > link.mark_bytes:
            marked = True
            link.marked += 1
        if link.trim_charges_full:
            link.vq_until = max(link.vq_until, t) + size * 8 / rate
            if backlog > TRIM_FULL_FIFO_FACTOR * link.queue_bytes:
                return None  # the real FIFO, deeper than the program's queue, overflows
        ser = charged * 8 / rate
        if not data and link.priority:
            start = max(t, link.ctrl_busy_until)
            link.ctrl_busy_until = start + ser
            link.busy_until = max(link.busy_until, t) + ser  # queued data waits for it
            return start + ser, packet, marked
        if not data and backlog > link.queue_bytes * (TRIM_FULL_FIFO_FACTOR if link.trim_charges_full else 1):
            return None
        if link.burst_bytes:
            start = max(t, link.busy_until - link.burst_bytes * 8 / rate)
            link.busy_until = max(t, link.busy_until) + ser
            return start, packet, marked
        start = max(t, link.busy_until)
        link.busy_until = start + ser
        return link.busy_until, packet, marked

    def add_endpoint(self, core: Core, routes: Mapping[int, SimPath],
                     peer: Callable[[], Core]) -> None:
        """Register a core whose poll() output (ev, payload) goes over routes[ev] to peer()."""
        def send(ev: int, payload: bytes) -> None:
            target = peer()

            def arrive(p: bytes, ce: bool) -> None:
                target.on_datagram(p, ev, self.now, ce)

            self.transmit(routes[ev], payload, arrive)
        self.endpoints.append((core, send))

    def add_pair(self, sender: Core, receiver: Core, fwd: Mapping[int, SimPath],
                 rev: Mapping[int, SimPath]) -> None:
        self.add_endpoint(sender, fwd, lambda: receiver)
        self.add_endpoint(receiver, rev, lambda: sender)

    def run(self, until: float, stop: Callable[[], bool] | None = None,
            on_tick: Callable[[float], None] | None = None) -> float:
        """Advance until `until` or until `stop()` holds; returns the simulated time reached."""
        while self.now <= until:
            for core, send in self.endpoints:
                for ev, payload in core.poll(self.now):
                    send(ev, payload)
            if on_tick is not None:
                on_tick(self.now)
            if stop is not None and stop():
                return self.now
            deadlines = [d for core, _ in self.endpoints
                         if (d := core.next_deadline()) is not None]
            nxt = min(deadlines, default=until + 1)
            if self._heap:
                nxt = min(nxt, self._heap[0][0])
            if nxt <= self.now:
                nxt = self.now + 1e-6  # a core that is "due now" but had nothing to send
            if nxt > until:
                self.now = until + 1e-9
                break
            self.now = nxt
            while self._heap and self._heap[0][0] <= self.now:
                _, _, fn = heapq.heappop(self._heap)
                fn()
        return self.now


@dataclass
class SimFabric:
    """Paths between two hosts shaped like the emulated Clos: per plane a NIC link at each end,
    per (plane, spine) an uplink and a downlink, each direction separate."""
    evs: list[EvInfo]  # the forward paths
    fwd: dict[int, SimPath]
    rev: dict[int, SimPath]
    links: dict[tuple[object, ...], SimLink]  # ("up"|"down"|"rup"|"rdown", plane, spine),
    # ("nic_s"|"nic_d"|"rnic_s"|"rnic_d", plane)


def sim_fabric(planes: int, spines: int, rate_bps: float | None = 10e6, delay: float = 0.0003,
               queue_bytes: int = 55_000, loss: float = 0.0, dup: float = 0.0,
               jitter: float = 0.0) -> SimFabric:
    """Every link alike: `rate_bps` (None: infinitely fast), `delay`, a FIFO of `queue_bytes`,
    random `loss` and duplication `dup` probabilities, up to `jitter` s of extra delay."""
    links: dict[tuple[object, ...], SimLink] = {}

    def link(*key: object) -> SimLink:
        if key not in links:
            links[key] = SimLink(rate_bps, delay, loss, dup, jitter, queue_bytes=queue_bytes)
        return links[key]

    evs: list[EvInfo] = []
    fwd: dict[int, SimPath] = {}
    rev: dict[int, SimPath] = {}
    for p in range(planes):
        for s in range(spines):
            ev = ev_value(p, p * spines + s)  # as the model numbers a cross-leaf pair's routes
            evs.append(EvInfo(ev, p))
            fwd[ev] = SimPath([link("nic_s", p), link("up", p, s), link("down", p, s), link("nic_d", p)])
            rev[ev] = SimPath([link("rnic_d", p), link("rup", p, s), link("rdown", p, s),
                               link("rnic_s", p)])
    return SimFabric(evs, fwd, rev, links)


@dataclass
class TransferResult:
    completed: list[tuple[int, bytes]]
    sender_events: list[Event]
    receiver_events: list[Event]
    end: float
    bins: dict[int, int]  # goodput bin (endpoints.host.goodput) -> bytes delivered


def run_transfer(sim: Simulation, sender: SenderCore, receiver: ReceiverCore, fwd: Mapping[int, SimPath],
                 rev: Mapping[int, SimPath], messages: Sequence[bytes], until: float) -> TransferResult:
    """Post `messages` at t=0 and run until all complete at the receiver or `until`."""
    sim.add_pair(sender, receiver, fwd, rev)
    for m in messages:
        sender.send_message(m, sim.now)
    completed: list[tuple[int, bytes]] = []
    s_events: list[Event] = []
    r_events: list[Event] = []
    bins: dict[int, int] = {}
    last = [0]

    def tick(now: float) -> None:
        completed.extend(receiver.take_completed())
        s_events.extend(sender.take_events())
        r_events.extend(receiver.take_events())
        delivered = receiver.bytes_delivered
        if delivered != last[0]:
            key = bin_of(now)
            bins[key] = bins.get(key, 0) + delivered - last[0]
            last[0] = delivered

    end = sim.run(until, stop=lambda: len(completed) >= len(messages), on_tick=tick)
    return TransferResult(completed, s_events, r_events, end, bins)
