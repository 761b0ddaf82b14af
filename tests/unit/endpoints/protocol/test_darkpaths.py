"""Paths that die mid-window (the paper's Fig. 9d, links flapping together): the sender presumes
overdue packets lost (`presume_dark`) and the receiver's SACKs skip reverse EVs whose forward
twin went silent (`sack_on_arrival_path`), so the live paths carry on while the loss timers
judge the dead ones."""

from __future__ import annotations

import random
from dataclasses import replace

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.receiver import MrcReceiver, ReverseEvs
from experiments.scenarios.base import DEFAULT_FABRIC
from experiments.sim.simclos import ClosModel, flap_together

# The scenario's default fabric (4 planes x 2 leaves x 3 spines, a host per leaf) at 20 Mbit/s:
# 8 of its 24 T0-T1 links flapping take 4 to 8 of the flow's 12 paths at once.
MODEL = ClosModel(params=replace(DEFAULT_FABRIC, link_mbps=20.0))
BOTH = {"presume_dark": True, "sack_on_arrival_path": True}  # the defaults (docs/transport.md)
NEITHER = {"presume_dark": False, "sack_on_arrival_path": False}


def test_eight_links_flapping_together_cost_a_flap_bin_little():
    for seed in (1, 3, 5):
        res = flap_together(MODEL, seed=seed, **BOTH)
        assert min(res["flap_bins"]) >= 0.95, (seed, res["flap_bins"])
        assert res["benched"] and res["skips"].get("dark", 0) > 0  # dead paths found, skipped first


def test_without_them_the_flap_bins_dip():
    """The mechanisms' worth: the same flaps as the loss timers alone handled them (each packet
    on a dead path held the window for `queue_delay_bound`) and with SACKs rotating over
    reverse paths that died with the forward ones."""
    worst = []
    for seed in (1, 3, 5):
        old = flap_together(MODEL, seed=seed, **NEITHER)
        worst.append(min(old["flap_bins"]))
    assert max(worst) < 0.9, worst
    # Presuming alone is not enough: SACKs rotating into reverse paths that died leave live
    # forward paths unacknowledged; they are benched by timeouts and the RTO backs off.
    alone = flap_together(MODEL, seed=5, presume_dark=True, sack_on_arrival_path=False)
    assert min(alone["flap_bins"]) < 0.5, alone["flap_bins"]


def _sacks_after_silence(silent: set[int], arrival: bool = True) -> set[int]:
    """A receiver with 2 reverse EVs per plane over 2 planes x 3 spines hears a packet on every
    path round after round, then the paths in `silent` stop delivering: the reverse EVs of the
    SACKs for the packets that keep coming on the others."""
    evs = [EvInfo((p << 16) | s, p) for p in range(2) for s in range(3)]
    cfg = replace(TransportConfig(), sack_every=1, sack_on_arrival_path=arrival)
    rcv = MrcReceiver(2, 1, evs, cfg, seed=1)
    now, psn, ways = 0.0, 0, []
    for rnd in range(40):
        for e in evs:
            if rnd >= 20 and e.ev in silent:
                continue
            now += 0.0002  # all within one reverse probe round: none condemned
            rcv.on_datagram(wire.encode_data(wire.OP_DATA_ONLY, 0, 2, psn, psn, 0, 8, b"x" * 8,
                                             wire.ts_us(now)), e.ev, now)
            psn += 1
            out = rcv.poll(now)
            if rnd >= 30:
                ways += [ev for ev, datagram in out if datagram[0] == wire.OP_SACK]
    assert sorted(rcv.rev.evs) == [0x00000, 0x00001, 0x10000, 0x10001]  # in use (2 per plane)
    return set(ways)


def test_sacks_leave_reverse_evs_whose_forward_twin_went_silent():
    """Links that fail both ways take a path's reverse with its forward: once nothing arrives on
    a forward EV for a round, its twin carries no SACK; with every path alive, the rotation
    is untouched (SACKs that followed their data made the emulated uplinks queue)."""
    assert _sacks_after_silence(set()) == {0x00000, 0x00001, 0x10000, 0x10001}
    assert _sacks_after_silence({0x00000, 0x10000}) == {0x00001, 0x10001}
    assert _sacks_after_silence({0x00000, 0x10000}, arrival=False) == {0x00000, 0x00001, 0x10000, 0x10001}
    # Every twin in use silent: the way the echoed packet came, over the spares' paths
    assert _sacks_after_silence({0x00000, 0x00001, 0x10000, 0x10001}) == {0x00002, 0x10002}


def _reverse() -> ReverseEvs:
    evs = [EvInfo((p << 16) | s, p) for p in range(2) for s in range(3)]
    return ReverseEvs(evs, 1, random.Random(1))


def test_a_sack_goes_back_the_way_its_packet_came_unless_condemned_or_out():
    rev = _reverse()
    assert rev.back(0x10002) == 0x10002  # a spare too: the arrival proved the path
    assert rev.back(0x90000) in rev.evs  # names no path back: the rotation
    used = rev.evs[0]
    rev.result(used, False)
    rev.result(used, False)  # condemned by two unanswered probes
    assert rev.back(used) != used and rev.back(used) in rev.evs
    rev.result(used, True) if used in rev.alive else None
    rev.out = 1 << rev.plane[0x10002]  # its plane's port is down at one end
    assert rev.plane[rev.back(0x10002)] != rev.plane[0x10002]
