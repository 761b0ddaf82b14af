"""A run killed with SIGKILL (no teardown at all) leaves its switches running; `mrclab clean`
(and the next run's start) finds every kind of leftover and removes it. The fabric gets one OVS
instance per plane (a small port budget), so several instances are left to find."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import REPO, assert_nothing_left
from topologies import cleanup
from topologies.switches.ovs import PORTS_PER_INSTANCE_ENV

pytestmark = pytest.mark.usefixtures("emulation_ready")

START = """
import sys, time
from pathlib import Path
from topologies.emulation import Emulation
from topologies.model import build
em = Emulation(build(planes=2, leaves=2, spines=1, hosts_per_leaf=1), Path(sys.argv[1]),
               switch=sys.argv[2])
em.start()
print("up", flush=True)
time.sleep(600)
"""


def test_a_killed_run_is_cleaned_up(tmp_path, switch_backend):
    env = {**os.environ, PORTS_PER_INSTANCE_ENV: "1"}
    proc = subprocess.Popen([sys.executable, "-c", START, str(tmp_path), switch_backend], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up", proc.stderr
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(0.5)
        left = {kind: items for kind, items in cleanup.leftovers().items() if items}
        assert left, "a killed run left nothing: the test proves nothing"
        if switch_backend == "ovs":  # both planes' instances, each with its namespace
            assert len(left.get("ovs_instances", [])) == len(left.get("ovs_netns", [])) == 2, left
        done = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert_nothing_left()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
