"""Which local process owns the other end of a TCP connection, read from /proc: the socket's
inode from /proc/net/tcp{,6} (by its local and remote ports), then the processes whose file
descriptors point at that inode. The controller uses it to accept OpenFlow connections only
from the run's own switch processes (a local user could otherwise pose as a switch): the
backend names them (`SwitchBackend.forwarding_pids`, passed as the controller's `switch_pids`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def _tcp_inodes(local_port: int, remote_port: int) -> set[int]:
    """Inodes of TCP sockets in this network namespace bound to `local_port` and connected
    to `remote_port` (any address: both ends of a loopback connection are local)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local = int(fields[1].rsplit(":", 1)[1], 16)
            remote = int(fields[2].rsplit(":", 1)[1], 16)
            if local == local_port and remote == remote_port and fields[9] != "0":
                out.add(int(fields[9]))
    return out


def _holds(pid: int, targets: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                return True
        except OSError:
            continue
    return False


def peer_owner(peer_port: int, server_port: int, candidates: Iterable[int]) -> int | None:
    """Which of `candidates` (pids) owns the client end of the connection from local port
    `peer_port` to our `server_port`, or None (another process, or it is gone)."""
    targets = {f"socket:[{inode}]" for inode in _tcp_inodes(peer_port, server_port)}
    if not targets:
        return None
    return next((pid for pid in candidates if _holds(pid, targets)), None)



def is_daemon_under(pid: int, daemon: str, folder: str) -> bool:
    """Whether process `pid` is `daemon` started with a path under `folder` on its command
    line (how an OVS instance names its run folder: pid file, database socket)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    prefix = folder.rstrip("/").encode() + b"/"
    return bool(argv) and Path(argv[0].decode(errors="replace")).name == daemon and \
        any(prefix in arg for arg in argv[1:])
