"""`mrclab validate`: rerun the quick set and check each figure against the committed reference.

The reference (experiments/reference/quick.json) records, per scenario, the options, fabric and
seed that produced it, the figures measured, and for each figure how it is checked:

* `at_most` / `at_least`: a bound with slack (recovery times, stalls: timing on a shared VM
  jitters by tens of ms, so the bound is what the claim needs, not the last value seen);
* `within`: |value - reference| <= tolerance (fractions of goodput or capacity);
* `true`: must hold (data_ok).

`--write-reference` reruns the set and rewrites the file with the new values, keeping the
tolerances: what htsim's validation scripts do with their committed results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from experiments.runner import run_scenario
from experiments.scenarios import SCENARIOS, Options, default_options
from experiments.scenarios.schema import Checks
from topologies import files

REFERENCE = Path(__file__).resolve().parent / "reference" / "quick.json"

# The quick set: small, short runs that still show each claim (a few minutes in all), and the
# figures checked, as each scenario declares them (`Scenario.quick`, `Scenario.checks`): bounds
# are what each claim needs with the slack of one short run on a shared 2-core VM.
QUICK: dict[str, Mapping[str, object]] = {name: sc.quick for name, sc in SCENARIOS.items()
                                          if sc.quick is not None}
CHECKS: dict[str, Checks] = {name: SCENARIOS[name].checks for name in QUICK}


def quick_options(name: str) -> Options:
    return default_options(name, **QUICK[name])


def sized_for_this_machine(opts: Options) -> Options:
    """The scenario's link rate, or the fastest this machine carries faithfully where that one
    would not be (as `mrclab run` without --link-mbps): the figures checked are fractions of
    capacity, which hold at any faithful rate."""
    from dataclasses import replace

    from experiments.analysis import calibration
    from experiments.runner import faithful_link_mbps
    from topologies import switches

    free = calibration.free_cores()  # read once, carried to the run's load check
    rate = faithful_link_mbps(opts, switches.resolve(opts.switch_backend), free,
                              ceiling=opts.fabric.link_mbps)
    return replace(opts, fabric=replace(opts.fabric, link_mbps=rate), free_cores=free)


def _progress(name: str) -> Callable[[str], None]:
    return lambda message: print(f"[{name}] {message}", flush=True)


def check(value: object, rule: str, ref: object, tol: float) -> bool:
    if rule == "true":
        return value is True
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    if rule == "at_most":
        return value <= tol
    if rule == "at_least":
        return value >= tol
    if rule == "within":
        return isinstance(ref, (int, float)) and abs(value - ref) <= tol
    raise ValueError(f"unknown check {rule!r}")


def compare(name: str, summary: dict, reference: dict) -> list[dict]:
    rows = []
    for transport, figures in CHECKS[name].items():
        measured = summary["transports"].get(transport, {})
        for figure, (rule, tol) in figures.items():
            ref = reference.get("figures", {}).get(transport, {}).get(figure)
            value = measured.get(figure)
            rows.append({"scenario": name, "transport": transport, "figure": figure, "value": value,
                         "reference": ref, "rule": rule, "tolerance": tol,
                         "ok": check(value, rule, ref, tol)})
    return rows


def validate_all(out: Path, write_reference: bool = False, names: list[str] | None = None) -> bool:
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {}
    rows: list[dict] = []
    new_ref = dict(reference)
    for name in names or list(QUICK):
        opts = sized_for_this_machine(quick_options(name))
        summary = run_scenario(opts, out / name, progress=_progress(name))
        unfaithful = not summary["fidelity"]["faithful"]
        if write_reference:
            new_ref[name] = {"options": opts.as_dict(), "fabric": summary["fabric"], "seed": opts.seed,
                             "software": summary["software"],
                             "figures": {t: {f: summary["transports"][t].get(f) for f in figs}
                                         for t, figs in CHECKS[name].items()}}
        got = compare(name, summary, new_ref.get(name, {}))
        for row in got:
            row["faithful"] = not unfaithful
        rows += got
    if write_reference:
        files.write_json(REFERENCE, new_ref)
    files.write_json(out / "validate.json", rows)
    width = max(len(f"{r['scenario']} {r['transport']} {r['figure']}") for r in rows)
    for r in rows:
        bound = {"at_most": f"<= {r['tolerance']:g}", "at_least": f">= {r['tolerance']:g}",
                 "within": f"{r['reference']} +- {r['tolerance']:g}", "true": "true"}[r["rule"]]
        flag = "ok  " if r["ok"] else "FAIL"
        note = "" if r["faithful"] else "  (emulation not faithful: see its summary)"
        print(f"{flag} {(r['scenario'] + ' ' + r['transport'] + ' ' + r['figure']).ljust(width)}  "
              f"{r['value']!s:>8}  want {bound}{note}")
    ok = all(r["ok"] for r in rows)
    print(f"validate: {sum(r['ok'] for r in rows)} of {len(rows)} figures within the reference")
    return ok
