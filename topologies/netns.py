"""Enter a Mininet host's network namespace from this process.

Python 3.11 has no `os.setns`, so libc's is called through ctypes. Sockets (netlink, UDP,
raw) opened inside `inside(pid)` stay bound to that namespace after the block ends, which
lets one process configure or probe every host without spawning one process per host.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns failed: {os.strerror(err)}")


@contextmanager
def inside(pid: int) -> Iterator[None]:
    """Run the block in the network namespace of process `pid` (this thread only)."""
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


