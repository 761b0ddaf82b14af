"""The floor bench through the real emulation, as `make bench` runs it, on two short windows:
the permutation's C endpoints carry what they offer and the figure is the machine's; bad input
is one line; nothing is left behind."""

import json
import subprocess
import sys

import pytest

from endpoints.protocol import wire
from experiments.tools.floor_bench import OFFERED_SHARE, QUIET_CORES
from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")


def test_floor_bench_measures_the_fabric_under_the_permutation(tmp_path, switch_backend):
    out = tmp_path / "floor.json"
    proc = subprocess.run([sys.executable, "-m", "experiments.tools.floor_bench", "--switch", switch_backend,
                           "--rates", "5,10", "--seconds", "2", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("[floor ") == 2 and "results: " in proc.stdout  # live progress, where
    runs = json.loads(out.read_text())["runs"]
    assert [r["link_mbps"] for r in runs] == [5.0, 10.0]
    for r in runs:
        assert r["fabric"] == {"planes": 2, "leaves": 4, "spines": 2, "hosts_per_leaf": 2,
                               "link_mbps": r["link_mbps"]} and r["backend"] == switch_backend
        # 16 senders (8 hosts x 2 planes) and 8 sinks, each sender at OFFERED_SHARE of its link
        assert r["endpoint_processes"] == 24
        frame_bits = 8 * (wire.frame_bytes(4096) + wire.IPV6_HDR)  # the carrier's header too
        want = OFFERED_SHARE * r["link_mbps"] * 1e6 / frame_bits * 16
        assert r["offered_pps"] == pytest.approx(want, rel=0.03)
        assert r["delivery_ratio"] >= 0.99, r  # the fabric carries what it was offered
        per_packet = r["machine_busy_cores"] / r["delivered_pps"] * 1e6
        assert r["us_per_packet"] == pytest.approx(per_packet, rel=0.01)
        # how busy the machine was before: said, and warned of when not quiet (a busy loop in CI)
        assert r["background_cores"] >= 0 and r["quiet"] == (r["background_cores"] <= QUIET_CORES)
    assert proc.stdout.count("warning: the machine was") == sum(not r["quiet"] for r in runs)
    assert runs[1]["delivered_pps"] == pytest.approx(2 * runs[0]["delivered_pps"], rel=0.05)
    assert_nothing_left()


def test_floor_bench_refuses_bad_rates_in_one_line(tmp_path):
    for rates in ("0", "ten", "10,-5"):
        proc = subprocess.run([sys.executable, "-m", "experiments.tools.floor_bench", "--rates", rates,
                               "--out", str(tmp_path / "floor.json")],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("floor_bench: error: --rates")
        assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "floor.json").exists()
