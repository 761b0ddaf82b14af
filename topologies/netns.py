"""The one namespace helper: enter a network namespace from this thread, or run a command in one.

The setns call itself is endpoints/host/nsenter.py's (the agents enter namespaces too).
Sockets (netlink, UDP, raw) opened inside `inside(pid)` stay bound to that namespace after the
block ends, which lets one process configure or probe every host without spawning one process
per host.
A namespace is named by a process in it (a Mininet host's shell: `inside`, `command`) or by
an iproute2 name under /run/netns (`inside_named`, `command_named`), for one that has no
process yet.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

from endpoints.host.nsenter import entered

NETNS_DIR = "/run/netns"  # where `ip netns add NAME` pins a namespace


def inside(pid: int) -> AbstractContextManager[None]:
    """Run the block in the network namespace of process `pid` (this thread only)."""
    return entered(f"/proc/{pid}/ns/net")


def inside_named(name: str) -> AbstractContextManager[None]:
    """Run the block in the named namespace `name` (iproute2's /run/netns/NAME)."""
    return entered(f"{NETNS_DIR}/{name}")


def command(pid: int, argv: Sequence[str]) -> list[str]:
    """`argv` to run inside the network namespace of process `pid` (Mininet's mnexec)."""
    return ["mnexec", "-a", str(pid), *argv]


def command_named(name: str, argv: Sequence[str]) -> list[str]:
    """`argv` to run inside the named namespace `name`."""
    return ["ip", "netns", "exec", name, *argv]


def run_batches(jobs: Sequence[tuple[int | None, Sequence[str], str]], parallel: int = 8) -> None:
    """Run each (pid or None for this namespace, argv, stdin script), `parallel` at a time, the
    process started inside the network namespace of `pid`: forked from this thread while it is
    in there (no mnexec or `ip netns exec`, which would remount /sys and hide pinned BPF
    objects). For `ip -batch -` and `tc -batch -`: one process configures a whole namespace.
    RuntimeError naming the first failure once all have run."""
    running: list[subprocess.Popen[str]] = []
    errors: list[str] = []

    def reap(proc: subprocess.Popen[str]) -> None:
        _out, err = proc.communicate()
        if proc.returncode:
            errors.append(f"{' '.join(proc.args)} failed ({proc.returncode}): "  # type: ignore[arg-type]
                          f"{err.strip()[:400]}")

    for pid, argv, script in jobs:
        with inside(pid) if pid is not None else nullcontext():
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None
        try:
            proc.stdin.write(script)  # the whole script now: the processes run side by side
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it stopped at an error: reap() reports it
        proc.stdin = None
        running.append(proc)
        if len(running) >= parallel:
            reap(running.pop(0))
    for proc in running:
        reap(proc)
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(jobs)} batches failed; first: {errors[0]}")
