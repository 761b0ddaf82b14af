"""The emulator's face towards the Python API, without root: what it builds, and what it tells
each agent of the fabric (before this face, the testbed computed it from the emulation's
insides)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from endpoints.protocol.config import TransportConfig
from topologies import cluster, face, shaping
from topologies.emulation import Emulation
from topologies.model import build
from topologies.pathtables import agent_paths

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)


def test_the_factory_builds_either_kind_with_the_apis_settings(tmp_path):
    config = TransportConfig(mtu_payload=2048)
    local = face.emulator(FABRIC, tmp_path, (), datapath="user", detect_ms=50,
                          dataplane_mode="droptail", transport=config, switch="ovs")
    assert type(local) is Emulation
    em = face.whole(local)
    assert (em.datapath_requested, em.detect_ms, em.dataplane_mode, em.switch_requested) == \
        ("user", 50, "droptail", "ovs")
    assert em.transport is config
    split = face.emulator(FABRIC, tmp_path, ("head", "s1"), switch="linux")
    assert isinstance(face.whole(split), cluster.SplitEmulation)


def test_whole_takes_only_an_emulation():
    with pytest.raises(AssertionError, match="not an emulation"):
        face.whole(SimpleNamespace())  # type: ignore[arg-type]


def test_agent_settings_tell_the_path_table_ecn_pacing_and_the_control_class(tmp_path):
    em = Emulation(FABRIC, tmp_path)
    settings = em.agent_settings("h1")
    assert settings == {"paths": agent_paths(FABRIC, "h1"), "ecn_fabric": False, "nic_pacing": True,
                        "nic_burst_bytes": shaping.BURST_BYTES, "control_priority": shaping.CLASS_CONTROL}
    # ... the burst the host NICs are shaped with, the one the pacer's stamps allow for
    assert f"burst {shaping.BURST_BYTES} " in shaping.host_htb_batch(["h1-p0"], 10, 100, 4096)
    em.dataplane_info = {"mode": "ebpf"}  # the switches mark ECN
    assert em.agent_settings("h1")["ecn_fabric"] is True
    unshaped = Emulation(FABRIC, tmp_path, shape_links=False)
    assert unshaped.agent_settings("h0") | {"paths": None} == \
        {"paths": None, "ecn_fabric": False, "nic_pacing": False, "nic_burst_bytes": 0,
         "control_priority": 0}
