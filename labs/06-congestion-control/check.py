"""Lab 6's checker: each of NSCC's four quadrants on crafted acknowledgements, then the
student's window rule in the product's senders on the product's simulated Clos
(experiments/sim/simclos.py): two flows from a small window over one marked bottleneck; once
settled, the link full, the queue below the trimming threshold, nothing trimmed, equal shares.
Last, the product's permutation scenario in the real emulation with the student's NSCC in every
host agent: a faithful run, every flow near its fair share."""

from __future__ import annotations

import math
import random

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.replaceable import cores
from experiments.analysis import metrics
from experiments.sim import simclos
from experiments.sim.simclos import ClosModel
from labs.checker import Check, CheckFailed, Context, Lab, Skipped, fabric
from topologies.model import FabricParams

CONFIG = TransportConfig().for_link(10.0)  # the lab's links: target = 6 frames at 10 Mbit/s
BASE = 0.004  # s: the crafted acknowledgements' smallest RTT
# The shared bottleneck: h0 and h1 under one leaf send to h4 and h5 under the other over one
# plane and one spine, so both flows cross the leaf's one uplink, which ECN-marks and trims at
# the emulated switches' thresholds. 5 ms per hop makes the round trip ~45 ms, the path's
# bandwidth-delay product ~14 packets: both start with a window of 4 (8 in flight, the link
# 60% used) and must grow to fill it. Measured (seed 1): the solution 4.85 + 4.87 Mbit/s,
# Jain 1.000, the uplink's queue 9.9 frames at the 90th percentile (the product's NSCC 11.9);
# without the increases (the skeleton) 2.88 + 2.88.
FABRIC = ClosModel(params=FabricParams(planes=1, leaves=2, spines=1, hosts_per_leaf=4,
                                       link_mbps=10.0), link_delay=0.005)
BOTTLENECK = ("up", "p0l0-p0s0")
SETTLED = (2.0, 4.0)  # s: measured once the windows have found their size
FAIR_MIN = 0.95  # Jain's index of the two flows' goodputs (1: equal shares)


def _cc(ctx: Context, cwnd: float = 20.0):  # -> LabNscc
    cc = ctx.module("nscc").LabNscc(CONFIG)
    cc.on_ack(0.0, BASE, False)  # a first sample sets the base RTT
    cc.cwnd = cwnd
    return cc


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


# Random acknowledgements within one quadrant, after the crafted ones: the student's window
# against the rule (the reference solution's on_ack, written out here), ack by ack.
RANDOM_ACKS = 60
QUADRANTS = {
    "proportional": ("no mark, below target", "TODO 1"),
    "fair": ("no mark, above target", "TODO 2"),
    "decrease": ("a mark, above target", "TODO 3"),
}


def _rule(cwnd: float, last_md: float, now: float, delay: float, ecn: bool, acked: int,
          srtt: float) -> tuple[float, float]:
    """(cwnd, when the window last decreased on a mark) after one acknowledgement."""
    c, target = CONFIG, CONFIG.target_delay_min
    if not ecn and delay < target:
        cwnd += c.proportional_gain * (target - delay) / target * acked
    elif not ecn:
        cwnd += c.fair_increase_pkts * acked / cwnd
    elif delay >= target and now - last_md >= srtt:
        last_md = now
        cwnd *= 1 - c.md_factor * (delay - target) / delay
    return min(max(cwnd, c.min_cwnd_pkts), c.max_cwnd_pkts), last_md


def _random_acks(ctx: Context, quadrant: str) -> None:
    what, todo = QUADRANTS[quadrant]
    rng = random.Random(6)
    target = CONFIG.target_delay_min
    cc = _cc(ctx)
    cwnd, last_md, now = cc.cwnd, float("-inf"), 1.0
    for i in range(RANDOM_ACKS):
        if quadrant == "decrease":  # a window of any size, marks at any spacing
            cwnd = cc.cwnd = rng.uniform(8.0, 60.0)
            now += rng.uniform(0.1, 1.6) * max(cc.srtt, BASE)
        else:
            now += rng.uniform(0.0005, 0.01)
        if quadrant == "proportional":
            delay = rng.uniform(0.0, 0.98) * target
        else:
            delay = rng.uniform(1.02, 4.0) * target
        acked = rng.randint(1, 8)
        before = cc.cwnd
        cc.on_ack(now, BASE + delay, quadrant == "decrease", acked_pkts=acked)
        cwnd, last_md = _rule(cwnd, last_md, now, delay, quadrant == "decrease", acked, cc.srtt)
        if not math.isclose(cc.cwnd, cwnd, rel_tol=1e-6, abs_tol=1e-9):
            since = "never" if last_md == float("-inf") else f"{(now - last_md) * 1e3:.1f} ms ago"
            raise CheckFailed(f"random acknowledgement {i + 1} ({what}: queueing delay "
                              f"{delay * 1e3:.1f} ms against a target of {target * 1e3:.1f}, "
                              f"{acked} packets acked, srtt {cc.srtt * 1e3:.1f} ms, last decrease "
                              f"{since}): cwnd {before:.3f} -> {cc.cwnd:.3f}, want {cwnd:.3f} "
                              f"({todo})")


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
    _random_acks(ctx, "proportional")
    return "below target, the window grows in proportion to the room left"


def fair_increase(ctx: Context) -> str:
    cc = _cc(ctx)
    cc.on_ack(1.0, BASE + 2 * CONFIG.target_delay_min, False, acked_pkts=4)
    want = 20.0 + CONFIG.fair_increase_pkts * 4 / 20.0
    if not _close(cc.cwnd, want):
        raise CheckFailed(f"4 packets acked above target, no mark: cwnd 20 -> {cc.cwnd:.3f}, want "
                          f"{want:.3f} ({CONFIG.fair_increase_pkts:g} packet per window of acks)")
    _random_acks(ctx, "fair")
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
    _random_acks(ctx, "decrease")
    return "a mark above target shrinks the window by how far above, once per round trip"


def ecn_below(ctx: Context) -> str:
    cc = _cc(ctx)
    cc.on_ack(1.0, BASE + 0.5 * CONFIG.target_delay_min, True)
    if not _close(cc.cwnd, 20.0):
        raise CheckFailed(f"a mark below target changed cwnd 20 -> {cc.cwnd:.3f}: a passing burst "
                          f"is no reason to move")
    return "a mark below target changes nothing"


def shared_bottleneck(ctx: Context) -> str:
    config = simclos.config_for(FABRIC, init_cwnd_pkts=4.0)  # what an agent derives, window 4
    run = simclos.run(FABRIC, [("h0", "h4", 0.0, SETTLED[1]), ("h1", "h5", 0.0, SETTLED[1])],
                      config, seed=1, until=SETTLED[1], watch=(BOTTLENECK,),
                      cores=cores({"nscc": ctx.module("nscc").LabNscc}))
    goodput = [run.goodput_mbps(f, *SETTLED) for f in run.flows]
    total, fair = sum(goodput), metrics.jain(goodput)
    rate = FABRIC.params.link_mbps
    shares = " and ".join(f"{g:.2f}" for g in goodput)
    windows = " and ".join(f"{f.snd.cc.cwnd:.1f}" for f in run.flows)
    if total < 0.9 * rate:
        raise CheckFailed(f"the two flows carried {shares} Mbit/s, {total:.2f} of the uplink's "
                          f"{rate:g} (windows {windows} packets): they did not grow to fill it")
    frame = wire.frame_bytes(config.mtu_payload)
    queue = sorted(b for t, b in run.queues[BOTTLENECK] if SETTLED[0] <= t < SETTLED[1])
    p90 = queue[int(0.9 * len(queue))] / frame
    trims = run.links[BOTTLENECK].trimmed
    if p90 >= config.trim_queue_frames or trims:
        raise CheckFailed(f"the uplink's queue reached {p90:.1f} frames (90th percentile), "
                          f"{trims} packets trimmed (windows {windows}): the decrease on marks "
                          f"must hold it below the trimming threshold, "
                          f"{config.trim_queue_frames} frames")
    if fair < FAIR_MIN:
        raise CheckFailed(f"shares {shares} Mbit/s (Jain {fair:.3f} < {FAIR_MIN}): equal growth "
                          f"and proportional decrease make them equal")
    return (f"2 flows from a window of 4 over one 10 Mbit/s uplink: {shares} Mbit/s (Jain "
            f"{fair:.3f}), queue {p90:.1f} frames at the 90th percentile, nothing trimmed")


# The emulated permutation: the product's permutation scenario (its fabric: 2 planes x 4 leaves
# x 2 spines, 2 hosts per leaf, 5 Mbit/s), shortened to EMU_DURATION s, every host's agent with
# the student's NSCC. The solution (seed 1, 2-core VM): 0.948 of what the fabric can carry,
# the worst flow 0.947 of its fair share, Jain 1.000.
EMU_DURATION = 4.0
EMU_CARRIED = 0.85  # of what the fabric can carry for the permutation
EMU_WORST = 0.8  # the worst flow's goodput over its fair share


def real_permutation(ctx: Context) -> str:
    s = fabric.scenario_run(ctx, "permutation", {"nscc": ("nscc.py", "LabNscc")},
                            transports=("mrc",), duration=EMU_DURATION)
    busy = fabric.unfaithful(s)
    if busy:  # a faithful run or no verdict: the machine, not the student's code
        raise Skipped(busy)
    t = s["transports"]["mrc"]
    where = f" (the run: {s['_out']})"
    if not t["data_ok"]:
        raise CheckFailed(f"{t['flows_delivered']} of {len(t['flow_goodput_mbps'])} flows "
                          f"delivered their data intact{where}")
    if t["throughput_fraction"] < EMU_CARRIED:
        raise CheckFailed(f"the flows carried {t['throughput_fraction']:.2f} of what the fabric "
                          f"can carry (want {EMU_CARRIED}){where}")
    if t["flow_fraction_min"] < EMU_WORST:
        raise CheckFailed(f"the worst flow got {t['flow_fraction_min']:.2f} of its fair share "
                          f"(want {EMU_WORST}){where}")
    return (f"{len(t['flow_goodput_mbps'])} flows in the emulation, a faithful run: "
            f"{t['throughput_fraction']:.2f} of what the fabric carries, the worst flow "
            f"{t['flow_fraction_min']:.2f} of its fair share, Jain {t['jain_fairness']:.3f}")


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
          "TODOs 1-3: growth fills the link, the decrease on marks above target holds the queue: "
          "the quadrant checks above say which rule is off"),
    Check("real-permutation", real_permutation,
          "the same window rule in every host agent of the emulation: look at the run's cc.png "
          "(windows, queues) and summary.json",
          needs=("proportional-increase", "fair-increase", "multiplicative-decrease",
                 "ecn-below-target", "shared-bottleneck-simulated"), emulated=True),
])
