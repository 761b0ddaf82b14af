"""Lab 6's checker: each of NSCC's four quadrants on crafted acknowledgements, then the
student's window rule in the product's senders on the simulated network: two flows from a small
window over one marked bottleneck; once settled, the link full, the queue held near the target,
nothing trimmed, equal shares."""

from __future__ import annotations

import math
from dataclasses import replace

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from experiments import metrics
from labs.checker import Check, CheckFailed, Context, Lab, simlab
from topologies.model import build

CONFIG = TransportConfig().for_link(10.0)  # the lab's links: target = 6 frames at 10 Mbit/s
BASE = 0.004  # s: the crafted acknowledgements' smallest RTT
# The shared bottleneck: h0 and h1 under one leaf send to h4 and h5 under the other over one
# plane and one spine, so both flows cross the leaf's one uplink, which ECN-marks at the
# emulated switches' threshold; 2 ms per hop makes the round trip ~30 ms, the path's
# bandwidth-delay product ~9 packets. Both start with a window of 4: growing fills the link,
# the decrease holds the queue near the target.
FABRIC = build(planes=1, leaves=2, spines=1, hosts_per_leaf=4, link_mbps=10)
HOP_DELAY = 0.002
SHARED = replace(TransportConfig(), init_cwnd_pkts=4.0)  # clos_run derives the rest
SETTLED = (2.0, 4.0)  # s: measured once the windows have found their size
FAIR_MIN = 0.95  # Jain's index of the two flows' goodputs (1: equal shares)
QUEUE_MAX_FRAMES = CONFIG.target_queue_frames + 2  # the bottleneck's median queue, settled


def _cc(ctx: Context, cwnd: float = 20.0):  # -> LabNscc
    cc = ctx.module("nscc").LabNscc(CONFIG)
    cc.on_ack(0.0, BASE, False)  # a first sample sets the base RTT
    cc.cwnd = cwnd
    return cc


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def proportional(ctx: Context) -> str:
    target, gain = CONFIG.target_delay_min, CONFIG.proportional_gain
    for fraction, what in ((0.0, "none"), (0.5, "half the target")):
        cc = _cc(ctx)
        cc.on_ack(1.0, BASE + fraction * target, False, acked_pkts=4)
        want = 20.0 + gain * (1 - fraction) * 4
        if not _close(cc.cwnd, want):
            raise CheckFailed(f"4 packets acked, no mark, queueing delay {what}: cwnd 20 -> "
                              f"{cc.cwnd:.3f}, want {want:.3f} (gain {gain} x (target - delay) / "
                              f"target per packet)")
    return "below target, the window grows in proportion to the room left"


def fair_increase(ctx: Context) -> str:
    cc = _cc(ctx)
    cc.on_ack(1.0, BASE + 2 * CONFIG.target_delay_min, False, acked_pkts=4)
    want = 20.0 + CONFIG.fair_increase_pkts * 4 / 20.0
    if not _close(cc.cwnd, want):
        raise CheckFailed(f"4 packets acked above target, no mark: cwnd 20 -> {cc.cwnd:.3f}, want "
                          f"{want:.3f} ({CONFIG.fair_increase_pkts:g} packet per window of acks)")
    return "above target with no mark, about one packet per round trip"


def decrease(ctx: Context) -> str:
    target = CONFIG.target_delay_min
    delay = 2 * target
    cc = _cc(ctx)
    cc.on_ack(1.0, BASE + delay, True)
    want = 20.0 * (1 - CONFIG.md_factor * (delay - target) / delay)
    if not _close(cc.cwnd, want):
        raise CheckFailed(f"a mark with the delay at twice the target: cwnd 20 -> {cc.cwnd:.3f}, "
                          f"want {want:.3f} (x 1 - md_factor x (delay - target) / delay)")
    cc.on_ack(1.0 + 0.5 * cc.srtt, BASE + delay, True)
    if not _close(cc.cwnd, want):
        raise CheckFailed(f"a second mark half a round trip later changed cwnd to {cc.cwnd:.3f}: "
                          f"decrease at most once per round trip (the marks describe one queue)")
    cc.on_ack(1.0 + 1.5 * cc.srtt, BASE + delay, True)
    if not cc.cwnd < want:
        raise CheckFailed("a mark a round trip and a half later did not decrease the window again")
    return "a mark above target shrinks the window by how far above, once per round trip"


def ecn_below(ctx: Context) -> str:
    cc = _cc(ctx)
    cc.on_ack(1.0, BASE + 0.5 * CONFIG.target_delay_min, True)
    if not _close(cc.cwnd, 20.0):
        raise CheckFailed(f"a mark below target changed cwnd 20 -> {cc.cwnd:.3f}: a passing burst "
                          f"is no reason to move")
    return "a mark below target changes nothing"


def shared_bottleneck(ctx: Context) -> str:
    flows = [(f"h{i}", f"h{4 + i}", [256 << 10] * 60) for i in range(2)]
    run = simlab.clos_run(FABRIC, flows, seed=1, until=SETTLED[1], config=SHARED,
                          cc_cls=ctx.module("nscc").LabNscc, delay=HOP_DELAY)
    goodput = [qp.mbps(*SETTLED) for qp in run.qps]
    total, fair = sum(goodput), metrics.jain(goodput)
    rate = FABRIC.params.link_mbps
    shares = " and ".join(f"{g:.2f}" for g in goodput)
    windows = " and ".join(f"{qp.sender.cc.cwnd:.1f}" for qp in run.qps)
    if total < 0.9 * rate:
        raise CheckFailed(f"the two flows carried {shares} Mbit/s, {total:.2f} of the uplink's "
                          f"{rate:g} (windows {windows} packets): they did not grow to fill it")
    bottleneck = run.links[("p0l0-p0s0", "up")]
    seen = bottleneck.window(*SETTLED)
    queue = sorted(b for _, b, _ in seen)[len(seen) // 2] / wire.frame_bytes(CONFIG.mtu_payload)
    trims = sum(1 for *_, trimmed in seen if trimmed)
    if queue > QUEUE_MAX_FRAMES or trims:
        raise CheckFailed(f"the uplink's median queue once settled is {queue:.1f} frames, "
                          f"{trims} packets trimmed (windows {windows}): NSCC holds it near the "
                          f"target, {CONFIG.target_queue_frames} frames")
    if fair < FAIR_MIN:
        raise CheckFailed(f"shares {shares} Mbit/s (Jain {fair:.3f} < {FAIR_MIN}): equal growth "
                          f"and proportional decrease make them equal")
    return (f"2 flows from a window of 4 over one 10 Mbit/s uplink: {shares} Mbit/s (Jain "
            f"{fair:.3f}), median queue {queue:.1f} frames, nothing trimmed once settled")


LAB = Lab(__file__, "Congestion control", files=("nscc.py",), checks=[
    Check("proportional-increase", proportional,
          "TODO 1: self.cwnd += c.proportional_gain * (target - delay) / target * acked_pkts"),
    Check("fair-increase", fair_increase,
          "TODO 2: self.cwnd += c.fair_increase_pkts * acked_pkts / self.cwnd"),
    Check("multiplicative-decrease", decrease,
          "TODO 3: only if now - self.last_md >= self.srtt: remember now, then "
          "self.cwnd *= 1 - c.md_factor * (delay - target) / delay"),
    Check("ecn-below-target", ecn_below, "a mark below target must leave the window alone"),
    Check("shared-bottleneck-simulated", shared_bottleneck,
          "growth fills the link, the decrease on marks above target holds the queue: the "
          "quadrant checks above say which rule is off"),
])
