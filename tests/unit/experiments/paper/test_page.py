"""A figure's folder from fake finished runs: the verdict (and when there is none), the data in
the paper's 200 ms bins, the plot, the index over every figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.paper import page
from experiments.paper.figures import BY_KEY, FIGURES, Figure


def _fake_run(folder: Path, mrc: dict, roce: dict, faithful: bool = True) -> None:
    folder.mkdir(parents=True)
    summary = {"transports": {"mrc": mrc, "roce": roce}, "fabric": {"planes": 4}, "seed": 1,
               "switch_backend": "linux", "faults": [{"t": 1.5, "transport": "mrc"}],
               "fidelity": {"faithful": faithful, "problems": [] if faithful else ["mrc: CPU idle 2%"]}}
    (folder / "summary.json").write_text(json.dumps(summary))
    rows = ["t_s,mrc_mbps,roce_mbps,spray_mbps"]  # 10 ms bins; spray did not run
    rows += [f"{i / 100:.2f},{70 + i % 20},{10.0},0.000" for i in range(100)]
    (folder / "timeseries.csv").write_text("\n".join(rows) + "\n")


def _fig11(tmp_path: Path, during: float = 76.8, faithful: bool = True) -> Path:
    fig = BY_KEY["fig11"]
    folder = tmp_path / "fig11"
    _fake_run(folder / page.run_folder(fig, 0, fig.runs[0]),
              {"goodput_before_mbps": 76.9, "goodput_during_mbps": during, "stall_ms": 0},
              {"goodput_before_mbps": 19.5, "goodput_during_mbps": 10, "stall_ms": 1010}, faithful)
    return folder


def test_a_figure_that_shows_the_papers_shape_is_reproduced_with_its_data_and_plot(tmp_path):
    folder = _fig11(tmp_path)
    s = page.settle(BY_KEY["fig11"], folder)
    assert s["verdict"] == page.REPRODUCED and s["runs"][0]["faithful"]
    assert json.loads((folder / "summary.json").read_text())["verdict"] == page.REPRODUCED
    lines = (folder / "data.csv").read_text().splitlines()
    assert lines[0] == "t_s,mrc_mbps,roce_mbps"  # a transport that did not run is not a series
    assert len(lines) == 1 + 5  # 1 s of 10 ms bins in 200 ms bins
    t, mrc, roce = lines[1].split(",")
    first_bin = sum(70 + i for i in range(20)) / 20  # the mean of its twenty 10 ms bins
    assert (float(t), float(mrc), float(roce)) == (0.0, pytest.approx(first_bin), 10.0)
    assert (folder / "plot.png").stat().st_size > 5000


def test_a_result_against_the_paper_is_a_finding_and_an_unfaithful_one_gets_no_verdict(tmp_path):
    assert page.settle(BY_KEY["fig11"], _fig11(tmp_path / "a", during=60.0))["verdict"] == page.NOT_REPRODUCED
    s = page.settle(BY_KEY["fig11"], _fig11(tmp_path / "b", faithful=False))
    assert s["verdict"] == page.NOT_FAITHFUL and "CPU idle" in s["not_faithful"][0]
    assert page.settle(BY_KEY["fig11"], tmp_path / "c")["verdict"] == page.DID_NOT_RUN


def test_the_index_lists_every_figure_of_the_paper_with_its_verdict(tmp_path, monkeypatch):
    page.settle(BY_KEY["fig11"], _fig11(tmp_path))
    md, html = page.index(tmp_path, {})  # fig11 read back from its folder
    text = md.read_text()
    for figure in FIGURES:
        assert f"{figure.key}" in text
    row = next(line for line in text.splitlines() if line.startswith("| [fig11]"))
    assert row.endswith(f"**{page.REPRODUCED}** |")
    lacking = Figure("fig99", "a figure", "the paper", "a claim", "", needs="a workload")
    monkeypatch.setattr(page, "FIGURES", (*FIGURES, lacking))  # every figure runs here now
    text = page.index(tmp_path, {})[0].read_text()
    fig99 = next(line for line in text.splitlines() if line.startswith("| fig99"))
    assert page.NOT_YET in fig99 and "needs a workload" in fig99
    fig20 = next(line for line in text.splitlines() if line.startswith("| fig20"))
    assert page.DID_NOT_RUN in fig20 and "mrclab paper fig20" in fig20
    assert html.read_text().count("data:image/png;base64,") == 1


def test_fig12s_page_draws_each_evs_state_and_writes_its_spans(tmp_path):
    fig = BY_KEY["fig12"]
    folder = tmp_path / "fig12"
    mrc = {"ev_label": "p0/s1", "ev": 0x10001, "bench_rtts": 1.2, "lost_age_ms": 9.6, "srtt_ms": 8.0,
           "ev_gap_ms": 6.0, "bad_after_ms": 30.0,
           "backup_label": "p0/s0", "backup_packets_before": 0, "backup_packets_during": 800,
           "goodput_fraction": 0.99, "goodput_before_mbps": 76.0, "goodput_during_mbps": 75.2,
           "dropped": 30, "evs": {"0x10000": "p0/s0", "0x10001": "p0/s1"},
           "ev_bands": {"0x10000": [[0.0, 1.5, "BACKUP"], [1.5, 5.0, "ACTIVE"]],
                        "0x10001": [[0.0, 1.5, "ACTIVE"], [1.5, 1.6, "ASSUMED_BAD"], [1.6, 5.0, "BACKUP"]]}}
    _fake_run(folder / page.run_folder(fig, 0, fig.runs[0]), mrc, {})
    s = page.settle(fig, folder)
    assert s["verdict"] == page.REPRODUCED, s["measured"]
    rows = (folder / "ev_states.csv").read_text().splitlines()
    assert rows[0] == ",".join(page.EV_HEADER)
    assert rows[1:] == ["0x10000,p0/s0,0.0,1.5,BACKUP", "0x10000,p0/s0,1.5,5.0,ACTIVE",
                        "0x10001,p0/s1,0.0,1.5,ACTIVE", "0x10001,p0/s1,1.5,1.6,ASSUMED_BAD",
                        "0x10001,p0/s1,1.6,5.0,BACKUP"]
    assert (folder / "plot.png").stat().st_size > 5000


def test_fig16_draws_a_panel_per_loss_rate_and_writes_a_row_per_point(tmp_path):
    from experiments.scenarios.allreduce import LOSS_RATES

    run = tmp_path / "fig16" / page.run_folder(BY_KEY["fig16"], 0, BY_KEY["fig16"].runs[0])
    run.mkdir(parents=True)

    def table(scale: float) -> dict:
        return {f"{r:g}": {"128": round(scale * (1 - 10 * r), 3), "512": None if r else scale}
                for r in LOSS_RATES}

    base = {"sizes_kb": [128, 512], "loss_rates": list(LOSS_RATES), "data_ok": True}
    summary = {"transports": {"mrc": {**base, "algbw_mbps": {"1": table(12.0)}},
                              "roce": {**base, "algbw_mbps": {"1": table(6.0), "16": table(11.0)}}},
               "fabric": {"planes": 2}, "seed": 1, "switch_backend": "linux", "faults": [],
               "fidelity": {"faithful": True, "problems": []}}
    (run / "summary.json").write_text(json.dumps(summary))
    s = page.settle(BY_KEY["fig16"], tmp_path / "fig16")
    assert s["verdict"] == page.NOT_REPRODUCED  # MRC's largest size did not finish under loss
    rows = (tmp_path / "fig16" / "data.csv").read_text().splitlines()
    assert rows[0] == ",".join(page.ALGBW_HEADER)
    assert len(rows) == 1 + 3 * len(LOSS_RATES) * 2  # 3 series x 3 rates x 2 sizes
    assert "roce x16 QPs,0.01,512," in rows  # did not finish: no value
    assert (tmp_path / "fig16" / "plot.png").stat().st_size > 10_000
