"""The one RTT estimator: RFC 6298 smoothing (gain 1/8 for the mean, 1/4 for the deviation).

NSCC keeps one per QP, the MRC sender one per EV (each path has its own timing), the
go-back-N sender one for its single path.

>>> est = RttEstimator()
>>> est.sample(0.004); (est.srtt, est.rttvar)
(0.004, 0.002)
>>> est.sample(0.008); (round(est.srtt, 6), round(est.rttvar, 6))
(0.0045, 0.0025)
"""

from __future__ import annotations


class RttEstimator:
    __slots__ = ("srtt", "rttvar", "samples")

    def __init__(self) -> None:
        self.srtt = 0.0  # smoothed RTT, s; 0.0 until the first sample
        self.rttvar = 0.0  # smoothed mean deviation, s
        self.samples = 0

    def sample(self, rtt: float) -> None:
        if self.samples == 0:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.samples += 1

    def timeout(self) -> float:
        """srtt + 4 rttvar: RFC 6298's retransmission timeout before its bounds."""
        return self.srtt + 4 * self.rttvar
