"""The scenario registry: every scenario `mrclab run` knows, by name.

Each module here is one kind of scenario and owns all of it: its scenarios' defaults, option
checks, how one transport is run and measured, the headline figures, its plots. A scenario of
an existing kind is one more entry in that module's SCENARIOS; a new kind is one more module,
listed in KINDS below.
"""

from __future__ import annotations

from dataclasses import replace

from experiments.analysis.transports import TRANSPORTS
from experiments.scenarios import (
    allreduce,
    collective,
    ecnbalance,
    evloss,
    failure,
    incast,
    permutation,
    schedule,
    schema,
)
from experiments.scenarios.base import Options, Scenario, check
from topologies.model import FabricError

KINDS = (failure, schedule, permutation, incast, ecnbalance, evloss, collective, allreduce)
SCENARIOS: dict[str, Scenario] = {s.name: s for kind in KINDS for s in kind.SCENARIOS}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise FabricError(f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)}") from None


def schema_reference(_: object = None) -> str:
    """The docs' "summary-schema" block: the summary's keys, then each figures type of the
    registry with the scenarios that record it and, in bold, their headline figures."""
    groups: dict[type, list[Scenario]] = {}
    for sc in SCENARIOS.values():
        groups.setdefault(sc.figures_type, []).append(sc)
    return schema.reference(
        schema.Entry(tp, tuple(s.name for s in group), tuple(f for s in group for f in s.figures))
        for tp, group in groups.items())


def parse_transports(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return default
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TRANSPORTS]
    if unknown or not names:
        raise FabricError(f"unknown transport(s) {unknown or text!r}: choose from {', '.join(TRANSPORTS)}")
    if len(set(names)) != len(names):
        raise FabricError(f"--transports lists a transport twice: {text}")
    return names


def default_options(name: str, **overrides: object) -> Options:
    """The scenario's defaults with `overrides` (Options fields), checked."""
    sc = scenario(name)
    base = Options(sc, sc.fabric, sc.transports, sc.duration, sc.fault_at, sc.fault_end)
    given = frozenset(overrides) - {"same_target", "given"}
    return check(replace(base, given=given, **overrides))  # type: ignore[arg-type]


__all__ = ["SCENARIOS", "Options", "Scenario", "check", "default_options", "parse_transports",
           "scenario", "schema_reference"]
