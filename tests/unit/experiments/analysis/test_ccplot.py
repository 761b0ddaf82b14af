"""cc.png from a results folder built by hand in the traces' format: what is read for a label
(its window, its QPs, the agents' host samples before the runner's), the busiest ports, and a
figure drawn whatever signal is missing."""

from __future__ import annotations

import json

import pytest

from experiments.analysis import ccplot
from topologies.model import FabricParams

T0 = 1000.0


def _write(folder, name, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records) + "{cut short")


def _results(tmp_path, agent_host_samples=False, faithful=True):
    traces = tmp_path / "traces"
    h0 = [{"qpn": 1, "event": "cc", "t": T0 + i * 0.005, "cwnd": 10 + i, "inflight": 8, "srtt": 0.004,
           "base_rtt": 0.002, "target": 0.02, "ecn_frac": 0.1, "path_rtt": None, "rto": 0.03,
           "usable": 4} for i in range(50)]
    h0 += [{"qpn": 1, "event": "cwnd_dec", "t": T0 + 0.1, "cause": "ecn", "before": 12, "after": 9,
            "fraction": 0.25},
           {"qpn": 1, "event": "ev_skip", "t": T0 + 0.1, "ev": 0x1C000, "cause": "ecn", "rtt": None},
           {"qpn": 1, "event": "ev_bad", "t": T0 + 0.2, "ev": 0x1C001, "rule": "rto", "seq": 5, "age": 0.05},
           {"qpn": 1, "event": "timeout", "t": T0 + 0.2, "psn": 5, "rto": 0.03},
           {"qpn": 9, "event": "cc", "t": T0 + 0.1, "cwnd": 99},  # another label's QP
           {"qpn": 1, "event": "cc", "t": T0 + 50, "cwnd": 99},  # after the window
           {"qpn": 1, "event": "complete", "t": T0 + 0.1, "msn": 1}]  # not a cc signal
    if agent_host_samples:
        h0.append({"qpn": None, "event": "host", "t": T0 + 0.05, "nics": {"0": [7, 28000, 0]},
                   "backlog": 0, "loop_lag": 0.001})
    _write(traces, "h0-trace.jsonl", h0)
    _write(traces, "h1-trace.jsonl", [{"qpn": 1, "event": "sack_cadence", "t": T0 + 0.05, "interval": 0.05,
                                       "sacks": 10, "pkts": 40, "on_count": 9, "on_delay": 1,
                                       "on_urgent": 0, "max_gap": 0.004, "nacks": 0, "ce": 2}])
    _write(traces, "host-queues.jsonl", [{"t": T0 + 0.02 * i, "hosts": {
        "h0": {"0": [i, i * 4198, 0], "1": [0, 0, 0]}, "h1": {"0": [1, 4198, 0]}, "h5": {"0": [3, 1, 0]}}}
        for i in range(10)])
    _write(traces, "switch-queues.jsonl", [{"t": T0 + 0.05 * i, "ports": {
        "p0l0-eth3": [i, i * 4198, i * 4000], "p0s0-eth1": [1, 4198, None], "p0l1-eth1": [0, 0, 0]}}
        for i in range(10)])
    summary = {"scenario": "permutation", "seed": 3, "fabric": FabricParams(2, 2, 2, 2).as_dict(),
               "fidelity": {"faithful": faithful, "problems": [] if faithful else ["CPU idle 2%"]},
               "faults": [{"t": 0.2, "transport": "mrc", "action": "cut"}],
               "dataplane": {"mode": "ebpf", "mark_bytes": 20990, "trim_bytes": 62970},
               "traces": {"windows": {"mrc": [T0, T0 + 1.0], "tcp": [T0 + 5, T0 + 6]},
                          "qps": {"mrc": [["h0", "h1", 1, "mrc"]], "tcp": [["h0", "h1", 9, "tcp"]]}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return summary


def test_a_label_reads_its_own_qps_inside_its_window(tmp_path):
    _results(tmp_path)
    data = ccplot.load(tmp_path, "mrc")
    assert data.qps == {1: ("h0", "h1")} and data.duration == 1.0
    cc = data.of(1, "cc")
    assert len(cc) == 50 and cc[0]["t"] == 0.0 and cc[-1]["cwnd"] == 59
    assert [r["cause"] for r in data.of(1, "cwnd_dec")] == ["ecn"]
    assert data.of(1, "ev_bad")[0]["rule"] == "rto" and len(data.of(1, "timeout")) == 1
    assert data.of(1, "sack_cadence")[0]["pkts"] == 40  # the receiver's, from h1's trace
    assert not data.of(1, "complete") and 9 not in data.events
    assert sorted(data.hosts) == ["h0", "h1"]  # the QPs' hosts only
    assert len(data.hosts["h0"]) == 10 and data.hosts["h0"][3] == (pytest.approx(0.06), {
        "0": [3, 3 * 4198, 0], "1": [0, 0, 0]})
    assert len(data.switch) == 10


def test_the_agents_own_host_samples_come_first(tmp_path):
    _results(tmp_path, agent_host_samples=True)
    data = ccplot.load(tmp_path, "mrc")
    assert data.hosts["h0"] == [(pytest.approx(0.05), {"0": [7, 28000, 0]})]
    assert len(data.hosts["h1"]) == 10  # no agent samples there: the runner's


def test_busiest_ports_by_peak_backlog_and_empty_ports_left_out():
    switch = [(0.0, {"a": [1, 100, 0], "b": [0, 0, 0], "c": [2, 900, None]}),
              (0.05, {"a": [3, 5000, 7000], "b": [0, 0, 0], "c": [0, 0, None]})]
    assert ccplot.busiest_ports(switch) == ["a", "c"]
    assert ccplot.busiest_ports(switch, 1) == ["a"]


def test_port_labels_say_which_way_each_port_sends():
    labels = ccplot.port_labels(FabricParams(2, 2, 2, 2).as_dict())
    assert labels["p0l0-eth3"] == "p0l0-eth3 (p0l0>p0s0)"
    assert labels["p0s0-eth1"] == "p0s0-eth1 (p0s0>p0l0)"


def test_figures_for_every_label_even_without_any_signal(tmp_path, figure_texts):
    summary = _results(tmp_path)
    drawn = ccplot.plot_run(tmp_path, summary)
    assert [p.name for p in drawn] == ["cc.png", "cc-tcp.png"]
    assert all(p.stat().st_size > 20_000 for p in drawn)
    words = figure_texts["cc.png"].splitlines()
    assert any(FabricParams(2, 2, 2, 2).describe() in w for w in words)
    # the decreases and the EV events, grouped by cause with their counts
    assert {"ecn (1)", "skip: ecn (1)", "benched: rto (1)", "timeout (1)"} <= set(words)
    assert "no data: no EV skipped or benched, no timeout" in figure_texts["cc-tcp.png"]
    assert "EMULATION NOT FAITHFUL" not in figure_texts["cc.png"]


def test_a_run_that_was_not_faithful_says_so_on_cc_png(tmp_path, figure_texts):
    ccplot.plot_run(tmp_path, _results(tmp_path, faithful=False))
    assert "EMULATION NOT FAITHFUL:\nCPU idle 2%" in figure_texts["cc.png"]
    assert ccplot.main([str(tmp_path), "--label", "tcp", "--out", str(tmp_path / "x.png")]) == 0
    assert ccplot.main([str(tmp_path), "--label", "quic"]) == 2
    with pytest.raises(ValueError, match="choose one of mrc, tcp"):
        ccplot.load(tmp_path, "quic")


def test_without_congestion_events_the_cores_own_events_stand_in():
    data = ccplot.CcData("mrc", 1.0, {1: ("h0", "h1"), 2: ("h2", "h3")}, events={
        1: {"ev_state": [{"t": 0.1, "new": "SKIP"}, {"t": 0.2, "new": "GOOD"},
                         {"t": 0.3, "new": "ASSUMED_BAD"}],
            "retx": [{"t": 0.4, "reason": "rto"}, {"t": 0.4, "reason": "rto"}, {"t": 0.5, "reason": "sack"}]},
        2: {"ev_skip": [{"t": 0.1, "cause": "ecn"}], "ev_state": [{"t": 0.1, "new": "SKIP"}],
            "ev_bad": [{"t": 0.3, "rule": "dark"}], "timeout": [{"t": 0.6, "psn": 3, "rto": 0.03}]}})
    assert data.skips(1) == [(0.1, "cause not traced")] and data.skips(2) == [(0.1, "ecn")]
    assert data.benchings(1) == [(0.3, "rule not traced")] and data.benchings(2) == [(0.3, "dark")]
    assert data.timeouts(1) == [0.4] and data.timeouts(2) == [0.6]
