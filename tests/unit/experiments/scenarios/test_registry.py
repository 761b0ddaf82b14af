"""The scenario registry and every option check, without root: a bad option is refused with a
sentence naming it before anything starts."""

from __future__ import annotations

import re

import pytest

from experiments.scenarios import SCENARIOS, default_options, parse_transports, scenario
from experiments.scenarios.base import Kind
from topologies.model import FabricError, FabricParams


def test_every_scenario_has_a_kind_headline_figures_and_valid_defaults():
    assert list(SCENARIOS) == ["link-failure", "switch-failure", "t0-failure", "link-flap",
                               "lossy-link", "port-failure", "port-flap", "link-cascade",
                               "flap-together", "port-flaps", "uplink-failures", "permutation",
                               "incast", "ecn-balance", "ev-loss", "collective", "allreduce", "alltoall"]
    for name, sc in SCENARIOS.items():
        assert isinstance(sc.kind, Kind) and sc.kind.name
        assert sc.figures[-1] == "data_ok"
        overrides = {"senders": 5} if sc.kind.name == "incast" else {}
        opts = default_options(name, **overrides)
        assert opts.as_dict()["transports"] == list(sc.transports)


def test_each_kind_records_its_own_options():
    assert default_options("lossy-link").as_dict()["loss"] == 0.2
    assert {"flaps_per_min", "down_ms"} <= set(default_options("link-flap").as_dict())
    assert default_options("incast", senders=5).as_dict()["senders"] == 5
    assert {"steps", "step_kb"} <= set(default_options("collective").as_dict())
    assert default_options("link-cascade").as_dict()["fault_count"] == 20
    assert default_options("uplink-failures").as_dict()["fault_count"] == 6  # two planes' uplinks
    assert "fault_count" not in default_options("link-failure").as_dict()
    assert "loss" not in default_options("link-failure").as_dict()
    assert "capture" not in default_options("link-failure").as_dict()
    assert {"flaps_per_min", "down_ms"} <= set(default_options("port-flap").as_dict())
    assert "port_status" not in default_options("port-failure").as_dict()  # on: as before
    assert default_options("port-failure", port_status=False).as_dict()["port_status"] is False
    captured = default_options("link-failure", capture=("h1", "p0l0-eth2"), packet_log=5).as_dict()
    assert (captured["capture"], captured["packet_log"]) == (["h1", "p0l0-eth2"], 5)


@pytest.mark.parametrize("name, overrides, words", [
    ("lossy-link", {"loss": 1.5}, "--loss must be a finite number in [0, 1], got 1.5"),
    ("incast", {"senders": 40}, "at most"),
    ("link-failure", {"link": "p0l0-p0s9"}, "no link named"),
    ("lossy-link", {"link": "h0-p0l0"}, "is a host link: random loss applies to T0-T1 links"),
    ("port-failure", {"link": "p0l0-p0s1"}, "is a T0-T1 link: port-failure cuts a host's NIC link"),
    ("port-flap", {"down_ms": 2000.0}, "--down-ms shorter than one flap period"),
    ("switch-failure", {"fail_switch": "p0l0"}, "is a leaf"),
    ("t0-failure", {"fail_switch": "p0s1"}, "is a spine (T1): t0-failure takes a leaf"),
    ("t0-failure", {"link": "h0-p0l0"}, "--link does not apply to t0-failure"),
    ("t0-failure", {"params": (("ev_sets", 16),)}, "--param unknown transport parameter(s) ev_sets"),
    ("link-failure", {"fault_at": 5.0, "fault_end": 4.0}, "--fault-at < --fault-end"),
    ("collective", {"transports": ("tcp",)}, "agents' transports only"),
    ("link-flap", {"down_ms": 2000.0}, "--down-ms shorter than one flap period"),
    ("permutation", {"duration": 0.0}, "--duration must be a finite number in (0, 3600]"),
    ("link-failure", {"detect_ms": 0.0}, "--detect-ms"),
    ("collective", {"steps": 1}, "--steps must be a whole number in [2, 1000]"),
    ("link-failure", {"capture": ("h9",)}, "cannot capture 'h9'"),
    ("link-failure", {"capture": ("h0", "h0")}, "names a target twice"),
    ("link-failure", {"packet_log": -1}, "--packet-log must be a whole number in [0, 1e+06], got -1"),
    ("link-failure", {"packet_log": 1e9}, "--packet-log must be a whole number"),
    # Numbers that passed before and then crashed or hung a run (issue 11, item 12).
    ("permutation", {"duration": float("inf")}, "--duration must be a finite number"),
    ("permutation", {"duration": float("nan")}, "--duration must be a finite number"),
    ("permutation", {"duration": 1e9}, "in (0, 3600], got 1000000000.0"),
    ("link-failure", {"detect_ms": float("nan")}, "--detect-ms must be a finite number"),
    ("link-failure", {"detect_ms": 1e12}, "--detect-ms must be a finite number in (0, 60000]"),
    ("link-failure", {"fault_end": float("inf")}, "--fault-end must be a finite number"),
    ("collective", {"steps": 1_000_000_000}, "--steps must be a whole number in [2, 1000]"),
    ("collective", {"step_kb": 2.5}, "--step-kb must be a whole number"),
    ("link-failure", {"seed": -1}, "--seed must be a whole number"),
    ("link-failure", {"transports": ("mrc", "mrc")}, "lists a transport twice"),
    # Options that do not apply to the scenario are refused, naming it, not silently ignored.
    ("permutation", {"loss": 0.1}, "--loss does not apply to the permutation scenario"),
    ("link-failure", {"steps": 5}, "--steps does not apply to the link-failure scenario"),
    ("collective", {"duration": 5.0}, "--duration does not apply to the collective scenario"),
    ("incast", {"detect_ms": 900.0}, "--detect-ms does not apply to the incast scenario"),
    ("lossy-link", {"fail_switch": "p0s1"}, "--fail-switch does not apply to the lossy-link scenario"),
    ("ecn-balance", {"transports": ("mrc", "tcp")}, "mrc, spray only, not tcp"),
    ("ecn-balance", {"fault_at": 7.8}, "--fault-at (when the second flow is forced"),
    ("ecn-balance", {"fault_at": 0.2}, "--fault-at > 0.5"),
    ("ecn-balance", {"fabric": FabricParams(2, 2, 1, 2)}, "2+ spines"),
])
def test_bad_options_are_refused_with_their_name(name, overrides, words):
    with pytest.raises(FabricError, match=re.escape(words)):
        default_options(name, **overrides)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(FabricError, match="choose one of link-failure"):
        scenario("frobnicate")
    with pytest.raises(FabricError, match="unknown transport"):
        parse_transports("mrc,quic", ("mrc",))
    assert parse_transports("mrc, roce", ("mrc",)) == ("mrc", "roce")
    assert parse_transports(None, ("mrc",)) == ("mrc",)


def test_the_options_each_scenario_takes_are_accepted():
    default_options("lossy-link", loss=0.1, link="p0l0-p0s1", detect_ms=100.0)
    default_options("switch-failure", fail_switch="p0s1")
    default_options("t0-failure", fail_switch="p0l0")
    ev = default_options("ev-loss", loss=0.3, params=(("active_fraction", 0.5), ("backup_min_paths", 2)))
    assert ev.as_dict()["params"] == {"active_fraction": 0.5, "backup_min_paths": 2}
    assert (ev.transport().active_fraction, ev.transport().port_status) == (0.5, True)
    default_options("link-flap", flaps_per_min=30.0, down_ms=200.0)
    default_options("incast", senders=3, duration=5.0, fault_at=1.0, fault_end=4.0)
    default_options("collective", steps=4, step_kb=16, link="p0l0-p0s1")
    default_options("permutation", duration=3.0, seed=7, transports=("mrc", "roce"))


def test_capacity_terms_are_each_kinds_own():
    # One home for what the capacity check and auto take from a scenario (the runner's and the
    # docs' table of auto's picks read it here, so they cannot disagree).
    from topologies.model import Fabric

    perm = default_options("permutation")
    terms = perm.scenario.kind.capacity_terms(perm, Fabric(perm.fabric))
    assert terms["queues_stand"] is True and terms["duration"] == perm.duration
    assert terms["busy_senders"] == perm.fabric.leaves * perm.fabric.hosts_per_leaf
    assert terms["mtu_payload"] == perm.transport().mtu_payload
    big = default_options("permutation", params=(("mtu_payload", 2048),))
    assert big.scenario.kind.capacity_terms(big, Fabric(big.fabric))["mtu_payload"] == 2048
    coll = default_options("collective")
    assert coll.scenario.kind.capacity_terms(coll, Fabric(coll.fabric))["duration"] is None  # in steps
    ring = default_options("allreduce")
    terms = ring.scenario.kind.capacity_terms(ring, Fabric(ring.fabric))
    assert terms["queues_stand"] is False and terms["agent_cost"] == ring.scenario.kind.agent_cost(ring) > 1.0
