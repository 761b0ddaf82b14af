import random
from collections import Counter

from endpoints.protocol.evset import ASSUMED_BAD, DENIED, GOOD, SKIP, EvInfo, EvSet, spread_over_planes


def _evs(planes, per_plane):
    return [EvInfo((p << 16) | i, p) for p in range(planes) for i in range(per_plane)]


def _set(planes=4, per_plane=8, **kw):
    args = dict(active_fraction=0.75, min_active=2, skip_rotations=1, rng=random.Random(3))
    args.update(kw)
    return EvSet(_evs(planes, per_plane), **args)


def test_set_is_spread_evenly_over_planes_and_capped():
    chosen = spread_over_planes(_evs(8, 64), 256)
    assert len(chosen) == 256
    assert Counter(e.plane for e in chosen) == {p: 32 for p in range(8)}
    s = _set(4, 8)
    assert Counter(s.plane[e] for e in s.active) == {p: 6 for p in range(4)}
    assert all(len(b) == 2 for b in s.backup.values())


def test_every_active_ev_once_per_rotation_and_planes_equal():
    s = _set(4, 8)
    used = [s.next_ev() for _ in range(len(s.active) * 10)]
    counts = Counter(used)
    assert set(counts) == set(s.active)
    assert set(counts.values()) == {10}
    assert len(set(used[:5])) == 5  # consecutive packets go to different EVs


def test_bad_ev_replaced_by_backup_of_same_plane_and_never_used():
    s = _set(4, 8)
    victim = s.active[0]
    plane = s.plane[victim]
    assert s.mark_bad(victim, 1.0)
    assert s.state[victim] == ASSUMED_BAD and victim not in s.active
    assert sum(1 for e in s.active if s.plane[e] == plane) == 6  # a backup stepped in
    assert victim not in {s.next_ev() for _ in range(500)}


def test_moves_record_every_evs_starting_role_then_each_join_and_leave():
    s = _set(2, 4, active_fraction=0.5)
    start = dict(s.moves)
    assert set(start) == set(s.plane) and {ev for ev, a in start.items() if a} == set(s.active)
    s.moves.clear()
    victim = s.active[0]
    spare = next(b for b in s.backup[s.plane[victim]] if s.state[b] == GOOD)
    assert s.mark_bad(victim, 1.0)
    assert sorted(s.moves) == sorted([(victim, False), (spare, True)])
    s.moves.clear()
    s.skip(s.active[0])  # a state change that leaves the set as it is
    assert s.moves == []
    plane = 1
    parked = [e for e in s.active if s.plane[e] == plane]
    assert s.park(plane) and sorted(s.moves) == sorted((e, False) for e in parked)
    s.moves.clear()
    assert s.unpark(plane) and sorted(s.moves) == sorted((e, True) for e in parked)


def test_plane_keeps_its_share_when_it_runs_out_of_backups():
    s = _set(4, 2, active_fraction=1.0)
    s.mark_bad((1 << 16) | 0, 0.0)
    share = Counter(s.plane[s.next_ev()] for _ in range(800))
    assert all(abs(n - 200) <= 8 for n in share.values()), share


def test_skip_lasts_about_one_rotation():
    s = _set(1, 4, active_fraction=1.0)
    ev = s.active[0]
    s.skip(ev)
    assert s.state[ev] == SKIP
    nxt = [s.next_ev() for _ in range(12)]
    assert ev not in nxt[:3]  # the rest of this rotation
    assert s.state[ev] == GOOD and ev in nxt  # back within the next rotations


def test_probes_resurrect_after_consecutive_successes():
    s = _set(2, 4)
    ev = s.active[0]
    s.mark_bad(ev, 0.0)
    assert not s.probe_result(ev, True, 3)
    assert not s.probe_result(ev, False, 3)  # a failure resets the count
    assert not s.probe_result(ev, True, 3)
    assert not s.probe_result(ev, True, 3)
    assert s.probe_result(ev, True, 3)
    assert s.state[ev] == GOOD
    changes = [c for c in s.changes if c[0] == ev]
    assert changes == [(ev, GOOD, ASSUMED_BAD), (ev, ASSUMED_BAD, GOOD)]


def test_floor_stops_marking_too_many_bad():
    s = _set(1, 4, active_fraction=1.0, min_active=2)
    evs = list(s.active)
    assert s.mark_bad(evs[0], 0) and s.mark_bad(evs[1], 0)
    assert not s.mark_bad(evs[2], 0)  # would leave fewer than the floor
    assert s.state[evs[2]] == GOOD


def test_denied_is_never_used_and_all_bad_falls_back():
    s = _set(1, 3, active_fraction=1.0, min_active=1)
    a, b, c = s.active
    s.deny(a)
    assert s.state[a] == DENIED
    assert a not in {s.next_ev() for _ in range(100)}
    s.mark_bad(b, 1.0)
    assert {s.next_ev() for _ in range(10)} == {c}


def test_floor_still_lets_a_backup_take_a_failed_evs_place():
    """Regression: at the floor, an EV that failed was kept in use even with a GOOD backup of its
    plane ready, although swapping the backup in leaves as many usable EVs (a stalled transfer
    in test_core_transport.test_floor_does_not_keep_dead_evs_while_a_backup_waits)."""
    s = _set(1, 3, active_fraction=0.67, min_active=2)  # 2 active (the floor), 1 backup
    a, b = s.active
    assert s.mark_bad(a, 1.0)
    assert s.state[a] == ASSUMED_BAD and a not in s.active and len(s.usable()) == 2
    assert not s.mark_bad(b, 1.0)  # no backup left: now the floor holds
    assert s.state[b] == GOOD
