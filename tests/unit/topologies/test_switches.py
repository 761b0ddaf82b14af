"""The switch backend seam without root: choosing a backend, and what each says about itself."""

from __future__ import annotations

import pytest

from topologies import preflight, switches
from topologies.model import build
from topologies.switches import linux
from topologies.switches.ovs import OvsBackend


def test_unknown_backend_is_named_with_the_choices():
    with pytest.raises(preflight.PreflightError, match="use one of auto, ovs, linux"):
        switches.resolve("frob")


def test_an_unavailable_backend_says_why(monkeypatch):
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: "no OVS here: run x"))
    with pytest.raises(preflight.PreflightError, match="no OVS here"):
        switches.resolve("ovs")


def test_auto_takes_the_fastest_available(monkeypatch):
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: None))
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: None))
    assert switches.resolve("auto") == switches.FASTEST_FIRST[0]
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: "not here"))
    assert switches.resolve("auto") == "ovs"
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: "no OVS: make setup"))
    with pytest.raises(preflight.PreflightError, match="no OVS: make setup"):  # OVS's reason
        switches.resolve("auto")


def test_every_backend_is_a_choice_and_implements_the_seam():
    assert set(switches.CHOICES) == {"auto", *switches.BACKENDS}
    assert set(switches.FASTEST_FIRST) == set(switches.BACKENDS)
    for name, cls in switches.BACKENDS.items():
        assert cls.name == name and not getattr(cls, "__abstractmethods__", None), name


def test_ovs_backend_before_start(tmp_path):
    fabric = build(planes=2, leaves=2, spines=1, hosts_per_leaf=1)
    ovs = switches.make("ovs", fabric, tmp_path, datapath="user")
    assert ovs.info()["switch_backend"] == "ovs"
    ports = ovs.switch_ports()  # type: ignore[attr-defined]
    assert len(ports) == len(set(ports)) == len(fabric.links) + len(fabric.fabric_links())
