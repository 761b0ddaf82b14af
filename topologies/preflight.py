"""What the machine must offer before an emulation starts, each failure a one-line fix.

The OVS datapath is detected, not assumed: the kernel datapath where the openvswitch module
is loaded (or loadable), the userspace (netdev) datapath otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


class PreflightError(RuntimeError):
    """The emulation cannot start; the message names the problem and the fix."""


class EmulationError(RuntimeError):
    """The emulation failed (at start or while running); the message is one line for the user."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise PreflightError("mrclab needs root to build namespaces and switches: run it with sudo")


def require_mininet() -> None:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        raise PreflightError("Mininet is not installed: run `make setup` "
                             "(or apt-get install mininet)") from None
    if not shutil.which("mnexec"):
        raise PreflightError("mnexec (from Mininet) is not on PATH: run `make setup`")


def require_ovs() -> None:
    if not shutil.which("ovs-vsctl"):
        raise PreflightError("Open vSwitch is not installed: run `make setup` "
                             "(or apt-get install openvswitch-switch)")
    try:
        subprocess.run(["ovs-vsctl", "--timeout=3", "show"], check=True,
                       capture_output=True, timeout=5)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        raise PreflightError("Open vSwitch is installed but not running: run `make setup` "
                             "(it starts ovsdb-server and ovs-vswitchd)") from None


def kernel_datapath_available() -> bool:
    """True where the openvswitch kernel module is loaded or can be loaded."""
    if Path("/sys/module/openvswitch").exists():
        return True
    if not Path("/proc/modules").exists():  # a kernel built without loadable modules
        return False
    result = subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True)
    return result.returncode == 0 and Path("/sys/module/openvswitch").exists()


def choose_datapath(requested: str = "auto") -> str:
    """'kernel' or 'user'. `requested` is 'auto', 'kernel' or 'user'."""
    if requested not in ("auto", "kernel", "user"):
        raise PreflightError(f"unknown datapath {requested!r}: use auto, kernel or user")
    if requested == "user":
        return "user"
    if kernel_datapath_available():
        return "kernel"
    if requested == "kernel":
        raise PreflightError("the OVS kernel datapath is not available on this kernel "
                             "(no openvswitch module): use --datapath user")
    return "user"


def check_all() -> None:
    """What every emulation needs, whatever its switches (topologies.switches.check adds the
    backend's own needs)."""
    require_root()
    require_mininet()
