"""The testbed hands one TransportConfig to both the switch data plane and the agents."""

from __future__ import annotations

import pytest

from endpoints.protocol.config import TransportConfig
from experiments.api import testbed
from experiments.api.testbed import transport_overrides
from topologies.model import FabricError, build


def test_agents_are_told_only_what_differs_from_the_defaults():
    assert transport_overrides(TransportConfig()) == {}
    assert transport_overrides(TransportConfig(mtu_payload=1024, probe_interval=0.01)) == \
        {"mtu_payload": 1024, "probe_interval": 0.01}


def test_the_switches_get_the_same_config_as_the_agents(tmp_path):
    config = TransportConfig(mtu_payload=2048)
    bed = testbed.Testbed(build(planes=1, leaves=2, spines=1, hosts_per_leaf=1), tmp_path, transport=config)
    assert bed.em.transport is config  # nothing started: the constructor only wires things up
    assert transport_overrides(bed.transport) == {"mtu_payload": 2048}


def test_progress_line_says_why_auto_fell_back():
    from types import SimpleNamespace

    from experiments.api.testbed import describe_switches

    em = SimpleNamespace(switch_backend="ovs", datapath="user", switch_choice="asked for")
    assert describe_switches(em) == "ovs switches, user datapath"  # type: ignore[arg-type]
    em.switch_choice = "auto: ovs"
    assert describe_switches(em) == "ovs switches, user datapath"  # type: ignore[arg-type]
    em.switch_choice = "auto: ovs; not linux (no NEXT-C-SID here)"
    assert describe_switches(em) == ("ovs switches, user datapath; "  # type: ignore[arg-type]
                                     "auto: ovs; not linux (no NEXT-C-SID here)")
    linux = SimpleNamespace(switch_backend="linux", datapath="", switch_choice="asked for")
    assert describe_switches(linux) == "linux switches"  # type: ignore[arg-type]


def test_unknown_agent_processes_is_one_line_before_anything_is_made(tmp_path):
    fabric = build(planes=2, leaves=2, spines=1, hosts_per_leaf=1)
    with pytest.raises(FabricError, match="unknown agent processes 'threads': use one of shared, per-host"):
        testbed.Testbed(fabric, workdir=tmp_path / "bed", agents="threads")
    assert not (tmp_path / "bed").exists()
    with pytest.raises(FabricError, match="unknown agent processes"):
        testbed.start_agents(None, ["h0"], tmp_path, seed=1, processes="one")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
