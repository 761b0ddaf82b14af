"""The typed result schema (experiments/scenarios/schema.py) against what runs wrote and what
the commands read: every figure a scenario names is declared in its figures type, every figure
in the committed reference is too, and the commands' lists are the registry's."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from experiments import docs_gen, runner, validate
from experiments.scenarios import SCENARIOS, default_options, schema
from experiments.scenarios.base import Record
from experiments.scenarios.incast import TIMEOUTS

REFERENCE = docs_gen.load_reference()
EXPERIMENTS = Path(__file__).resolve().parents[4] / "experiments"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_figure_a_scenario_names_is_declared_in_its_type(name):
    sc = SCENARIOS[name]
    declared = set(schema.fields(sc.figures_type))
    assert schema.DATA_OK in declared and sc.figures[-1] == schema.DATA_OK
    named = {*sc.figures, *sc.brief, *sc.never,
             *(figure for checks in sc.checks.values() for figure in checks)}
    assert named <= declared, sorted(named - declared)


# A scenario added since the last full run has no entry until `make experiment` and `mrclab docs
# --from results` (the docs table leaves it out until then).
@pytest.mark.parametrize("name", [n for n in SCENARIOS if n in REFERENCE])
def test_the_committed_reference_holds_only_declared_figures_and_every_headline_one(name):
    """What a full run recorded (experiments/reference/full.json: every scalar figure) is what
    the type says, and each transport has every headline figure."""
    sc = SCENARIOS[name]
    declared = set(schema.fields(sc.figures_type))
    for label, figures in REFERENCE[name]["transports"].items():
        assert set(figures) <= declared, (label, sorted(set(figures) - declared))
        assert set(sc.figures) <= set(figures), (label, sorted(set(sc.figures) - set(figures)))


def test_validate_runs_and_checks_what_the_scenarios_declare():
    assert list(validate.QUICK) == [n for n, sc in SCENARIOS.items() if sc.quick is not None]
    for name, checks in validate.CHECKS.items():
        assert checks, name  # a quick run that checks nothing would prove nothing
        run = validate.quick_options(name).transports
        assert {label.split("-")[0] for label in checks} <= set(run), name
        for figures in checks.values():
            for check in figures.values():
                assert check.rule in ("at_most", "at_least", "within", "true")


def test_a_check_holds_or_fails_by_its_rule():
    def holds(value: object, check: schema.Check, ref: object = None) -> bool:
        return validate.check(value, check.rule, ref, check.bound)

    assert holds(90.0, schema.at_most(100.0)) and not holds(110.0, schema.at_most(100.0))
    assert holds(900.0, schema.at_least(800.0)) and not holds(None, schema.at_least(800.0))
    assert holds(0.82, schema.within(0.04), 0.8) and not holds(0.9, schema.within(0.04), 0.8)
    assert holds(True, schema.IS_TRUE) and not holds(1, schema.IS_TRUE)  # True, not truthy


def test_the_docs_table_has_a_row_for_every_scenario():
    assert set(docs_gen.ROWS) == set(SCENARIOS)
    assert docs_gen.SCENARIOS == tuple(SCENARIOS)


def test_every_summary_carries_the_schema_version_and_only_keys_the_schema_declares():
    opts = default_options("link-failure")
    record = Record(transports={"mrc": {schema.DATA_OK: True}})
    info = {"setup_seconds": 1.0, "datapath": "user", "switches": {"switch_backend": "linux"},
            "capacity": {}, "dataplane": {}, "controller_events": [], "traces": {},
            "fidelity": {"faithful": True}, "captures": {}, "controller_died": {}}
    summary = runner._summarise(runner.Run(opts, record), info)
    assert summary["schema_version"] == schema.SCHEMA_VERSION
    assert set(summary) <= set(schema.fields(schema.Summary)), \
        sorted(set(summary) - set(schema.fields(schema.Summary)))


def test_data_ok_needs_every_transport():
    assert schema.data_ok({"transports": {"mrc": {"data_ok": True}, "roce": {"data_ok": True}}})
    assert not schema.data_ok({"transports": {"mrc": {"data_ok": True}, "roce": {"data_ok": False}}})
    assert not schema.data_ok({"transports": {"mrc": {}}})


def test_the_reference_block_names_every_type_and_its_scenarios():
    from experiments.scenarios import schema_reference

    text = schema_reference()
    assert f"`schema_version` {schema.SCHEMA_VERSION}" in text
    for sc in SCENARIOS.values():
        row = next(line for line in text.splitlines() if f"`{sc.figures_type.__name__}`" in line)
        assert sc.name in row
        for figure in sc.figures:
            assert f"**`{figure}`**" in row
    assert "**`recovery_ms`**: float or None" in text  # a `|` would split the table's cell


def test_a_headline_or_checked_figure_is_spelled_once_in_experiments():
    """Each such key has one home, a Final constant in schema.py or in the module of the
    scenario that records it; producer and readers import it. data_ok and timeouts are left
    out: other records use the same words (the benchmarks' and fuzz's own data_ok, the agents'
    timeouts counter the incast sums)."""
    keys = {f for sc in SCENARIOS.values()
            for f in (*sc.figures, *(k for checks in sc.checks.values() for k in checks))}
    keys -= {schema.DATA_OK, TIMEOUTS}
    spelled: dict[str, list[str]] = defaultdict(list)
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in keys:
                spelled[node.value].append(f"{path.relative_to(EXPERIMENTS.parent)}:{node.lineno}")
    assert "recovery_ms" in keys and "throughput_of_ceiling" in keys  # checked figures count too
    assert {k: where for k, where in spelled.items() if len(where) > 1} == {}
