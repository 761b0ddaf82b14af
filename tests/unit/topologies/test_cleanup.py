"""Processes of a run found by its marker, in their environment or as an argument (the sudo
parent of a remote router's shell), and killed: those of one run alone, none spared wrongly, and
only gone when the call returns (real child processes, no root)."""

from __future__ import annotations

import os
import subprocess
import uuid

from topologies import cleanup


def _marked(run_id: str, as_argument: bool = False) -> subprocess.Popen:
    if as_argument:  # like `sudo -E mnexec -c env MRCLAB_RUN=<id> bash ...`
        return subprocess.Popen(["sh", "-c", "sleep 30", f"{cleanup.MARKER}={run_id}"])
    return subprocess.Popen(["sleep", "30"], env={**os.environ, cleanup.MARKER: run_id})


def test_one_runs_processes_are_killed_and_gone_the_others_spared():
    mine, other = f"test-{uuid.uuid4().hex}", f"test-{uuid.uuid4().hex}"
    procs = [_marked(mine), _marked(mine, as_argument=True), _marked(other)]
    try:
        found = cleanup.marked_processes()
        assert {found.get(p.pid) for p in procs} == {mine, other}
        assert cleanup.kill_marked(only=mine) == 2
        found = cleanup.marked_processes()  # killed, not yet reaped: zombies carry no marker
        assert procs[0].pid not in found and procs[1].pid not in found
        assert found[procs[2].pid] == other and procs[2].poll() is None
        assert cleanup.kill_marked(only=mine) == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_grace_lets_processes_end_on_their_own():
    run_id = f"test-{uuid.uuid4().hex}"
    quick = subprocess.Popen(["sleep", "0.2"], env={**os.environ, cleanup.MARKER: run_id})
    try:
        assert cleanup.kill_marked(only=run_id, grace=10) == 0
        assert quick.wait(timeout=5) == 0  # it ended by itself, not by SIGKILL
    finally:
        quick.kill()
        quick.wait()


def test_the_marker_for_a_remote_command(monkeypatch):
    monkeypatch.setenv(cleanup.MARKER, "abc")
    assert cleanup.run_marker() == [f"{cleanup.MARKER}=abc"]
    monkeypatch.delenv(cleanup.MARKER)
    assert cleanup.run_marker() == []
