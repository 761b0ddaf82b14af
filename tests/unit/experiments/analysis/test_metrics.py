import pytest

from experiments.analysis import metrics


def test_series_converts_bytes_per_bin_to_mbps():
    assert metrics.series({100: 12500, 102: 25000}, 100, 3) == [10.0, 0.0, 20.0]


def test_total_goodput_adds_the_flows_bin_by_bin_over_the_window():
    # A window of 3 bins from late in bin 100; 12500 bytes in a 10 ms bin is 10 Mbit/s.
    t_start = 100.75 * metrics.BIN_S  # still bin 100
    t_end = t_start + 3 * metrics.BIN_S
    a = {99: 99_999, 100: 12500, 101: 12500}  # bin 99: before the window
    b = {101: 25000, 103: 50000}  # bin 103: after it
    assert metrics.total_goodput([a, b], t_start, t_end) == pytest.approx([10.0, 30.0, 0.0])
    assert metrics.total_goodput(iter([b]), t_start, t_end) == pytest.approx([0.0, 20.0, 0.0])
    assert metrics.total_goodput([], t_start, t_end) == [0.0, 0.0, 0.0]


def test_recovery_is_first_bin_of_a_sustained_run():
    # 10 Mbit/s, cut at bin 100, nothing for 30 bins, then back to 10.
    mbps = [10.0] * 100 + [0.0] * 30 + [10.0] * 100
    assert metrics.recovery_ms(mbps, 100, 9.0) == pytest.approx(300.0)


def test_recovery_ignores_a_short_blip_that_does_not_hold():
    mbps = [10.0] * 100 + [0.0] * 10 + [10.0] * 10 + [0.0] * 40 + [10.0] * 60
    assert metrics.recovery_ms(mbps, 100, 9.0) == pytest.approx(600.0)


def test_no_dip_means_zero_recovery_and_never_means_none():
    assert metrics.recovery_ms([10.0] * 100, 10, 9.0) == 0.0
    assert metrics.recovery_ms([10.0] * 50 + [0.0] * 50, 50, 9.0) is None
    # A run that only starts holding after the end index does not count.
    assert metrics.recovery_ms([0.0] * 50 + [10.0] * 50, 0, 9.0, end_index=40) is None


def test_single_noisy_bins_do_not_break_recovery():
    mbps = [10.0, 8.5, 10.0, 11.5, 9.9] * 60
    assert metrics.recovery_ms(mbps, 0, 9.0) == 0.0


def test_longest_stall():
    mbps = [1.0, 0, 0, 1.0, 0, 0, 0, 0, 2.0, 0]
    assert metrics.longest_stall_ms(mbps) == pytest.approx(40.0)
    assert metrics.longest_stall_ms(mbps, 0, 3) == pytest.approx(20.0)


def test_smoothed_is_forward_mean():
    assert metrics.smoothed([0, 10, 20, 30], 2) == [5, 15, 25, 30]


def test_steady_width_widens_only_for_bursty_deliveries():
    from experiments.analysis.metrics import steady_width

    smooth_flow = [10.0] * 300
    assert steady_width(smooth_flow, 0, 300, 9.0) == 5
    bursty = [40.0 if i % 10 == 0 else 0.0 for i in range(300)]  # mean 4, one burst per 100 ms
    assert steady_width(bursty, 0, 300, 3.6) == 10
    assert steady_width([80.0 if i % 20 == 0 else 0.0 for i in range(300)], 0, 300, 3.6) == 20
    assert steady_width([0.0] * 300, 0, 300, 1.0) is None
