"""Window congestion control: UET NSCC as the OCP spec names it (uet-1.0-nscc), the one MRC uses.

Two signals per acknowledged packet: its queueing delay (RTT minus the base RTT, the smallest
RTT seen) against the target (`target_delay_min`: `target_queue_frames` frames at the link
rate), and whether it was ECN marked. NSCC's four quadrants:

| ECN | queueing delay vs target | action |
|---|---|---|
| no  | below | proportional increase: the further below target, the faster |
| no  | above | fair increase: about one packet per RTT, so flows converge to fairness |
| yes | above | multiplicative decrease by gamma x (avg - target) / avg of the smoothed queueing
|     |       | delay, at most `max_md_jump`, at most once per RTT |
| yes | below | no change: the mark came from a transient burst (the sender skips the EV) |

and `eta` packets per RTT added in every quadrant but the decrease. A trim is "ECN above target"
whatever the RTT says (there may be none): a fixed decrease; a loss the strongest one.

A fabric with no ECN at all (`--dataplane droptail`, `ecn_fabric` false) gets one more rule: a
median path RTT beyond `delay_md_over_target` x target is read as a mark above target. With
ECN it is off: unmarked delay then sits in queues no switch marks (a host's own NIC queue, the
emulator), and cutting the window for it throttled an idle fabric (issue 10, P1).
"""

from __future__ import annotations

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.rtt import RttEstimator

CAUSES = ("ecn", "delay", "trim", "loss", "timeout")  # why a window decreased (trace `cwnd_dec`)
AVG_GAIN = 1 / 16  # EWMA gain of the smoothed queueing delay and of the marked fraction


class Nscc:
    def __init__(self, config: TransportConfig) -> None:
        self.c = config
        self.cwnd = min(config.init_cwnd_pkts, config.max_cwnd_pkts)  # packets
        self.base_rtt = float("inf")
        self.rtt = RttEstimator()  # the QP's RTT over all its paths
        self._last_decrease = -1.0
        self.decreases = 0
        # Smoothed queueing delay (RTT - base RTT): the decrease's magnitude.
        self.avg_qdelay = 0.0
        # Fraction of acknowledgements that echo a CE mark (for the trace): MRC's marks are per
        # path, and the hot EV itself is skipped by the sender.
        self.ecn_frac = 0.0
        # Every decrease that took effect, for the trace: (t, cause, cwnd before, after,
        # severity); drained by the sender.
        self.log: list[tuple[float, str, float, float, float]] = []

    @property
    def target(self) -> float:
        """The RTT the delay rules compare with (EV delay skips, the ECN-less fallback)."""
        base = self.base_rtt if self.base_rtt != float("inf") else 0.0
        return max(self.c.target_delay_min, base * self.c.target_over_base)

    @property
    def srtt(self) -> float:
        return self.rtt.srtt

    def rtt_sample(self, rtt: float) -> None:
        if rtt <= 0:
            return
        self.base_rtt = min(self.base_rtt, rtt)
        self.rtt.sample(rtt)

    def on_ack(self, now: float, rtt: float | None, ecn: bool, acked_pkts: int = 1,
               path_delay: float | None = None) -> None:
        """`path_delay`: the QP's typical path RTT (median over its EVs), for the ECN-less
        fallback; the QP-wide smoothed RTT when not given."""
        if rtt is not None:
            self.rtt_sample(rtt)
        if rtt is None or self.base_rtt == float("inf"):
            return
        c = self.c
        qd = max(0.0, rtt - self.base_rtt)
        self.avg_qdelay += (qd - self.avg_qdelay) * AVG_GAIN
        self.ecn_frac += (float(ecn) - self.ecn_frac) * AVG_GAIN
        t = c.target_delay_min
        typical = path_delay if path_delay is not None else self.srtt
        decrease = ecn and qd >= t
        if not c.ecn_fabric and not ecn and typical - self.base_rtt > c.delay_md_over_target * t:
            # No marks anywhere: a standing queue across most of the QP's paths (the median
            # path, not one sample: one hot path is the EV skip's business).
            self._decrease(now, max(0.25, min(1.0, (typical - self.base_rtt - t) / t)), "delay")
            decrease = True
        elif not ecn and qd < t:
            self.cwnd += c.proportional_gain * (t - qd) / t * acked_pkts
        elif not ecn:
            self.cwnd += c.fair_increase_pkts * acked_pkts / max(self.cwnd, 1.0)
        elif decrease and self.avg_qdelay > t:
            avg = self.avg_qdelay
            self._cut(now, min(c.gamma * (avg - t) / avg, c.max_md_jump), "ecn")
        if not decrease:
            self.cwnd += c.eta * acked_pkts / max(self.cwnd, 1.0)
        self.cwnd = min(max(self.cwnd, c.min_cwnd_pkts), c.max_cwnd_pkts)

    def on_trim(self, now: float) -> None:
        """A trimmed packet: its queue passed the trimming threshold, well above any target,
        so this is "ECN and above target" whatever the RTT estimate says (there may be none)."""
        self._decrease(now, 0.5, "trim")

    def on_loss(self, now: float, cause: str = "loss") -> None:
        """A loss read as congestion (`cause` loss or timeout): the strongest decrease."""
        self._decrease(now, 1.0, cause)

    def _decrease(self, now: float, severity: float, cause: str) -> None:
        self._cut(now, self.c.md_factor * severity, cause)

    def _cut(self, now: float, fraction: float, cause: str) -> None:
        if now - self._last_decrease < max(self.srtt, self.c.target_delay_min):
            return  # once per RTT
        self._last_decrease = now
        self.decreases += 1
        before = self.cwnd
        self.cwnd = max(self.c.min_cwnd_pkts, self.cwnd * (1 - fraction))
        self.log.append((now, cause, before, self.cwnd, fraction))
