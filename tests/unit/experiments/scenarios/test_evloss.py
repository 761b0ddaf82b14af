"""ev-loss's pure pieces: which EV is made lossy, each EV's state spans for the Fig. 13 plot,
which backup took the lossy EV's place, when it was benched; and the options it refuses."""

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
    sent_between,
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


SAMPLES = [
    (0.0, {1: ("GOOD", True, 0), 2: ("GOOD", False, 0)}),
    (0.5, {1: ("GOOD", True, 1000), 2: ("GOOD", False, 0)}),
    (1.0, {1: ("ASSUMED_BAD", False, 1500), 2: ("GOOD", True, 200)}),
    (1.5, {1: ("GOOD", False, 1600), 2: ("GOOD", True, 900)}),
]


def test_bands_merge_equal_neighbours_and_last_until_the_end():
    out = bands(SAMPLES, 2.0)
    assert out[1] == [[0.0, 1.0, ACTIVE], [1.0, 1.5, "ASSUMED_BAD"], [1.5, 2.0, BACKUP]]
    assert out[2] == [[0.0, 1.0, BACKUP], [1.0, 2.0, ACTIVE]]


def test_the_backup_that_took_over_was_idle_before_the_loss_and_active_after():
    plane_of = {1: 0, 2: 0, 3: 1}
    assert backup_taken(SAMPLES, plane_of, 1, 0.7) == 2
    assert backup_taken(SAMPLES, plane_of, 1, 0.0) is None  # no sample before the loss
    other_plane = [(t, {**evs, 3: ("GOOD", t >= 1.0, 0)}) for t, evs in SAMPLES]
    assert backup_taken(other_plane, {1: 0, 2: 1, 3: 1}, 1, 0.7) is None  # only its own plane's
    assert sent_between(SAMPLES, 2, 0.7, 2.0) == 700 and sent_between(SAMPLES, 2, 0.0, 0.6) == 0
    assert sent_between(SAMPLES, 2, 1.9, 2.0) is None


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
    # EV 1 sent 1000 bytes in the 0.5 s between the samples at 0.0 and 0.5: ten 100-byte packets
    assert packet_gap_ms(SAMPLES, 1, 0.0, 0.6, 100) == 50.0
    assert packet_gap_ms(SAMPLES, 2, 0.0, 0.6, 100) is None  # a backup sends nothing
