"""experiments/analysis/standing.py: when a run's queues stood, and what a packet cost before and
after (the cost bench's phases)."""

from __future__ import annotations

import json

import pytest

from experiments.analysis import standing
from experiments.tools import cost_bench


def _trace(path, ecn_by_time, extra=()):
    lines = [json.dumps({"event": "cc", "t": t, "ecn_frac": e, "cwnd": 10}) for t, e in ecn_by_time]
    path.write_text("\n".join([*extra, *lines]) + "\n")


def test_a_senders_queue_stood_when_its_ecn_fraction_first_passed_the_threshold(tmp_path):
    over = standing.ECN_STANDING + 0.01
    lines = [json.dumps({"event": "cc", "t": 1.0, "ecn_frac": 0.0}),
             json.dumps({"event": "sack", "t": 1.5, "ecn_frac": 0.9}),  # not a cc record
             '{"event": "cc", "t": 2.0, "ecn_fr',  # cut short by the run's end
             json.dumps({"event": "cc", "t": 3.0, "ecn_frac": standing.ECN_STANDING}),  # at, not past
             json.dumps({"event": "cc", "t": 4.0, "ecn_frac": over}),
             json.dumps({"event": "cc", "t": 5.0, "ecn_frac": 0.1})]  # falls back: still 4.0
    assert standing.sender_onset(lines) == 4.0
    assert standing.sender_onset(lines[:4]) is None


def test_the_runs_queues_stood_when_half_of_its_senders_had(tmp_path):
    assert standing.run_onset([]) is None
    assert standing.run_onset([7.0]) == 7.0
    assert standing.run_onset([9.0, 5.0, 7.0]) == 7.0  # two of three by 7
    assert standing.run_onset([9.0, 5.0, None, None]) == 9.0  # half of four by 9
    assert standing.run_onset([5.0, None, None]) is None  # one of three: not half


def test_onset_reads_the_sending_agents_traces_and_leaves_out_the_silent_ones(tmp_path):
    _trace(tmp_path / "h1-trace.jsonl", [(1.0, 0.1), (6.0, 0.8)])
    _trace(tmp_path / "h2-trace.jsonl", [(1.0, 0.2), (8.0, 0.9)])
    _trace(tmp_path / "h3-trace.jsonl", [(1.0, 0.0), (9.0, 0.0)])  # a same-leaf flow: never
    (tmp_path / "h4-trace.jsonl").write_text(json.dumps({"event": "rx", "t": 2.0}) + "\n")  # a receiver
    (tmp_path / "notes.txt").write_text("not a trace")
    assert standing.onset(tmp_path) == 8.0  # h1 and h2 of the three senders
    _trace(tmp_path / "h2-trace.jsonl", [(1.0, 0.2)])
    assert standing.onset(tmp_path) is None  # one of three
    assert standing.onset(tmp_path / "missing") is None


def test_a_run_splits_into_its_calm_and_standing_phases():
    t = [i * 0.5 for i in range(29)]  # samples 0 .. 14 s into the flow
    warm = cost_bench.WARM_S  # what the cost bench passes: the flows have found their rates
    calm, stood = standing.phases(t, warm, 6.0)
    assert (t[calm[0]], t[calm[1]]) == (warm, 6.0)
    assert (t[stood[0]], t[stood[1]]) == (6.0 + standing.STANDING_SETTLE_S, 14.0)
    # queues that never stood: all of it is calm
    assert standing.phases(t, warm, None) == ((3, 28), None)
    # stood too late to read what followed, or too soon to read what came before
    late = 14.0 - standing.STANDING_SETTLE_S - standing.MIN_WINDOW_S + 0.5
    assert standing.phases(t, warm, late)[1] is None
    early = warm + standing.MIN_CALM_S - 0.5
    assert standing.phases(t, warm, early)[0] is None
    assert standing.phases(t, warm, early)[1] is not None


def test_packets_per_second_are_read_in_the_phases_own_window():
    goodput = [(float(t), 8.0 if t < 5 else 4.0) for t in range(10)]
    assert standing.window_pps(goodput, 0.0, 5.0, 1000) == pytest.approx(1000.0)
    assert standing.window_pps(goodput, 5.0, 10.0, 1000) == pytest.approx(500.0)
    assert standing.window_pps(goodput, 20.0, 30.0, 1000) == 0.0


def _run(rate, calm, stood, stood_after=5.0):
    phases = {"calm": dict(zip(("busy_cores", "agents_process_cores", "delivered_data_pps"), calm,
                               strict=True))}
    if stood is not None:
        phases["standing_queues"] = dict(zip(("busy_cores", "agents_process_cores",
                                              "delivered_data_pps"), stood, strict=True))
    return {"link_mbps": rate, "queues_stood_s": stood_after if stood else None, "phases": phases}


def test_the_standing_cost_is_the_ratio_per_delivered_packet_over_the_runs_that_saw_both(monkeypatch):
    monkeypatch.setattr(standing.os, "cpu_count", lambda: 2)
    assert standing.standing_cost([_run(5, (0.3, 0.25, 2300), None)]) is None
    # the same packets at 1.5 and 1.6 times the CPU; fewer packets for the same CPU count too
    got = standing.standing_cost([_run(5, (0.3, 0.25, 2300), None),
                                    _run(10, (0.4, 0.35, 4600), (0.6, 0.56, 4600))])
    assert got is not None
    assert (got["busy_cores"], got["agents_process_cores"]) == (pytest.approx(1.5), pytest.approx(1.6))
    assert got["measured_at_mbps"] == [10] and got["stood_after_s"] == [5.0] and not got["saturated"]
    fewer = standing.standing_cost([_run(10, (0.4, 0.4, 4000), (0.4, 0.4, 2000))])
    assert fewer is not None and fewer["busy_cores"] == pytest.approx(2.0)
    # the agents' process at its ceiling: the ratio is a floor, said so
    capped = standing.standing_cost([_run(10, (0.9, 0.5, 4600), (1.6, standing.SATURATED_CORES, 4500))])
    assert capped is not None and capped["saturated"]
    # a phase with nothing delivered is no reading
    assert standing.standing_cost([_run(10, (0.4, 0.35, 4600), (0.6, 0.5, 0))]) is None


def test_a_standing_phase_that_filled_the_machine_is_a_floor_too():
    """A rehearsal with a busy loop on one of 2 cores: OVS's standing phase took the free core
    (1.03 with the loop's 0.96) and read 1.1 times the calm cost; the machine, not the agents'
    process (0.46), was full."""
    run = _run(10, (0.96, 0.42, 4626), (1.03, 0.46, 4500))
    run["phases"]["standing_queues"]["background_cores"] = 0.96
    got = standing.standing_cost([run], cores=2)
    assert got is not None and got["saturated"]
    quiet = _run(10, (0.96, 0.42, 4626), (1.03, 0.46, 4500))
    got = standing.standing_cost([quiet], cores=2)
    assert got is not None and not got["saturated"]
    # steal counts as taken too
    quiet["phases"]["standing_queues"]["steal_cores"] = 0.8
    assert standing.standing_cost([quiet], cores=2)["saturated"]
