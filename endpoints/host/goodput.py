"""The one goodput bin: bytes delivered per 10 ms of CLOCK_MONOTONIC, which every namespace
shares, so the runner can line bins up with the faults it injects. The MRC agents and the
TCP/MPTCP peers count with it; experiments.analysis.metrics and the simulated network read it.

>>> bins = GoodputBins()
>>> bins.add(12.3456, 4096); bins.add(12.3499, 100); bins.add(12.351, 1)
>>> bins.as_json()
{'1234': 4196, '1235': 1}
"""

from __future__ import annotations

BIN_S = 0.010  # s: about a dozen full packets (default mtu_payload) per bin at 10 Mbit/s


def bin_of(now: float) -> int:
    """The bin a monotonic time falls in."""
    return int(now / BIN_S)


class GoodputBins:
    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # a plain dict: half the cost of a Counter's `+=`

    def add(self, now: float, nbytes: int) -> None:
        key = int(now / BIN_S)
        self.counts[key] = self.counts.get(key, 0) + nbytes

    def as_json(self) -> dict[str, int]:
        """{bin: bytes}, bins in order, as the agents and TCP peers report them."""
        return {str(k): v for k, v in sorted(self.counts.items())}
