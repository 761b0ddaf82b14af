"""The run context: one hold on the run lock per process (nested layers join it), the folders it
registers and removes, a lock refused while another process holds it; and an interrupt cannot
cut short the clean-up after a killed predecessor, nor a teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from topologies import cleanup, files, runctx
from topologies.preflight import PreflightError
from topologies.runctx import RunContext

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _nothing_held_after():
    yield
    held = runctx.run_id()
    runctx._release(force=True)  # so that one failure does not fail every later test
    assert held is None, "a test left the run lock held"


@pytest.fixture
def cleaned(monkeypatch) -> list[dict]:
    """The lock taker's clean-up, recorded instead of run (it would touch the machine)."""
    calls: list[dict] = []
    monkeypatch.setattr(cleanup, "cleanup_leftovers",
                        lambda registry=None, spare=None: calls.append(
                            {"registry": registry, "spare": spare}) or {"processes": 0})
    return calls


def test_nested_contexts_join_the_outer_one(tmp_path, cleaned):
    """runner -> Testbed -> Emulation: one take, one clean-up, one release, by the outermost."""
    with RunContext(tmp_path) as outer:
        assert not outer.joined and cleaned == [{"registry": tmp_path / cleanup.REGISTRY_NAME,
                                                  "spare": outer.run_id}]
        assert os.environ[cleanup.MARKER] == outer.run_id == runctx.run_id()
        inner = RunContext().enter()  # the default directory: joined, never taken
        assert inner.joined and inner.run_id == outer.run_id
        with RunContext() as innermost:
            assert innermost.run_id == outer.run_id
        inner.leave()
        inner.leave()  # idempotent: an emulation's stop runs more than once
        assert runctx.run_id() == outer.run_id and not cleanup.lock_free(tmp_path)
        assert len(cleaned) == 1
    assert runctx.run_id() is None and cleanup.lock_free(tmp_path)
    assert cleanup.MARKER not in os.environ
    assert cleanup.holder(tmp_path) == {}


def test_folders_are_registered_and_removed_when_their_context_is_left(tmp_path, cleaned):
    given = tmp_path / "given"  # a Testbed's workdir of the caller's: registered, never removed
    given.mkdir()
    with RunContext(tmp_path) as run:
        work = run.folder("mrclab-x-", parent=tmp_path)
        with RunContext() as inner:  # a joined layer's folder is its own
            staging = inner.folder(".out-", parent=tmp_path)
            inner.register(given)
            RunContext.register_server("10.0.0.2", "/tmp/server-s1")
        assert not staging.exists() and work.is_dir()
        assert work.stat().st_mode & 0o777 == 0o700
        registry = files.read_json(tmp_path / cleanup.REGISTRY_NAME)
        assert registry["pid"] == os.getpid() and registry["run"] == run.run_id
        assert registry["dirs"] == [str(work), str(staging), str(given)]
        assert registry["servers"] == [{"address": "10.0.0.2", "folder": "/tmp/server-s1"}]
    assert not work.exists() and given.is_dir()
    assert cleanup.holder(tmp_path) == {}


def test_an_exception_releases_the_lock_and_removes_the_folders(tmp_path, cleaned):
    with pytest.raises(RuntimeError), RunContext(tmp_path) as run:
        work = run.folder("mrclab-x-", parent=tmp_path)
        raise RuntimeError("the run failed")
    assert not work.exists() and runctx.run_id() is None and cleanup.lock_free(tmp_path)
    assert cleanup.MARKER not in os.environ


def test_a_retry_of_a_failed_teardown_takes_the_lock_without_cleaning(tmp_path, cleaned):
    with RunContext(tmp_path, clean=False) as run:
        assert run.run_id and not cleanup.lock_free(tmp_path)
    assert cleaned == []


HOLDER = """
import sys, time
from pathlib import Path
from topologies.runctx import RunContext
with RunContext(Path(sys.argv[1]), clean=False):
    print("held", flush=True)
    time.sleep(60)
"""


def test_the_lock_is_refused_while_another_process_holds_it(tmp_path, cleaned):
    """One line naming the holder and how to stop it; nothing taken, made or registered."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "run", "incast"],
                            cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        registry = (tmp_path / cleanup.REGISTRY_NAME).read_bytes()
        work = tmp_path / "work"
        work.mkdir()
        with pytest.raises(PreflightError) as refused, RunContext(tmp_path) as run:
            run.folder("mrclab-x-", parent=work)
        message = str(refused.value)
        assert "\n" not in message and f"pid {proc.pid}: {tmp_path} run incast" in message
        assert f"sudo kill {proc.pid}" in message
        assert list(work.iterdir()) == [] and cleaned == []
        assert runctx.run_id() is None and cleanup.MARKER not in os.environ
        assert (tmp_path / cleanup.REGISTRY_NAME).read_bytes() == registry
        assert not cleanup.lock_free(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert cleanup.lock_free(tmp_path)  # the kernel released it with its holder


def test_an_interrupt_during_the_start_up_clean_up_waits_for_it_to_finish(tmp_path, monkeypatch):
    """A soak run interrupted while its start removed a killed session's leftovers stopped
    half-way: the processes and bridges were gone, the veths, the loss rule's nftables table and
    the BPF pins stayed, and nothing removed them. The whole clean-up now runs; the interrupt
    follows it, and the lock is released."""
    steps = []

    def leftovers(registry=None, spare=None):
        steps.append("processes")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C half-way
        steps.append("veths, nftables, pins")
        return {}

    monkeypatch.setattr(cleanup, "cleanup_leftovers", leftovers)
    before = signal.getsignal(signal.SIGINT)  # ignored when pytest runs as a background job
    with pytest.raises(KeyboardInterrupt):
        RunContext(tmp_path).enter()
    assert steps == ["processes", "veths, nftables, pins"]
    assert runctx.run_id() is None and cleanup.lock_free(tmp_path)
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_the_teardown_shield_lets_no_interrupt_cut_the_teardown_short(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    steps = []
    with runctx.teardown_shield():
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C, a kill
            os.kill(os.getpid(), sig)
            steps.append(sig)
    assert steps == [signal.SIGINT, signal.SIGTERM]
    assert capsys.readouterr().err.count("mrclab: still tearing down, please wait") == 2
    assert {s: signal.getsignal(s) for s in before} == before  # restored


def test_outside_the_main_thread_the_blocks_run_as_they_are():
    seen = []

    def worker():
        with runctx.teardown_shield(), runctx.interrupts_deferred("x"):
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before]


def test_the_first_interrupt_raises_later_ones_do_not_and_it_is_remembered(capsys):
    """A command's handler: a swallowed KeyboardInterrupt still ends the command as interrupted
    (cli.main checks `interrupted()` after the command returns)."""
    old = signal.getsignal(signal.SIGTERM)
    try:
        runctx.interrupts_once()
        assert runctx.interrupted() is False
        with pytest.raises(KeyboardInterrupt):
            runctx.interrupt_once(signal.SIGINT, None)
        assert runctx.interrupted() is True
        runctx.interrupt_once(signal.SIGINT, None)  # during the teardown: said, not raised
        assert "still tearing down" in capsys.readouterr().err
        runctx.interrupts_once()  # the next command starts afresh
        assert runctx.interrupted() is False
    finally:
        signal.signal(signal.SIGTERM, old)
