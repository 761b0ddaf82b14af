"""What a killed run can leave behind, and the run lock: the one place that knows every kind
of leftover (OVS bridges, switch-side veths, Mininet host shells, pinned BPF objects).

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

from topologies.model import Fabric
from topologies.preflight import PreflightError

LOCK_PATH = Path("/run/mrclab.lock")
BRIDGE_TAG = "mrclab"  # external_ids key marking our bridges for `mrclab clean`
BRIDGE_NAME = re.compile(r"p\d+[ls]\d+")  # the model's switch names (topologies/model.py)
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
def tag_bridges(names: list[str]) -> None:
    """Mark bridges as ours (one ovsdb transaction), so `our_bridges` finds exactly them."""
    args = ["ovs-vsctl"]
    for name in names:
        args += ["--", "set", "bridge", name, f"external_ids:{BRIDGE_TAG}=1"]
    subprocess.run(args, check=True, capture_output=True)


def our_bridges() -> list[str]:
    """Bridges tagged as ours, plus untagged ones with our switch names: a run killed between
    Mininet creating the bridges and the tagging transaction leaves those."""
    tagged = subprocess.run(
        ["ovs-vsctl", "--timeout=10", "--columns=name", "--format=csv", "--no-headings",
         "find", "bridge", f"external_ids:{BRIDGE_TAG}=1"], capture_output=True, text=True)
    names = {line.strip().strip('"') for line in tagged.stdout.splitlines() if line.strip()}
    listed = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True)
    names |= {b for b in listed.stdout.split() if BRIDGE_NAME.fullmatch(b)}
    return sorted(names)


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


def cleanup_leftovers(fabric: Fabric | None = None, kill_shells: bool = False) -> dict[str, int]:
    """Delete mrclab bridges, stray veths and (`kill_shells`) Mininet host shells of a killed run."""
    bridges = set(our_bridges())
    if fabric is not None:
        bridges |= {s.name for s in fabric.switches}
    if bridges:
        args = ["ovs-vsctl", "--timeout=60"]
        for name in sorted(bridges):
            args += ["--", "--if-exists", "del-br", name]
        subprocess.run(args, capture_output=True)
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
    if kill_shells:  # Mininet host shells: bash started by mnexec with "mininet:hN" in argv
        found = subprocess.run(["pgrep", "-f", r"^bash .*mininet:h[0-9]+$"], capture_output=True,
                               text=True)
        for pid in found.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
                shells += 1
            except (ProcessLookupError, ValueError):
                pass
    return {"bridges": len(bridges), "veths": removed, "shells": shells, "bpf_pins": bpf_pins()}
