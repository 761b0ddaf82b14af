"""The host NIC as a transmit scheduler: a QP's packet is built when its port can take it.

In MRC hardware the NIC serialises each port at line rate and a QP's packet is made (and
timestamped) when its port is free: a window larger than the path needs leaves packets unsent
in the QP, never in a queue that the RTT then measures. An emulated host instead has a kernel
qdisc (HTB at the link rate) in front of every NIC; a sender that hands it a whole window
builds a standing queue there which no switch marks and which inflates every RTT sample
(issue 10, P1).

`NicPacer` is a virtual queue per plane, shared by every QP of a host: each frame sent adds its
serialisation time at the link rate; a port is ready while less than `depth` frames wait. The
sender takes an EV only on a ready port (`EvSet.next_ev_paced`); the agent charges control
packets too and resynchronises the model with the real qdisc backlog now and then (`sync`), so
a host a little slower than its nominal rate does not let the kernel queue creep up.
Pure: the caller passes the time.

Batched refills (the agents' setting; the simulations keep the defaults): a port filled to
`depth` frames is refilled only once it has drained `refill` frames (`next_ready`), so a sender
wakes up once per `refill` frames per port rather than once per frame, and the kernel's qdisc
paces the frames in between, as a NIC's scheduler would. The frames then wait in the host qdisc
for up to `depth` frame times: with `stamp_departure` each is timestamped (`charge`'s return)
with the earliest instant its port can start sending it, not the instant it was handed over, so
the RTT a sender measures holds little host queue.

The earliest, not the modelled: the host's qdisc is a token bucket (HTB), not a serialiser. One
that has been idle holds `burst_bytes` of credit and sends that much at once, so a frame may
leave up to `burst_bytes` at the link rate before this model's departure. A stamp later than
the real departure comes back, echoed in a SACK, from the sender's future: its RTT sample is
discarded and NSCC, which acts only on acknowledgements with a sample, stops reacting (measured
2026-12-03 with the agents' former 18 KB burst stamped by the model alone: 608 RTT samples in a
12 s permutation against about 25,000 unbatched). `charge` therefore stamps the model's
departure less `burst_bytes`, never before the hand-over.
"""

from __future__ import annotations

from collections.abc import Callable

DEPTH_FRAMES = 1.5  # frames a port may hold: one in service, the next ready, no standing queue
RETRY_S = 1e-6  # s: a full port whose freeing rounds to now is asked again this much later


class NicPacer:
    def __init__(self, planes: int, rate_bps: float, frame_bytes: int,
                 depth: float = DEPTH_FRAMES, extra_bytes: int = 0, refill: float = 0.0,
                 stamp_departure: bool = False, burst_bytes: int = 0) -> None:
        """`extra_bytes`: what the host adds to every frame after its sender made it (the
        encapsulation's outer header), charged with each. `refill`: frames a full port drains
        before a waiting sender is woken (0: as soon as it can take one); `stamp_departure`:
        `charge` returns the earliest the frame can start leaving, not `now`; `burst_bytes`:
        the credit the host qdisc's token bucket lets out at once (how early that can be)."""
        if not rate_bps > 0 or planes < 1:
            raise ValueError("a NIC pacer needs a positive rate and at least one plane")
        if not 0 <= refill < depth:
            raise ValueError("a NIC pacer's refill must be below its depth")
        self.rate_bps = rate_bps
        self.extra_bytes = extra_bytes
        self.slack = depth * frame_bytes * 8 / rate_bps  # s of queue a ready port may hold
        # s of queue left when a waiting sender is woken
        self.wake_slack = (depth - refill) * frame_bytes * 8 / rate_bps
        self.stamp_departure = stamp_departure
        self.early_s = burst_bytes * 8 / rate_bps  # how far a real departure may precede the model's
        self.busy_until = [0.0] * planes
        # The QPs waiting for each full port (`turn`): key -> (when it was last served, its
        # next frame's bytes).
        self.lines: list[dict[int, tuple[float, int]]] = [{} for _ in range(planes)]

    def ready(self, plane: int, now: float) -> bool:
        return self.ready_at(now)(plane)

    def ready_at(self, now: float) -> Callable[[int], bool]:
        """`ready(plane, now)` as a one-argument test, for a sender asking plane after plane
        at one instant: one call per plane instead of two. It reads the ports live, so a
        frame charged meanwhile counts."""
        busy, slack = self.busy_until, self.slack
        return lambda plane: busy[plane] - now <= slack

    def charge(self, plane: int, wire_bytes: int, now: float) -> float:
        """A frame of `wire_bytes` (Ethernet included) was handed to `plane`'s port; returns its
        timestamp: `now`, or with `stamp_departure` the earliest the port can start sending it."""
        bu = self.busy_until
        start = bu[plane] if bu[plane] > now else now
        bu[plane] = start + (wire_bytes + self.extra_bytes) * 8 / self.rate_bps
        if not self.stamp_departure:
            return now
        start -= self.early_s
        return start if start > now else now

    def next_ready(self, now: float) -> float:
        """When a sender waiting for a port that is busy now should be woken: the earliest time
        one has drained to `wake_slack` of queue (ready since `slack`, with `refill` frames
        more room)."""
        slack, soonest = self.wake_slack, None
        for busy in self.busy_until:  # a loop, not a list: asked every time a sender waits
            t = busy - slack
            if t > now and (soonest is None or t < soonest):
                soonest = t
        return now if soonest is None else soonest

    def frees(self, plane: int, now: float) -> float:
        """`next_ready` for the one port `plane`, found full at `now` by a sender that can use
        no other. Never `now` itself: a rounding that put the port's freeing at `now` would
        have that sender asked again at once, for ever."""
        t = self.busy_until[plane] - self.wake_slack
        return t if t > now else now + RETRY_S

    def turn(self, plane: int, key: int, since: float, wire_bytes: int, now: float) -> float:
        """`frees` for a QP (`key`) that can use only `plane` and found it full at `now`, last
        served (sent a frame) at `since`, its next frame `wire_bytes` long: the port's freeing
        plus the time on the wire of the next frames of the QPs waiting for it that were served
        less recently. A QP stays in line until it `leave`s.

        Without a line every waiting QP was woken when the port freed, and all but one found
        it full again: with 16 go-back-N QPs to each of three peers, two dozen polls a frame
        per port (issue 19). In line, about one is woken a frame, in the NIC's round robin
        (the QP served least recently first). The estimate needs no hand-over: a QP woken
        early (one ahead sent more than its frame, or joined after it asked) asks again, one
        woken late (one ahead left) finds the port ready, and any QP polled meanwhile for a
        datagram may take a ready port out of turn."""
        line = self.lines[plane]
        line[key] = (since, wire_bytes)
        ahead = 0
        mine = True  # not yet passed in the line: an equal `since` before it is ahead
        for k, (t, size) in line.items():
            if k == key:
                mine = False
            elif t < since or (t == since and mine):
                ahead += size + self.extra_bytes
        return self.frees(plane, now) + ahead * 8 / self.rate_bps

    def leave(self, plane: int, key: int) -> None:
        self.lines[plane].pop(key, None)

    def leave_all(self, key: int) -> None:
        """A QP closed: out of every line."""
        for line in self.lines:
            line.pop(key, None)

    def sync(self, plane: int, backlog_bytes: int, now: float) -> None:
        """The real queue holds `backlog_bytes`: never believe the port emptier than that."""
        bu = self.busy_until
        bu[plane] = max(bu[plane], now + backlog_bytes * 8 / self.rate_bps)
