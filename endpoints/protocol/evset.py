"""The sender's EV set and per-EV state machine.

GOOD ---(ECN echo / TRIMMED NACK)--> SKIP ---(a rotation and `skip_for` s later)--> GOOD
GOOD/SKIP ---(real loss or timeout)--> ASSUMED_BAD: leaves the active set at once, a backup of
    the same plane takes its place; probed in the background
ASSUMED_BAD ---(probes_to_resurrect probe replies in a row)--> GOOD (back as a backup, or active
    when its plane is short)
any ---(operator)--> DENIED: never used again

A plane whose NIC port is down (here or at the peer: endpoints/protocol/portstatus.py) is
parked: its active EVs leave the set with their state kept and no backup takes their place,
until the port returns and they come back as they were.

Spraying walks the active set in a fresh pseudo-random order each rotation (a shuffled deck), so
every active EV carries one packet per rotation: an even spread with no coordination, and
"skip for one rotation" has a precise meaning. With a NIC that paces (`next_ev(plane_ok)`), the
plane is chosen first, by which NIC port can take a packet now, and the EV from that plane's
own deck, so a port never idles while a packet waits for a busy one.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

GOOD, SKIP, ASSUMED_BAD, DENIED = "GOOD", "SKIP", "ASSUMED_BAD", "DENIED"


class EvInfo(NamedTuple):
    ev: int  # 32-bit entropy value, opaque to the core
    plane: int  # which plane the EV's path crosses (backups come from the same plane)


class EvReport(NamedTuple):
    """One forward EV of a sending QP as it is now: what `evs` in the CLI shows."""
    ev: int
    state: str
    active: bool  # in the active set (False: a backup, benched or denied)
    skips: int  # times it entered SKIP (ECN echo, trimmed NACK, delay)
    benched: int  # times it went ASSUMED_BAD (a real loss or a timeout)
    srtt: float | None  # its own smoothed RTT, s; None before its first sample
    bytes_sent: int  # payload bytes sent on it, retransmissions included


def spread_over_planes(evs: Sequence[EvInfo], limit: int) -> list[EvInfo]:
    """Up to `limit` EVs, taken round-robin across planes so every plane gets an even share."""
    by_plane: dict[int, list[EvInfo]] = {}
    for info in evs:
        by_plane.setdefault(info.plane, []).append(info)
    chosen: list[EvInfo] = []
    queues = [list(v) for _, v in sorted(by_plane.items())]
    while len(chosen) < limit and any(queues):
        for q in queues:
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    return chosen


class EvSet:
    def __init__(self, evs: Sequence[EvInfo], active_fraction: float, min_active: int,
                 skip_rotations: int, rng: random.Random, limit: int = 256,
                 stateless: bool = False, backup_min_paths: int = 0) -> None:
        """`backup_min_paths`: a plane with fewer EVs keeps no backups (0: backups always);
        with backups each set picks its own at random (`rng`)."""
        if not evs:
            raise ValueError("an EV set needs at least one EV")
        chosen = spread_over_planes(evs, limit)
        self.plane = {e.ev: e.plane for e in chosen}
        if len(self.plane) != len(chosen):
            raise ValueError("EV values must be unique")
        self.state = {e.ev: GOOD for e in chosen}
        # Stateless: plain packet spraying (the `spray` transport), every EV stays GOOD whatever
        # happens to it; what the state machine adds is measured against this.
        self.stateless = stateless
        self.rng = rng
        self.min_active = min_active
        self.skip_rotations = skip_rotations
        self.active: list[int] = []
        self.backup: dict[int, list[int]] = {}
        self._plane_active_target: dict[int, int] = {}
        by_plane: dict[int, list[int]] = {}
        for e in chosen:
            by_plane.setdefault(e.plane, []).append(e.ev)
        for plane, plane_evs in sorted(by_plane.items()):
            if len(plane_evs) < backup_min_paths:
                n_active = len(plane_evs)
            else:
                n_active = max(1, round(len(plane_evs) * active_fraction))
                if n_active < len(plane_evs) and backup_min_paths:
                    rng.shuffle(plane_evs)  # each QP its own backups: no path left out by all
            self.active += plane_evs[:n_active]
            self.backup[plane] = plane_evs[n_active:]
            self._plane_active_target[plane] = n_active
        self.skip_until: dict[int, int] = {}  # ev -> rotation number it may be used again
        self.skip_until_t: dict[int, float] = {}  # ev -> and not before this time
        self.now = 0.0  # the caller's clock, set before next_ev (time-bounded skips)
        self.rotation = 0
        # Paced spraying: one deck and rotation count per plane, planes taken in turn.
        self._paced = False
        self._planes = sorted(by_plane)
        self._plane_cursor = 0
        self._plane_deck: dict[int, list[int]] = {p: [] for p in self._planes}
        self._plane_rot: dict[int, int] = dict.fromkeys(self._planes, 0)
        self._deck: list[int] = []
        self.bad_since: dict[int, float] = {}
        self.probe_ok: dict[int, int] = {}
        self.changes: list[tuple[int, str, str]] = []  # (ev, old, new), drained by the sender
        self.entered: Counter[tuple[int, str]] = Counter()  # (ev, state) -> times it entered it
        self.parked: dict[int, list[int]] = {}  # plane -> its active EVs while its port is down
        # (ev, active) joins and leaves of the active set (`moves`), every EV's starting role first
        self._was_active = set(self.active)
        self._moves: list[tuple[int, bool]] = [(ev, ev in self._was_active) for ev in self.plane]

    # ----- queries --------------------------------------------------------------------------
    @property
    def moves(self) -> list[tuple[int, bool]]:
        """(ev, active) joins and leaves of the active set so far, drained by the sender (clear
        the list). Read against the set as it is now, so a transition written elsewhere (a lab's
        `mark_bad`) is recorded too; the set's own transitions record each step as they go."""
        self._note_moves()
        return self._moves

    def usable(self) -> list[int]:
        return [ev for ev in self.active if self.state[ev] in (GOOD, SKIP)]

    def bad(self) -> list[int]:
        return [ev for ev, s in self.state.items() if s == ASSUMED_BAD]

    def any_bad(self) -> bool:
        """`bool(bad())` without the list: the sender asks on every loop."""
        return ASSUMED_BAD in self.state.values()

    def counts(self) -> dict[str, int]:
        out = {GOOD: 0, SKIP: 0, ASSUMED_BAD: 0, DENIED: 0}
        for s in self.state.values():
            out[s] += 1
        return out

    # ----- spraying -------------------------------------------------------------------------
    def _skip_over(self, ev: int, rotation: int) -> bool:
        return rotation >= self.skip_until.get(ev, 0) and self.now >= self.skip_until_t.get(ev, 0.0)

    def next_ev(self) -> int:
        """The EV for the next packet: the next card of this rotation's shuffled deck."""
        for _ in range(3):
            while self._deck:
                ev = self._deck.pop()
                state = self.state[ev]
                if state == GOOD:
                    return ev
                if state == SKIP and self._skip_over(ev, self.rotation):
                    self._set(ev, GOOD)
                    return ev
            self._new_deck()
        skipped = [ev for ev in self.active if self.state[ev] == SKIP]
        if skipped:
            # Every usable EV is skipped: a skip says "prefer the others", and there are none;
            # spread over the skipped ones rather than pile on one.
            return self.rng.choice(skipped)
        return self._fallback()

    def next_ev_paced(self, plane_ok: Callable[[int], bool]) -> int | None:
        """`next_ev` for a NIC that paces (endpoints/protocol/nicpacer.py): the plane is the
        next in turn among those whose port can take a packet now (`plane_ok`), the EV the next
        card of that plane's own deck; None when every plane with a usable EV is busy (the
        caller waits for a port)."""
        self._paced = True
        planes = self._planes
        n = len(planes)
        busy = []
        for k in range(n):
            plane = planes[(self._plane_cursor + k) % n]
            if not plane_ok(plane):
                busy.append(plane)
                continue
            ev = self._deal(plane)
            if ev is not None:
                self._plane_cursor = (self._plane_cursor + k + 1) % n
                return ev
        # Nothing dealt. Wait for a port if a busy one has a usable EV (asked only now: most
        # calls deal a card, and the one per wake-up that finds every port busy asks once).
        return None if busy and self._usable_on(busy) else self._fallback()

    def _usable_on(self, planes: list[int]) -> bool:
        """Whether an active EV on one of `planes` is usable (GOOD or SKIP)."""
        state, plane = self.state, self.plane
        for ev in self.active:
            if plane[ev] in planes and state[ev] in (GOOD, SKIP):
                return True
        return False

    def _deal(self, plane: int) -> int | None:
        """The next card of `plane`'s own deck (one rotation over its usable active EVs)."""
        deck = self._plane_deck[plane]
        for _ in range(2):
            while deck:
                ev = deck.pop()
                if ev in self.active and self._dealable(ev, plane):
                    if self.state[ev] == SKIP:
                        self._set(ev, GOOD)
                    return ev
            self._plane_rot[plane] += 1
            deck += [ev for ev in self.active if self.plane[ev] == plane and self._dealable(ev, plane)]
            self.rng.shuffle(deck)
        # Every usable EV of the plane is skipped: spread over the skipped ones rather than
        # idle the port or pile on one EV.
        skipped = [ev for ev in self.active if self.plane[ev] == plane and self.state[ev] == SKIP]
        return self.rng.choice(skipped) if skipped else None

    def _dealable(self, ev: int, plane: int) -> bool:
        state = self.state[ev]
        return state == GOOD or (state == SKIP and self._skip_over(ev, self._plane_rot[plane]))

    def _new_deck(self) -> None:
        """One rotation: every plane gets the same number of cards (its usable EVs, repeated up
        to the largest plane's count), shuffled within the plane, then interleaved. A plane that
        lost an EV keeps its share on its surviving EVs, as backup swap-in does with larger sets."""
        self.rotation += 1
        by_plane: dict[int, list[int]] = {}
        for ev in self.active:
            state = self.state[ev]
            if state == GOOD or (state == SKIP and self._skip_over(ev, self.rotation)):
                by_plane.setdefault(self.plane[ev], []).append(ev)
        if not by_plane:
            self._deck = []
            return
        width = max(len(v) for v in by_plane.values())
        columns = []
        for evs in by_plane.values():
            cards = [evs[i % len(evs)] for i in range(width)]
            self.rng.shuffle(cards)
            columns.append(cards)
        self.rng.shuffle(columns)
        self._deck = [col[i] for i in range(width) for col in columns]

    def _fallback(self) -> int:
        """Nothing usable is active: use the least recently failed EV rather than stop."""
        candidates = [ev for ev, s in self.state.items() if s != DENIED]
        if not candidates:
            raise RuntimeError("every EV is DENIED: nothing to send on")
        return min(candidates, key=lambda ev: -self.bad_since.get(ev, float("-inf")))

    # ----- state changes --------------------------------------------------------------------
    def _note_moves(self) -> None:
        """Record which EVs joined or left the active set since the last call (after every
        change of the set: rare, so a diff rather than bookkeeping at each list edit)."""
        now_active = set(self.active)
        if now_active != self._was_active:
            self._moves += [(ev, ev in now_active) for ev in self.plane
                           if (ev in now_active) != (ev in self._was_active)]
            self._was_active = now_active

    def _set(self, ev: int, new: str) -> None:
        old = self.state[ev]
        if old != new:
            self.state[ev] = new
            self.changes.append((ev, old, new))
            self.entered[ev, new] += 1

    def skip(self, ev: int, until_t: float = 0.0) -> bool:
        """Skip `ev` for `skip_rotations` rotations and until `until_t`; True if it was GOOD
        (the skip took effect)."""
        if self.stateless or self.state.get(ev) != GOOD:
            return False
        rotation = self._plane_rot[self.plane[ev]] if self._paced else self.rotation
        self.skip_until[ev] = rotation + self.skip_rotations + 1
        self.skip_until_t[ev] = until_t
        self._set(ev, SKIP)
        return True

    def mark_bad(self, ev: int, now: float) -> bool:
        """A real loss or a timeout on `ev`. Returns False if the floor kept it in use."""
        if self.stateless:
            return False
        if self.state.get(ev) not in (GOOD, SKIP):
            return False
        plane = self.plane[ev]
        spare = next((b for b in self.backup[plane] if self.state[b] == GOOD), None)
        if ev in self.active and spare is None and len(self.usable()) <= self.min_active:
            return False  # the floor: only when no backup would take its place
        self._set(ev, ASSUMED_BAD)
        self.bad_since[ev] = now
        self.probe_ok[ev] = 0
        if ev in self.active:
            self.active.remove(ev)
            if spare is not None:
                self.backup[plane].remove(spare)
                self.active.append(spare)
        elif ev in self.backup.get(plane, []):
            self.backup[plane].remove(ev)
        self._note_moves()
        return True

    def probe_result(self, ev: int, ok: bool, needed: int) -> bool:
        """Record a probe outcome for an ASSUMED_BAD EV; True when it is resurrected."""
        if self.state.get(ev) != ASSUMED_BAD:
            return False
        self.probe_ok[ev] = self.probe_ok.get(ev, 0) + 1 if ok else 0
        if self.probe_ok[ev] < needed:
            return False
        self._set(ev, GOOD)
        plane = self.plane[ev]
        self.backup[plane].append(ev)
        self._rebalance(plane)
        self._note_moves()
        return True

    def _rebalance(self, plane: int) -> None:
        """Keep the plane's active share: a resurrected EV fills a slot its failure emptied."""
        if plane in self.parked:
            return  # its port is down: nothing of it is active until it returns
        want = self._plane_active_target[plane]
        active = [a for a in self.active if self.plane[a] == plane]
        while len(active) < want and self.backup[plane]:
            ev = self.backup[plane].pop(0)
            self.active.append(ev)
            active.append(ev)

    def deny(self, ev: int) -> None:
        if ev not in self.state:
            raise KeyError(f"EV {ev:#x} is not in this QP's set")
        self._set(ev, DENIED)
        if ev in self.active:
            self.active.remove(ev)
        for b in (*self.backup.values(), *self.parked.values()):
            if ev in b:
                b.remove(ev)
        self._note_moves()

    # ----- NIC ports ------------------------------------------------------------------------
    def park(self, plane: int) -> bool:
        """Take `plane` out of use (its port is down): its active EVs leave the set, states
        kept, no backup in their place; the decks are dealt again without them. False if it
        was parked already or is no plane of this set."""
        if plane in self.parked or plane not in self.backup:
            return False
        self.parked[plane] = [ev for ev in self.active if self.plane[ev] == plane]
        self.active = [ev for ev in self.active if self.plane[ev] != plane]
        self._deck = []
        self._plane_deck[plane].clear()
        self._note_moves()
        return True

    def unpark(self, plane: int) -> bool:
        """`plane`'s port is back: its parked EVs that are still usable return to the active
        set (those found bad meanwhile stay out, probed), backups fill the rest of its share."""
        evs = self.parked.pop(plane, None)
        if evs is None:
            return False
        self.active += [ev for ev in evs if self.state[ev] in (GOOD, SKIP)]
        self._rebalance(plane)
        self._deck = []
        self._note_moves()
        return True
