"""NSCC (uet-1.0-nscc): the quadrants on the queueing delay, the gamma decrease bounded by
max_md_jump once per RTT, eta, and the delay-only decrease only on a fabric without ECN."""

from dataclasses import replace

import pytest

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.congestion import Nscc

CFG = TransportConfig(target_delay_min=0.005)
BASE = 0.001  # s: every test's base RTT


def _drive(marked_every: int | None, rtt: float, acks: int = 4000, cfg: TransportConfig = CFG) -> Nscc:
    cc = Nscc(cfg)
    cc.rtt_sample(BASE)
    t = 0.0
    for i in range(acks):
        t += 0.0005
        ecn = marked_every is not None and i % marked_every == 0
        cc.on_ack(t, rtt, ecn, 1, rtt)
    return cc


@pytest.mark.parametrize("ecn, qdelay, change", [
    (False, 0.001, "up"),     # proportional increase
    (False, 0.030, "up"),     # fair increase: no delay-only decrease while the fabric marks
    (True, 0.001, "eta"),     # ECN below target: no change but eta
    (True, 0.030, "down"),    # multiplicative decrease
])
def test_quadrants_on_the_queueing_delay(ecn, qdelay, change):
    cfg = replace(CFG, target_delay_min=0.02)
    cc = Nscc(cfg)
    cc.on_ack(0.0, 0.002, False)  # base RTT 2 ms
    cc.avg_qdelay = qdelay
    before = cc.cwnd
    cc.on_ack(1.0, 0.002 + qdelay, ecn)
    if change == "down":
        assert before * (1 - cfg.max_md_jump) <= cc.cwnd < before
        assert cc.log[-1][1] == "ecn"
    elif change == "eta":
        assert cc.cwnd == pytest.approx(before + cfg.eta / before)
    else:
        assert cc.cwnd > before


def test_below_target_grows_proportionally_and_above_target_grows_slowly():
    cfg = replace(CFG, max_cwnd_pkts=10_000.0)
    fast, slow = _drive(None, 0.002, cfg=cfg), _drive(None, 0.007, cfg=cfg)
    assert fast.cwnd > 4 * slow.cwnd > 4 * CFG.init_cwnd_pkts  # both grow, proportional much faster
    assert fast.decreases == slow.decreases == 0


def test_the_decrease_follows_the_smoothed_queueing_delay_and_is_bounded():
    # gamma x (avg - target) / avg: a queue just over target trims the window a little, one far
    # over it cuts by max_md_jump and no more.
    cuts = {}
    for qd in (0.0055, 0.1):
        cc = Nscc(CFG)
        cc.rtt_sample(BASE)
        cc.avg_qdelay = qd
        cc.on_ack(1.0, BASE + qd, True)
        cuts[qd] = cc.log[-1][4]
    assert cuts[0.0055] == pytest.approx(CFG.gamma * (0.0055 - 0.005) / 0.0055, rel=0.05)
    assert cuts[0.1] == CFG.max_md_jump


def test_at_most_one_decrease_per_rtt():
    cc = _drive(1, 0.02, acks=400)  # 0.2 s of marks far above target, srtt 20 ms
    assert 5 <= cc.decreases <= 11
    assert cc.cwnd == CFG.min_cwnd_pkts


def test_unmarked_standing_queue_decreases_only_on_a_fabric_without_ecn():
    # Median path RTT > 1.5 x target with no mark: on a marking fabric the queue is somewhere no
    # switch marks (a host's NIC), not congestion; without ECN it is the only signal there is.
    marking = _drive(None, 0.012)
    droptail = _drive(None, 0.012, cfg=replace(CFG, ecn_fabric=False))
    assert marking.decreases == 0 and marking.cwnd > 4 * CFG.init_cwnd_pkts  # fair increase
    assert droptail.decreases > 0 and droptail.cwnd < CFG.init_cwnd_pkts
    assert {entry[1] for entry in droptail.log} == {"delay"}


def test_eta_lifts_a_qp_that_only_sees_marks_below_target():
    cc = _drive(1, 0.002, acks=200)
    assert cc.decreases == 0
    assert CFG.init_cwnd_pkts < cc.cwnd < CFG.init_cwnd_pkts + 200 * CFG.eta / CFG.init_cwnd_pkts + 1e-9


def test_trims_and_losses_are_logged_with_their_cause():
    cc = Nscc(CFG)
    cc.on_trim(0.0)
    cc.on_loss(1.0, "timeout")
    assert [entry[1] for entry in cc.log] == ["trim", "timeout"]
    assert cc.cwnd == pytest.approx(CFG.init_cwnd_pkts * (1 - CFG.md_factor / 2) * (1 - CFG.md_factor))
