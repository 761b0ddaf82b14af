"""A deterministic discrete-event network for the sans-IO cores: the same objects the agents run,
driven by simulated time instead of sockets.

A path is a list of links; a link has a rate (with a FIFO queue of bounded depth), a
propagation delay, random loss, duplication, jitter (which reorders), and down intervals. Links
can be shared between paths (a host NIC, a spine), so congestion and failures behave like
the fabric's. Everything random comes from one seeded `random.Random`.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


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
        self.endpoints: list[tuple[object, Callable[[int, bytes], None]]] = []

    def schedule(self, t: float, fn: Callable[[], None]) -> None:
        self._n += 1
        heapq.heappush(self._heap, (t, self._n, fn))

    def transmit(self, path: SimPath, packet: bytes, deliver: Callable[[bytes], None]) -> None:
        t = self.now
        size = len(packet) + 62  # Ethernet + IPv6 + UDP headers on the wire
        for link in path.links:
            if link.is_down(t) or (link.loss and self.rng.random() < link.loss):
                link.dropped += 1
                return
            if link.rate_bps:
                start = max(t, link.busy_until)
                if (start - t) * link.rate_bps / 8 > link.queue_bytes:
                    link.dropped += 1
                    return
                link.busy_until = start + size * 8 / link.rate_bps
                t = link.busy_until
            t += link.delay + (self.rng.random() * link.jitter if link.jitter else 0.0)
            link.carried += 1
        copies = 2 if any(lk.dup and self.rng.random() < lk.dup for lk in path.links) else 1
        for i in range(copies):
            self.schedule(t + i * 1e-6, lambda p=packet: deliver(p))

    def add_endpoint(self, core: object, routes: Mapping[int, SimPath],
                     peer: Callable[[], object]) -> None:
        """Register a core whose poll() output (ev, payload) goes over routes[ev] to peer()."""
        def send(ev: int, payload: bytes) -> None:
            target = peer()
            self.transmit(routes[ev], payload,
                          lambda p, ev=ev: target.on_datagram(p, ev, self.now))  # type: ignore[attr-defined]
        self.endpoints.append((core, send))

    def add_pair(self, sender: object, receiver: object, fwd: Mapping[int, SimPath],
                 rev: Mapping[int, SimPath]) -> None:
        self.add_endpoint(sender, fwd, lambda: receiver)
        self.add_endpoint(receiver, rev, lambda: sender)

    def run(self, until: float, stop: Callable[[], bool] | None = None,
            on_tick: Callable[[float], None] | None = None) -> float:
        """Advance until `until` or until `stop()` holds; returns the simulated time reached."""
        while self.now <= until:
            for core, send in self.endpoints:
                for ev, payload in core.poll(self.now):  # type: ignore[attr-defined]
                    send(ev, payload)
            if on_tick is not None:
                on_tick(self.now)
            if stop is not None and stop():
                return self.now
            deadlines = [d for core, _ in self.endpoints
                         if (d := core.next_deadline()) is not None]  # type: ignore[attr-defined]
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


def fabric_like_paths(planes: int, spines: int, rate_bps: float | None = 40e6, delay: float = 0.0003,
                      queue_bytes: int = 64 * 1024) -> tuple[list[SimLink], list[SimLink],
                                                         dict[tuple[int, int], list[SimLink]]]:
    """Host NIC links per plane (sender side, receiver side) and a spine link per (plane, spine),
    shaped like the emulated fabric: returns (src_nics, dst_nics, spine_links)."""
    src = [SimLink(rate_bps, delay, queue_bytes=queue_bytes) for _ in range(planes)]
    dst = [SimLink(rate_bps, delay, queue_bytes=queue_bytes) for _ in range(planes)]
    core = {(p, s): [SimLink(rate_bps, delay, queue_bytes=queue_bytes),
                     SimLink(rate_bps, delay, queue_bytes=queue_bytes)]
            for p in range(planes) for s in range(spines)}
    return src, dst, core
