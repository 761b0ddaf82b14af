"""The one RTT estimator: RFC 6298's first sample and smoothing."""

from __future__ import annotations

import pytest

from endpoints.protocol.rtt import RttEstimator


def test_first_sample_then_smoothing():
    est = RttEstimator()
    assert est.samples == 0 and est.srtt == 0.0
    est.sample(0.010)
    assert (est.srtt, est.rttvar) == (0.010, 0.005) and est.timeout() == pytest.approx(0.030)
    for _ in range(200):
        est.sample(0.002)
    assert est.srtt == pytest.approx(0.002, rel=1e-6) and est.rttvar < 1e-6
    assert est.samples == 201
