"""Linux kernel routers as switches: each switch a network namespace whose kernel forwards with
its own SRv6 (`seg6local End flavors next-csid` for the switch's uSID, static /48 routes to its
neighbours, the baseline's ECMP as multipath routes), installed from the same tables-as-data the
OpenFlow controller uses (controller/kernel_tables.py) by the control-plane process
`python -m controller.run --backend linux` (controller/kernel_app.py). On a kernel without
seg6local the same routes run with the uN of topologies/dataplane/usid.py at every port's
ingress (eBPF) instead; the run records which.

The kernel forwards in the softirq of whoever transmits, on every core, with no per-port cost:
a much faster data plane than OVS's userspace one, and an independent implementation of RFC
9800 that checks the project's packets.

Faults: a cut sets the link's upper end down (the other loses its carrier: the kernel keeps
using routes through it until the routing plane withdraws them, as OVS does); a silent switch
failure is `forwarding` 0 in its namespace (End still shifts, nothing leaves); random loss is
the project's nftables rule run inside the router's namespace (`port_namespace`).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from topologies import files, netns
from topologies.dataplane import usid
from topologies.model import Fabric
from topologies.switches.base import COUNTER_KEYS, NOTIFY_FILE, STATUS_FILE, SwitchBackend


class LinuxBackend(SwitchBackend):
    name = "linux"
    # A cut leaves the leaf's end up, losing its carrier: set down, its multipath next hops
    # would be skipped at once (a dead next hop), a local repair OVS does not have.
    cut_both_ends = False
    removes_port_namespaces = True  # the routers' namespaces, their ports with them

    def __init__(self, fabric: Fabric, workdir: Path, **options: Any) -> None:
        super().__init__(fabric, workdir)
        # The run's seed keys every router's ECMP hash (routers.multipath_seed); None: the
        # kernel's own boot-time key, as where the sysctl is missing (before 6.11).
        self.ecmp_seed: int | None = options.get("ecmp_seed")
        self.ecmp_seeded = False
        # The kernel's seg6local, or the eBPF uN where it has none (the emulation's choice)
        self.usid: str = options.get("usid") or usid.mode()
        self.routers_path = workdir / "routers.json"
        self.status_path = workdir / STATUS_FILE
        self.pids: dict[str, int] = {}
        from topologies.switches.routers import IFINDEX_BASE

        self._ifindex = {(sw.name, p): IFINDEX_BASE + i for i, (sw, p) in enumerate(
            (sw, p) for sw in fabric.switches for p in fabric.ports(sw.name))}

    @classmethod
    def unavailable(cls) -> str | None:
        return _kernel_support()

    # ----- start-up -------------------------------------------------------------------------
    def start_instances(self) -> None:
        # Nothing of an earlier run in the same folder may look like this run's control plane.
        for stale in (self.routers_path, self.workdir / NOTIFY_FILE):
            stale.unlink(missing_ok=True)

    def controller_config(self) -> dict[str, Any]:
        return {"routers": str(self.routers_path), "usid": self.usid}

    def controller_command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "controller.run", "--backend", "linux", "--config", str(config)]

    def controller_listening(self) -> bool:
        return (self.workdir / NOTIFY_FILE).exists()  # bound first thing

    def add_switches(self, net: Any) -> None:
        from topologies.switches.routers import (
            MULTIPATH_SEED_KEY,
            ROUTER_SYSCTLS,
            KernelRouter,
            multipath_seed,
        )

        self.net = net
        routers = [net.addSwitch(sw.name, cls=KernelRouter, inNamespace=True, dpid=f"{sw.dpid:016x}")
                   for sw in self.fabric.switches]
        for router in routers:
            router.finish_shell()
            self.pids[router.name] = router.pid
            with netns.inside(router.pid):  # before any port exists: every port inherits them
                for key, value in ROUTER_SYSCTLS.items():
                    _write_sysctl(key, value)
                if self.ecmp_seed is not None and os.path.exists(f"/proc/sys/{MULTIPATH_SEED_KEY}"):
                    _write_sysctl(MULTIPATH_SEED_KEY, str(multipath_seed(self.ecmp_seed, router.name)))
                    self.ecmp_seeded = True

    def seed_ecmp_in_shell(self, router: Any) -> None:
        """What add_switches does for the ECMP hash key, through `router`'s shell (a router on
        another server), where that server's kernel has the key."""
        from topologies.switches.routers import MULTIPATH_SEED_KEY, multipath_seed

        if self.ecmp_seed is not None:
            key, seed = MULTIPATH_SEED_KEY.replace("/", "."), multipath_seed(self.ecmp_seed, router.name)
            if "seeded" in router.cmd(f"sysctl -qw {key}={seed} 2>/dev/null && echo seeded"):
                self.ecmp_seeded = True

    def port_link_options(self, switch: str, port: int) -> str:
        # The model's MAC (each port's static neighbour names the MAC across the cable) and an
        # ifindex unique over every router, so that one load of the switch egress program
        # serves them all (its maps are keyed by ifindex).
        return f" address {self.fabric.port_mac(switch, port)} index {self._ifindex[(switch, port)]}"

    def start_switches(self) -> None:
        jobs = []
        for sw in self.fabric.switches:
            lines = ["link set dev lo up"] + [
                f"link set dev {self.fabric.port_ifname(sw.name, p)} up" for p in self.fabric.ports(sw.name)]
            jobs.append((self.pids[sw.name], ["ip", "-batch", "-"], "\n".join(lines) + "\n"))
            if self.usid == usid.EBPF:
                ports = [self.fabric.port_ifname(sw.name, p) for p in self.fabric.ports(sw.name)]
                jobs.append((self.pids[sw.name], ["tc", "-batch", "-"],
                             usid.ingress_script(ports, usid.END_SECTION)))
        netns.run_batches(jobs)
        # The control plane waits for this: the routers exist and their ports are up.
        files.write_json(self.routers_path, self.pids, indent=None)

    # ----- where things are -----------------------------------------------------------------
    def port_namespace(self, switch: str) -> int | None:
        return self.pids[switch]

    def forwarding_pids(self) -> list[int]:
        return []  # the kernel forwards in the softirq of whoever transmits

    # ----- observation ----------------------------------------------------------------------
    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        try:
            return self.net_dev_counters(switch, Path(f"/proc/{self.pids[switch]}/net/dev").read_text())
        except OSError:
            return {}

    def net_dev_counters(self, switch: str, net_dev: str) -> dict[int, dict[str, int]]:
        """port_counters from the text of /proc/net/dev read in the router's namespace."""
        port_of = {self.fabric.port_ifname(switch, p): p for p in self.fabric.ports(switch)}
        out = {}
        for line in net_dev.splitlines()[2:]:
            name, _, rest = line.partition(":")
            port = port_of.get(name.strip())
            if port is None:
                continue
            v = [int(x) for x in rest.split()]
            # Receive: bytes packets errs drop ...; transmit (from the 9th): bytes packets errs drop.
            out[port] = dict(zip(COUNTER_KEYS, (v[1], v[0], v[9], v[8], v[3], v[11]), strict=True))
        return out

    def link_state(self, switch: str, ifname: str) -> str:
        """As the control plane last saw the port (and acted on it: a port it shows up has its
        routes back)."""
        status = files.read_json(self.status_path)
        if not status:
            return ""
        return "down" if ifname in status.get("ports_down", []) else "up"

    # ----- faults ---------------------------------------------------------------------------
    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        with netns.inside(self.pids[switch]):
            with open("/proc/sys/net/ipv6/conf/all/forwarding", "w") as fh:
                fh.write("1" if forwarding else "0")

    # ----- teardown and leftovers -----------------------------------------------------------
    def stop(self) -> None:
        if self.net is not None:
            for node in self.net.switches:
                try:
                    node.terminate()  # the namespace, its ports and their filters go with it
                except Exception:  # noqa: BLE001 - teardown goes on whatever one shell does
                    pass

    def info(self) -> dict[str, Any]:
        return {"switch_backend": self.name, "routers": len(self.fabric.switches),
                "end_behaviour": usid.describe(self.usid), "kernel": platform.release(),
                "ecmp_hash_seed": self.ecmp_seed if self.ecmp_seeded else None}


def _write_sysctl(key: str, value: str) -> None:
    with open(f"/proc/sys/{key}", "w") as fh:
        fh.write(value)


@functools.lru_cache(maxsize=1)
def _kernel_support() -> str | None:
    """None when this machine's kernel and iproute2 run the routers, else why not (one line,
    naming the fix). Asked of a scratch namespace that dies with the probe."""
    if os.geteuid() != 0:
        return "the Linux switch backend needs root: run it with sudo"
    for tool in ("ip", "unshare", "mnexec"):
        if shutil.which(tool) is None:
            return f"{tool} not found: run `make setup`"
    why = usid.unavailable(usid.mode())
    return None if why is None else f"{why}: the routers' uN cannot run"
