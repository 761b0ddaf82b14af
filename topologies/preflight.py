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


OVS_TOOLS = ("ovs-vsctl", "ovs-ofctl", "ovs-vswitchd", "ovsdb-server", "ovsdb-tool")
OVS_SCHEMAS = (Path("/usr/share/openvswitch/vswitch.ovsschema"),
               Path("/usr/local/share/openvswitch/vswitch.ovsschema"))


def ovs_schema() -> Path:
    """The Open vSwitch database schema the per-plane instances are created from."""
    for path in OVS_SCHEMAS:
        if path.is_file():
            return path
    raise PreflightError("Open vSwitch's database schema (vswitch.ovsschema) was not found: run "
                         "`make setup` (or apt-get install openvswitch-switch)")


def require_ovs() -> None:
    """What the ovs backend needs: OVS's programs and schema (it runs its own instances, one
    per plane or group of planes; the system's need not run) and nsenter to start them in their namespaces."""
    missing = [tool for tool in OVS_TOOLS if not shutil.which(tool)]
    if missing:
        raise PreflightError(f"Open vSwitch is not installed ({', '.join(missing)} missing): run "
                             f"`make setup` (or apt-get install openvswitch-switch)")
    ovs_schema()
    if not shutil.which("nsenter"):
        raise PreflightError("nsenter (util-linux) is not on PATH: run `make setup`")


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
