"""NSCC-like window control: the four quadrants, and ECN read as a per-path signal."""

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc

CFG = TransportConfig(target_delay_min=0.005)


def _drive(marked_every: int | None, rtt: float, acks: int = 4000) -> Nscc:
    cc = Nscc(CFG)
    cc.rtt_sample(0.001)  # base RTT
    t = 0.0
    for i in range(acks):
        t += 0.0005
        ecn = marked_every is not None and i % marked_every == 0
        cc.on_ack(t, rtt, ecn, 1, rtt)
    return cc


def test_below_target_grows_proportionally_and_above_target_grows_slowly():
    fast, slow = _drive(None, 0.002), _drive(None, 0.006)
    assert fast.cwnd > 4 * slow.cwnd > 4 * CFG.init_cwnd_pkts  # both grow, proportional much faster
    assert fast.decreases == slow.decreases == 0


def test_ecn_below_target_changes_nothing():
    cc = _drive(1, 0.002, acks=200)
    assert cc.decreases == 0 and cc.cwnd == CFG.init_cwnd_pkts


def test_decrease_scales_with_the_marked_fraction():
    # One hot path in twelve (ECN on 1/12 of acks) trims the window a little; marks on every
    # ack (all paths hot) cut it hard. Same RTT, above target.
    one_hot = _drive(12, 0.006)
    all_hot = _drive(1, 0.006)
    assert 0.05 < one_hot.ecn_frac < 0.12 and all_hot.ecn_frac > 0.95
    assert one_hot.cwnd > 3 * all_hot.cwnd
    assert all_hot.cwnd <= 2 * CFG.min_cwnd_pkts


def test_unmarked_standing_queue_still_decreases():
    cc = _drive(None, 0.012)  # median path RTT > 1.5 x target, no ECN at all
    assert cc.decreases > 0 and cc.cwnd < CFG.init_cwnd_pkts
