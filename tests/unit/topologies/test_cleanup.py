"""The run lock's clean-up of a killed predecessor, and a teardown, cannot be cut short by an
interrupt."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from topologies import cleanup


def test_an_interrupt_during_the_start_up_clean_up_waits_for_it_to_finish(tmp_path, monkeypatch):
    """A soak run interrupted while its start removed a killed session's leftovers stopped
    half-way: the processes and bridges were gone, the veths, the loss rule's nftables table and
    the BPF pins stayed, and nothing removed them. The whole clean-up now runs; the interrupt
    follows it, and the lock is released."""
    steps = []

    def leftovers(registry=None, teardown=False):
        steps.append("processes")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C half-way
        steps.append("veths, nftables, pins")
        return {}

    monkeypatch.setattr(cleanup, "cleanup_leftovers", leftovers)
    before = signal.getsignal(signal.SIGINT)  # ignored when pytest runs as a background job
    with pytest.raises(KeyboardInterrupt):
        cleanup.take_lock(tmp_path)
    assert steps == ["processes", "veths, nftables, pins"]
    assert cleanup.run_id() is None and cleanup.lock_free(tmp_path)
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_the_teardown_shield_lets_no_interrupt_cut_the_teardown_short(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    steps = []
    with cleanup.teardown_shield():
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C, a kill
            os.kill(os.getpid(), sig)
            steps.append(sig)
    assert steps == [signal.SIGINT, signal.SIGTERM]
    assert capsys.readouterr().err.count("mrclab: still tearing down, please wait") == 2
    assert {s: signal.getsignal(s) for s in before} == before  # restored


def test_outside_the_main_thread_the_blocks_run_as_they_are():
    seen = []

    def worker():
        with cleanup.teardown_shield(), cleanup.interrupts_deferred("x"):
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before]
