"""Who sends to whom, without root."""

from __future__ import annotations

import pytest

from experiments.api import traffic
from topologies.model import build


@pytest.mark.parametrize("n, seed", [(2, 1), (6, 1), (6, 2), (16, 7)])
def test_derangement_is_a_seeded_permutation_with_no_fixed_point(n, seed):
    names = [f"h{i}" for i in range(n)]
    perm = traffic.derangement(names, seed)
    assert sorted(perm) == sorted(perm.values()) == sorted(names)
    assert all(src != dst for src, dst in perm.items())
    assert perm == traffic.derangement(names, seed)  # reproducible from the seed


def test_incast_roles_keep_the_victim_off_the_crowd():
    names = [f"h{i}" for i in range(8)]
    roles = traffic.incast_roles(names, 3)
    assert roles.receiver == "h7" and roles.victim == ("h0", "h6")
    assert roles.senders == ["h1", "h2", "h3"]
    assert len(traffic.incast_roles(names, 99).senders) == 5  # everyone else, no more


def test_ring_and_cross_leaf_pair():
    assert traffic.ring(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]
    fabric = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    src, dst = traffic.cross_leaf_pair(fabric)
    assert fabric.host(src).leaf_index == 0 and fabric.host(dst).leaf_index == 2
    assert all(route.spine is not None for route in fabric.routes(src, dst))
