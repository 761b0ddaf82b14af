"""check-fabric on two fabric shapes, through the real CLI, as a user would run it."""

import json
import os
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, assert_nothing_left
from topologies.switches.ovs import PORTS_PER_INSTANCE_ENV

pytestmark = pytest.mark.usefixtures("emulation_ready")


@pytest.mark.parametrize("shape, sample", [
    ({"planes": 2, "leaves": 2, "spines": 2, "hosts-per-leaf": 2}, None),
    ({"planes": 4, "leaves": 3, "spines": 3, "hosts-per-leaf": 3}, 40),
])
def test_check_fabric_proves_every_path_and_the_cut(shape, sample, switch_backend):
    argv = [sys.executable, "-m", "experiments.cli", "check-fabric", "--switch", switch_backend]
    for key, value in shape.items():
        argv += [f"--{key}", str(value)]
    if sample:
        argv += ["--sample-pairs", str(sample), "--seed", "7"]
    # The larger shape with one OVS instance per plane (27 switch ports each; the default
    # budget would put all four in one), the smaller with the default grouping.
    env = {**os.environ, PORTS_PER_INSTANCE_ENV: "30"} if sample else None
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["switch_backend"] == switch_backend
    if switch_backend == "ovs":
        assert result["ovs_instances"] == (shape["planes"] if sample else 1)
    hosts = shape["leaves"] * shape["hosts-per-leaf"]
    assert result["hosts"] == hosts
    assert result["switches"] == shape["planes"] * (shape["leaves"] + shape["spines"])
    pairs = sample or hosts * (hosts - 1)
    assert result["pairs"] == pairs
    # Expected path count from first principles, not from the model under test.
    if sample is None:
        same_leaf = shape["leaves"] * shape["hosts-per-leaf"] * (shape["hosts-per-leaf"] - 1)
        cross = pairs - same_leaf
        assert result["paths_total"] == shape["planes"] * (same_leaf + cross * shape["spines"])
    assert result["paths_delivered"] == result["paths_total"]
    assert result["paths_expected_lost"] > 0
    assert result["paths_lost"] == result["paths_expected_lost"]
    assert result["paths_lost_unexpected"] == 0 and result["paths_survived_cut"] == 0
    assert result["paths_restored"] == result["paths_total"]
    assert result["ok"] is True
    assert result["setup_seconds"] < 60
    assert_nothing_left()


def test_check_fabric_with_an_explicit_cut_link(switch_backend):
    argv = [sys.executable, "-m", "experiments.cli", "check-fabric", "--planes", "2", "--leaves", "3",
            "--spines", "2", "--hosts-per-leaf", "1", "--cut", "p1l2-p1s1", "--switch", switch_backend]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cut_link"] == "p1l2-p1s1"
    # Paths via plane 1, spine 1 that start or end at leaf 2's host h2: 2 peers x 2 directions.
    assert result["paths_expected_lost"] == 4 == result["paths_lost"]
    assert_nothing_left()
