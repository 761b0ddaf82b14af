"""The run lock's clean-up of a killed predecessor cannot be cut short by an interrupt."""

from __future__ import annotations

import os
import signal

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
