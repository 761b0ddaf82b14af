"""The data-plane benchmark through the real emulation, as `make bench` runs it (two short
windows on the 16x4 fabric): sane, self-consistent figures merged into the results file, and
nothing left behind."""

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")

START_PPS = 1000  # far below what any backend carries: the first window must be faithful


def test_dataplane_bench_measures_packet_hops(tmp_path, switch_backend):
    out = tmp_path / "dataplane.json"
    out.write_text(json.dumps({"other": {"16x4": {"packet_hops_per_s": 1}}}))
    proc = subprocess.run([sys.executable, "-m", "experiments.tools.dataplane_bench", "--switch",
                           switch_backend, "--shapes", "16x4", "--trials", "2", "--start-pps",
                           str(START_PPS), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["other"] == {"16x4": {"packet_hops_per_s": 1}}  # earlier results kept
    r = data[switch_backend]["16x4"]
    assert r["switches"]["switch_backend"] == switch_backend and r["dataplane"] == "ebpf"
    assert r["fabric"]["planes"] == 4 and r["hops"] == 3 and r["ipv6_in_ipv6"] is True
    assert r["planes_loaded"] == 4 and r["one_plane"]["planes_loaded"] == 1
    for load in (r, r["one_plane"]):  # every plane loaded (the figure), then one plane
        assert 1 <= len(load["sweep"]) <= 2 and load["sweep"][0]["offered_pps_asked"] == START_PPS
        for t in load["sweep"]:  # every window self-consistent
            assert t["checksum_errors"] == 0 and 0 <= t["drain_s"] <= 30
            assert t["packet_hops_per_s"] == pytest.approx(3 * t["delivered_pps"], rel=0.01, abs=3)
            assert t["offered_pps"] == pytest.approx(t["offered_pps_asked"], rel=0.1)
        # The best faithful window is the one recorded, at least the first (slow) one.
        assert load["delivery_ratio"] >= r["faithful_delivery"] == 0.99
        assert load["packet_hops_per_s"] == max(t["packet_hops_per_s"] for t in load["sweep"]
                                                if t["delivery_ratio"] >= 0.99)
        assert load["packet_hops_per_s"] >= 0.98 * 3 * START_PPS
    if switch_backend == "ovs":  # userspace forwarding: its processes' CPU is measured
        assert r["forwarding_cores"] > 0 and r["one_plane"]["forwarding_cores"] > 0
        assert r["switches"]["allocator"] != "glibc"  # `make setup` installs the preloaded one
    assert r["setup_seconds"] > 0 and r["teardown_seconds"] > 0
    assert_nothing_left()
