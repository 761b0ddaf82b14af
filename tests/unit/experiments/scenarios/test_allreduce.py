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
