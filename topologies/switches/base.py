"""The switch backend seam: every switch-specific thing an emulation does goes through one
`SwitchBackend`, so the same fabric model, hosts, links, shaping, eBPF data plane, faults and
measurements run on either switch implementation (OVS + os-ken in `ovs.py`, Linux kernel
routers in `linux.py`).

An emulation calls, in this order: `start_instances`, `controller_config` and
`controller_command` (the control-plane process it starts), `controller_listening` (until it
is), `add_switches` (Mininet nodes; the emulation then makes every link, asking
`port_link_options` for the switch ends), `start_switches` (after the links exist), then
during the run the queries and faults below, and at the end `stop`. The control plane writes
its status to `STATUS_FILE` in the run's folder (`ready_dpids`: the switches it has programmed)
whatever the backend. A killed run leaves what `leftovers` lists and `cleanup_leftovers`
removes (topologies/cleanup.py calls both for every backend).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

from topologies import netns
from topologies.model import LINK_MTU, Fabric

# Per-port counters every backend reports (port_counters): packets and bytes each way, and the
# packets the switch itself dropped on the port (not a queue's drops: those are tc's).
COUNTER_KEYS = ("rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes", "rx_drop", "tx_drop")
STATUS_FILE = "controller-status.json"  # the control plane's status, in the run's folder
NOTIFY_FILE = "controller.sock"  # where it hears of failures no port event reveals


def set_mtu(ifnames: list[str], netns_pid: int | None, mtu: int = LINK_MTU) -> None:
    """Set the MTU of interfaces in one namespace (a process in it, or None: this one's)."""
    from pyroute2 import IPRoute

    with (netns.inside(netns_pid) if netns_pid is not None else nullcontext()), IPRoute() as ipr:
        for name in ifnames:
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], mtu=mtu)


# How often a remote server's CPU times are read (the head's fidelity sampler's own interval).
REMOTE_CPU_INTERVAL_S = 0.25
# A kernel's boot id, printed first by a server's CPU command: one equal to this machine's is
# this machine (a lab server, a namespace beside the head), whose CPU the head reads itself.
BOOT_ID = "/proc/sys/kernel/random/boot_id"


class SwitchBackend(ABC):
    """One run's switches. `fabric`: the model; `workdir`: the run's private folder (logs)."""

    name: ClassVar[str] = ""
    # A cut T0-T1 link: both ends set down (True), or only the spine's (the leaf's end then
    # loses its carrier). Either way the switches see both ports go down.
    cut_both_ends: ClassVar[bool] = True
    # True when `stop()` deletes the namespaces holding the switch ports, and with them every
    # port's qdiscs and filters (so nothing needs removing from them first).
    removes_port_namespaces: ClassVar[bool] = False

    def __init__(self, fabric: Fabric, workdir: Path) -> None:
        self.fabric = fabric
        self.workdir = workdir
        self.net: Any = None  # the Mininet network, once `add_switches` ran

    # ----- what the machine offers -----------------------------------------------------------
    @classmethod
    @abstractmethod
    def unavailable(cls) -> str | None:
        """None when this machine can run the backend, else why not, as one line naming the fix."""

    # ----- start-up, in this order -----------------------------------------------------------
    @abstractmethod
    def start_instances(self) -> None:
        """Before the controller starts: the daemons or namespaces the switches need."""

    @abstractmethod
    def controller_config(self) -> dict[str, Any]:
        """Keys the backend adds to the controller process's JSON configuration."""

    @abstractmethod
    def controller_command(self, config: Path) -> list[str]:
        """argv of the control-plane process, given its configuration file."""

    @abstractmethod
    def controller_listening(self) -> bool:
        """True once the control-plane process accepts its switches."""

    @abstractmethod
    def add_switches(self, net: Any) -> None:
        """Add every switch of the fabric to a Mininet network before it is built."""

    def port_link_options(self, switch: str, port: int) -> str:
        """Extra `ip link add` options for the veth end that is port `port` of `switch` (e.g.
        " address MAC index N"), "" for none."""
        return ""

    @abstractmethod
    def start_switches(self) -> None:
        """After the links exist (Mininet built): ports sized, switches running."""

    # ----- where things are ------------------------------------------------------------------
    @abstractmethod
    def port_namespace(self, switch: str) -> int | None:
        """A process in the network namespace holding `switch`'s ports, or None for this
        process's own namespace (tc, eBPF, nftables and link cuts run there)."""

    @abstractmethod
    def forwarding_pids(self) -> list[int]:
        """The processes that forward packets (CPU headroom samples; empty when forwarding
        runs in the kernel's softirq, charged to no process)."""

    def remote_cpu_commands(self) -> dict[str, list[str]]:
        """{server: argv} that prints that server's `BOOT_ID`, then its /proc/stat first line every
        `REMOTE_CPU_INTERVAL_S` until it is killed, for every other machine forwarding this
        fabric's packets (a split fabric's servers: docs/cluster.md); none when all of it runs
        here."""
        return {}

    # ----- observation -----------------------------------------------------------------------
    @abstractmethod
    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        """{port number (the model's): {COUNTER_KEYS...}} as the switch counts them."""

    @abstractmethod
    def link_state(self, switch: str, ifname: str) -> str:
        """"up" or "down" as the switch itself sees port `ifname` (its notice of a carrier
        change can lag the interface), "" if it cannot tell."""

    # ----- faults ----------------------------------------------------------------------------
    @abstractmethod
    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        """Make `switch` drop everything with its ports still up (a silent failure no port
        event reveals), or forward again."""

    # ----- teardown and leftovers ------------------------------------------------------------
    @abstractmethod
    def stop(self) -> None:
        """Remove this run's switches and everything they hold (idempotent)."""

    @classmethod
    def leftovers(cls) -> dict[str, list[str]]:
        """What killed runs of this backend left on the machine, by kind (empty: nothing)."""
        return {}

    @classmethod
    def cleanup_leftovers(cls) -> dict[str, int]:
        """Remove what `leftovers` lists; counts by kind."""
        return {}

    def info(self) -> dict[str, Any]:
        """What a summary records about the switches (`switch_backend` and its settings)."""
        return {"switch_backend": self.name}
