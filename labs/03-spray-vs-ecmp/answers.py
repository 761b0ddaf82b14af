"""Lab 3, spraying vs ECMP: read your permutation run and answer from its numbers.

`summary` below is your run's results/permutation/summary.json as a dict (the checker loads it
and calls these functions). Fill in each TODO between its `# TODO N` and `# END TODO N` lines,
then run `make check-lab N=3`.
"""

from __future__ import annotations

from typing import Any


def flow_goodputs(summary: dict[str, Any], transport: str) -> list[float]:
    """Each flow's steady goodput in Mbit/s for `transport` ("roce" or "spray")."""
    # TODO 1: every transport's figures are under summary["transports"][transport]; the
    # per-flow goodputs under "flow_goodput_mbps"
    raise NotImplementedError("TODO 1")
    # END TODO 1


def cdf(values: list[float]) -> list[tuple[float, float]]:
    """The empirical CDF: (value, fraction of flows at or below it) for each value, smallest
    first; the last fraction is 1.0."""
    # TODO 2: sort the values; the i-th smallest (from 1) has fraction i / n
    raise NotImplementedError("TODO 2")
    # END TODO 2


def fair_share(summary: dict[str, Any], transport: str) -> float:
    """What each flow could get if the fabric were shared perfectly: the capacity the run
    reports for this permutation, divided by the number of flows."""
    # TODO 3: "capacity_mbps" over the number of flows
    raise NotImplementedError("TODO 3")
    # END TODO 3


def starved(summary: dict[str, Any], transport: str) -> int:
    """How many of `transport`'s flows got less than 3/4 of the fair share."""
    # TODO 4: count with flow_goodputs and fair_share
    raise NotImplementedError("TODO 4")
    # END TODO 4


def better_tail(summary: dict[str, Any]) -> str:
    """Which transport's slowest flow did better, "roce" or "spray"?"""
    # TODO 5: compare the two transports' smallest flow goodputs
    raise NotImplementedError("TODO 5")
    # END TODO 5
