"""Open vSwitch + os-ken, one OVS instance per plane on large fabrics: every switch an OVS
bridge, its tables pushed by the os-ken controller (`controller/`), the uSID shift an OpenFlow
reg-move.

Why one instance per plane: the userspace (netdev) datapath's main thread polls every port of
its instance on every loop, so its cost grows with the number of ports, not packets (measured:
~850 ports in one ovs-vswitchd carried 27k packet-hops/s, ~100 ports 168k). The planes are
separate fabrics (no link crosses planes), so each can get its own ovsdb-server + ovs-vswitchd.
But each instance also pays a fixed cost per main-loop wake-up, and at low rates every packet
wakes its instance: on a 2-plane fabric of 48 ports at 40 Mbit/s, two instances used 1.6 cores
where one used 0.8, and MRC lost 10-20% of its goodput to the CPU it no longer had. So planes
are grouped: as many per instance as keep it under `PORTS_PER_INSTANCE` switch ports, at least
one (64 hosts x 8 planes: one instance per plane; 16 x 4 and smaller: one instance). Each
instance has:

* a network namespace `mrclab-ovs<N>` holding its planes' switch-side interfaces and its
  ovs-vswitchd: the netdev datapath opens a tap named `ovs-netdev` (and one per bridge), names
  that are per namespace (the system OVS holds `ovs-netdev` in the root namespace);
* a run folder `RUN_ROOT/i<N>` (short: Unix socket paths must stay under 108 bytes) with its
  database, sockets, pid files and logs; `OVS_RUNDIR` points OVS's own tools at it, and every
  switch's Mininet shell has it set, so `ovs-ofctl dump-flows p0l0` typed there reaches the
  right instance;
* the controller on one Unix socket (`OF_SOCKET`, reachable from every namespace, root's
  only); ovs-vswitchd refuses an absolute `unix:` controller outside its run folder but
  resolves a relative one inside it, so each run folder has a symlink `of.sock` to it.

Start-up: databases before the controller; every veth created (by the emulation) before any
ovs-vswitchd starts, so no instance reconfigures once per new interface; then each instance
starts and gets all its bridges and ports in one ovsdb transaction, every instance at once.
Teardown: SIGKILL every daemon at once (a graceful exit with ~130 ports took over 5 s per
instance), end the switch shells, delete the namespaces: the kernel takes every port, tap and
filter with them.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topologies import preflight
from topologies.switches.base import SwitchBackend
from topologies.switches.ovsprocs import (
    NETNS_DIR,
    NETNS_PREFIX,
    RUN_ROOT,
    daemon_pid,
    delete_netns,
    instance_netns,
    kill_daemons,
    legacy_bridges,
    netns_pids,
    run_dirs,
)

OF_SOCKET = RUN_ROOT / "of.sock"  # the controller's OpenFlow socket
# Switch ports one ovs-vswitchd holds at most when planes share it (see above): ~100 ports
# forwarded at 6x the rate of ~850 (docs/architecture.md). The environment variable
# overrides it (the tests use it to give small fabrics several instances).
PORTS_PER_INSTANCE = 160
PORTS_PER_INSTANCE_ENV = "MRCLAB_OVS_PORTS_PER_INSTANCE"
FAIL_COOKIE = 0xDEAD  # marks the flow that makes a switch stop forwarding (`set_forwarding`)
# The userspace datapath sends through AF_PACKET sockets whose buffers are sized from
# net.core.wmem_default when ovs-vswitchd opens them (208 KB by default): frames queued in the
# ports' qdiscs fill it and OVS drops what it cannot send without counting it. These sysctls
# are global (a namespace reads the root's), so they are raised before any instance starts.
SOCKET_BUFFER = 16 << 20
BUFFER_SYSCTLS = ("wmem_default", "rmem_default", "wmem_max", "rmem_max")
# ovs-vswitchd's memory allocator. On every loop the netdev datapath allocates a frame buffer
# for each slot of a receive batch on each port it polls and frees the slots left empty
# (netdev-linux, NETDEV_MAX_BURST per recvmmsg): thousands of frame-sized blocks per loop at
# ~130 ports, which glibc serves from its sorted bins (perf: ~23% of a loaded instance in
# malloc and free). tcmalloc's per-thread cache serves them in a few instructions: the 64x8
# fabric forwarded ~31% more with every plane loaded, ~17% with one (docs/experiments.md).
# Preloaded where installed (`make setup` installs it); ALLOCATOR_ENV=glibc runs without it,
# for comparison.
ALLOCATOR = "tcmalloc_minimal"
ALLOCATOR_ENV = "MRCLAB_OVS_ALLOCATOR"
_PORT_RE = re.compile(r"port\s+(\d+):\s*rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?"
                      r"tx pkts=(\d+), bytes=(\d+), drop=(\d+)", re.S)


def plane_groups(params: Any, budget: int | None = None) -> list[tuple[int, ...]]:
    """The planes each instance holds, in order: as many as keep it under `budget` (default
    `PORTS_PER_INSTANCE`) switch ports (a host's NIC, both ends of each T0-T1 link), at least
    one."""
    per_plane = params.leaves * (params.hosts_per_leaf + 2 * params.spines)
    size = max(1, (PORTS_PER_INSTANCE if budget is None else budget) // per_plane)
    return [tuple(range(p, min(p + size, params.planes))) for p in range(0, params.planes, size)]


@dataclass(frozen=True)
class Instance:
    """One ovsdb-server + ovs-vswitchd and the planes it holds: where everything of it lives."""
    index: int
    planes: tuple[int, ...]

    @property
    def rundir(self) -> Path:
        return RUN_ROOT / f"i{self.index}"

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.index}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def env(self) -> dict[str, str]:
        """The environment that points OVS's tools and daemons at this instance."""
        return {**os.environ, "OVS_RUNDIR": str(self.rundir), "OVS_DBDIR": str(self.rundir),
                "OVS_LOGDIR": str(self.rundir)}

    def pid(self, daemon: str = "ovs-vswitchd") -> int | None:
        return daemon_pid(self.rundir, daemon)

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, capture_output=True, text=True, env=self.env)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()[:400]}")
        return result

    def db_argv(self) -> list[list[str]]:
        """Create the database and start ovsdb-server (detached)."""
        conf = self.rundir / "conf.db"
        return [["ovsdb-tool", "create", str(conf), str(preflight.ovs_schema())],
                ["ovsdb-server", str(conf), f"--remote=punix:{self.rundir / 'db.sock'}",
                 f"--pidfile={self.rundir / 'ovsdb-server.pid'}",
                 f"--log-file={self.rundir / 'ovsdb-server.log'}", "--detach", "--no-chdir",
                 "-vconsole:off"],
                ["ovs-vsctl", "--no-wait", "init"]]

    def vswitchd_argv(self, allocator: str | None = None) -> list[str]:
        """ovs-vswitchd in the instance's namespace (detached; its unixctl socket and the
        bridges' .mgmt sockets in the run folder, through OVS_RUNDIR), with `allocator` (a
        shared library's name) preloaded."""
        preload = ["env", f"LD_PRELOAD={allocator}"] if allocator else []
        return ["nsenter", f"--net={self.netns_path}", *preload, "ovs-vswitchd",
                f"unix:{self.rundir / 'db.sock'}", f"--pidfile={self.rundir / 'ovs-vswitchd.pid'}",
                f"--log-file={self.rundir / 'ovs-vswitchd.log'}", "--detach", "--no-chdir",
                "-vconsole:off"]


def allocator_library() -> str | None:
    """The preloaded allocator's library (None: glibc's malloc, when it is not installed or
    ALLOCATOR_ENV says glibc)."""
    if os.environ.get(ALLOCATOR_ENV, ALLOCATOR) == "glibc":
        return None
    return ctypes.util.find_library(ALLOCATOR)


def _parallel(commands: list[tuple[Instance, list[str]]]) -> None:
    """Run one command per instance, all at once; RuntimeError naming the first that failed."""
    procs = [(inst, argv, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           text=True, env=inst.env)) for inst, argv in commands]
    failed = []
    for _inst, argv, proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{' '.join(argv[:3])}: {err.strip()[:300]}")
    if failed:
        raise RuntimeError(f"starting the OVS instances failed: {failed[0]}")


def _ip_batch(lines: list[str], netns: str | None = None, force: bool = False) -> None:
    if not lines:
        return
    argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if force else []), "-batch", "-"]
    result = subprocess.run(argv, input="".join(f"{line}\n" for line in lines), text=True,
                            capture_output=True)
    if result.returncode != 0 and not force:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()[:400]}")


def raise_socket_buffers(minimum: int = SOCKET_BUFFER) -> None:
    """Raise the global socket-buffer sysctls (never lower them)."""
    for key in BUFFER_SYSCTLS:
        path = Path(f"/proc/sys/net/core/{key}")
        with contextlib.suppress(OSError):
            if int(path.read_text()) < minimum:
                path.write_text(str(minimum))


class OvsBackend(SwitchBackend):
    """OVS bridges, one ovsdb-server + ovs-vswitchd per group of planes (`plane_groups`).
    `datapath`: auto (the kernel datapath where the openvswitch module exists), kernel or
    user."""

    name = "ovs"
    removes_port_namespaces = True

    def __init__(self, fabric: Any, workdir: Path, datapath: str = "auto") -> None:
        super().__init__(fabric, workdir)
        self.datapath_requested = datapath
        self.datapath = ""
        self.allocator: str | None = None  # ovs-vswitchd's preloaded allocator (None: glibc)
        budget = os.environ.get(PORTS_PER_INSTANCE_ENV)
        groups = plane_groups(fabric.params, int(budget) if budget and budget.isdigit() else None)
        self.instances = [Instance(i, planes) for i, planes in enumerate(groups)]
        self._of_plane = {p: inst for inst in self.instances for p in inst.planes}
        self._ns_pid: dict[int, int] = {}  # a process in each instance's namespace
        self._started: list[Instance] = []
        self.timings: dict[str, float] = {}

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            preflight.require_ovs()
        except preflight.PreflightError as exc:
            return str(exc)
        return None

    def instance(self, switch: str) -> Instance:
        return self._of_plane[self.fabric.switch(switch).plane]

    # ----- start-up ----------------------------------------------------------------------------
    def start_instances(self) -> None:
        """Namespaces and databases (ovs-vswitchd waits for the links: `start_switches`)."""
        self.datapath = preflight.choose_datapath(self.datapath_requested)
        self.allocator = allocator_library()
        t0 = time.monotonic()
        RUN_ROOT.mkdir(mode=0o700, exist_ok=True)
        os.chmod(RUN_ROOT, 0o700)  # the controller's socket: root's only
        raise_socket_buffers()
        self._started = list(self.instances)  # from here on, stop() has something to undo
        _ip_batch([f"netns add {inst.netns}" for inst in self.instances])
        for inst in self.instances:
            # Switch ports need no IPv6 of their own (no link-local address, DAD or MLD per port).
            _ip_batch(["link set dev lo up"], inst.netns)
            subprocess.run(["nsenter", f"--net={inst.netns_path}", "sysctl", "-q", "-w",
                            "net.ipv6.conf.all.disable_ipv6=1",
                            "net.ipv6.conf.default.disable_ipv6=1"], capture_output=True)
            shutil.rmtree(inst.rundir, ignore_errors=True)
            inst.rundir.mkdir(mode=0o700)
            (inst.rundir / "of.sock").symlink_to(OF_SOCKET)
        for step in range(3):  # create, serve, init: each step for every instance at once
            _parallel([(inst, inst.db_argv()[step]) for inst in self.instances])
        self.timings["ovs_db"] = time.monotonic() - t0

    # ----- controller ------------------------------------------------------------------------
    def controller_config(self) -> dict[str, Any]:
        # Only root reaches the socket (its folder is root's only), and the controller accepts a
        # connection only from an ovs-vswitchd serving a run folder under RUN_ROOT (the peer's
        # pid comes with the connection): no other local process can pose as a switch.
        return {"of_socket": str(OF_SOCKET), "switch_rundir": str(RUN_ROOT)}

    def controller_command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "controller.run", "--config", str(config)]

    def controller_listening(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(OF_SOCKET))
                return True
            except OSError:
                return False

    # ----- switches --------------------------------------------------------------------------
    def add_switches(self, net: Any) -> None:
        self.net = net
        net.controllers.append(_ControllerRef())
        cls = plane_switch_class()
        for sw in self.fabric.switches:
            node = net.addSwitch(sw.name, cls=cls, dpid=f"{sw.dpid:016x}",
                                 instance=self._of_plane[sw.plane], datapath=self.datapath,
                                 batch=True, failMode="secure", protocols="OpenFlow13")
            self._ns_pid.setdefault(self._of_plane[sw.plane].index, node.pid)

    def start_switches(self) -> None:
        t0 = time.monotonic()
        _parallel([(inst, inst.vswitchd_argv(self.allocator)) for inst in self.instances])
        self.timings["ovs_vswitchd"] = time.monotonic() - t0
        self.net.start()  # the switch class's batch start: one transaction per instance
        self.timings["ovs_bridges"] = time.monotonic() - t0

    def port_namespace(self, switch: str) -> int | None:
        return self._ns_pid[self.instance(switch).index]

    def forwarding_pids(self) -> list[int]:
        return [pid for inst in self._started if (pid := inst.pid()) is not None]

    # ----- OVS's own tools, pointed at the switch's instance ----------------------------------
    def ofctl(self, command: str, switch: str, *args: str, check: bool = True) -> str:
        """`ovs-ofctl -O OpenFlow13 COMMAND SWITCH ARGS` on the switch's instance: stdout, or
        (`check`) RuntimeError with OVS's message."""
        return self.instance(switch).run(["ovs-ofctl", "-O", "OpenFlow13", command, switch, *args],
                                         check=check).stdout

    def vsctl(self, switch: str, *args: str) -> subprocess.CompletedProcess:
        """`ovs-vsctl ARGS` on the database of the switch's instance (never raises)."""
        return self.instance(switch).run(["ovs-vsctl", "--timeout=10", *args], check=False)

    # ----- observation -----------------------------------------------------------------------
    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        counters = {}
        for m in _PORT_RE.finditer(self.ofctl("dump-ports", switch, check=False)):
            port, rxp, rxb, rxd, txp, txb, txd = (int(x) for x in m.groups())
            counters[port] = {"rx_pkts": rxp, "rx_bytes": rxb, "tx_pkts": txp, "tx_bytes": txb,
                              "rx_drop": rxd, "tx_drop": txd}
        return counters

    def link_state(self, switch: str, ifname: str) -> str:
        return self.vsctl(switch, "get", "interface", ifname, "link_state").stdout.strip()

    # ----- faults ----------------------------------------------------------------------------
    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        if forwarding:
            self.ofctl("del-flows", switch, f"table=0,cookie={FAIL_COOKIE:#x}/-1")
        else:
            self.ofctl("add-flow", switch, f"table=0,priority=65535,cookie={FAIL_COOKIE:#x},actions=drop")

    # ----- teardown and leftovers ------------------------------------------------------------
    def stop(self) -> None:
        t0 = time.monotonic()
        kill_daemons([inst.rundir for inst in self._started])
        self.timings["stop_daemons"] = time.monotonic() - t0
        if self.net is not None:
            for node in self.net.switches:  # a namespace lives while a process is in it
                with contextlib.suppress(Exception):
                    node.terminate()
        self.timings["stop_shells"] = time.monotonic() - t0
        for inst in self._started:
            delete_netns(inst.netns)
            shutil.rmtree(inst.rundir, ignore_errors=True)
        OF_SOCKET.unlink(missing_ok=True)  # the controller's, which has stopped listening
        self._started = []
        self.timings["stop"] = time.monotonic() - t0

    @classmethod
    def leftovers(cls) -> dict[str, list[str]]:
        return {"ovs_instances": [str(d) for d in run_dirs()], "ovs_netns": instance_netns(),
                "bridges": legacy_bridges()}

    @classmethod
    def cleanup_leftovers(cls) -> dict[str, int]:
        dirs = run_dirs()
        kill_daemons(dirs)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        names = instance_netns()
        for name in names:
            for pid in netns_pids(name):  # a killed run's switch shells, still inside
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            delete_netns(name)
        OF_SOCKET.unlink(missing_ok=True)
        bridges = legacy_bridges()
        if bridges:
            subprocess.run(["ovs-vsctl", "--timeout=60",
                            *[a for b in bridges for a in ("--", "--if-exists", "del-br", b)]],
                           capture_output=True)
        return {"ovs_instances": len(dirs), "ovs_netns": len(names), "bridges": len(bridges)}

    def info(self) -> dict[str, Any]:
        return {"switch_backend": self.name, "datapath": self.datapath,
                "allocator": self.allocator or "glibc",
                "ovs_instances": len(self.instances),
                "planes_per_instance": [len(inst.planes) for inst in self.instances],
                # a select group picks its bucket by OVS's own hash: the run's seed does not key it
                "ecmp_hash_seed": None}


class _ControllerRef:
    """What Mininet reads of a controller (`start`, `stop`); the switches' target is the
    controller's Unix socket through their run folder (`PlaneOVSSwitch`)."""

    name = "c0"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


_switch_class: Any = None


def plane_switch_class() -> Any:
    """Mininet's OVSSwitch bound to its plane's instance (the class is built on first use:
    Mininet is imported only when an emulation runs)."""
    global _switch_class
    if _switch_class is not None:
        return _switch_class
    from mininet.node import OVSSwitch

    class PlaneOVSSwitch(OVSSwitch):
        """An OVS bridge of its plane's instance: its shell runs in the instance's namespace (so
        tools typed there reach its ports and, through OVS_RUNDIR, its instance), and the batch
        start-up sends one ovsdb transaction per instance, every instance at once."""

        def __init__(self, name: str, instance: Instance, **params: Any) -> None:
            self.instance = instance
            super().__init__(name, **params)

        def _popen(self, cmd: list[str], **params: Any) -> Any:
            prefix = ["nsenter", f"--net={self.instance.netns_path}", "env",
                      f"OVS_RUNDIR={self.instance.rundir}"]
            return super()._popen(prefix + list(cmd), **params)

        @classmethod
        def setup(cls) -> None:  # Mininet's asks the system's ovsdb, which need not run
            version = subprocess.run(["ovs-vsctl", "--version"], capture_output=True,
                                     text=True).stdout
            cls.OVSVersion = re.findall(r"\d+\.\d+", version)[0]

        def start(self, controllers: Any) -> None:
            ports = "".join(f" -- add-port {self} {intf} -- set Interface {intf} "
                            f"ofport_request={self.ports[intf]}"
                            for intf in self.intfList() if self.ports[intf])
            # The controller id is per switch: one transaction holds a whole instance.
            self.vsctl(f'-- --id=@c{self.name} create Controller target=\\"unix:of.sock\\" '
                       f"max_backoff={self.reconnectms} -- --if-exists del-br {self} "
                       f"-- add-br {self} -- set bridge {self} controller=[@c{self.name}]"
                       + self.bridgeOpts() + ports)

        @classmethod
        def batchStartup(cls, switches: Any, run: Any = None) -> Any:  # noqa: N802 - Mininet's
            groups: dict[Instance, list[Any]] = {}
            for sw in switches:
                groups.setdefault(sw.instance, []).append(sw)
            commands = []
            for inst, members in groups.items():
                argv = ["ovs-vsctl", "--timeout=300"]
                for sw in members:
                    for cmd in sw.commands:
                        argv += _unquote_words(cmd)
                    sw.commands, sw.batch = [], False
                commands.append((inst, argv))
            _parallel(commands)
            return switches

    _switch_class = PlaneOVSSwitch
    return _switch_class


def _unquote_words(cmd: str) -> list[str]:
    """A queued ovs-vsctl command line as argv (no shell in between: its one quoted value,
    the controller target, loses its shell escaping)."""
    return [w.replace('\\"', '"') for w in cmd.split()]
