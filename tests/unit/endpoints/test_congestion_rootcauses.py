"""Regression tests, one per root cause of issue 10's permutation and incast shortfalls, over the
simulated Clos (experiments/sim/simclos.py: the agents' cores on a model of the emulated fabric).
Each runs the model with the fault (or without the fix) and as on main, so it fails if the fix
goes, or if the model stops showing the fault. docs/experiments.md has the emulated figures."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvSkip
from endpoints.protocol.evset import SKIP, EvInfo, EvSet
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.sim.simclos import ClosModel, ecn_balance, incast, permutation
from topologies.model import FabricParams

PERM = ClosModel()  # the permutation's former default fabric: 2 x 2 leaves x 3 spines x 3 hosts
# 7:1 incast + victim on 10 hosts, 2 spines: the variant the analysis measured
INCAST = ClosModel(FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=5, link_mbps=10.0))
SEED = 1  # a permutation where every flow crosses leaves: uplinks offered exactly their capacity


@pytest.fixture(scope="module")
def perm_fixed():
    return permutation(PERM, seed=SEED)


@pytest.fixture(scope="module")
def incast_fixed():
    return incast(INCAST, senders=7, seed=SEED)


def test_as_fixed_the_permutation_reaches_the_header_ceiling(perm_fixed):
    # 4096 of 4206 bytes are payload, SACKs share the NICs: ~0.965 of the link is the ceiling.
    assert perm_fixed["fraction"] >= 0.955 and perm_fixed["min"] >= 0.95
    assert perm_fixed["benched"] == {} and perm_fixed["timeouts"] == 0
    assert perm_fixed["decreases"].get("delay", 0) == 0


def test_host_queues_in_the_rtt_made_the_delay_fallback_throttle_the_permutation(perm_fixed):
    # P1, as emulated before: a standing queue in the sending host's qdisc, and SACKs behind the
    # receiving host's data, inflate every RTT; the ECN-less delay rule, on in a marking
    # fabric, cut the window for it.
    before = permutation(replace(PERM, host_priority=False, nic_pacing=False), seed=SEED,
                         ecn_fabric=False)
    assert before["decreases"].get("delay", 0) > 20 and before["fraction"] < 0.7
    # The NIC pacer keeps the host qdisc at a frame or two.
    assert perm_fixed["run"].nic_backlog_max() <= 2 * wire.frame_bytes(4096)
    assert before["run"].nic_backlog_max() > 5 * wire.frame_bytes(4096)


def test_backups_left_a_third_of_the_uplinks_idle_when_every_flow_crosses_leaves(perm_fixed):
    # P2: with 3 spines the 0.75 active fraction made one spine every QP's backup.
    before = permutation(PERM, seed=SEED, backup_min_paths=1)
    assert before["fraction"] < perm_fixed["fraction"] - 0.08 and before["min"] < 0.8


def test_backups_only_with_many_paths_and_chosen_per_qp():
    few = [EvInfo((1 << 16) | i, 0) for i in range(3)]
    s = EvSet(few, 0.75, 2, 1, random.Random(1), backup_min_paths=8)
    assert len(s.active) == 3 and s.backup[0] == []
    many = [EvInfo((1 << 16) | i, 0) for i in range(16)]
    actives = {frozenset(EvSet(many, 0.75, 2, 1, random.Random(seed), backup_min_paths=8).active)
               for seed in range(8)}
    assert all(len(a) == 12 for a in actives) and len(actives) > 1  # each QP its own backups


def test_a_sack_timer_shorter_than_the_packet_gap_sent_a_sack_every_packet_or_two(perm_fixed):
    # P3: sack_delay below a frame time let the timer, not the count, set the cadence.
    before = permutation(PERM, seed=SEED, sack_delay=0.0005, duration=2.0)

    def per_sack(res):
        rcv = [f.rcv for f in res["run"].flows]
        return sum(r.stats["packets"] for r in rcv) / sum(r.stats["sacks"] for r in rcv)

    assert per_sack(before) < 2.5 < 3.3 < per_sack(perm_fixed)
    assert before["fraction"] < perm_fixed["fraction"] - 0.01


def test_trimmed_headers_charged_as_full_frames_wasted_the_incast_bottleneck(incast_fixed):
    # I1 (fixed in the data plane; the model keeps the fault switchable).
    charged = incast(replace(INCAST, trim_charges_full=True), senders=7, seed=SEED)
    assert charged["crowd_fraction"] < incast_fixed["crowd_fraction"] - 0.1
    assert charged["timeouts"] > 20 and charged["benched"]
    assert incast_fixed["crowd_fraction"] >= 0.9 and incast_fixed["victim_fraction"] >= 0.95


def test_a_timeout_below_the_trimming_queue_benched_healthy_evs_at_the_incast_onset(incast_fixed):
    # I2: a trimming queue is 50 ms at 10 Mbit/s; an RTO of 30 ms fired on packets only queued.
    floorless = incast(INCAST, senders=7, seed=SEED, queue_delay_bound=1e-9)
    assert sum(floorless["benched"].values()) > 0 and floorless["timeouts"] > 0
    assert incast_fixed["benched"] == {} and incast_fixed["timeouts"] == 0


def test_the_last_hops_trims_stand_for_the_marks_it_never_makes(incast_fixed):
    # The last hop never marks: with only delay (NSCC's fair increase) and trims to go by, the
    # crowd's windows grew until most excess packets crossed the fabric to be trimmed there.
    unmarked = incast(INCAST, senders=7, seed=SEED, lasthop_mark_rtts=1e-9)
    assert incast_fixed["trimmed"] < unmarked["trimmed"] / 2
    assert incast_fixed["crowd_fraction"] > unmarked["crowd_fraction"] + 0.02


def test_without_a_window_ceiling_a_paced_sender_grows_its_window_until_competition_floods(incast_fixed):
    # A NIC-limited sender sees no queue, so NSCC keeps increasing: the victim's window means
    # nothing by the time the incast starts (hundreds of packets), and once the paths slow down
    # all of it may be in flight (the analysis's earlier simulation model measured a victim at
    # 0.23 of its rate from it; this model shows the window, not that collapse).
    def peak(res):
        return max(e.cwnd for e in res["run"].flows[0].events if e.event == "cc")

    unbounded = incast(INCAST, senders=7, seed=SEED, max_cwnd_pkts=2048.0)
    assert peak(unbounded) > 100
    assert peak(incast_fixed) <= incast_fixed["run"].config.max_cwnd_pkts == 18


def test_a_skip_shorter_than_an_rtt_kept_load_on_the_shared_path():
    # ecn-balance (Fig. 14): with two EVs per plane a rotation is two packets; a skip must last
    # several RTTs for the mark's news to move the load.
    fabric = ClosModel(FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0))
    fixed = ecn_balance(fabric)
    rotation_only = ecn_balance(fabric, skip_rtts=1e-9)
    assert fixed["goodput_fraction"] >= 0.9
    assert rotation_only["goodput_fraction"] < fixed["goodput_fraction"] - 0.04


class QpRttSkip(MrcSender):
    """The skip as it was: counted in the QP's smoothed RTT whatever the skipped path's."""

    def _skip(self, ev: int, now: float, cause: str, rtt: float | None = None) -> None:
        if self.evs.skip(ev, now + self.c.skip_rtts * self.cc.srtt):
            self.skips[cause] += 1
            self.events.append(EvSkip(now, ev, cause, rtt))


def test_a_skip_counted_in_the_qps_rtt_kept_load_on_the_hot_path():
    # ecn-balance (Fig. 14) on its scenario's fabric: the forced flow's queue makes the shared
    # path's round trip several times the first flow's QP-wide RTT, which its cooler paths keep
    # short. Counted in the QP's RTT the skip ended long before the next echo of the hot path
    # could come back, and each return carried the EV's share of the spray for that round trip.
    fabric = ClosModel(FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=20.0))
    fixed = ecn_balance(fabric)
    qp_rtt = ecn_balance(fabric, cores=(QpRttSkip, MrcReceiver))
    assert fixed["a_shared_share_after"] <= 0.04 < qp_rtt["a_shared_share_after"]
    assert fixed["goodput_fraction"] >= qp_rtt["goodput_fraction"] + 0.01
    # Fig. 14's pair against what the simulated links can carry as payload (no encapsulation)
    top = wire.payload_ceiling(4096, None, encapsulated=False)
    assert fixed["goodput_of_ceiling"] == pytest.approx(fixed["goodput_fraction"] / top, abs=0.002)
    assert fixed["goodput_of_ceiling"] >= 0.95


def test_a_skip_lasts_round_trips_of_the_skipped_path_or_of_the_qp_whichever_is_longer():
    cfg = TransportConfig()
    evs = [EvInfo((1 << 16) | 0xC000, 0), EvInfo((2 << 16) | 0xC001, 1)]
    snd = MrcSender(1, 2, evs, cfg, 1)
    hot, cool = evs[0].ev, evs[1].ev
    snd.cc.rtt.sample(0.002)
    snd._ev_rtt_sample(hot, 0.010)
    snd._ev_rtt_sample(cool, 0.001)
    snd._skip(hot, 1.0, "ecn")
    snd._skip(cool, 1.0, "ecn")
    assert snd.evs.state[hot] == snd.evs.state[cool] == SKIP
    assert snd.evs.skip_until_t[hot] == pytest.approx(1.0 + cfg.skip_rtts * 0.010)
    assert snd.evs.skip_until_t[cool] == pytest.approx(1.0 + cfg.skip_rtts * 0.002)


def test_a_ce_marked_packet_is_acknowledged_at_once_with_its_own_ev():
    cfg = TransportConfig(sack_delay=0.005)
    evs = [EvInfo((1 << 16) | 0xC000, 0), EvInfo((2 << 16) | 0xC001, 1)]
    rcv = MrcReceiver(2, 1, evs, cfg, 1)
    hot = evs[1].ev
    pkt = wire.encode_data(wire.OP_DATA_FIRST, 0, 2, 0, 0, 0, 8192, b"x" * 4096, 0)
    rcv.on_datagram(pkt, hot, 0.0, ecn_ce=True)
    sacks = [wire.decode(p) for _, p in rcv.poll(0.0) if p[0] == wire.OP_SACK]
    assert len(sacks) == 1 and sacks[0].echo_ev == hot and sacks[0].flags & wire.F_ECN_ECHO
    rcv = MrcReceiver(2, 1, evs, replace(cfg, ack_on_ce=False), 1)
    rcv.on_datagram(pkt, hot, 0.0, ecn_ce=True)
    assert not [p for _, p in rcv.poll(0.0) if p[0] == wire.OP_SACK]  # coalesced: it waits


def test_skipping_every_ev_of_a_plane_never_idles_its_port():
    evs = [EvInfo((1 << 16) | i, 0) for i in range(2)] + [EvInfo((2 << 16) | i, 1) for i in range(2)]
    s = EvSet(evs, 1.0, 2, 1, random.Random(3))
    for ev in (evs[0].ev, evs[1].ev):
        s.skip(ev, until_t=10.0)
    picked = {s.next_ev_paced(lambda plane: plane == 0) for _ in range(20)}
    assert picked == {evs[0].ev, evs[1].ev}
    assert all(s.state[ev] == SKIP for ev in picked)
