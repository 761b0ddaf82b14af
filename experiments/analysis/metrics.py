"""Recovery metrics from 10 ms goodput bins: pure functions, unit-tested.

`recovery_ms`: from the fault to the start of the first bin after which goodput stays at or above
90% of its pre-fault level (scaled by the capacity that survives) for at least 200 ms. A 10 ms
bin holds only about a dozen packets at 10 Mbit/s, so one bin jitters by +-10% with no fault at
all; "goodput" in that test is therefore the 50 ms moving average starting at each bin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from endpoints.host.goodput import BIN_S as BIN_S  # the bin every figure here counts in

SMOOTH_BINS = 5  # the moving average recovery is judged on: 50 ms of BIN_S bins
HOLD_S = 0.200
THRESHOLD = 0.90


def series(bins: Mapping[int, int], start_bin: int, n_bins: int) -> list[float]:
    """Mbit/s per bin for bins start_bin .. start_bin + n_bins - 1 (missing bins are zero)."""
    scale = 8 / BIN_S / 1e6
    return [bins.get(start_bin + i, 0) * scale for i in range(n_bins)]


def total_goodput(bins_of: Iterable[Mapping[int, int]], t_start: float, t_end: float) -> list[float]:
    """Mbit/s per bin from `t_start` to `t_end` (monotonic seconds), every flow's `series` added
    bin by bin: what a collective's flows deliver together."""
    n = round((t_end - t_start) / BIN_S)
    total = [0.0] * n
    for bins in bins_of:
        total = [a + b for a, b in zip(total, series(bins, int(t_start / BIN_S), n), strict=True)]
    return total


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def smoothed(values: Sequence[float], width: int = SMOOTH_BINS) -> list[float]:
    """Forward moving average: out[i] = mean(values[i:i+width]) (shorter at the end)."""
    out = []
    acc = sum(values[:width])
    for i in range(len(values)):
        n = min(width, len(values) - i)
        out.append(acc / n if n else 0.0)
        acc -= values[i]
        if i + width < len(values):
            acc += values[i + width]
    return out


def recovery_ms(mbps: Sequence[float], fault_index: int, target: float,
                end_index: int | None = None, width: int = SMOOTH_BINS) -> float | None:
    """Milliseconds from bin `fault_index` to the first bin from which the smoothed goodput
    holds >= `target` for HOLD_S, searching up to `end_index`; None if it never does."""
    end = len(mbps) if end_index is None else min(end_index, len(mbps))
    hold = round(HOLD_S / BIN_S)
    smooth = smoothed(mbps, width)
    run_start = None
    for i in range(fault_index, end):
        if smooth[i] >= target:
            if run_start is None:
                run_start = i
            if i - run_start + 1 >= hold:
                return round((run_start - fault_index) * BIN_S * 1000, 1)
        else:
            run_start = None
    return None


def longest_stall_ms(mbps: Sequence[float], start: int = 0, end: int | None = None) -> float:
    """Longest run of bins with nothing delivered, in ms."""
    best = run = 0
    for value in mbps[start:end]:
        run = run + 1 if value == 0 else 0
        best = max(best, run)
    return round(best * BIN_S * 1000, 1)


def steady_width(mbps: Sequence[float], start: int, end: int, level: float,
                 widths: Sequence[int] = (SMOOTH_BINS, 10, 20)) -> int | None:
    """The finest smoothing (in bins) at which the fault-free stretch start..end itself never
    falls below `level`, so that the recovery test cannot fail on noise the transport shows
    with no fault at all: a transport whose application sees data in bursts (MPTCP
    reassembling subflows, TCP with jumbo segments) fails it at 50 ms with no fault at all, and
    its recovery is then judged at the width it does pass. None: not even at the widest."""
    if end - start < round(HOLD_S / BIN_S):
        return None
    for width in widths:
        smooth = smoothed(mbps, width)[start:end - width]
        if smooth and min(smooth) >= level:
            return width
    return None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted values, linearly interpolated between neighbours.

    >>> percentile([10.0, 20.0, 30.0, 40.0], 50)
    25.0
    """
    if not sorted_values:
        raise ValueError("no values")
    k = (len(sorted_values) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every value is equal, 1/n when one takes everything.

    >>> jain([5.0, 5.0]), jain([10.0, 0.0])
    (1.0, 0.5)
    """
    total = sum(values)
    return total * total / (len(values) * sum(v * v for v in values)) if total else 0.0


def headline(figures: Mapping[str, object], keys: tuple[str, ...], sep: str = " ",
             never: Mapping[str, str] | None = None) -> str:
    """A transport's figures `keys`, in words (`wait ms 150, share 0.9`) or as
    `name=value` with `sep="="` (`wait_ms=150`). A figure without a value is left out (never
    the word None), but for those in `never`, whose missing value is news: there the words
    `never[figure]`, or `name=never`.

    >>> headline({"settle_ms": None, "wait_ms": 150.0, "share": None},
    ...          ("settle_ms", "wait_ms", "share"), never={"settle_ms": "never settled"})
    'never settled, wait ms 150'
    >>> headline({"settle_ms": 10.0, "ok": True}, ("settle_ms", "ok"), sep="=")
    'settle_ms=10, ok=True'
    """
    parts: list[str] = []
    for k in keys:
        value = figures.get(k)
        if never and k in never and k in figures and value is None:
            parts.append(never[k] if sep == " " else f"{k}{sep}never")
        elif value is not None:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            parts.append(f"{k.replace('_', ' ') if sep == ' ' else k}{sep}{shown}")
    return ", ".join(parts)
