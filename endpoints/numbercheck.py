"""The one validator of numbers (`check_number`): scenario options, fabric parameters and the
agents' control requests all go through it, so inf, nan, 1e400 and bools are refused the same
way everywhere. Below both the agents and the fabric model, which raise their own errors
through it (`error`)."""

from __future__ import annotations

from typing import Any


def check_number(name: str, value: object, lo: float, hi: float, *, integral: bool = False,
                 lo_open: bool = False, error: type[Exception] = ValueError) -> Any:
    """`value` if it is a finite number in [lo, hi] (`lo_open`: (lo, hi]), and a whole number
    (an int, not a float) when `integral`; `error` naming `name` and the range otherwise.

    >>> check_number("qpn", 7, 1, 2**24 - 1, integral=True)
    7
    >>> check_number("seconds", True, 0, 60, lo_open=True)
    Traceback (most recent call last):
    ...
    ValueError: seconds must be a finite number in (0, 60], got True
    """
    kind = "a whole number" if integral else "a finite number"
    bounds = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
    ok = isinstance(value, int) if integral else isinstance(value, (int, float))
    if ok and not isinstance(value, bool):
        number: Any = value  # ints compare exactly with the float bounds, however large
        if number == number and (lo < number if lo_open else lo <= number) and number <= hi:
            return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise error(f"{name} must be {kind} in {bounds}, got {shown}")
