"""A dead controller or agent is noticed (issue 11, item 6): a controller killed mid-run ends the
run with one line and a summary marked not faithful; an agent killed mid-run ends it with one
line naming the host and its log's tail, no traceback, and the earlier results stay. (The
default runs every host's agent in one process: killing h1's kills them all, and the line
names them all.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, assert_nothing_left
from topologies import cleanup

pytestmark = pytest.mark.usefixtures("emulation_ready")


def _run_pids(module: str) -> list[int]:
    """Processes `python -m module` of the run that holds the lock (by its marker)."""
    rid = cleanup.holder().get("run")
    out = []
    for pid, marker in cleanup.marked_processes().items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker == rid and module.encode() in argv:
            out.append(pid)
    return sorted(out)


def _run_and_kill(tmp_path, name: str, module: str, host: str | None, after: float):
    out = tmp_path / name
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "run", name, "--transports",
                             "mrc", "--duration", "4", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    victims: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        if _run_pids("endpoints.host.agent"):  # traffic is about to flow
            victims = [p for p in _run_pids(module)
                       if host is None or f"/agent-{host}.json".encode() in
                       Path(f"/proc/{p}/cmdline").read_bytes()]
            break
        time.sleep(0.05)
    assert victims, "the process to kill never appeared"
    time.sleep(after)  # into the transport's traffic
    os.kill(victims[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, stderr, out


def test_a_controller_killed_mid_run_fails_the_run_and_marks_it_not_faithful(tmp_path):
    code, _, stderr, out = _run_and_kill(tmp_path, "permutation", "controller.run", None, 2.0)
    lines = stderr.strip().splitlines()
    assert code == 1, stderr[-2000:]
    assert len(lines) == 1 and "controller died" in lines[0] and "controller.log" in lines[0], stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fidelity"]["faithful"] is False
    assert any("controller died" in p for p in summary["fidelity"]["problems"])
    assert (out / "traces" / "controller.log").exists()
    assert_nothing_left()


def test_an_agent_killed_mid_run_is_named_with_its_log_and_no_traceback(tmp_path):
    code, _, stderr, out = _run_and_kill(tmp_path, "permutation", "endpoints.host.agent", "h1", 1.5)
    lines = stderr.strip().splitlines()
    assert code == 1, stderr[-2000:]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    assert "the agents of h0, h1, h2" in lines[0] and "(one process) died" in lines[0], lines[0]
    assert not out.exists()  # the run did not complete: no result
    assert_nothing_left()
