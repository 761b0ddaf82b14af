"""Open vSwitch + os-ken: every switch an OVS bridge, its tables pushed by the os-ken controller
(`controller/`), the uSID shift an OpenFlow reg-move.

Start-up uses Mininet's batch OVS start (one ovsdb transaction for every bridge and port);
teardown deletes every bridge in one transaction. Bridges are tagged in their external_ids so
that a killed run's are found again.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

from topologies import preflight
from topologies.switches.base import SwitchBackend, set_mtu

REPO = Path(__file__).resolve().parents[2]
FAIL_COOKIE = 0xDEAD  # marks the flow that makes a switch stop forwarding (`set_forwarding`)
BRIDGE_TAG = "mrclab"  # external_ids key marking our bridges
BRIDGE_NAME = re.compile(r"p\d+[ls]\d+")  # the model's switch names (topologies/model.py)
PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")
_PORT_RE = re.compile(r"port\s+(\d+):\s*rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?"
                      r"tx pkts=(\d+), bytes=(\d+), drop=(\d+)", re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OvsBackend(SwitchBackend):
    """OVS bridges of the system's ovsdb-server + ovs-vswitchd. `datapath`: auto (the kernel
    datapath where the openvswitch module exists), kernel or user."""

    name = "ovs"

    def __init__(self, fabric: Any, workdir: Path, datapath: str = "auto") -> None:
        super().__init__(fabric, workdir)
        self.datapath_requested = datapath
        self.datapath = ""
        self.controller_port = 0

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            preflight.require_ovs()
        except preflight.PreflightError as exc:
            return str(exc)
        return None

    def start_instances(self) -> None:
        self.datapath = preflight.choose_datapath(self.datapath_requested)

    # ----- controller ------------------------------------------------------------------------
    def controller_config(self) -> dict[str, Any]:
        self.controller_port = _free_port()
        # Only these processes' connections are the run's switches (the controller accepts no
        # other; without a pid it cannot check, and its log says so).
        return {"port": self.controller_port, "switch_pids": self.forwarding_pids() or None}

    def controller_command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "controller.run", "--config", str(config)]

    def controller_listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.controller_port), timeout=0.2).close()
            return True
        except OSError:
            return False

    # ----- switches --------------------------------------------------------------------------
    def add_switches(self, net: Any) -> None:
        from mininet.node import OVSSwitch

        self.net = net
        # Not Mininet's RemoteController: it starts a shell to telnet-probe the port (a process
        # per run, and its output decoding has failed on stray bytes); switches need only this.
        net.controllers.append(_ControllerRef(self.controller_port))
        cls = partial(OVSSwitch, datapath=self.datapath, batch=True, failMode="secure",
                      protocols="OpenFlow13")
        for sw in self.fabric.switches:
            net.addSwitch(sw.name, cls=cls, dpid=f"{sw.dpid:016x}")

    def start_switches(self) -> None:
        # Jumbo MTU before OVS adds the ports, so that it sizes its buffers for them.
        set_mtu(self.switch_ports(), None)
        self.net.start()  # Mininet's batch start: one ovsdb transaction for every bridge
        tag_bridges([sw.name for sw in self.fabric.switches])  # `mrclab clean` finds ours

    def switch_ports(self) -> list[str]:
        """Every switch-side interface of the fabric."""
        return [link.b_ifname for link in self.fabric.links] + \
            [link.a_ifname for link in self.fabric.links if link.kind == "fabric"]

    def port_namespace(self, switch: str) -> int | None:
        return None  # the system OVS: ports in this process's (the root) namespace

    def forwarding_pids(self) -> list[int]:
        try:  # a stale pid file may name another process by now
            pid = int(PIDFILE.read_text().strip())
            if Path(f"/proc/{pid}/comm").read_text().strip() == "ovs-vswitchd":
                return [pid]
        except (OSError, ValueError):
            pass
        return []

    # ----- OVS's own tools, pointed at the switch's instance ----------------------------------
    def ofctl(self, command: str, switch: str, *args: str, check: bool = True) -> str:
        """`ovs-ofctl -O OpenFlow13 COMMAND SWITCH ARGS`: stdout, or (`check`) RuntimeError
        with OVS's message."""
        argv = ["ovs-ofctl", "-O", "OpenFlow13", command, switch, *args]
        result = subprocess.run(argv, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
        return result.stdout

    def vsctl(self, *args: str) -> subprocess.CompletedProcess:
        """`ovs-vsctl ARGS` on the run's database (never raises; see returncode)."""
        return subprocess.run(["ovs-vsctl", "--timeout=10", *args], capture_output=True, text=True)

    # ----- observation -----------------------------------------------------------------------
    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        out = self.ofctl("dump-ports", switch, check=False)
        counters = {}
        for m in _PORT_RE.finditer(out):
            port, rxp, rxb, rxd, txp, txb, txd = (int(x) for x in m.groups())
            counters[port] = {"rx_pkts": rxp, "rx_bytes": rxb, "tx_pkts": txp, "tx_bytes": txb,
                              "rx_drop": rxd, "tx_drop": txd}
        return counters

    def link_state(self, switch: str, ifname: str) -> str:
        return self.vsctl("get", "interface", ifname, "link_state").stdout.strip()

    # ----- faults ----------------------------------------------------------------------------
    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        if forwarding:
            self.ofctl("del-flows", switch, f"table=0,cookie={FAIL_COOKIE:#x}/-1")
        else:
            self.ofctl("add-flow", switch, f"table=0,priority=65535,cookie={FAIL_COOKIE:#x},actions=drop")

    # ----- teardown and leftovers ------------------------------------------------------------
    def stop(self) -> None:
        _delete_bridges({sw.name for sw in self.fabric.switches} | set(our_bridges()))
        if self.net is not None:
            for node in self.net.switches:  # Mininet keeps a shell per switch: end them too
                try:
                    node.terminate()
                except Exception:  # noqa: BLE001 - teardown goes on whatever one shell does
                    pass

    @classmethod
    def leftovers(cls) -> dict[str, list[str]]:
        return {"bridges": our_bridges()}

    @classmethod
    def cleanup_leftovers(cls) -> dict[str, int]:
        bridges = set(our_bridges())
        _delete_bridges(bridges)
        return {"bridges": len(bridges)}

    def info(self) -> dict[str, Any]:
        return {"switch_backend": self.name, "datapath": self.datapath, "ovs_instances": 1}


class _ControllerRef:
    """What Mininet's OVSSwitch.start reads of a controller: the os-ken process listens here."""

    name = "c0"
    protocol = "tcp"

    def __init__(self, port: int) -> None:
        self.port = port

    def IP(self) -> str:  # noqa: N802 - Mininet's name
        return "127.0.0.1"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def tag_bridges(names: list[str]) -> None:
    """Mark bridges as ours (one ovsdb transaction), so `our_bridges` finds exactly them."""
    args = ["ovs-vsctl"]
    for name in names:
        args += ["--", "set", "bridge", name, f"external_ids:{BRIDGE_TAG}=1"]
    subprocess.run(args, check=True, capture_output=True)


def our_bridges() -> list[str]:
    """Bridges tagged as ours, plus untagged ones with our switch names: a run killed between
    Mininet creating the bridges and the tagging transaction leaves those. Empty where the
    system OVS does not run."""
    if shutil.which("ovs-vsctl") is None:
        return []
    tagged = subprocess.run(
        ["ovs-vsctl", "--timeout=10", "--columns=name", "--format=csv", "--no-headings",
         "find", "bridge", f"external_ids:{BRIDGE_TAG}=1"], capture_output=True, text=True)
    names = {line.strip().strip('"') for line in tagged.stdout.splitlines() if line.strip()}
    listed = subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True)
    names |= {b for b in listed.stdout.split() if BRIDGE_NAME.fullmatch(b)}
    return sorted(names)


def _delete_bridges(names: set[str]) -> None:
    if names:
        args = ["ovs-vsctl", "--timeout=60"]
        for name in sorted(names):
            args += ["--", "--if-exists", "del-br", name]
        subprocess.run(args, capture_output=True)
