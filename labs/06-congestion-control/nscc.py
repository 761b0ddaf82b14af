"""Lab 6, congestion control: NSCC's window rule, the four quadrants.

`LabNscc` is the sender's congestion control (`endpoints/protocol/congestion.py`'s `Nscc`) with
your version of what happens on each acknowledgement; its reaction to trims and losses, and its
RTT estimate, stay the product's. Fill in each TODO between its `# TODO N` and `# END TODO N`
lines, then run `make check-lab N=6`.

Two signals per acknowledgement: the *queueing delay* (this RTT minus the smallest RTT seen:
what the queues added) against a target, and whether the packet was ECN-marked by a switch:

    ECN   delay vs target   action
    no    below             proportional increase: the further below target, the faster
    no    above             fair increase: about one packet per RTT, so flows converge
    yes   above             multiplicative decrease, at most once per RTT
    yes   below             nothing: the mark came from a passing burst
"""

from __future__ import annotations

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc


class LabNscc(Nscc):
    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.last_md = float("-inf")  # when the window last decreased on a mark

    def on_ack(self, now: float, rtt: float | None, ecn: bool, acked_pkts: int = 1,
               path_delay: float | None = None) -> None:
        """`acked_pkts` packets acknowledged at `now`, the last one `ecn`-marked or not, its
        round trip `rtt` (s; None when unknown). `self.cwnd` is the window, in packets."""
        if rtt is None:
            return
        self.rtt_sample(rtt)  # keeps self.base_rtt (the smallest RTT) and self.srtt up to date
        delay = max(0.0, rtt - self.base_rtt)  # what the queues added to this round trip
        target = self.c.target_delay_min  # a few full frames of queue at the link rate
        c = self.c
        if not ecn and delay < target:
            # TODO 1: proportional increase: c.proportional_gain packets per acknowledged packet
            # at zero delay, less in proportion as the delay nears the target
            pass
            # END TODO 1
        elif not ecn:
            # TODO 2: fair increase: c.fair_increase_pkts per round trip, i.e. that much over
            # one window's worth of acknowledgements
            pass
            # END TODO 2
        elif delay >= target:
            # TODO 3: multiplicative decrease, once per round trip (self.srtt since
            # self.last_md): by c.md_factor x how far above target, (delay - target) / delay
            pass
            # END TODO 3
        # ECN below target: nothing to do, the mark came from a burst that has passed.
        self.cwnd = min(max(self.cwnd, c.min_cwnd_pkts), c.max_cwnd_pkts)
