"""The scenario registry and every option check, without root: a bad option is refused with a
sentence naming it before anything starts."""

from __future__ import annotations

import pytest

from experiments.scenarios import SCENARIOS, default_options, parse_transports, scenario
from experiments.scenarios.base import Kind
from topologies.model import FabricError


def test_every_scenario_has_a_kind_headline_figures_and_valid_defaults():
    assert list(SCENARIOS) == ["link-failure", "switch-failure", "link-flap", "lossy-link",
                               "permutation", "incast", "collective"]
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
    assert "loss" not in default_options("link-failure").as_dict()
    assert "capture" not in default_options("link-failure").as_dict()
    captured = default_options("link-failure", capture=("h1", "p0l0-eth2"), packet_log=5).as_dict()
    assert (captured["capture"], captured["packet_log"]) == (["h1", "p0l0-eth2"], 5)


@pytest.mark.parametrize("name, overrides, words", [
    ("lossy-link", {"loss": 1.5}, "probability in [0, 1]"),
    ("incast", {"senders": 40}, "at most"),
    ("link-failure", {"link": "p0l0-p0s9"}, "no link named"),
    ("link-failure", {"link": "h0-p0l0"}, "is a host link"),
    ("switch-failure", {"fail_switch": "p0l0"}, "is a leaf"),
    ("link-failure", {"fault_at": 5.0, "fault_end": 4.0}, "--fault-at < --fault-end"),
    ("collective", {"transports": ("tcp",)}, "agents' transports only"),
    ("link-flap", {"down_ms": 2000.0}, "--down-ms shorter than one flap period"),
    ("permutation", {"duration": 0.0}, "--duration must be > 0"),
    ("link-failure", {"detect_ms": 0.0}, "--detect-ms"),
    ("collective", {"steps": 1}, "--steps 2 or more"),
    ("link-failure", {"capture": ("h9",)}, "cannot capture 'h9'"),
    ("link-failure", {"capture": ("h0", "h0")}, "names a target twice"),
    ("link-failure", {"packet_log": -1}, "--packet-log must be >= 0"),
])
def test_bad_options_are_refused_with_their_name(name, overrides, words):
    with pytest.raises(FabricError, match=words.replace("[", r"\[").replace("]", r"\]")):
        default_options(name, **overrides)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(FabricError, match="choose one of link-failure"):
        scenario("frobnicate")
    with pytest.raises(FabricError, match="unknown transport"):
        parse_transports("mrc,quic", ("mrc",))
    assert parse_transports("mrc, roce", ("mrc",)) == ("mrc", "roce")
    assert parse_transports(None, ("mrc",)) == ("mrc",)
