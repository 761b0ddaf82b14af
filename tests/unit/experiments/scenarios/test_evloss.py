"""ev-loss's pure pieces: which EV is made lossy, each EV's state spans for the Fig. 13 plot
(from a small synthetic sender trace), which backup took the lossy EV's place, when it was
benched; and the options it refuses."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from endpoints.protocol.evset import EvInfo, EvSet
from experiments.scenarios import default_options
from experiments.scenarios.evloss import (
    ACTIVE,
    BACKUP,
    FABRIC,
    backup_taken,
    bands,
    category,
    choose_ev,
    first_bad,
    first_bench,
    packet_gap_ms,
    packets_between,
)
from topologies.model import Fabric, FabricError


def _rows(active: dict[int, bool], state: dict[int, str] | None = None) -> list[dict]:
    return [{"ev": ev, "active": a, "state": (state or {}).get(ev, "GOOD")} for ev, a in active.items()]


def test_the_lossy_ev_is_an_active_ev_in_use_on_the_chosen_plane():
    fabric = Fabric(FABRIC)
    routes = fabric.routes("h0", "h1")
    p0 = [r for r in routes if r.plane == 0]
    assert [r.label for r in p0] == ["p0/s0", "p0/s1"]
    p1 = [r for r in routes if r.plane == 1]
    # plane 0's active EV is on spine 1 (spine 0 a backup); plane 1's on spine 0
    rows = _rows({p0[0].ev: False, p0[1].ev: True, p1[0].ev: True, p1[1].ev: False})
    chosen = choose_ev(rows, routes, 0)
    assert chosen is not None and chosen.label == "p0/s1"
    assert chosen.links[1] == "p0l0-p0s1"  # the source leaf's uplink: where the loss goes
    assert choose_ev(rows, routes, 1).label == "p1/s0"  # type: ignore[union-attr]
    benched = _rows({p0[0].ev: False, p0[1].ev: True}, {p0[1].ev: "ASSUMED_BAD"})
    assert choose_ev(benched, routes, 0) is None
    skipped = _rows({p0[0].ev: False, p0[1].ev: True}, {p0[1].ev: "SKIP"})  # an ECN echo: still in use
    assert choose_ev(skipped, routes, 0).label == "p0/s1"  # type: ignore[union-attr]


def test_the_16_ev_set_of_fig12_keeps_one_active_and_one_backup_per_plane():
    # The EvSet the agents build from Fig. 12's --param values, on ev-loss's fabric.
    routes = Fabric(FABRIC).routes("h0", "h1")
    evs = EvSet([EvInfo(r.ev, r.plane) for r in routes], active_fraction=0.5, min_active=2,
                skip_rotations=1, rng=random.Random(1), limit=16, backup_min_paths=2)
    assert len(evs.active) == 8 and sorted(evs.plane[e] for e in evs.active) == list(range(8))
    assert all(len(b) == 1 for b in evs.backup.values())
    lossy = next(e for e in evs.active if evs.plane[e] == 0)
    spare = evs.backup[0][0]
    assert evs.mark_bad(lossy, 1.0) and spare in evs.active and lossy not in evs.active


def test_category_splits_good_into_active_and_backup():
    assert category("GOOD", True) == ACTIVE and category("GOOD", False) == BACKUP
    assert category("ASSUMED_BAD", False) == "ASSUMED_BAD" and category("SKIP", True) == "SKIP"


def _role(t, ev, active):
    return {"event": "ev_active", "t": t, "ev": ev, "active": active}


def _state(t, ev, old, new):
    return {"event": "ev_state", "t": t, "ev": ev, "old": old, "new": new}


def _load(t, sent):
    return {"event": "ev_load", "t": t, "interval": 0.05, "sent": {str(ev): n for ev, n in sent.items()}}


# A synthetic sender trace, times from the flow's start: EV 1 active and EV 2 its plane's
# backup, EV 3 active on another plane; EV 1 benched at 1.0076 s (between two 50 ms polls) and
# EV 2 joins at that instant; EV 1 resurrected as a backup at 1.5.
TRACE = [
    _role(0.001, 1, True), _role(0.001, 2, False), _role(0.001, 3, True),
    _load(0.05, {1: 5, 3: 5}), _load(0.5, {1: 10, 3: 10}), _load(1.0, {1: 4, 3: 4}),
    _state(1.0076, 1, "GOOD", "ASSUMED_BAD"), _role(1.0076, 1, False), _role(1.0076, 2, True),
    {"event": "rtt", "t": 1.1, "ev": 3, "rtt": 0.001},  # other records are ignored
    _load(1.05, {2: 3, 3: 3}), _load(1.5, {2: 7, 3: 7}),
    _state(1.5, 1, "ASSUMED_BAD", "GOOD"),
    _state(1.6, 3, "GOOD", "SKIP"), _state(1.65, 3, "SKIP", "GOOD"),
]


def test_bands_hold_every_change_at_its_own_time_however_short():
    out = bands(TRACE, 2.0)
    assert out[1] == [[0.001, 1.008, ACTIVE], [1.008, 1.5, "ASSUMED_BAD"], [1.5, 2.0, BACKUP]]
    assert out[2] == [[0.001, 1.008, BACKUP], [1.008, 2.0, ACTIVE]]
    # a 50 ms SKIP that a poll every 50 ms could miss
    assert out[3] == [[0.001, 1.6, ACTIVE], [1.6, 1.65, "SKIP"], [1.65, 2.0, ACTIVE]]
    # the bench and the role it costs, recorded at one instant, make one span, not two
    assert all(a < b for spans in out.values() for a, b, _ in spans)
    assert bands(list(reversed(TRACE)), 2.0) == out  # the order of the lines does not matter


def test_the_backup_that_took_over_was_idle_before_the_loss_and_active_after():
    plane_of = {1: 0, 2: 0, 3: 1}
    assert backup_taken(TRACE, plane_of, 1, 0.7) == 2
    assert backup_taken(TRACE, plane_of, 1, 0.0) is None  # no role known before the loss
    assert backup_taken(TRACE, {1: 0, 2: 1, 3: 1}, 1, 0.7) is None  # only its own plane's
    assert packets_between(TRACE, 2, 0.7, 2.0) == 10 and packets_between(TRACE, 2, 0.0, 1.0) == 0
    assert packets_between(TRACE, 1, 0.0, 1.0) == 19 and packets_between(TRACE, 2, 1.9, 2.0) == 0


def test_first_bad_is_the_first_bench_after_the_loss_began():
    changes = [[0.3, 1, "GOOD", "ASSUMED_BAD"], [0.4, 1, "ASSUMED_BAD", "GOOD"],
               [1.02, 2, "GOOD", "ASSUMED_BAD"], [1.05, 1, "GOOD", "SKIP"], [1.08, 1, "SKIP", "ASSUMED_BAD"]]
    assert first_bad(changes, 1, 1.0) == 1.08
    assert first_bad(changes, 3, 0.0) is None


@pytest.mark.parametrize(("overrides", "words"), [
    ({"transports": ("roce",)}, "transports mrc, spray only, not roce"),
    ({"fault_at": 0.3}, "--fault-at > 0.5"),
    ({"fabric": replace(FABRIC, hosts_per_leaf=2)}, "hosts-per-leaf 1"),
    ({"params": (("active_fraction", 2.0),)}, "--param"),
])
def test_ev_loss_refuses_what_it_cannot_measure(overrides, words):
    with pytest.raises(FabricError, match=words):
        default_options("ev-loss", **overrides)


def test_the_bench_is_timed_from_the_lost_packet_and_the_evs_packet_spacing_is_measured():
    records = [{"event": "ev_bad", "t": 0.9, "ev": 1, "rule": "sack", "age": 0.004},
               {"event": "rtt", "t": 1.1, "ev": 1, "rtt": 0.001},
               {"event": "ev_bad", "t": 1.3, "ev": 2, "rule": "sack", "age": 0.002},
               {"event": "ev_bad", "t": 1.2, "ev": 1, "rule": "dark", "age": 0.010}]
    assert first_bench(records, 1, 1.0) == records[3]  # after the loss began, this EV's
    assert first_bench(records, 3, 0.0) is None
    # EV 1 sent 5 + 10 packets in the intervals ending within [0.0, 0.6]: one every 40 ms
    assert packet_gap_ms(TRACE, 1, 0.0, 0.6) == 40.0
    assert packet_gap_ms(TRACE, 2, 0.0, 0.6) is None  # a backup sends nothing
