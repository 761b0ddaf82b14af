"""The emulation's pure parts, without root: what it will tell the switch data plane."""

from __future__ import annotations

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from topologies.emulation import Emulation
from topologies.model import build


def test_switch_thresholds_count_frames_of_the_runs_payload_size(tmp_path):
    """An experiment that changes mtu_payload changes the switches' thresholds along with the
    agents' packets (the switches once read the default config whatever the run)."""
    fabric = build(planes=1, leaves=2, spines=1, hosts_per_leaf=1)
    default = Emulation(fabric, tmp_path).switch_port_specs()
    small = Emulation(fabric, tmp_path, transport=TransportConfig(mtu_payload=1024)).switch_port_specs()
    assert len(small) == len(default) == len(fabric.links) + len(fabric.fabric_links())
    for a, b in zip(small, default, strict=True):
        assert a.ifname == b.ifname and a.last_hop == b.last_hop
        assert a.drop_bytes * wire.frame_bytes(4096) == b.drop_bytes * wire.frame_bytes(1024)
        assert a.mark_bytes == TransportConfig().ecn_mark_frames * wire.frame_bytes(1024)


def test_a_start_refused_by_the_lock_leaves_the_running_emulation_alone(tmp_path, monkeypatch):
    """Regression: a second emulation whose start was refused (another one holds the machine's
    lock) went on in stop() to remove leftovers, i.e. the running emulation's switches."""
    from topologies import cleanup, emulation, preflight, runctx

    def refused(directory, clean):
        raise preflight.PreflightError("another emulation runs")

    cleaned = []
    monkeypatch.setattr(emulation.switches, "check", lambda requested: "ovs")
    monkeypatch.setattr(runctx, "_take", refused)
    monkeypatch.setattr(cleanup, "cleanup_leftovers", lambda: cleaned.append(True))
    em = Emulation(build(planes=1, leaves=1, spines=1), tmp_path)
    try:
        em.start()
    except preflight.PreflightError:
        pass
    em.stop()
    assert cleaned == []
