"""A figure's folder from its finished runs, and the index page over every figure.

results/paper/<fig>/ holds its runs (run-N-<scenario>/, each a `mrclab run` result), `data.csv`
(goodput in the paper's 200 ms bins per series, or each flow's goodput), `plot.png` shaped like
the paper's (same axes and series, fault times marked; Fig. 12's with every EV's state below,
as the paper's Fig. 13, and those states in `ev_states.csv`) and `summary.json`: the paper's claim, the
setup here, what was measured and the verdict. `index.md` and `index.html` (plots inline) list
every figure of the paper, those not expressible yet included.
"""

from __future__ import annotations

import base64
import csv
import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.outdir import REPO
from experiments.paper.figures import BIN_S, FIGURES, Figure, Run, Summary
from experiments.scenarios.allreduce import ALGBW_MBPS
from topologies import files

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

REFERENCE = REPO / "experiments" / "reference" / "paper.json"  # `mrclab docs --paper`

REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"
NOT_FAITHFUL, DID_NOT_RUN, NOT_YET = "not faithful", "did not run", "not expressible yet"


def run_folder(figure: Figure, index: int, run: Run) -> str:
    return f"run-{index + 1}-{run.scenario}"


def _series(folder: Path, run: Run) -> dict[str, list[float]]:
    """The run's goodput per transport, in `BIN_S` bins (timeseries.csv holds finer bins)."""
    with (folder / "timeseries.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}
    step = float(rows[1]["t_s"]) - float(rows[0]["t_s"]) if len(rows) > 1 else BIN_S
    per = max(1, round(BIN_S / step))
    out: dict[str, list[float]] = {}
    for column in rows[0]:
        if not column.endswith("_mbps"):
            continue
        values = [float(r[column] or 0.0) for r in rows]
        if not any(values):
            continue  # a transport the run did not have
        name = column[:-len("_mbps")]
        label = f"{run.label}: {name}" if run.label else name
        out[label] = [sum(values[i:i + per]) / len(values[i:i + per]) for i in range(0, len(values), per)]
    return out


def _fault_times(summary: Summary) -> list[float]:
    return sorted({round(float(e["t"]), 2) for e in summary.get("faults", []) if "t" in e})


def write_data_and_plot(figure: Figure, folder: Path, runs: list[tuple[Run, Path, Summary]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if figure.plot == "algbw":  # Fig. 16: a panel per loss rate
        write_algbw(figure, folder, runs)
        return
    if figure.plot == "ev_states":  # Fig. 13: goodput above, every EV's state below
        fig, (ax, ev_ax) = plt.subplots(2, 1, figsize=(8, 7), height_ratios=(1, 1.6))
    else:
        fig, ax = plt.subplots(figsize=(8, 4))
    if figure.plot == "flows":
        header = ["flow"]
        columns: list[list[float]] = []
        for _run, _path, summary in runs:
            for transport, t in summary["transports"].items():
                header.append(f"{transport}_mbps")
                columns.append(list(t.get("flow_goodput_mbps", [])))
        n = max((len(c) for c in columns), default=0)
        width = 0.8 / max(len(columns), 1)
        for k, (name, values) in enumerate(zip(header[1:], columns, strict=True)):
            ax.bar([i + k * width for i in range(len(values))], values, width, label=name[:-5])
        ax.set_xlabel("flow")
        ax.set_ylabel("goodput (Mbit/s)")
        table = [[i, *[c[i] if i < len(c) else "" for c in columns]] for i in range(n)]
    else:
        series: dict[str, list[float]] = {}
        for run, path, summary in runs:
            series.update(_series(path, run))
            for transport, t in summary["transports"].items():  # a fault schedule's capacity left
                if isinstance(t.get("capacity_mbps"), list) and t.get("efficiency"):
                    series[f"{transport}: capacity left x {t['efficiency']}"] = \
                        [round(c * t["efficiency"], 3) for c in t["capacity_mbps"]]
            for t in _fault_times(summary):
                ax.axvline(t, color="grey", linestyle=":", linewidth=1)
        n = max((len(v) for v in series.values()), default=0)
        for name, values in series.items():
            ax.plot([(i + 0.5) * BIN_S for i in range(len(values))], values, label=name)  # bin centres
        ax.set_xlabel(f"time (s; {BIN_S * 1000:.0f} ms bins; dotted: faults)")
        ax.set_ylabel("goodput (Mbit/s)")
        header = ["t_s", *[f"{name}_mbps" for name in series]]
        table = [[round(i * BIN_S, 2), *[round(v[i], 3) if i < len(v) else "" for v in series.values()]]
                 for i in range(n)]
    if figure.plot == "ev_states":
        from experiments.scenarios.evloss import EV_LEGEND, draw_ev_bands

        banded = [t for _, _, summary in runs for t in summary["transports"].values()
                  if t.get("ev_bands")]
        ax.set_ylim(bottom=0)  # "line rate holds": the goodput against zero, not its own noise
        for t in banded[:1]:
            draw_ev_bands(ev_ax, t)
            ev_ax.set_xlim(ax.get_xlim())
            ev_ax.set_title(f"per-EV state: {EV_LEGEND}", fontsize=8, loc="left")
            ev_ax.set_xlabel("time (s)")
        with (folder / "ev_states.csv").open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(EV_HEADER)
            for t in banded:
                writer.writerows(ev_rows(t))
    ax.set_title(f"{figure.key}: {figure.title}")
    ax.legend(fontsize=7)
    _save(fig, folder, header, table)


def _save(fig: PlotFigure, folder: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A figure's plot.png from `fig` (closed then) and its data.csv: `header`, then `rows`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(folder / "plot.png", dpi=90)
    plt.close(fig)
    with (folder / "data.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


ALGBW_HEADER = ("series", "loss", "size_kb", ALGBW_MBPS)


def write_algbw(figure: Figure, folder: Path, runs: list[tuple[Run, Path, Summary]]) -> None:
    """Fig. 16's plot (algorithm bandwidth against message size, a panel per loss rate, a line
    per transport and QP count) and data.csv (a row per point; empty: did not finish)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.scenarios.allreduce import draw_algbw, series

    transports = {k: v for _, _, summary in runs for k, v in summary["transports"].items()}
    rates = list(dict.fromkeys(rate for _, rate, _, _ in series(transports)))
    fig, axes = plt.subplots(1, max(len(rates), 1), figsize=(4 * max(len(rates), 1), 4), squeeze=False)
    draw_algbw(list(axes[0]), transports)
    fig.suptitle(f"{figure.key}: {figure.title}", fontsize=10)
    _save(fig, folder, ALGBW_HEADER, ([label, rate, kb, "" if v is None else v]
                                      for label, rate, sizes, values in series(transports)
                                      for kb, v in zip(sizes, values, strict=True)))


EV_HEADER = ("ev", "path", "t0_s", "t1_s", "state")


def ev_rows(figures: dict[str, Any]) -> list[list]:
    """ev_states.csv's rows from an ev-loss run's figures: each EV's spans of one state (ACTIVE
    and BACKUP are GOOD in and out of the active set), EVs in the plot's order."""
    return [[ev, path, t0, t1, state] for ev, path in figures["evs"].items()
            for t0, t1, state in figures["ev_bands"].get(ev, [])]


def settle(figure: Figure, folder: Path) -> dict[str, Any]:
    """The figure's summary from whatever its runs left in `folder` (written there too)."""
    out: dict[str, Any] = {"figure": figure.key, "title": figure.title, "paper": figure.paper,
                           "claim": figure.claim, "setup": figure.setup}
    if not figure.expressible:
        return {**out, "verdict": NOT_YET, "measured": f"needs {figure.needs}"}
    runs: list[tuple[Run, Path, Summary]] = []
    for i, run in enumerate(figure.runs):
        path = folder / run_folder(figure, i, run)
        summary = files.read_json(path / "summary.json")
        if not summary or "transports" not in summary:
            return {**out, "verdict": DID_NOT_RUN, "measured": f"no result in {path}"}
        runs.append((run, path, summary))
    summaries = [s for _, _, s in runs]
    out["runs"] = [{"scenario": r.scenario, "label": r.label, "folder": p.name, "fabric": s["fabric"],
                    "seed": s.get("seed"), "switch_backend": s.get("switch_backend"),
                    "faithful": s["fidelity"]["faithful"], "problems": s["fidelity"]["problems"],
                    "disturbed": s["fidelity"].get("disturbed", [])}
                   for r, p, s in runs]
    assert figure.judge is not None
    try:
        verdict = figure.judge(summaries)
    except KeyError as exc:  # a run that ended without the figure's numbers (data not intact)
        return {**out, "verdict": DID_NOT_RUN, "measured": f"a run lacks {exc}"}
    unfaithful = [f"{p.name}: {'; '.join(s['fidelity']['problems'])}" for _, p, s in runs
                  if not s["fidelity"]["faithful"]]
    out.update({"measured": verdict.measured, "figures": verdict.figures,
                "verdict": NOT_FAITHFUL if unfaithful else REPRODUCED if verdict.holds else NOT_REPRODUCED})
    if unfaithful:
        out["not_faithful"] = unfaithful
    write_data_and_plot(figure, folder, runs)
    files.write_json(folder / "summary.json", out)
    return out


def index(results: Path, settled: dict[str, dict[str, Any]]) -> tuple[Path, Path]:
    """index.md and index.html over every figure: `settled` (key -> its summary) for those this
    invocation settled, what an earlier one left for the others."""
    rows: list[tuple[Figure, dict[str, Any], Path | None]] = []
    for figure in FIGURES:
        if not figure.expressible:
            s = settle(figure, results / figure.key)
        else:
            s = settled.get(figure.key) or files.read_json(results / figure.key / "summary.json") or \
                {"verdict": DID_NOT_RUN, "measured": f"not run yet: `mrclab paper {figure.key}`"}
        png = results / figure.key / "plot.png"
        rows.append((figure, s, png if png.exists() else None))
    md = ["# The MRC paper's evaluation on this testbed", "",
          "Each figure of the paper's section 6: what it showed, what ran here, what was measured "
          "and whether the paper's shape holds (`mrclab paper`).", "",
          "| figure | the paper | the claim checked | measured | verdict |", "|---|---|---|---|---|"]
    for figure, s, plot in rows:
        name = f"[{figure.key}]({figure.key}/plot.png)" if plot else figure.key
        md.append(f"| {name}: {figure.title} | {figure.paper} | {figure.claim} | {s['measured']} | "
                  f"**{s['verdict']}** |")
    md_path = results / "index.md"
    md_path.write_text("\n".join(md) + "\n")
    body = ["<h1>The MRC paper's evaluation on this testbed</h1>"]
    for figure, s, plot in rows:
        body.append(f"<h2>{html.escape(figure.key)}: {html.escape(figure.title)}: "
                    f"{html.escape(s['verdict'])}</h2>")
        for label, text in (("The paper", figure.paper), ("Checked", figure.claim),
                            ("Here", figure.setup), ("Measured", s["measured"])):
            if text:
                body.append(f"<p><b>{label}:</b> {html.escape(str(text))}</p>")
        if plot is not None:
            data = base64.b64encode(plot.read_bytes()).decode()
            body.append(f'<img alt="{figure.key}" src="data:image/png;base64,{data}">')
    html_path = results / "index.html"
    html_path.write_text("<!doctype html><meta charset='utf-8'><title>mrclab paper</title>\n"
                         + "\n".join(body) + "\n")
    return md_path, html_path


def reference_from(results: Path) -> dict[str, Any]:
    """The committed reference from a `mrclab paper` run's folder: every figure's summary (those
    not expressible yet with what they need)."""
    out = []
    for figure in FIGURES:
        s = files.read_json(results / figure.key / "summary.json") if figure.expressible else \
            settle(figure, results / figure.key)
        out.append(s or {"figure": figure.key, "title": figure.title, "verdict": DID_NOT_RUN,
                         "measured": "not in this run"})
    return {"figures": out}


def table(reference: dict[str, Any]) -> str:
    """README's table of the paper's figures from the committed reference."""
    rows = ["| figure | the paper | measured here | verdict |", "|---|---|---|---|"]
    for s in reference.get("figures", []):
        figure = next((f for f in FIGURES if f.key == s.get("figure")), None)
        if figure is None:
            continue
        runs = s.get("runs") or []
        where = ""
        if runs:
            fab, r0 = runs[0]["fabric"], runs[0]
            where = (f" ({fab['planes']}x{fab['leaves']}x{fab['spines']}x{fab['hosts_per_leaf']}, "
                     f"{fab['link_mbps']:g} Mbit/s, {r0.get('switch_backend')}, seed {r0.get('seed')})")
        rows.append(f"| {figure.key}: {figure.title} | {figure.paper} | {s['measured']}{where} | "
                    f"**{s['verdict']}** |")
    return "\n".join(rows) + "\n"
