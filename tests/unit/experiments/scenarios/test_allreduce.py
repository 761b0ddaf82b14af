"""allreduce's pure pieces: the sweep (sizes, loss rates, RoCE's QP counts), how a chunk is
split over a host pair's QPs, the algorithm bandwidth, the figure's series; and the options it
refuses."""

from __future__ import annotations

import pytest

from experiments.scenarios import default_options, scenario
from experiments.scenarios.allreduce import (
    LOSS_RATES,
    ROCE_QPS,
    algbw_mbps,
    chunks,
    iterations,
    loss_rates,
    qp_counts,
    series,
    sizes_kb,
)
from topologies.model import FabricError


def test_the_sweep_is_the_papers_unless_options_say_otherwise():
    opts = default_options("allreduce")
    assert loss_rates(opts) == LOSS_RATES == (0.0, 0.001, 0.01)
    assert qp_counts(opts, "roce") == ROCE_QPS and qp_counts(opts, "mrc") == (1,)
    given = default_options("allreduce", loss=0.02, qps=(2, 8))
    assert loss_rates(given) == (0.0, 0.002, 0.02) and qp_counts(given, "roce") == (2, 8)
    assert sizes_kb(512) == (32, 128, 512) and sizes_kb(2) == (1, 2)


def test_a_chunk_is_split_over_the_qps_to_the_byte_and_bandwidth_is_size_over_time():
    assert chunks(1000, 3) == [334, 333, 333] and sum(chunks(524288, 16)) == 524288
    assert chunks(2, 4) == [1, 1, 0, 0]  # a QP with nothing to carry writes nothing
    assert algbw_mbps(1_000_000, 0.5) == 16.0
    assert algbw_mbps(1_000_000, None) is None


def test_each_size_is_timed_over_the_largest_sizes_bytes_within_one_limit(monkeypatch):
    # Every size moves as many bytes as the largest's one collective: the same number of random
    # losses on average, so a small size is not one lucky or unlucky draw.
    assert [iterations(kb, 2048) for kb in sizes_kb(2048)] == [16, 4, 1]
    assert iterations(512, 512) == 1 and iterations(1000, 512) == 1
    kind = scenario("alltoall").kind
    clock = {"t": 0.0}
    monkeypatch.setattr("experiments.scenarios.allreduce.time.monotonic", lambda: clock["t"])
    durations = iter([0.1, 0.3, 0.2, 0.2])
    limits = []

    def one(groups, hosts, size, limit):  # a collective that takes the next duration
        limits.append(limit)
        took = next(durations)
        clock["t"] += took
        return took if took <= limit else None

    monkeypatch.setattr(kind, "collective", one)
    assert kind.repeated([], 4, 1024, 4, 20.0) == pytest.approx(0.2)  # the mean, not the last
    assert limits == pytest.approx([20.0, 19.9, 19.6, 19.4])  # one limit for all of them
    durations, limits = iter([5.0, 5.0, 5.0]), []
    assert kind.repeated([], 4, 1024, 3, 12.0) is None  # the third would end past the limit
    assert limits == pytest.approx([12.0, 7.0, 2.0])


def test_allreduce_goes_round_the_ring_and_alltoall_between_every_pair():
    names = ["h0", "h1", "h2", "h3"]
    assert scenario("allreduce").kind.pairs(names) == [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    every = scenario("alltoall").kind.pairs(names)
    assert len(every) == 12 and len(set(every)) == 12 and all(a != b for a, b in every)


def test_series_name_roce_by_its_qp_count_and_keep_sizes_in_order():
    transports = {"mrc": {"algbw_mbps": {"1": {"0": {"512": 10.0, "32": 3.0}}}},
                  "roce": {"algbw_mbps": {"4": {"0.01": {"32": None, "512": 9.0}}}}}
    assert series(transports) == [("mrc", "0", [32, 512], [3.0, 10.0]),
                                  ("roce x4 QPs", "0.01", [32, 512], [None, 9.0])]


@pytest.mark.parametrize(("overrides", "words"), [
    ({"transports": ("mrc", "tcp")}, "drop tcp/mptcp"),
    ({"transports": ("mrc",), "qps": (4,)}, "add roce"),
    ({"qps": (0, 4)}, "--qps"),
    ({"qps": (4, 4)}, "distinct"),
    ({"loss": 0.5}, r"\(0, 0.2\]"),
    ({"steps": 5}, "--steps does not apply"),
])
def test_allreduce_refuses_what_it_cannot_measure(overrides, words):
    with pytest.raises(FabricError, match=words):
        default_options("allreduce", **overrides)
