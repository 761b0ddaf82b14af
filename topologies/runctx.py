"""One run's hold on the machine: the run lock, the work folders it registers, and what Ctrl-C
and SIGTERM do to it. `RunContext` is the only thing that takes the lock.

Only one emulation runs at a time. The lock is an `fcntl.flock` on `cleanup.RUN_DIR/lock`
(root-only, 0700): taking it is atomic, and the kernel releases it when its holder dies, so a
lock can never outlive its run nor name a PID that was reused since. Whoever takes it first
removes what a killed predecessor left (`cleanup.cleanup_leftovers`), then records its run in
the registry (`RUN_DIR/run.json`: pid, run id, the folders and servers it uses) so that the
next taker, or `mrclab clean`, can remove those in turn.

The layers of one run each hold a context (`mrclab run`, then its Testbed, then the
Emulation; or a Testbed alone from the Python API; or an Emulation alone from a tool): a
context entered while this process holds the lock joins it, and only the outermost takes and
releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from topologies import cleanup, files
from topologies.preflight import PreflightError


@dataclass
class _Held:
    fd: int
    run_id: str
    registry: Path
    depth: int = 1


_held: _Held | None = None
_held_guard = threading.Lock()
last_cleanup: dict[str, int] = {}  # what the last lock taker removed


class RunContext:
    """This process's hold on the machine for one run. Use as a context manager, or `enter()`
    and `leave()` (idempotent) where the hold spans calls (a Testbed's start and close).

    directory: where the lock and registry live (default `cleanup.RUN_DIR`); clean: the taker
    removes what a killed run left first (False: a retry of a failed teardown, which must not
    remove what it is still tearing down). A context entered while another is held joins it.
    Folders made with `folder()` belong to this context: registered with the run, removed
    when it is left."""

    def __init__(self, directory: Path | None = None, clean: bool = True) -> None:
        self.directory = directory
        self.clean = clean
        self.run_id = ""
        self.joined = False  # entered while another context held the lock
        self._entered = False
        self._folders: list[Path] = []

    def __enter__(self) -> RunContext:
        return self.enter()

    def __exit__(self, *exc: object) -> None:
        self.leave()

    @property
    def held(self) -> bool:
        return self._entered

    def enter(self) -> RunContext:
        """Take the lock, or join this process's hold on it; PreflightError naming the holder
        if another live process holds it (nothing is left behind)."""
        if not self._entered:
            self.run_id, self.joined = _take(self.directory, self.clean)
            self._entered = True
        return self

    def leave(self) -> None:
        """Remove this context's folders and drop its hold (the outermost releases the lock)."""
        if not self._entered:
            return
        self._entered = False
        try:
            for path in reversed(self._folders):
                shutil.rmtree(path, ignore_errors=True)
            self._folders.clear()
        finally:
            _release()

    def folder(self, prefix: str, parent: Path | None = None) -> Path:
        """A fresh private work folder (0700, under the system's temporary directory or
        `parent`), registered so that a kill -9 leaves it to the next run or `mrclab clean`;
        removed when this context is left."""
        path = files.private_dir(prefix, parent)
        self._folders.append(path)
        self.register(path)
        return path

    def register(self, path: Path) -> None:
        """Record a folder this run made (removed by its owner), for the next taker after a
        kill -9."""
        _record("dirs", str(path))

    @staticmethod
    def register_server(address: str, folder: str) -> None:
        """Record a server this run uses (a split fabric) and its folder there, cleaned over ssh
        by the next lock taker if this run is killed."""
        _record("servers", {"address": address, "folder": folder})


# ----- the lock itself (RunContext's alone) -----------------------------------------------------
def _take(directory: Path | None, clean: bool) -> tuple[str, bool]:
    """(run id, joined): join this process's hold, or take the lock, clean after a dead
    predecessor (`clean`), register, and mark the processes the run will start (`MARKER`)."""
    global _held, last_cleanup
    with _held_guard:
        if _held is not None:
            _held.depth += 1
            return _held.run_id, True
        where = cleanup.run_dir(directory)
        fd = os.open(where / cleanup.LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PreflightError(cleanup.busy_message(cleanup.holder(where))) from None
        held = _held = _Held(fd, secrets.token_hex(8), where / cleanup.REGISTRY_NAME)
    try:
        if clean:  # all of it: an interrupt half-way would leave the rest to no one
            with interrupts_deferred("removing what a killed run left"):
                last_cleanup = cleanup.cleanup_leftovers(registry=held.registry, spare=held.run_id)
        files.write_json(held.registry, {"pid": os.getpid(), "run": held.run_id,
                                         "started": time.time(), "argv": sys.argv, "dirs": []},
                         mode=0o600)
        os.environ[cleanup.MARKER] = held.run_id
    except BaseException:
        _release(force=True)
        raise
    return held.run_id, False


def _release(force: bool = False) -> None:
    """Drop one level of the hold; the last one clears the registry and releases the lock."""
    global _held
    with _held_guard:
        if _held is None:
            return
        _held.depth -= 1
        if _held.depth > 0 and not force:
            return
        held, _held = _held, None
    os.environ.pop(cleanup.MARKER, None)
    with contextlib.suppress(OSError):
        files.write_json(held.registry, {}, mode=0o600)
    os.close(held.fd)  # the kernel drops the flock with the last descriptor


def _record(key: str, item: object) -> None:
    """Append to the registry's `key` list; nothing while no run is held."""
    if _held is None:
        return
    data = files.read_json(_held.registry)
    data.setdefault(key, []).append(item)
    files.write_json(_held.registry, data, mode=0o600)


def run_id() -> str | None:
    """The id of the run this process holds the lock for, if any."""
    return _held.run_id if _held is not None else None


def check_lock_free(directory: Path | None = None) -> None:
    """PreflightError naming the holder if another live process holds the run lock."""
    if _held is None and not cleanup.lock_free(directory):
        raise PreflightError(cleanup.busy_message(cleanup.holder(directory)))


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A private work folder for the block, under the run lock and registered (a tool's own
    run: the emulation it starts joins it); removed when the block ends."""
    with RunContext() as run:
        yield run.folder(prefix, parent)


def clean_all() -> dict[str, int]:
    """`mrclab clean`: take the lock (refused while a live run holds it), which removes every
    leftover of a dead run, and release it."""
    with RunContext():
        pass
    return last_cleanup


# ----- interrupts ---------------------------------------------------------------------------------
_interrupted = False  # interrupt_once has raised in this process


def interrupt_once(signum: int, frame: object) -> None:
    """A command's SIGINT and SIGTERM handler: the first raises KeyboardInterrupt, which unwinds
    through every context manager, so teardown runs; later ones must not abort that teardown."""
    global _interrupted
    if _interrupted:
        print("mrclab: still tearing down, please wait", file=sys.stderr, flush=True)
        return
    _interrupted = True
    raise KeyboardInterrupt


def interrupts_once() -> None:
    """SIGTERM (and, where the caller sets it, SIGINT) to `interrupt_once`, none seen yet."""
    global _interrupted
    _interrupted = False
    signal.signal(signal.SIGTERM, interrupt_once)


def interrupted() -> bool:
    """Whether `interrupt_once` raised: a KeyboardInterrupt that a library's handler swallowed
    on its way up still ends the command as interrupted (a Ctrl-C during a split fabric's start
    was seen to end it with status 0)."""
    return _interrupted


def interrupts_raise() -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt, which unwinds through every `with` (the
    emulation's teardown included). For a command's entry point: SIGINT is set here, not left as
    inherited, because Python installs its KeyboardInterrupt handler only when it starts with
    SIGINT at the default action, and a shell without job control starts background commands
    (`cmd &` in a script, a CI job) with SIGINT ignored, which every child inherits: there
    Ctrl-C did nothing. SIGTERM would otherwise end the process without any teardown."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)


@contextlib.contextmanager
def _interrupts_to(handler: Callable[[int, object], None]) -> Iterator[None]:
    """SIGINT and SIGTERM call `handler` during the block, and get their own handlers back
    after it (only the main thread can set handlers; elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, before in old.items():
            signal.signal(s, before)


@contextlib.contextmanager
def teardown_shield() -> Iterator[None]:
    """SIGINT and SIGTERM print "still tearing down" instead of interrupting the block (only
    the main thread can set handlers; elsewhere the block runs unshielded)."""
    def _still(signum: int, frame: object) -> None:
        print("mrclab: still tearing down, please wait", file=sys.stderr, flush=True)

    with _interrupts_to(_still):
        yield


@contextlib.contextmanager
def interrupts_deferred(what: str) -> Iterator[None]:
    """SIGINT and SIGTERM during the block print "`what`, please wait" and are raised as
    KeyboardInterrupt once the block has finished (main thread only; elsewhere the block runs
    as it is): for steps that must not stop half-way but should not swallow the interrupt."""
    got: list[int] = []

    def _later(signum: int, frame: object) -> None:
        got.append(signum)
        print(f"mrclab: {what}, please wait", file=sys.stderr, flush=True)

    with _interrupts_to(_later):
        yield
    if got:
        raise KeyboardInterrupt
