"""Window congestion control in the spirit of UET NSCC (the one MRC uses).

Two signals per acknowledged packet: its RTT against a target delay, and whether it was ECN
marked. NSCC's four quadrants:

| ECN | RTT vs target | action |
|---|---|---|
| no  | below | proportional increase: the further below target, the faster |
| no  | above | fair increase: about one packet per RTT, so flows converge to fairness |
| yes | above | multiplicative decrease, at most once per RTT |
| yes | below | no change: the mark came from a transient burst, not a standing queue |

A fabric may give no ECN at all (`--dataplane droptail`, or queues where nothing marks: host
NICs, last hops); then a median path RTT beyond `delay_md_over_target` x target is treated as a
mark above target, so queues stay bounded, while a single hot path is handled by the sender
skipping its EV (`delay_skip_over_target`).
A real loss also decreases the window once per RTT.
"""

from __future__ import annotations

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.rtt import RttEstimator


class Nscc:
    def __init__(self, config: TransportConfig) -> None:
        self.c = config
        self.cwnd = config.init_cwnd_pkts  # packets
        self.base_rtt = float("inf")
        self.rtt = RttEstimator()  # the QP's RTT over all its paths
        self._last_decrease = -1.0
        self.decreases = 0
        # Fraction of acknowledgements that echo a CE mark (DCTCP's alpha, g = 1/16): MRC's ECN
        # marks are per path, so one hot path out of many must trim the window a little, not
        # halve it; the hot EV itself is skipped by the sender.
        self.ecn_frac = 0.0

    @property
    def target(self) -> float:
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
        delay = rtt if rtt is not None else self.srtt
        if delay <= 0:
            return
        self.ecn_frac += (float(ecn) - self.ecn_frac) / 16
        target = self.target
        above = delay >= target
        typical = path_delay if path_delay is not None else self.srtt
        if not ecn and typical > self.c.delay_md_over_target * target:
            # A standing queue across most of the QP's paths with no mark to say so (an
            # ECN-less fabric, or queues where nothing marks: host NICs, last hops): the median
            # path, not one sample, since one hot path is the EV skip's business.
            self._decrease(now, max(0.25, min(1.0, (delay - target) / target)))
        elif not ecn and not above:
            gain = self.c.proportional_gain * (target - delay) / target
            self.cwnd += gain * acked_pkts
        elif not ecn and above:
            self.cwnd += self.c.fair_increase_pkts * acked_pkts / max(self.cwnd, 1.0)
        elif ecn and above:
            self._decrease(now, max(self.ecn_frac, 1 / 16))
        self.cwnd = min(max(self.cwnd, self.c.min_cwnd_pkts), self.c.max_cwnd_pkts)

    def on_trim(self, now: float) -> None:
        """A trimmed packet: its queue passed the trimming threshold, well above any target,
        so this is "ECN and above target" whatever the RTT estimate says (there may be none)."""
        self._decrease(now, 0.5)

    def on_loss(self, now: float) -> None:
        self._decrease(now, 1.0)

    def _decrease(self, now: float, severity: float) -> None:
        if now - self._last_decrease < max(self.srtt, self.c.target_delay_min):
            return  # once per RTT
        self._last_decrease = now
        self.decreases += 1
        self.cwnd = max(self.c.min_cwnd_pkts, self.cwnd * (1 - self.c.md_factor * severity))
