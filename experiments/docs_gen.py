"""The figures in README.md and docs/ that would otherwise be typed by hand: the measured ones,
generated from a committed reference file (experiments/reference/full.json), and the transport
parameters' table, generated from endpoints/protocol/config.py.

A generated block sits between `<!-- generated:NAME -->` and `<!-- end generated:NAME -->`;
`mrclab docs` rewrites every block from the reference, `mrclab docs --from results` first
rewrites the reference from a full run's summaries (`make experiment`). A unit test fails when
a committed document differs from what this module makes of the committed reference.
"""

from __future__ import annotations

import ast
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.analysis.transports import TRANSPORTS  # the tables' columns, in the runner's order
from experiments.demo import SCENARIO as DEMO_SCENARIO
from experiments.outdir import REPO
from experiments.scenarios import SCENARIOS as REGISTRY
from experiments.scenarios import failure, schema_reference
from experiments.scenarios.schema import DATA_OK, Cells, Row, Spread
from topologies import files
from topologies.model import DEFAULT_DETECT_MS

REFERENCE = Path(__file__).resolve().parent / "reference" / "full.json"
# The cost benchmark's result the docs show (`make bench` writes results/bench/cost.json;
# `mrclab docs --cost results/bench/cost.json` takes it as the reference).
COST_REFERENCE = Path(__file__).resolve().parent / "reference" / "cost.json"
CONFIG_SOURCE = REPO / "endpoints" / "protocol" / "config.py"
DOCUMENTS = (REPO / "README.md", REPO / "docs" / "experiments.md", REPO / "docs" / "transport.md")
SCENARIOS = tuple(REGISTRY)  # the registry's order: one list for make, the docs and the sweep
SWEEP_INDEX = "sweep.json"  # experiments/sweep.py's record of which run folder holds which seed
_BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- end generated:(?P=name) -->)", re.S)

Figures = Cells


def _scalars(summary: dict[str, Any]) -> dict[str, Any]:
    return {t: {k: v for k, v in figures.items() if v is None or isinstance(v, (bool, int, float))}
            for t, figures in summary["transports"].items()}


def run_folders(results: Path) -> dict[str, list[Path]]:
    """Per scenario, its run folders in seed order: those `experiments/sweep.py` recorded in
    results/sweep.json (several seeds), else results/NAME alone; scenarios without a result
    are left out."""
    index = files.read_json(results / SWEEP_INDEX)
    out: dict[str, list[Path]] = {}
    for name in SCENARIOS:
        recorded = [results / r["out"] for r in index.get("runs", [])
                    if r.get("scenario") == name and r.get("status") in (0, 1)]  # 1: ran, data not ok
        folders = recorded or [results / name]
        folders = [f for f in folders if (f / "summary.json").is_file()]
        if folders:
            out[name] = folders
    return out


def reference_from_results(results: Path) -> dict[str, Any]:
    """The reference file's content from a folder of `mrclab run` results: per scenario its
    fabric, seed, software, switch backend and, per transport, every scalar figure of its
    summary (its first seed's); with several seeds (`make experiment SEEDS=...`), `runs`:
    each seed's faithfulness and figures, which the tables show as median (min-max)."""
    out: dict[str, Any] = {}
    for name, folders in run_folders(results).items():
        summaries = [json.loads((f / "summary.json").read_text()) for f in folders]
        summary = summaries[0]
        out[name] = {
            "fabric": summary["fabric"], "seed": summary["seed"], "software": summary["software"],
            "switch_backend": (summary.get("switches") or {}).get("switch_backend"),
            "dataplane": summary["dataplane"].get("mode"), "detect_ms": summary["routing"]["detect_ms"],
            "faithful": all(s["fidelity"]["faithful"] for s in summaries),
            "transports": _scalars(summary),
        }
        if len(summaries) > 1:
            out[name]["runs"] = [{"seed": s["seed"], "faithful": s["fidelity"]["faithful"],
                                  "transports": _scalars(s)} for s in summaries]
    return out


def figures_of(entry: dict[str, Any]) -> dict[str, Figures]:
    """A reference entry's figures per transport: its one run's values, or over several seeds
    (`runs`) a `Spread` per number (None when no seed had one) and `data_ok` true only when
    every seed's was."""
    runs = entry.get("runs") or []
    if len(runs) < 2:
        return dict(entry["transports"])
    out: dict[str, Figures] = {}
    for t in entry["transports"]:
        per_seed = [r["transports"].get(t, {}) for r in runs]
        keys = {k for f in per_seed for k in f}
        merged: Figures = {}
        for k in keys:
            values = [f.get(k) for f in per_seed]
            if any(isinstance(v, bool) for v in values):
                merged[k] = all(v is True for v in values)
                continue
            numbers = sorted(float(v) for v in values if isinstance(v, (int, float)))
            merged[k] = Spread(statistics.median(numbers), numbers[0], numbers[-1], len(values),
                               len(values) - len(numbers)) if numbers else None
        out[t] = merged
    return out


# Per scenario: its row (`Scenario.row`: the label, and how a transport's figures become its cell).
ROWS: dict[str, Row] = {name: sc.row for name, sc in REGISTRY.items() if sc.row is not None}


def _how_many_runs(reference: dict[str, Any]) -> str:
    """The sentence above the table: one run per scenario, or median (min-max) over seeds."""
    seeds = sorted({tuple(r["seed"] for r in e.get("runs", [])) or (e.get("seed"),)
                    for e in reference.values()}, key=len)
    if len(seeds[-1]) < 2:
        shown = ", ".join(str(s[0]) for s in seeds)
        return (f"One run per scenario (seed {shown}): no run-to-run spread measured yet (`make "
                f"experiment SEEDS=\"1 2 3 4 5\"`, then `make docs ARGS=\"--from results\"`, shows "
                f"each figure as median (min-max) over the seeds).")
    return (f"Each figure is the median (min-max) over {len(seeds[-1])} seeds per scenario (seeds "
            f"{', '.join(str(s) for s in seeds[-1])}): a difference inside a range is noise.")


def results_table(reference: dict[str, Any]) -> str:
    """One row per scenario, one column per transport ("-": not run)."""
    lines = [_how_many_runs(reference), "",
             "| scenario | " + " | ".join(TRANSPORTS) + " |", "|---" * (len(TRANSPORTS) + 1) + "|"]
    figures = {name: figures_of(reference[name]) for name in SCENARIOS if name in reference}
    for name, transports in figures.items():
        label, cell = ROWS[name]
        cells = [cell(transports[t], transports.get(f"{t}-droptail", {})) if t in transports else "-"
                 for t in TRANSPORTS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    wrong = [f"{name} {t}" for name, transports in figures.items()
             for t, f in transports.items() if f.get(DATA_OK) is not True]
    unfaithful = [name for name in figures if reference[name].get("faithful") is False]
    lines.append("")
    lines.append("Every byte correct (`data_ok`) in every run." if not wrong
                 else "Not every byte correct (`data_ok` false): " + ", ".join(wrong) + ".")
    lines.append(" Every run was faithful." if not unfaithful
                 else " Not faithful (see their summaries): " + ", ".join(unfaithful) + ".")
    return "\n".join(lines[:-2]) + "\n" + lines[-2] + lines[-1] + "\n"


def demo_sentence(reference: dict[str, Any]) -> str:
    """What the link-failure run showed, in one sentence (README's account of the demo)."""
    entry = reference[DEMO_SCENARIO]
    return failure.story(figures_of(entry), entry.get("detect_ms", DEFAULT_DETECT_MS))


def parameters_table(_: dict[str, Any] | None = None) -> str:
    """Every TransportConfig field with its default and the comment beside it in config.py:
    the code is the one home of both."""
    source = CONFIG_SOURCE.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TransportConfig")
    rows = ["| parameter | default | why |", "|---|---|---|"]
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.value is not None):
            continue
        default = ast.get_source_segment(source, node.value)
        comment = lines[node.lineno - 1].partition("#")[2].strip()
        rows.append(f"| `{node.target.id}` | `{default}` | {comment.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def cost_section(_: dict[str, Any] | None = None) -> str:
    """The whole machine's CPU per delivered data packet (experiments/reference/cost.json), and
    the link rate `--link-mbps auto` would pick with it on each scenario's default fabric."""
    from experiments.analysis import capacity
    from experiments.scenarios import Options, default_options

    cost = json.loads(COST_REFERENCE.read_text())
    fab = cost["fabric"]
    rows = [f"Measured with `make bench` on the {fab['planes']} x {fab['leaves']} x {fab['spines']} x "
            f"{fab['hosts_per_leaf']} permutation (MRC only, {cost['backend']} switches, seed "
            f"{cost['seed']}, {cost['fingerprint']['cores']} cores, {cost['fingerprint']['cpu']}):",
            "", "Before the fabric's queues stood (the calm start; the calibration's figures), and "
                "after, where the run lasted into it (experiments/analysis/standing.py):",
            "", "| link rate | data packets/s delivered | cores busy | us per packet | the agents' "
                "process, of a core | queues stood after | then: us per packet | then: the agents' "
                "process | CPU idle p10 | faithful |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in cost["runs"]:
        verdict = "yes" if r["faithful"] else "no"
        phases = r.get("phases", {})
        calm, stood = phases.get("calm", {} if phases else r), phases.get("standing_queues")
        before = (f"{calm['delivered_data_pps']:,} | {calm['busy_cores']:.2f} | "
                  f"{calm['us_per_packet']:.0f} | {calm.get('agents_process_cores', '-')}") \
            if calm else "- | - | - | -"
        after = (f"{r['queues_stood_s']:g} s | {stood['us_per_packet']:.0f} | "
                 f"{stood['agents_process_cores']:.2f}") if stood else "- | - | -"
        rows.append(f"| {r['link_mbps']:g} Mbit/s | {before} | {after} | "
                    f"{r['cpu_idle_p10_pct']}% | {verdict} |")
    refs = cost["references"]
    rows += ["", f"Fit: **{cost['fixed_cores']:.2f} of a core whatever the rate, plus "
                 f"{cost['marginal_us_per_packet']:.0f} us per delivered data packet**. A bare Python "
                 f"UDP send-and-receive loop takes {refs['python_udp_loop_us_per_datagram']} us per "
                 f"datagram on the same machine."]
    idle = cost.get("idle")
    if idle:
        rows[-1] += (f" With no data moving, read directly: the fabric up takes "
                     f"{idle['fabric_cores']:.2f} of a core, with every host's agent running "
                     f"{idle['fabric_and_agents_cores']:.2f}: what does not grow with the rate. The "
                     f"fit's fixed part is more, as the cost per packet falls with the rate (fewer "
                     f"wake-ups per packet).")
    picks = []
    for name, sc in REGISTRY.items():
        opts: Options = default_options(name)
        load = sc.kind.capacity_terms(opts, _fabric(opts))
        rate = capacity.faithful_rate(cost["backend"], opts.fabric, load.pop("busy_senders"),
                                      load.pop("mtu_payload"), {}, {},
                                      agent_cores=cost["fingerprint"]["cores"], calibration=cost,
                                      **load)
        picks.append(f"{name} {rate:g}")
    rows += ["", "With these figures as its calibration, on an idle machine, `--link-mbps auto` picks "
                 "(Mbit/s; a run without `--link-mbps` takes the smaller of this and the scenario's "
                 "own rate): " + ", ".join(picks) + "."]
    return "\n".join(rows) + "\n"


def cost_profile(_: dict[str, Any] | None = None) -> str:
    """The agents' top functions by own time in the cost reference's profiled run."""
    cost = json.loads(COST_REFERENCE.read_text())
    top = cost.get("profile_top") or []
    if not top:
        return "No profile in the reference (`make bench` profiles one run).\n"
    rows = [f"The agents' top functions by own time (cProfile, every agent of one run at "
            f"{cost.get('profile_link_mbps', 0):g} Mbit/s; the profiler slows small calls most, so "
            f"shares are indicative; `send` holds the kernel's forwarding, which runs inline):", "",
            "| function | calls | share of the agents' time |", "|---|---|---|"]
    rows += [f"| `{r['function']}` | {r['calls']:,} | {r['share_pct']}% |" for r in top[:10]]
    return "\n".join(rows) + "\n"


def paper_table(_: dict[str, Any] | None = None) -> str:
    from experiments.paper import page
    return page.table(files.read_json(page.REFERENCE))


def _fabric(opts: Any) -> Any:
    from topologies.model import Fabric
    return Fabric(opts.fabric)


BLOCKS: dict[str, Callable[[dict[str, Any]], str]] = {"cost": cost_section, "cost-profile": cost_profile,
                                                      "results": results_table,
                                                      "demo": demo_sentence,
                                                      "summary-schema": schema_reference,
                                                      "paper": paper_table,
                                                      "transport-parameters": parameters_table}


def render(text: str, reference: dict[str, Any]) -> str:
    """`text` with every generated block rewritten from `reference`."""
    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}: known {sorted(BLOCKS)}")
        return m.group(1) + BLOCKS[name](reference) + m.group(4)
    return _BLOCK.sub(fill, text)


def load_reference(path: Path = REFERENCE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def update(results: Path | None = None, reference_path: Path = REFERENCE,
           documents: tuple[Path, ...] = DOCUMENTS, cost: Path | None = None,
           paper: Path | None = None) -> list[Path]:
    """Rewrite the reference from `results` (if given), the cost reference from `cost` (a
    cost benchmark's result, if given) and the paper's from `paper` (a `mrclab paper` folder, if
    given), then every generated block; returns the documents that changed."""
    if paper is not None:
        from experiments.paper import page
        files.write_json(page.REFERENCE, page.reference_from(paper))
    if cost is not None:
        files.write_json(COST_REFERENCE, json.loads(cost.read_text()))
    if results is not None:
        files.write_json(reference_path, reference_from_results(results))
    reference = load_reference(reference_path)
    changed = []
    for doc in documents:
        old = doc.read_text()
        new = render(old, reference)
        if new != old:
            files.write_text(doc, new)
            changed.append(doc)
    return changed
