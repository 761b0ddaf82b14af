"""Bring a fabric model to life: controller process, Mininet hosts and OVS switches, host
networking, link shaping, and a teardown that leaves nothing behind.

Start-up follows what measured fast on a 2-core VM: Mininet's batch OVS start (one ovsdb
transaction for every bridge and port), tc applied with one `tc -batch` per namespace instead
of Mininet's TCLink (several subprocesses per interface), host addresses with pyroute2 from
this process (setns, no process per host). Teardown deletes every bridge in one ovs-vsctl
transaction and drops the namespaces, rather than Mininet's interface-by-interface stop.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from endpoints.protocol.config import TransportConfig
from topologies import cleanup, files, hostnet, netns, preflight, shaping
from topologies.dataplane.attach import DataPlane
from topologies.dataplane.ports import PortSpec, switch_ports
from topologies.model import LINK_MTU, Fabric

FAIL_COOKIE = 0xDEAD  # marks the flow that makes a switch stop forwarding (`set_switch`)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulation:
    """A running fabric. Use as a context manager; `stop()` is idempotent."""

    def __init__(self, fabric: Fabric, workdir: Path, datapath: str = "auto",
                 detect_ms: float = 900.0, shape_links: bool = True,
                 dataplane_mode: str = "auto", transport: TransportConfig | None = None) -> None:
        if dataplane_mode not in ("auto", "ebpf", "droptail"):
            raise preflight.PreflightError(
                f"unknown data plane {dataplane_mode!r}: use auto, ebpf or droptail")
        self.fabric = fabric
        # The run's transport parameters: the switch thresholds count frames of its payload size.
        self.transport = transport or TransportConfig()
        self.dataplane_mode = dataplane_mode
        self.dataplane: DataPlane | None = None  # when the eBPF program runs
        # What ran at the switch egress ports, recorded in every summary.
        self.dataplane_info: dict = {"mode": "none" if not shape_links else "droptail"}
        self.workdir = Path(workdir)
        self.datapath_requested = datapath
        self.detect_ms = detect_ms
        self.shape_links = shape_links
        self.datapath = ""
        self.net = None
        self.controller: subprocess.Popen | None = None
        self.procs: list[subprocess.Popen] = []
        self.setup_seconds = 0.0
        self.timings: dict[str, float] = {}
        self._pids: dict[str, int] = {}
        self._stopped = False

    # ----- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Emulation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        preflight.check_all()
        self.datapath = preflight.choose_datapath(self.datapath_requested)
        cleanup.take_lock()
        cleanup.cleanup_leftovers()
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        _raise_socket_buffer_limits()
        self._start_controller()
        self.timings["controller"] = time.monotonic() - t0
        self._build_mininet()
        self.timings["mininet"] = time.monotonic() - t0
        self._configure_hosts()
        self.timings["hosts"] = time.monotonic() - t0
        self._wait_flows()
        self.setup_seconds = time.monotonic() - t0
        self.timings["flows"] = self.setup_seconds

    def _start_controller(self) -> None:
        port = _free_port()
        self.controller_port = port
        self.status_path = self.workdir / "controller-status.json"
        self.events_path = self.workdir / "controller-events.jsonl"
        self.notify_path = self.workdir / "controller.sock"
        config = {"fabric": self.fabric.params.as_dict(), "status": str(self.status_path),
                  "events": str(self.events_path), "detect_ms": self.detect_ms, "port": port,
                  "notify": str(self.notify_path)}
        config_path = self.workdir / "controller.json"
        files.write_json(config_path, config, indent=None)
        log = open(self.workdir / "controller.log", "w")
        self.controller = subprocess.Popen(
            [sys.executable, "-m", "controller.run", "--config", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=str(Path(__file__).resolve().parent.parent))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.controller.poll() is not None:
                raise RuntimeError(f"controller exited at start: see {self.workdir / 'controller.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("controller did not listen within 30 s")

    def _build_mininet(self) -> None:
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch

        setLogLevel("error")
        switch_cls = partial(OVSSwitch, datapath=self.datapath, batch=True, failMode="secure",
                             protocols="OpenFlow13")
        net = Mininet(switch=switch_cls, controller=None, build=False, autoSetMacs=False,
                      autoStaticArp=False, waitConnected=False)
        self.net = net
        # Not Mininet's RemoteController: it starts a shell to telnet-probe the port (a process
        # per run, and its output decoding has failed on stray bytes); switches need only this.
        net.controllers.append(_ControllerRef(self.controller_port))
        for sw in self.fabric.switches:
            net.addSwitch(sw.name, dpid=f"{sw.dpid:016x}")
        for host in self.fabric.hosts:
            net.addHost(host.name, ip=None)
        for link in self.fabric.links:
            extra = {"addr1": self.fabric.host(link.a).nics[link.plane].mac} \
                if link.kind == "host" else {}
            net.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, **extra)
        net.build()
        self._set_mtu(net)  # before OVS adds the ports, so it sizes its buffers for jumbo frames
        net.start()
        self._pids = {h.name: net[h.name].pid for h in self.fabric.hosts}
        cleanup.tag_bridges([sw.name for sw in self.fabric.switches])  # `mrclab clean` finds ours

    def _set_mtu(self, net: object) -> None:
        from pyroute2 import IPRoute

        switch_side = [link.b_ifname for link in self.fabric.links] + \
            [link.a_ifname for link in self.fabric.links if link.kind == "fabric"]
        with IPRoute() as ipr:
            for name in switch_side:
                ipr.link("set", index=ipr.link_lookup(ifname=name)[0], mtu=LINK_MTU)
        for host in self.fabric.hosts:
            with netns.inside(net[host.name].pid), IPRoute() as ipr:  # type: ignore[index]
                for nic in host.nics:
                    ipr.link("set", index=ipr.link_lookup(ifname=nic.ifname)[0], mtu=LINK_MTU)

    def _configure_hosts(self) -> None:
        if self.shape_links:
            self._switch_data_plane()
        for host in self.fabric.hosts:
            pid = self._pids[host.name]
            # Offload off on both datapaths: the userspace one cannot complete partial
            # checksums, and the eBPF trim recomputes a full one (never a partial seed).
            hostnet.configure_host(self.fabric, host, pid, offload_off=True)
            if self.shape_links:
                with netns.inside(pid):
                    shaping.tc_batch(shaping.host_htb_batch(
                        [n.ifname for n in host.nics], self.fabric.params.link_mbps,
                        shaping.HOST_QUEUE_PACKETS))

    def _switch_data_plane(self) -> None:
        """Every switch egress port: HTB at the link rate with a strict-priority control class,
        and, where eBPF loads, the ECN-marking / trimming program (topologies/dataplane/);
        drop-tail FIFOs otherwise, said plainly in `dataplane_info`."""
        from topologies import dataplane

        mbps = self.fabric.params.link_mbps
        names = [n for n, _ in self._switch_egress()]
        mtu = self.transport.mtu_payload
        queue = shaping.SWITCH_QUEUE_PACKETS
        reason = dataplane.available() if self.dataplane_mode != "droptail" else "asked for"
        if reason is not None:
            shaping.tc_batch(shaping.switch_htb_batch(names, mbps, queue, shaping.BURST_BYTES, mtu))
            if self.dataplane_mode == "ebpf":
                raise preflight.PreflightError(f"the eBPF data plane cannot run here: {reason}")
            why = ("asked for (--dataplane droptail)" if reason == "asked for"
                   else f"eBPF unavailable: {reason}")
            self.dataplane_info = {"mode": "droptail", "reason": why}
            return
        shaping.tc_batch(shaping.switch_htb_batch(names, mbps, queue, shaping.BURST_BYTES, mtu,
                                                  fifo_headroom=10))
        specs = self.switch_port_specs()
        self.dataplane = dataplane.attach_ports(specs)
        th = specs[0]
        self.dataplane_info = {"mode": "ebpf", "trim": True, "mark_bytes": th.mark_bytes,
                               "trim_bytes": th.trim_bytes, "drop_bytes": th.drop_bytes,
                               "queue_packets": queue}

    def _switch_egress(self) -> list[tuple[str, bool]]:
        """(ifname, faces a host) of every switch egress port."""
        ports = []
        for link in self.fabric.links:
            ports.append((link.b_ifname, link.kind == "host"))
            if link.kind == "fabric":
                ports.append((link.a_ifname, False))
        return ports

    def switch_port_specs(self) -> list[PortSpec]:
        """What the eBPF program is told about each switch egress port: the model's ports, the
        link rate, and thresholds from this run's transport parameters (those the agents get)."""
        return switch_ports(self._switch_egress(), self.fabric.params.link_mbps,
                            shaping.SWITCH_QUEUE_PACKETS, self.transport)

    def dataplane_counters(self) -> dict[str, dict[str, int]]:
        """Per-port counters of the eBPF program (empty when it does not run)."""
        return self.dataplane.counters() if self.dataplane is not None else {}

    def set_trimming(self, enabled: bool) -> None:
        if self.dataplane is None:
            raise preflight.PreflightError("trimming needs the eBPF data plane, which is not running "
                                           f"({self.dataplane_info.get('reason', 'drop-tail')})")
        self.dataplane.set_trim(enabled)
        self.dataplane_info["trim"] = enabled

    def _wait_flows(self, timeout: float = 120.0) -> None:
        want = len(self.fabric.switches)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.controller is not None and self.controller.poll() is not None:
                raise RuntimeError(f"controller died: see {self.workdir / 'controller.log'}")
            try:
                status = json.loads(self.status_path.read_text())
                if len(status["ready_dpids"]) >= want:
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"flows not installed on all {want} switches within {timeout:.0f} s")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        for proc in self.procs:
            _kill_group(proc)
        if self.net is not None:
            for host in self.net.hosts:
                try:
                    host.terminate()  # its namespace, and the host ends of its veths, go with it
                except Exception:  # noqa: BLE001 - teardown must go on whatever one host does
                    pass
        if self.dataplane is not None:
            self.dataplane.detach()  # before the bridges go: their ports take the filters along
        cleanup.cleanup_leftovers(self.fabric)
        if self.controller is not None:
            _kill_group(self.controller)
        self.timings["teardown"] = time.monotonic() - t0
        cleanup.release_lock()

    # ----- use ------------------------------------------------------------------------------
    def notify_controller(self, message: dict) -> None:
        """Tell the controller what BFD would see (a switch that silently stopped forwarding)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(json.dumps(message).encode(), str(self.notify_path))

    def pid(self, node: str) -> int:
        """A process in the network namespace of `node`: a host's shell, or for a switch the
        shell Mininet keeps in the namespace its ports live in."""
        if node in self._pids:
            return self._pids[node]
        self.fabric.switch(node)  # FabricError naming the valid names
        return self.net[node].pid  # type: ignore[index]

    def popen(self, node: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start a process inside the namespace of `node` (a host, or a switch to reach its
        ports); it is killed at teardown."""
        proc = subprocess.Popen(netns.command(self.pid(node), argv),
                                start_new_session=True, **kwargs)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def set_link(self, name: str, up: bool) -> float:
        """Cut or restore a link (both ends, as a pulled cable would). Returns the monotonic time."""
        from pyroute2 import IPRoute

        link = self.fabric.link(name)
        state = "up" if up else "down"
        ends: list[tuple[str, int | None]] = [(link.b_ifname, None)]
        ends.append((link.a_ifname, self.pid(link.a) if link.kind == "host" else None))
        stamp = 0.0
        for ifname, pid in ends:
            if pid is None:
                with IPRoute() as ipr:
                    ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state=state)
            else:
                with netns.inside(pid), IPRoute() as ipr:
                    ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state=state)
            stamp = stamp or time.monotonic()
        return stamp

    def set_switch(self, name: str, forwarding: bool) -> float:
        """Make switch `name` stop forwarding with its ports still up (a drop-everything flow
        above all others, installed straight into OVS, not by the controller), the failure no
        port event reveals; or forward again. Returns the monotonic time."""
        switch = self.fabric.switch(name)
        if forwarding:
            args = ["del-flows", switch.name, f"table=0,cookie={FAIL_COOKIE:#x}/-1"]
        else:
            args = ["add-flow", switch.name,
                    f"table=0,priority=65535,cookie={FAIL_COOKIE:#x},actions=drop"]
        result = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise RuntimeError(f"ovs-ofctl {' '.join(args)}: {result.stderr.strip()}")
        return time.monotonic()

    def wait_link_state(self, name: str, up: bool, timeout: float = 10.0) -> float:
        """Block until OVS itself reports the switch-side ends of link `name` up (or down):
        carrier changes reach ovs-vswitchd asynchronously, later on a busy machine. Returns
        the seconds waited; raises RuntimeError after `timeout`."""
        link = self.fabric.link(name)
        ends = [link.b_ifname] + ([link.a_ifname] if link.kind == "fabric" else [])
        want = "up" if up else "down"
        t0 = time.monotonic()
        while True:
            states = [subprocess.run(["ovs-vsctl", "--timeout=5", "get", "interface", end, "link_state"],
                                     capture_output=True, text=True).stdout.strip() for end in ends]
            if all(s == want for s in states):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"OVS still reports {name} as {states} after {timeout:.0f} s")
            time.sleep(0.02)


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


def _raise_socket_buffer_limits(minimum: int = 8 << 20) -> None:
    """Agents and probers ask for multi-MB socket buffers; the kernel caps them at these global
    limits (default ~208 KB). Only ever raised, never lowered."""
    for key in ("rmem_max", "wmem_max"):
        path = Path(f"/proc/sys/net/core/{key}")
        try:
            if int(path.read_text()) < minimum:
                path.write_text(str(minimum))
        except OSError:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=3)
    except (ProcessLookupError, PermissionError):
        return
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=3)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
