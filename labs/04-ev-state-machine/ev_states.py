"""Lab 4, the EV state machine: what an MRC sender does when a path fails and when it heals.

`LabEvSet` is the sender's EV set (`endpoints/protocol/evset.py`) with your version of the two
transitions a failure drives; everything else (spraying, skips, denial) is the product's. Read
`EvSet` first: `self.state`, `self.active`, `self.backup`, `self.plane`, `self._set`. Fill in each
TODO between its `# TODO N` and `# END TODO N` lines, then run `make check-lab N=4`.

    GOOD/SKIP --(a real loss or a timeout)--> ASSUMED_BAD    mark_bad
    ASSUMED_BAD --(`needed` probe replies in a row)--> GOOD   probe_result
"""

from __future__ import annotations

from endpoints.protocol.evset import ASSUMED_BAD, GOOD, SKIP, EvSet


class LabEvSet(EvSet):
    def mark_bad(self, ev: int, now: float) -> bool:
        """A real loss or a timeout on `ev`: bench it at once. Returns False when the floor keeps
        it in use (no backup to take its place and no more than `min_active` usable EVs)."""
        if self.stateless:
            return False  # plain spraying (the `spray` transport) keeps no path state
        if self.state.get(ev) not in (GOOD, SKIP):
            return False
        plane = self.plane[ev]
        # TODO 1: a GOOD backup of the same plane (from self.backup[plane]), or None
        spare = None
        # END TODO 1
        # TODO 2: the floor: an active EV with no spare stays in use (return False) when
        # len(self.usable()) is already at or below self.min_active
        # END TODO 2
        # TODO 3: bench it: state ASSUMED_BAD (with self._set, which records the change), the
        # time in self.bad_since[ev], its run of successful probes self.probe_ok[ev] at 0
        # END TODO 3
        # TODO 4: out of the active set, the spare (if any) in from the plane's backups; a
        # benched backup just leaves the backups
        # END TODO 4
        return True

    def probe_result(self, ev: int, ok: bool, needed: int) -> bool:
        """A probe of the benched `ev` was answered (`ok`) or timed out. True when this brings
        it back: `needed` successes in a row."""
        if self.state.get(ev) != ASSUMED_BAD:
            return False
        # TODO 5: count the run of successes in self.probe_ok[ev] (a failure starts it again
        # from 0); below `needed`, it stays benched: return False
        # END TODO 5
        # TODO 6: resurrect it: GOOD, back among its plane's backups, then
        # self._rebalance(plane) refills the active slot its failure emptied; return True
        return False
        # END TODO 6
