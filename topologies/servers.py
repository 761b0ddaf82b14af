"""Reaching the servers of a split fabric (topologies/cluster.py): ssh as root, with the
ssh_config `MRCLAB_SSH_CONFIG` names if set, and a killed run's leftovers cleaned over there
(what topologies/runctx.py's lock taker calls for every server a dead run registered)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

SSH_CONFIG_ENV = "MRCLAB_SSH_CONFIG"  # an ssh_config for every connection to a server
CHECKOUT = Path(__file__).resolve().parent.parent  # the same path on every server


def ssh_options() -> list[str]:
    config = os.environ.get(SSH_CONFIG_ENV)
    return ["-F", config] if config else []


def ssh_command(server_ip: str, remote: str, tty: bool = False) -> list[str]:
    """argv running the shell command `remote` as root on a server."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", *ssh_options(),
            *(["-tt"] if tty else []), f"root@{server_ip}", remote]


def server_run(server_ip: str, remote: str, stdin: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(ssh_command(server_ip, remote), input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def clean_server(address: str, folder: str) -> bool:
    """What a killed run left on a server: its leftovers as `mrclab clean` sees them there,
    and its folder. True when the server answered."""
    command = (f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -c "
               f"'from topologies import runctx; runctx.clean_all()'; rm -rf {shlex.quote(folder)}")
    try:
        return server_run(address, command, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False
