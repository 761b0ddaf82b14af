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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.flows import TRANSPORTS  # the tables' columns, in the runner's order
from topologies import files

REPO = Path(__file__).resolve().parent.parent
REFERENCE = Path(__file__).resolve().parent / "reference" / "full.json"
CONFIG_SOURCE = REPO / "endpoints" / "protocol" / "config.py"
DOCUMENTS = (REPO / "README.md", REPO / "docs" / "experiments.md", REPO / "docs" / "transport.md")
SCENARIOS = ("link-failure", "switch-failure", "link-flap", "lossy-link", "permutation", "incast",
             "collective")
_BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- end generated:(?P=name) -->)", re.S)

Figures = dict[str, Any]


def reference_from_results(results: Path) -> dict[str, Any]:
    """The reference file's content from a folder of `mrclab run` results: per scenario its
    fabric, seed, software, switch backend and, per transport, every scalar figure of its
    summary."""
    out: dict[str, Any] = {}
    for name in SCENARIOS:
        summary = json.loads((results / name / "summary.json").read_text())
        out[name] = {
            "fabric": summary["fabric"], "seed": summary["seed"], "software": summary["software"],
            "switch_backend": (summary.get("switches") or {}).get("switch_backend"),
            "dataplane": summary["dataplane"].get("mode"), "detect_ms": summary["routing"]["detect_ms"],
            "faithful": summary["fidelity"]["faithful"],
            "transports": {t: {k: v for k, v in figures.items()
                               if v is None or isinstance(v, (bool, int, float))}
                           for t, figures in summary["transports"].items()},
        }
    return out


def _num(value: object, digits: int = 3) -> str:
    if value is None:
        return "never"
    if isinstance(value, float):
        return f"{round(value, digits):g}"
    return str(value)


def _ms(value: object) -> str:
    return "never" if value is None else f"{float(value):.0f}"  # type: ignore[arg-type]


# Per scenario: the row's label and how a transport's figures become its cell.
ROWS: dict[str, tuple[str, Callable[[Figures, Figures], str]]] = {
    "link-failure": ("link-failure: recovery / stall ms",
                     lambda t, _: f"{_ms(t.get('recovery_ms'))} / {_ms(t.get('stall_ms'))}"),
    "switch-failure": ("switch-failure: recovery / stall ms",
                       lambda t, _: f"{_ms(t.get('recovery_ms'))} / {_ms(t.get('stall_ms'))}"),
    "link-flap": ("link-flap: goodput fraction / stall ms",
                  lambda t, _: f"{_num(t.get('goodput_fraction'))} / {_ms(t.get('stall_ms'))}"),
    "lossy-link": ("lossy-link p=0.2: goodput fraction",
                   lambda t, _: _num(t.get("goodput_fraction"))),
    "permutation": ("permutation: throughput fraction",
                    lambda t, _: _num(t.get("throughput_fraction"))),
    "incast": ("incast: victim fraction, trim / drop-tail",
               lambda t, d: f"{_num(t.get('victim_goodput_fraction'))} / "
                            f"{_num(d.get('victim_goodput_fraction'))}" if d
               else _num(t.get("victim_goodput_fraction"))),
    "collective": ("collective: step p99 ms, no fault / cut",
                   lambda t, _: f"{_ms(t.get('step_time_p99_ms_no_fault'))} / "
                                f"{_ms(t.get('step_time_p99_ms'))}"),
}


def results_table(reference: dict[str, Any]) -> str:
    """One row per scenario, one column per transport ("-": not run)."""
    lines = ["| scenario | " + " | ".join(TRANSPORTS) + " |", "|---" * (len(TRANSPORTS) + 1) + "|"]
    for name in SCENARIOS:
        if name not in reference:
            continue
        label, cell = ROWS[name]
        transports = reference[name]["transports"]
        cells = [cell(transports[t], transports.get(f"{t}-droptail", {})) if t in transports else "-"
                 for t in TRANSPORTS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    wrong = [f"{name} {t}" for name in SCENARIOS if name in reference
             for t, figures in reference[name]["transports"].items() if figures.get("data_ok") is not True]
    lines.append("")
    lines.append("Every byte correct (`data_ok`) in every run." if not wrong
                 else "Not every byte correct (`data_ok` false): " + ", ".join(wrong) + ".")
    return "\n".join(lines) + "\n"


def demo_sentence(reference: dict[str, Any]) -> str:
    """What the link-failure run showed, in one sentence (README's account of the demo)."""
    t = reference["link-failure"]["transports"]
    mrc, roce = t["mrc"], t["roce"]
    return (f"MRC {_num(mrc['goodput_before_mbps'])} Mbit/s before the cut and "
            f"{_num(mrc['goodput_during_mbps'])} during it, recovery {_ms(mrc['recovery_ms'])} ms, "
            f"longest run of empty 10 ms bins {_ms(mrc['stall_ms'])} ms; the single-path baseline "
            f"(roce) stalls "
            f"{_ms(roce['stall_ms'])} ms (the {_ms(reference['link-failure'].get('detect_ms', 900))} ms "
            f"detection delay plus its retransmission timer), then runs at "
            f"{_num(roce['goodput_after_mbps'])} Mbit/s on a surviving spine.\n")


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


BLOCKS: dict[str, Callable[[dict[str, Any]], str]] = {"results": results_table,
                                                      "demo": demo_sentence,
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
           documents: tuple[Path, ...] = DOCUMENTS) -> list[Path]:
    """Rewrite the reference from `results` (if given), then every generated block; returns
    the documents that changed."""
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
