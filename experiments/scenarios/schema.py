"""The typed result schema: what a run's summary.json holds, and the parts of a scenario's
results every command reads from the registry rather than keeping a list of its own.

A summary (`Summary`) is the same for every scenario but for `transports`: per transport label,
the figures of that scenario's own type, a `Figures` subclass declared in the scenario's module
beside the code that fills it. Each scenario also declares there its headline figures (the
report's columns), the figures its progress line shows, its row in the docs' results table and
the tolerances `mrclab validate` checks (`Scenario` in base.py). The docs' "summary-schema"
block is made from these types (`reference`), so the reference cannot drift from them.

Pure: no I/O, importable from anywhere in experiments/.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, NamedTuple, TypedDict

# Raised when a summary's layout changes (a key renamed, removed or given another meaning);
# adding a figure keeps it. Every summary carries it as `schema_version`.
SCHEMA_VERSION: Final = 1
DATA_OK: Final = "data_ok"  # every transport's figure: every byte delivered was the byte sent
# Figures several scenarios record under one key (each figures type says what it measures
# there); a figure only one scenario records has its key in that scenario's module. Every
# reader imports the key from its home.
STALL_MS: Final = "stall_ms"  # the longest run of empty goodput bins after a fault
GOODPUT_BEFORE_MBPS: Final = "goodput_before_mbps"
GOODPUT_DURING_MBPS: Final = "goodput_during_mbps"
GOODPUT_FRACTION: Final = "goodput_fraction"  # goodput as a share: of before the fault, or of capacity
A_SHARED_SHARE_AFTER: Final = "a_shared_share_after"  # ecn-balance: A's data left on the shared path


class Figures(TypedDict):
    """What every scenario records per transport; a scenario's own type adds its figures."""
    data_ok: bool


class Summary(TypedDict, total=False):
    """summary.json of `mrclab run` (experiments/runner.py); the demo adds `failure` and `ok`."""
    mrclab_result: int  # experiments/outdir.py: this folder is an mrclab result
    schema_version: int
    scenario: str
    title: str
    fabric: dict[str, Any]  # FabricParams.as_dict
    config: dict[str, Any]  # the options run, the setup time, the datapath
    switch_backend: str
    switches: dict[str, Any]
    capacity: dict[str, Any]  # the offered load against what this machine carries faithfully
    seed: int
    software: dict[str, str]
    dataplane: dict[str, Any]
    routing: dict[str, Any]  # detect_ms, the controller's events
    faults: list[dict[str, Any]]  # what was done to the fabric, on each transport's clock
    transports: dict[str, Figures]  # label -> the scenario's figures type
    fidelity: dict[str, Any]
    traces: dict[str, Any]
    path_state: dict[str, Any]
    captures: dict[str, Any]
    controller_died: dict[str, Any]


def data_ok(summary: Mapping[str, Any]) -> bool:
    """Every transport of a summary delivered every byte intact."""
    return all(t.get(DATA_OK) for t in summary["transports"].values())


class Check(NamedTuple):
    """How `mrclab validate` checks one figure: `at_most` / `at_least` a bound, `within` a
    tolerance of the committed reference's value, or `true`."""
    rule: Literal["at_most", "at_least", "within", "true"]
    bound: float


def at_most(bound: float) -> Check:
    return Check("at_most", bound)


def at_least(bound: float) -> Check:
    return Check("at_least", bound)


def within(tolerance: float) -> Check:
    return Check("within", tolerance)


IS_TRUE = Check("true", 0.0)
Checks = Mapping[str, Mapping[str, Check]]  # transport label -> figure -> check


# --- the docs' results table: one row per scenario -----------------------------------------

Cells = dict[str, Any]  # a transport's figures in a reference: values, or `Spread`s over seeds


class Spread(NamedTuple):
    """One figure over several seeds: the median and range of those that have a value, and
    how many had none (a recovery that never came)."""
    median: float
    lo: float
    hi: float
    runs: int
    missing: int


class Row(NamedTuple):
    """A scenario's row in the docs' results table: its label, and how a transport's figures
    (with the same transport's drop-tail figures, where the scenario ran it) become its cell."""
    label: str
    cell: Callable[[Cells, Cells], str]


def _with_spread(value: Spread, one: Callable[[object], str]) -> str:
    """`median (min-max)`, and how many seeds had no value ("never")."""
    text = one(value.median) if value.lo == value.hi else \
        f"{one(value.median)} ({one(value.lo)}-{one(value.hi)})"
    return text + (f", never in {value.missing} of {value.runs}" if value.missing else "")


def num(value: object, digits: int = 3) -> str:
    """A figure in a docs cell: rounded, `median (min-max)` over seeds, "never" for none."""
    if isinstance(value, Spread):
        return _with_spread(value, lambda v: num(v, digits))
    if value is None:
        return "never"
    if isinstance(value, float):
        return f"{round(value, digits):g}"
    return str(value)


def ms(value: object) -> str:
    """A time in milliseconds in a docs cell, whole."""
    if isinstance(value, Spread):
        return _with_spread(value, ms)
    return "never" if value is None else f"{float(value):.0f}"  # type: ignore[arg-type]


# --- the generated reference of the types ---------------------------------------------------

def type_name(tp: object) -> str:
    """A figure's type as the docs show it: `float | None`, `dict[str, int]`."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    origin = typing.get_origin(tp)
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(tp, "__name__", str(tp))


def fields(figures_type: type) -> dict[str, str]:
    """A figures type's keys and their types as text, in declaration order (base first)."""
    return {k: type_name(v) for k, v in typing.get_type_hints(figures_type).items()}


class Entry(NamedTuple):
    """What the reference shows of one figures type: the scenarios that record it, their
    headline figures."""
    figures_type: type
    scenarios: tuple[str, ...]
    headline: tuple[str, ...]


def reference(entries: Iterable[Entry]) -> str:
    """The docs' "summary-schema" block: the summary's top level, then per figures type its
    keys and types, headline figures in bold."""
    top = ", ".join(f"`{k}`" for k in fields(Summary))
    lines = [f"Every `summary.json` carries `schema_version` {SCHEMA_VERSION} and these keys: {top}. "
             f"Under `transports`, per transport label, the scenario's figures (headline "
             f"figures, the report's columns, in bold; `{DATA_OK}` in every one):", ""]
    lines += ["| figures type | scenarios | figures |", "|---|---|---|"]
    for e in entries:
        shown = ", ".join(f"**`{k}`**: {t}" if k in e.headline else f"`{k}`: {t}"
                          for k, t in fields(e.figures_type).items())
        lines.append(f"| `{e.figures_type.__name__}` | {', '.join(e.scenarios)} | "
                     f"{shown.replace('|', 'or')} |")
    return "\n".join(lines) + "\n"
