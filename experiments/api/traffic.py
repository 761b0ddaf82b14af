"""Who sends to whom: the traffic patterns of the scenarios, as pure functions of the fabric
(and a seed), so they are unit-tested without root.

>>> from topologies.model import build
>>> fabric = build(planes=1, leaves=2, spines=1, hosts_per_leaf=2)
>>> cross_leaf_pair(fabric)
('h0', 'h3')
>>> ring([h.name for h in fabric.hosts])
[('h0', 'h1'), ('h1', 'h2'), ('h2', 'h3'), ('h3', 'h0')]
"""

from __future__ import annotations

import random
from typing import NamedTuple

from topologies.model import Fabric


def cross_leaf_pair(fabric: Fabric) -> tuple[str, str]:
    """The first host of the first leaf and the last host of the last leaf: every route
    between them crosses a spine (when there are two leaves or more)."""
    first = next(h for h in fabric.hosts if h.leaf_index == 0)
    last = next(h for h in reversed(fabric.hosts) if h.leaf_index == fabric.params.leaves - 1)
    return first.name, last.name


def derangement(names: list[str], seed: int) -> dict[str, str]:
    """A seeded random permutation with no host sending to itself."""
    rng = random.Random(seed)
    while True:
        shuffled = names[:]
        rng.shuffle(shuffled)
        if all(a != b for a, b in zip(names, shuffled, strict=True)):
            return dict(zip(names, shuffled, strict=True))


class IncastRoles(NamedTuple):
    senders: list[str]
    receiver: str
    victim: tuple[str, str]  # (src, dst): dst shares the receiver's leaf


def incast_roles(names: list[str], senders: int) -> IncastRoles:
    """The last host receives the incast; the victim flow goes from the first host to the
    second last (the receiver's leaf neighbour); up to `senders` of the others send."""
    receiver, victim_dst, victim_src = names[-1], names[-2], names[0]
    crowd = [h for h in names if h not in (receiver, victim_dst, victim_src)][:senders]
    return IncastRoles(crowd, receiver, (victim_src, victim_dst))


def ring(names: list[str]) -> list[tuple[str, str]]:
    """Each host sends to its right neighbour, the last to the first."""
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
