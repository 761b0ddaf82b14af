"""What the interactive CLI reads and prints, kept pure (unit-tested): sizes with suffixes,
probabilities, byte counts, rates and aligned tables.

>>> parse_size("200M"), parse_size("1.5K"), parse_size("4096")
(209715200, 1536, 4096)
>>> fmt_bytes(209715200), fmt_bytes(1536), fmt_bytes(12)
('200.0 MiB', '1.5 KiB', '12 B')
>>> print(table([("EV", "state"), ("0x1c000", "GOOD")]))
EV       state
0x1c000  GOOD
"""

from __future__ import annotations

import re
from collections.abc import Sequence

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.I)


class Usage(ValueError):
    """Bad input to a CLI command: one line saying what was expected."""


def parse_size(text: str) -> int:
    """Bytes from `200M`, `1.5G`, `64K`, `4096` (binary multiples: K = 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise Usage(f"bad size {text!r}: a number of bytes, optionally with K, M, G or T (200M)")
    value = float(m.group(1)) * UNITS[m.group(2).upper()]
    if value < 1 or value != int(value):
        raise Usage(f"bad size {text!r}: a whole number of bytes, at least 1")
    return int(value)


def parse_probability(text: str) -> float:
    """A drop probability from `0.2` or `20%`.

    >>> parse_probability("20%"), parse_probability("0.05")
    (0.2, 0.05)
    """
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise Usage(f"bad probability {text!r}: a number in [0, 1] or a percentage (0.2, 20%)") from None
    if not 0.0 <= value <= 1.0:
        raise Usage(f"bad probability {text!r}: it must lie in [0, 1] (0 clears the loss)")
    return value


def parse_positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise Usage(f"bad {what} {text!r}: a number > 0") from None
    if not value > 0:
        raise Usage(f"bad {what} {text!r}: a number > 0")
    return value


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_mbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.1f} Mbit/s"


def table(rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, two spaces apart; None prints as "-"."""
    cells = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(max(map(len, cells)))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
                     for r in cells)
