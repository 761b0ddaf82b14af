"""Enter a network namespace from this thread: the one home of the setns call.

Python 3.11 has no `os.setns`, so libc's is called through ctypes. A socket opened inside the
block stays bound to that namespace after it ends: one process can hold sockets in several
namespaces (topologies/netns.py configures every host this way; endpoints/host/shared.py runs
every host's agent so).
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
def entered(path: str) -> Iterator[None]:
    """Run the block in the network namespace `path` names (/proc/PID/ns/net, /run/netns/NAME);
    this thread only, back home when it ends."""
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)
