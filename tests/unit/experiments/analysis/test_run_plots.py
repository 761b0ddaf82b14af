"""Every plot of a run, opened and checked at the matplotlib level on synthetic data (no root):
goodput axes bounded by what the fabric carries with the higher bins marked, no `None` in any
word, every line style in a legend, cc.png MRC's even when the baseline ran first (as in the
demo), and no figure title over a panel."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from experiments.analysis import ccplot, plots
from experiments.analysis.metrics import BIN_S
from experiments.runner import _brief
from experiments.scenarios import SCENARIOS, failure
from tests.unit.experiments.analysis.test_ccplot import _results

LINK_FAILURE = SCENARIOS["link-failure"]


def _run(tmp_path: Path) -> dict:
    """A demo-like run: the baseline (tcp here) first, then MRC; MRC's curve has one wild bin
    (bursty 10 ms accounting) and its recovery never came."""
    summary = _results(tmp_path)
    qps = summary["traces"]["qps"]
    summary["traces"]["qps"] = {"tcp": qps["tcp"], "mrc": qps["mrc"]}
    summary.update(scenario="link-failure", title="a T0-T1 link cut", routing={"detect_ms": 900.0},
                   failure={"at_s": 0.5, "restored_at_s": 0.8, "link": "p0l0-p0s0"},
                   faults=[{"t": 0.5, "transport": "mrc", "action": "cut", "target": "p0l0-p0s0"},
                           {"t": 0.8, "transport": "mrc", "action": "restore", "target": "p0l0-p0s0"},
                           {"t": 0.5, "transport": "tcp", "action": "cut", "target": "p0l0-p0s0"}],
                   transports={"mrc": {"recovery_ms": None, "stall_ms": 0.0, "goodput_fraction": None,
                                       "capacity_mbps": {"before": 80.0, "during": 70.0}},
                               "tcp": {"recovery_ms": 1760.0, "stall_ms": 1750.0, "goodput_fraction": 0.3,
                                       "capacity_mbps": {"before": 20.0, "during": 20.0}}})
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return summary


def _draw_all(tmp_path: Path, summary: dict) -> None:
    n = int(1.0 / BIN_S)
    mrc = [75.0] * n
    mrc[30] = 1500.0  # a bin 19x what the fabric carries
    curves = {"tcp": [19.0] * n, "mrc": mrc}
    plots.plot_scenario(tmp_path, summary, curves, {"mrc": (0.0, 1.0), "tcp": (0.0, 1.0)},
                        {"mrc": [[0.5, 0x1C000, "GOOD", "ASSUMED_BAD"]]},
                        LINK_FAILURE.headline)
    plots.plot_recovery(tmp_path / "recovery.png", curves, BIN_S, summary, failure.legend)
    plots.plot_cdf(tmp_path / "cdf.png", summary, "ms", lambda t: [([1, 2, 3], "-", "steps")])
    plots.plot_session(tmp_path / "session.png", [plots.FlowPanel("1 mrc h0->h1", "mrc", {}, [], [])],
                       0.0, 1.0, summary["faults"], summary["fabric"])
    ccplot.plot_run(tmp_path, summary)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Every plot of one synthetic run, drawn once: (its folder, file name -> the Figure saved
    there, drawn so that every extent can be read)."""
    from matplotlib.figure import Figure

    folder = tmp_path_factory.mktemp("run")
    saved: dict[str, object] = {}
    original = Figure.savefig

    def savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
        original(self, fname, *args, **kwargs)
        saved[Path(str(fname)).name] = self

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", savefig)
        mp.setattr(plots.pyplot, "close", lambda fig=None: None)  # keep them to inspect
        _draw_all(folder, _run(folder))
    yield folder, saved
    plots.pyplot.close("all")


def test_every_plot_of_a_run_opens(drawn):
    tmp_path, figures = drawn
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["cc-tcp.png", "cc.png", "cdf.png", "goodput.png", "path_state.png", "recovery.png",
                    "session.png"]
    for name in pngs:
        image = matplotlib.image.imread(tmp_path / name)
        assert image.shape[0] >= 300 and image.shape[1] >= 500, name
        assert name in figures


def test_goodput_axes_are_bounded_by_what_the_fabric_carries_with_outliers_marked(drawn):
    _, figures = drawn
    tcp_ax, mrc_ax = figures["goodput.png"].axes
    assert tcp_ax.get_ylim()[1] == pytest.approx(plots.HEADROOM * 20.0)
    assert mrc_ax.get_ylim()[1] == pytest.approx(plots.HEADROOM * 80.0)  # not 1500
    words = [t.get_text() for t in mrc_ax.get_legend().get_texts()]
    assert "1 bins above the axis (max 1500)" in words
    assert "what the fabric carries (80 Mbit/s)" in words
    (rec_ax,) = figures["recovery.png"].axes
    assert rec_ax.get_ylim()[1] == pytest.approx(plots.HEADROOM * 80.0)


def test_no_figure_says_none(drawn):
    from matplotlib.text import Text

    _, figures = drawn
    for name, fig in figures.items():
        words = "\n".join(t.get_text() for t in fig.findobj(Text))
        assert "None" not in words, name
    title = figures["goodput.png"].axes[1].get_title(loc="left")
    assert title == "mrc: never recovered, stall ms 0"
    figs = {"recovery_ms": None, "stall_ms": 0.0, "goodput_fraction": None, "data_ok": True}
    assert _brief(LINK_FAILURE, figs) == "recovery_ms=never, stall_ms=0, data_ok=True"


@pytest.mark.parametrize("name", ["goodput.png", "recovery.png", "session.png"])
def test_every_line_style_is_in_a_legend(drawn, name):
    from matplotlib.lines import Line2D

    _, figures = drawn
    for ax in figures[name].axes[:1] if name == "session.png" else figures[name].axes:
        legend = ax.get_legend()
        assert legend is not None, name
        def style(line):
            return (line.get_color(), line.get_linestyle(), line.get_alpha())
        shown = {style(h) for h in legend.legend_handles if isinstance(h, Line2D)}
        drawn = {style(line) for line in ax.get_lines()}
        assert drawn <= shown, (name, drawn - shown)


def test_cc_png_is_mrcs_even_when_the_baseline_ran_first(drawn):
    _, figures = drawn
    assert ", mrc: congestion signals" in figures["cc.png"]._suptitle.get_text()
    assert ", tcp: congestion signals" in figures["cc-tcp.png"]._suptitle.get_text()
    assert ccplot.main_label(["roce", "mrc"]) == "mrc" and ccplot.main_label(["tcp"]) == "tcp"


def test_no_figure_title_overlaps_a_panel(drawn):
    _, figures = drawn
    for name, fig in figures.items():
        title = fig._suptitle
        if title is None or not title.get_text():
            continue
        renderer = fig.canvas.get_renderer()
        box = title.get_window_extent(renderer)
        for ax in fig.axes:
            for other in (ax.get_window_extent(renderer), ax.title.get_window_extent(renderer),
                          ax._left_title.get_window_extent(renderer)):
                assert not box.overlaps(other) or other.width == 0, name
