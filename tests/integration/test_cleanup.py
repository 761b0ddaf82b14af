"""A killed or interrupted run must not poison the next one: whatever it leaves (processes,
bridges, interfaces, the fault injector's nftables table, BPF pins, work and staging folders,
the lock) is removed by the next start and by `mrclab clean`; a second Ctrl-C cannot abort a
teardown; a lock naming a live but unrelated PID blocks nothing."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, assert_nothing_left
from topologies import cleanup
from topologies.runctx import RunContext

pytestmark = pytest.mark.usefixtures("emulation_ready")

TINY = ["--planes", "1", "--leaves", "2", "--spines", "1", "--hosts-per-leaf", "1"]


def _mrclab(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _nft_table() -> bool:
    """The fault injector's table, in this namespace or one holding switch ports: an OVS
    instance's (named, in /run/netns) or a kernel router's (a Mininet node's shell)."""
    argv = ["nft", "list", "table", "netdev", "mrclab_faults"]
    spaces = [["ip", "netns", "exec", n] for n in
              (os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
              if n.startswith("mrclab-")]
    for proc in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmdline = Path(proc).read_bytes()
        except OSError:
            continue
        if b"mininet:" in cmdline:
            spaces.append(["nsenter", "-t", proc.split("/")[2], "-n"])
    return any(subprocess.run(pre + argv, capture_output=True).returncode == 0
               for pre in [[], *spaces])


def _result(folder) -> None:
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({
        "mrclab_result": 1, "scenario": "link-failure", "transports": {}, "earlier": True}))


def test_kill_9_leftovers_go_at_the_next_start(tmp_path, switch_backend):
    before = set(glob.glob("/tmp/mrclab-lossy-link-*"))
    out = tmp_path / "lossy"
    run = _mrclab("run", "lossy-link", "--transports", "mrc", "--duration", "6", "--fault-at", "1.5",
                  "--fault-end", "5.5", "--out", str(out), "--switch", switch_backend)
    try:
        _wait_for(lambda: _nft_table() or run.poll() is not None, 120, "the loss rule")
        assert run.poll() is None, run.communicate()[1][-2000:]
        time.sleep(0.3)
    finally:
        run.kill()  # kill -9: no teardown at all
        run.communicate()
    left = sorted(set(glob.glob("/tmp/mrclab-lossy-link-*")) - before) + \
        [str(p) for p in tmp_path.glob(".lossy-*")]
    assert left, "the killed run had made no work or staging folder"
    # The next run first removes everything the killed one left: its nftables chains would
    # otherwise bind to this fabric's interfaces by name and drop 20% on one of its links.
    nxt = _mrclab("check-fabric", *TINY, "--switch", switch_backend)
    stdout, stderr = nxt.communicate(timeout=300)
    assert nxt.returncode == 0, stderr[-2000:]
    assert json.loads(stdout.strip().splitlines()[-1])["ok"] is True
    assert_nothing_left(left)
    assert not out.exists()


def test_clean_removes_what_a_kill_9_left(tmp_path):
    before = set(glob.glob("/tmp/mrclab-link-failure-*"))
    run = _mrclab("run", "link-failure", "--transports", "mrc", "--duration", "5", "--fault-at", "1.5",
                  "--fault-end", "3", "--out", str(tmp_path / "lf"))
    try:
        _wait_for(lambda: "mrc: running" in _peek(run) or run.poll() is not None, 120, "traffic")
        assert run.poll() is None
        time.sleep(0.5)
    finally:
        run.kill()
        run.communicate()
    left = sorted(set(glob.glob("/tmp/mrclab-link-failure-*")) - before) + \
        [str(p) for p in tmp_path.glob(".lf-*")]
    clean = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert_nothing_left(left)


_seen: dict[int, str] = {}


def _peek(proc: subprocess.Popen) -> str:
    """What `proc` printed so far on stdout (non-blocking)."""
    os.set_blocking(proc.stdout.fileno(), False)
    try:
        chunk = proc.stdout.read()
    except (TypeError, OSError):
        chunk = None
    _seen[proc.pid] = _seen.get(proc.pid, "") + (chunk or "")
    return _seen[proc.pid]


def test_a_second_interrupt_cannot_abort_the_teardown(tmp_path):
    before = set(glob.glob("/tmp/mrclab-link-failure-*"))
    out = tmp_path / "lf"
    _result(out)
    earlier = (out / "summary.json").read_text()
    run = _mrclab("run", "link-failure", "--transports", "mrc", "--duration", "6", "--fault-at", "1.5",
                  "--fault-end", "3", "--out", str(out))
    _wait_for(lambda: "mrc: running" in _peek(run) or run.poll() is not None, 120, "traffic")
    assert run.poll() is None
    time.sleep(0.5)
    run.send_signal(signal.SIGINT)
    for _ in range(6):  # impatient: Ctrl-C again and again while it tears down
        time.sleep(0.15)
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr[-2000:]
    assert "the emulation was torn down" in stderr and "Traceback" not in stderr
    left = sorted(set(glob.glob("/tmp/mrclab-link-failure-*")) - before) + \
        [str(p) for p in tmp_path.glob(".lf-*")]
    assert_nothing_left(left)
    assert (out / "summary.json").read_text() == earlier
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_a_lock_file_naming_a_live_but_unrelated_pid_blocks_nothing():
    # What a stale pid lock looked like: a pid that was reused since (1 is always alive).
    path = cleanup.LOCK_PATH
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_text("1")
    try:
        proc = _mrclab("check-fabric", *TINY)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if path.read_text() == "1":
            path.unlink()
    assert proc.returncode == 0, stderr[-2000:]
    assert_nothing_left()


def test_a_live_holder_is_named_with_a_command_that_clears_it():
    with RunContext(clean=False):
        proc = _mrclab("check-fabric", *TINY)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"sudo kill {os.getpid()}" in lines[0], stderr


def test_clean_removes_what_a_killed_cli_session_left():
    """`mrclab cli` takes the same lock and registers its folder like a run: after a kill -9
    of the session, `mrclab clean` removes its processes, switches and folder too."""
    pattern = os.path.join(tempfile.gettempdir(), "mrclab-testbed-*")
    before = set(glob.glob(pattern))
    session = _mrclab("cli", *TINY, stdin=subprocess.PIPE)
    try:
        _wait_for(lambda: "*** up in" in _peek(session) or session.poll() is not None, 120,
                  "the session")
        assert session.poll() is None, session.communicate()[1][-2000:]
    finally:
        session.kill()
        session.communicate()
    left = sorted(set(glob.glob(pattern)) - before)
    assert left, "the killed session had made no work folder"
    clean = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert_nothing_left(left)
