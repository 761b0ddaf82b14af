"""A fabric split over two servers on this one machine: the second "server" is a network, PID
and mount namespace with its own sshd (topologies/cluster_lab.py), reached over ssh as a real
machine would be. check-fabric through the real CLI, nothing left on either side after a normal
end, after a Ctrl-C, and after a kill -9 of the head and `mrclab clean`; bad --servers refused in
one line."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import require_or_skip
from tests.integration.helpers import REPO, assert_nothing_left
from topologies import cluster_lab
from topologies.servers import SSH_CONFIG_ENV

pytestmark = pytest.mark.usefixtures("emulation_ready")
LAB_NUMBER = 7  # not the 1 `python -m topologies.cluster_lab up` makes by hand
SHAPE = {"planes": 2, "leaves": 2, "spines": 2, "hosts-per-leaf": 1}


@pytest.fixture(scope="module")
def server():
    require_or_skip(None if os.path.exists("/usr/sbin/sshd") else "sshd missing: run `make setup`")
    from topologies.switches import linux

    if linux.LinuxBackend.unavailable() is not None:
        pytest.skip(linux.LinuxBackend.unavailable())
    lab = cluster_lab.start(LAB_NUMBER)
    try:
        yield lab
    finally:
        cluster_lab.stop(lab)
        assert f"{cluster_lab.LAB_PREFIX}{LAB_NUMBER}" not in cluster_lab.leftovers()
        assert not os.path.exists(lab.folder)


def _argv(servers: str, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "experiments.cli", "check-fabric", "--switch", "linux",
            "--servers", servers, *extra]
    for key, value in SHAPE.items():
        argv += [f"--{key}", str(value)]
    return argv


def _env(lab) -> dict:
    return {**os.environ, SSH_CONFIG_ENV: str(lab.ssh_config)}


def _server_left(lab) -> list[str]:
    """What runs or remains on the server besides its sshd: router shells, control planes,
    interfaces other than its own, run folders."""
    out = lab.ssh("ps -eo args= | grep -E 'mininet:|controller.run|mnexec' | grep -v grep; "
                  "ip -o link show | grep -vE ': (lo|eth0)[@:]'; "
                  "ls -d /tmp/mrclab-check-fabric-*/server-* 2>/dev/null")
    return [line for line in out.stdout.splitlines() if line.strip()]


def test_split_fabric_proves_every_path_and_leaves_nothing(server):
    proc = subprocess.run(_argv(f"head,{server.address}"), cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_env(server))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    hosts = SHAPE["leaves"] * SHAPE["hosts-per-leaf"]
    pairs = hosts * (hosts - 1)
    # From first principles: every cross-leaf pair has planes x spines paths.
    assert result["paths_total"] == SHAPE["planes"] * SHAPE["spines"] * pairs
    assert result["paths_delivered"] == result["paths_total"]
    assert result["paths_lost"] == result["paths_expected_lost"] > 0
    assert result["paths_lost_unexpected"] == 0 and result["paths_survived_cut"] == 0
    assert result["paths_restored"] == result["paths_total"]
    assert result["ok"] is True
    assert result["placement"] == {"servers": ["head", server.address], "head": "head", "split": True,
                                   "planes": {"head": [], server.address: [0, 1]}}
    assert result["remote_servers"] == [server.address]
    assert _server_left(server) == []
    assert_nothing_left()


def _started_on_server(server) -> subprocess.Popen:
    """A split check-fabric, returned once its control plane runs on the server."""
    head = subprocess.Popen(_argv(f"head,{server.address}"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env(server))
    deadline = time.monotonic() + 120
    while not any("controller.run" in line for line in _server_left(server)):
        if head.poll() is not None or time.monotonic() > deadline:
            head.kill()
            pytest.fail(f"no control plane on the server: {head.communicate()[1][-1000:]}")
        time.sleep(0.2)
    return head


def test_interrupted_head_leaves_nothing_on_either(server):
    head = _started_on_server(server)
    head.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        _, err = head.communicate(timeout=120)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    assert head.returncode != 0 and "interrupted" in err.lower(), err[-1000:]
    assert _server_left(server) == []
    assert_nothing_left()


def test_killed_head_then_clean_leaves_nothing_on_either(server):
    head = _started_on_server(server)
    try:
        head.send_signal(signal.SIGKILL)
        head.wait(timeout=10)
        assert _server_left(server), "the server's part should outlive a killed head until a clean"
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    clean = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True, timeout=120, env=_env(server))
    assert clean.returncode == 0, clean.stderr
    assert "1 servers" in clean.stdout
    assert _server_left(server) == []
    assert_nothing_left()


@pytest.mark.parametrize("servers, words", [
    ("head,head", "twice"), ("head,no_such", "not a host name"),
    ("head,no-such-server.invalid", "unknown server"),
    ("head,10.252.250.2", "cannot ssh to root@10.252.250.2"),
])
def test_bad_servers_refused_in_one_line(server, servers, words):
    proc = subprocess.run(_argv(servers), cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=_env(server))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert_nothing_left()
