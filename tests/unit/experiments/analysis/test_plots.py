"""The scenario figures drawn from a summary built by hand: every title names the fabric the
same way (FabricParams.describe), and a run that was not faithful says so on the figure."""

from __future__ import annotations

from experiments.analysis import plots
from experiments.analysis.metrics import BIN_S
from experiments.scenarios import SCENARIOS, failure
from topologies.model import FabricParams

LINK_FAILURE = SCENARIOS["link-failure"]

FABRIC = FabricParams(planes=2, leaves=3, spines=1, hosts_per_leaf=1, link_mbps=2.5)
WORDS = "2 planes x 3 leaves x 1 spine, 1 host per leaf, 2.5 Mbit/s links"


def _summary(faithful: bool = True) -> dict:
    return {"scenario": "link-failure", "title": "a T0-T1 link cut", "seed": 4,
            "fabric": FABRIC.as_dict(),
            "fidelity": {"faithful": faithful,
                         "problems": [] if faithful else ["CPU idle 3% < 10%", "link rate 61%"]},
            "faults": [{"t": 1.0, "transport": "mrc", "action": "cut"}],
            "transports": {"mrc": {"recovery_ms": 12.0, "stall_ms": 40.0}},
            "failure": {"at_s": 1.0, "restored_at_s": 2.0, "link": "p0l0-p0s0"},
            "routing": {"detect_ms": 900.0}}


def test_the_words_for_a_fabric():
    assert FABRIC.describe() == WORDS
    assert FabricParams().describe() == \
        "4 planes x 2 leaves x 2 spines, 2 hosts per leaf, 10 Mbit/s links"
    assert plots.fabric_label(_summary()) == WORDS


def test_every_scenario_figure_names_the_fabric_alike(tmp_path, figure_texts):
    summary = _summary()
    curve = [5.0] * int(3 / BIN_S)
    plots.plot_scenario(tmp_path, summary, {"mrc": curve}, {"mrc": (0.0, 3.0)},
                        {"mrc": [[0.5, 0x1C000, "GOOD", "SKIP"]]},
                        LINK_FAILURE.headline)
    plots.plot_recovery(tmp_path / "recovery.png", {"mrc": curve}, BIN_S, summary, failure.legend)
    plots.plot_session(tmp_path / "session.png", [plots.FlowPanel("1 mrc h0->h1", "mrc", {}, [], [])],
                       0.0, 3.0, [], FABRIC.as_dict())
    for name in ("goodput.png", "recovery.png", "session.png"):
        assert WORDS in figure_texts[name], name
    assert (tmp_path / "goodput.png").stat().st_size > 10_000



def test_a_run_that_was_not_faithful_says_so_on_its_figures(tmp_path, figure_texts):
    curve = [5.0] * int(3 / BIN_S)
    for faithful in (True, False):
        summary = _summary(faithful)
        plots.plot_scenario(tmp_path, summary, {"mrc": curve}, {"mrc": (0.0, 3.0)},
                            {"mrc": [[0.5, 0x1C000, "GOOD", "SKIP"]]},
                        LINK_FAILURE.headline)
        plots.plot_recovery(tmp_path / "recovery.png", {"mrc": curve}, BIN_S, summary, failure.legend)
        plots.plot_cdf(tmp_path / "cdf.png", summary, "ms", lambda t: [([1, 2, 3], "-", "steps")])
        for name in ("goodput.png", "path_state.png", "recovery.png", "cdf.png"):
            stamped = "EMULATION NOT FAITHFUL" in figure_texts[name]
            assert stamped is not faithful, name
            assert ("CPU idle 3% < 10%" in figure_texts[name]) is not faithful, name
