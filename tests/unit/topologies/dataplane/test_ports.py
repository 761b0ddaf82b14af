"""What each port is told: thresholds in whole frames of the run's payload size, the rate in
fixed point, flags."""

from __future__ import annotations

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from topologies.dataplane import ports

CFG = TransportConfig()


def test_default_thresholds_are_ordered_and_in_frames():
    th = ports.default_thresholds(50, CFG)
    frame_len = wire.frame_bytes(CFG.mtu_payload)
    assert frame_len == 14 + 40 + 8 + wire.DATA_OVERHEAD + TransportConfig().mtu_payload
    assert th == (CFG.ecn_mark_frames * frame_len, CFG.trim_queue_frames * frame_len, 50 * frame_len)
    for q in range(3, 40):
        small = ports.default_thresholds(q, CFG)
        assert 0 < small.mark_bytes < small.trim_bytes < small.drop_bytes == q * frame_len
    with pytest.raises(ValueError):
        ports.default_thresholds(2, CFG)


def test_thresholds_follow_the_runs_transport_parameters():
    """The switches count frames of the run's payload size, and mark ECN one frame below the
    target the agents' NSCC aims at: change either and both ends move together."""
    small_frames = TransportConfig(mtu_payload=1024)
    th = ports.default_thresholds(20, small_frames)
    assert th.drop_bytes == 20 * wire.frame_bytes(1024) < ports.default_thresholds(20, CFG).drop_bytes
    assert th.mark_bytes == small_frames.ecn_mark_frames * wire.frame_bytes(1024)
    deeper = TransportConfig(target_queue_frames=10)
    assert ports.default_thresholds(20, deeper).mark_bytes == 9 * wire.frame_bytes(CFG.mtu_payload)
    assert deeper.link_target_delay(10.0) == 10 * wire.frame_bytes(CFG.mtu_payload) * 8 / 10e6


def test_rate_fixed_point():
    assert ports.rate_fp(8e9) == 1 << ports.RATE_SHIFT  # 1 byte per ns
    assert abs(ports.rate_fp(10e6) / (1 << ports.RATE_SHIFT) * 1e9 - 1.25e6) < 1.25e6 * 1e-4
    assert ports.rate_fp(10e3) > 1000  # 0.01 Mbit/s still exact to 0.1%
    with pytest.raises(ValueError):
        ports.rate_fp(0)


def test_port_spec_validation_and_switch_ports():
    specs = ports.switch_ports([("p1l0-eth1", True), ("p1l0-eth3", False)], 10.0, 50, CFG)
    assert [p.last_hop for p in specs] == [True, False]
    assert all(p.rate_bps == 10e6 and p.trim for p in specs)
    assert specs[0].config_values()[4] == ports.FLAG_LAST_HOP | ports.FLAG_TRIM
    assert specs[1].config_values()[4] == ports.FLAG_TRIM
    with pytest.raises(ValueError):
        ports.PortSpec("x", None, 1e6, 9000, 100, 50000).validate()
    with pytest.raises(ValueError):
        ports.PortSpec("x", None, 0, 1, 2, 3).validate()


def test_the_virtual_queue_drains_at_the_port_rate_to_the_sampling_instant():
    rate = ports.rate_fp(10e6)  # 1250 bytes per ms
    vq = 20_000 << ports.RATE_SHIFT
    assert ports.vq_now(vq, 1_000, 1_000, rate) == 20_000  # no time passed
    assert ports.vq_now(vq, 1_000, 0, rate) == 20_000  # last_ns ahead (frozen in tests)
    assert ports.vq_now(vq, 0, 4_000_000, rate) == pytest.approx(15_000, abs=1)  # 4 ms at 10 Mbit/s
    assert ports.vq_now(vq, 0, 10**9, rate) == 0  # long idle: empty, never negative
