"""What a killed run can leave behind, and the run lock: the one place that knows every kind
of leftover (each switch backend's own, such as OVS bridges; switch-side veths, Mininet host
shells, pinned BPF objects).

Only one emulation runs at a time: its process id is in `LOCK_PATH` while it runs. A run
killed before its teardown is cleaned by the next start (bridges, veths, pins) and by
`mrclab clean` (also host shells).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from topologies.preflight import PreflightError

LOCK_PATH = Path("/run/mrclab.lock")
VETH_NAME = re.compile(r"^(p\d+[ls]\d+|h\d+)-eth\d+$")  # the model's interface names


# ----- the run lock -----------------------------------------------------------------------------
def check_lock_free() -> None:
    """Raise PreflightError if another live mrclab process holds the emulation lock."""
    if LOCK_PATH.exists():
        try:
            pid = int(LOCK_PATH.read_text().strip() or 0)
        except ValueError:
            pid = 0
        if pid and pid != os.getpid() and Path(f"/proc/{pid}").exists():
            raise PreflightError(
                f"another mrclab emulation (pid {pid}) is running: wait for it or run `make clean`")


def take_lock() -> None:
    check_lock_free()
    LOCK_PATH.write_text(str(os.getpid()))


def release_lock() -> None:
    try:
        if LOCK_PATH.read_text().strip() == str(os.getpid()):
            LOCK_PATH.unlink()
    except OSError:
        pass


# ----- leftovers --------------------------------------------------------------------------------
def bpf_pins() -> int:
    """Remove pins left by processes that died without detaching their data plane; their tc
    filters went with the interfaces. Returns how many pin directories were removed."""
    from topologies.dataplane.bpf import PIN_ROOT

    removed = 0
    if not PIN_ROOT.is_dir():
        return 0
    for entry in PIN_ROOT.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _host_shells() -> list[int]:
    """Mininet host shells: bash started by mnexec with "mininet:hN" in argv."""
    found = subprocess.run(["pgrep", "-f", r"^bash .*mininet:h[0-9]+$"], capture_output=True,
                           text=True)
    return [int(pid) for pid in found.stdout.split()]


def _our_veths() -> list[str]:
    """Interfaces in this namespace named like the model's (switch-side ends survive their
    switches; host ends die with their namespaces)."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [m.split("@")[0] for m in re.findall(r"^\d+: (\S+):", links, re.M)
            if VETH_NAME.match(m.split("@")[0])]


def leftovers() -> dict[str, list]:
    """What is left on the machine right now, by kind (every list empty: nothing): what a run
    must not leave behind, and what `cleanup_leftovers` removes."""
    from topologies import switches

    return {**switches.leftovers(), "veths": _our_veths(), "host_shells": _host_shells()}


def cleanup_leftovers(kill_shells: bool = False) -> dict[str, int]:
    """Delete what a killed run left: every switch backend's own leftovers (OVS bridges, ...),
    stray veths and (`kill_shells`) Mininet host shells."""
    from topologies import switches

    out = switches.cleanup_leftovers()
    # Root-side ends of our veths (switch ports) survive the bridges; host ends die with
    # their namespaces.
    from pyroute2 import IPRoute

    removed = 0
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and VETH_NAME.match(name):
                try:
                    ipr.link("del", index=link["index"])
                    removed += 1
                except Exception:  # noqa: BLE001 - its peer's deletion may have taken it already
                    pass
    shells = 0
    if kill_shells:
        for pid in _host_shells():
            try:
                os.kill(pid, signal.SIGKILL)
                shells += 1
            except ProcessLookupError:
                pass
    return {**out, "veths": removed, "shells": shells, "bpf_pins": bpf_pins()}
