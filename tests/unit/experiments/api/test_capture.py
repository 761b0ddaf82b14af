"""What a capture target names, from the model alone (no root)."""

import pytest

from experiments.api.capture import resolve
from topologies.model import FabricError, build

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)


@pytest.mark.parametrize("target, where", [
    ("h1", ("h1", "any")),  # every NIC, in the host's namespace
    ("h1-eth1", ("h1", "h1-eth1")),  # one NIC
    ("p0l0-eth1", ("p0l0", "p0l0-eth1")),  # a leaf's host-facing port
    ("p1l1-eth3", ("p1l1", "p1l1-eth3")),  # a leaf's uplink to spine 1
    ("p1s0-eth2", ("p1s0", "p1s0-eth2")),  # a spine's port to leaf 1
])
def test_targets_resolve_to_the_node_that_owns_the_interface(target, where):
    assert resolve(FABRIC, target) == where


@pytest.mark.parametrize("target", ["h9", "h1-eth7", "p0l0-eth9", "p0s0", "p0l0-p0s0", ""])
def test_anything_else_is_refused_with_the_forms_it_takes(target):
    with pytest.raises(FabricError, match="a host .h1., a host NIC .h1-eth0. or a switch port"):
        resolve(FABRIC, target)
