"""An OVS run's daemons and namespaces, found from what they leave on the machine: where each
instance lives (its run folder under `RUN_ROOT`, its namespace), the daemon a run folder's pid
file names, killing them, and what a killed run left (folders, namespaces, bridges an earlier
version put in the system OVS). The backend (ovs.py) starts and stops them; `mrclab clean`
finds them here after a run that could not.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from topologies import netns

RUN_ROOT = Path("/run/mrclab-ovs")
NETNS_DIR = Path(netns.NETNS_DIR)
NETNS_PREFIX = "mrclab-ovs"
DAEMONS = ("ovs-vswitchd", "ovsdb-server")
# The system OVS of earlier versions held every bridge: a killed run of one left them there.
LEGACY_BRIDGE_TAG = "mrclab"
BRIDGE_NAME = re.compile(r"p\d+[ls]\d+")  # the model's switch names (topologies/model.py)


def daemon_pid(rundir: Path, daemon: str) -> int | None:
    """The pid in `rundir`'s pid file, if that process is `daemon` serving this run folder
    (pids are reused: the command line must say so)."""
    try:
        pid = int((rundir / f"{daemon}.pid").read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if not argv or Path(argv[0].decode(errors="replace")).name != daemon or \
            not any(str(rundir).encode() in arg for arg in argv):
        return None
    return pid


def kill_daemons(rundirs: list[Path], timeout: float = 5.0) -> None:
    pids = [pid for d in rundirs for daemon in DAEMONS if (pid := daemon_pid(d, daemon))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Not yet exited (a zombie has: init here reaps orphans only about once a second)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def run_dirs() -> list[Path]:
    if not RUN_ROOT.is_dir():
        return []
    return sorted(d for d in RUN_ROOT.iterdir() if d.is_dir() and not d.is_symlink())


def instance_netns() -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR)
                      if n.startswith(NETNS_PREFIX) and n[len(NETNS_PREFIX):].isdigit())
    except OSError:
        return []


def delete_netns(name: str) -> None:
    if (NETNS_DIR / name).exists():
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def netns_pids(name: str) -> list[int]:
    """Processes whose network namespace is the named one."""
    try:
        target = os.stat(NETNS_DIR / name).st_ino
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                    out.append(int(entry))
    return out


def legacy_bridges() -> list[str]:
    """Bridges an earlier version left in the system OVS (tagged, or named like the model's
    switches); empty where the system OVS does not run."""
    if shutil.which("ovs-vsctl") is None or not Path("/var/run/openvswitch/db.sock").exists():
        return []
    tagged = subprocess.run(
        ["ovs-vsctl", "--timeout=5", "--columns=name", "--format=csv", "--no-headings",
         "find", "bridge", f"external_ids:{LEGACY_BRIDGE_TAG}=1"], capture_output=True, text=True)
    names = {line.strip().strip('"') for line in tagged.stdout.splitlines() if line.strip()}
    listed = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    names |= {b for b in listed.stdout.split() if BRIDGE_NAME.fullmatch(b)}
    return sorted(names)
