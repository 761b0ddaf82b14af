"""Bring a fabric model to life: control-plane process, Mininet hosts, the switches of the
run's backend (topologies/switches/: OVS + os-ken, or Linux kernel routers), host networking,
link shaping, and a teardown that leaves nothing behind.

Start-up follows what measured fast on a 2-core VM: tc applied with one `tc -batch` per
namespace instead of Mininet's TCLink (several subprocesses per interface), host addresses with
pyroute2 from this process (setns, no process per host), and whatever is fastest for the
switches themselves (their backend's business). Everything switch-specific goes through the
backend; this module knows only where each switch's ports live (`port_namespace`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from endpoints.protocol.config import TransportConfig
from topologies import cleanup, files, hostnet, netns, pathtables, placement, preflight, shaping, switches
from topologies.dataplane import encap as host_encap
from topologies.dataplane import usid as usid_behaviours
from topologies.dataplane.attach import DataPlane
from topologies.model import DEFAULT_DETECT_MS, LINK_MTU, Fabric
from topologies.preflight import EmulationError
from topologies.runctx import RunContext, teardown_shield
from topologies.switches import SwitchBackend
from topologies.switches.base import NOTIFY_FILE, STATUS_FILE
from topologies.switchports import SwitchPorts


def existing_link_class() -> type:
    """Mininet's Link for a veth pair that already exists (`Emulation._create_links`): Mininet
    records its interfaces and creates nothing."""
    from mininet.link import Link

    class ExistingLink(Link):
        def makeIntfPair(self, *args: object, **kwargs: object) -> None:  # noqa: N802 - Mininet's
            return None

    return ExistingLink


class Emulation(SwitchPorts):
    """A running fabric. Use as a context manager; `stop()` is idempotent.

    switch: the switch backend, `auto` (the fastest this machine runs), `ovs` or `linux`;
    datapath: OVS's datapath (auto, kernel, user), for the ovs backend; servers: the machines
    the fabric is split over, the head (this one) first (topologies/placement.py)."""

    def __init__(self, fabric: Fabric, workdir: Path, datapath: str = "auto",
                 detect_ms: float = DEFAULT_DETECT_MS, shape_links: bool = True,
                 dataplane_mode: str = "auto", transport: TransportConfig | None = None,
                 switch: str = "auto", servers: Sequence[str] | None = None,
                 ecmp_seed: int | None = 1) -> None:
        if dataplane_mode not in ("auto", "ebpf", "droptail"):
            raise preflight.PreflightError(
                f"unknown data plane {dataplane_mode!r}: use auto, ebpf or droptail")
        if switch not in switches.CHOICES:
            raise preflight.PreflightError(f"unknown switch backend {switch!r}: use one of "
                                           f"{', '.join(switches.CHOICES)}")
        self.fabric = fabric
        self.switch_requested = switch
        self.ecmp_seed = ecmp_seed  # keys the baseline's ECMP hash where the backend can seed it
        # Which machine runs which plane (`servers`: the head first; None: all on this one).
        self.placement = placement.place(fabric, tuple(servers)) if servers else placement.local(fabric)
        # Switch-side interface -> the switch it belongs to (where its namespace is asked).
        self._port_owner = {link.b_ifname: link.b for link in fabric.links}
        self._port_owner.update({link.a_ifname: link.a for link in fabric.links if link.kind == "fabric"})
        self.switches: SwitchBackend | None = None  # the run's backend, once started
        self.switch_choice = ""  # why that backend (`auto`: what it passed over, and why)
        self.usid = usid_behaviours.KERNEL  # where End/End.DT6 run: chosen at start()
        self.seg6local_refused: dict[str, str] = {}  # servers whose kernels refuse it (split)
        # The run's transport parameters: the switch thresholds count frames of its payload size.
        self.transport = transport or TransportConfig()
        self.dataplane_mode = dataplane_mode
        self.dataplane: DataPlane | None = None  # when the eBPF program runs
        self.encap: host_encap.HostEncap | None = None  # the hosts' MRC encapsulation
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
        self._stopped = False  # teardown completed
        self._stopping = False  # teardown began: processes dying now are being killed
        self.controller_died: tuple[float, int] | None = None
        self.teardown_errors: list[str] = []
        self._run: RunContext | None = None  # the run lock, held from start to teardown

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

    @property
    def switch_backend(self) -> str:
        """The backend's name ("ovs", "linux"), once started."""
        return self.switches.name if self.switches is not None else ""

    def switch_info(self) -> dict:
        """What a summary records about the switches: the backend's info and why it was chosen."""
        return {**self.backend.info(), "switch_choice": self.switch_choice, "usid_behaviours": self.usid,
                "seg6local_refused": self.seg6local_refused, "placement": self.placement.as_dict()}

    @property
    def backend(self) -> SwitchBackend:
        if self.switches is None:
            raise RuntimeError("the emulation has not started")
        return self.switches

    def start(self) -> None:
        name, self.switch_choice = switches.check_choice(self.switch_requested)
        self.usid, refusal = usid_behaviours.across(usid_behaviours.mode(), self.seg6local_refused)
        for what, why in (("host encapsulation", host_encap.unavailable()),
                          ("SRv6 behaviours", refusal or usid_behaviours.unavailable(self.usid))):
            if why is not None:
                raise preflight.PreflightError(f"MRC's {what} cannot run here: {why}")
        # The run's hold on the machine (joined when a Testbed or the runner holds it): its
        # taker removes whatever a killed run left, first.
        self._run = RunContext().enter()
        _LIVE.add(self)
        t0 = time.monotonic()
        try:
            files.ensure_private(self.workdir)  # control sockets and the run's files live here
        except OSError as exc:
            raise preflight.PreflightError(str(exc)) from None
        _raise_socket_buffer_limits()
        self.switches = self._make_backend(name)
        self.switches.start_instances()
        self.timings["switch_instances"] = time.monotonic() - t0
        self.datapath = getattr(self.switches, "datapath", "")
        self._start_controller()
        self.timings["controller"] = time.monotonic() - t0
        self._build_mininet()
        self.timings["mininet"] = time.monotonic() - t0
        self._configure_hosts()
        self.timings["hosts"] = time.monotonic() - t0
        self._wait_flows()
        self.setup_seconds = time.monotonic() - t0
        self.timings["flows"] = self.setup_seconds
        self.timings.update({f"{self.backend.name}_{k}": v for k, v in
                             getattr(self.backend, "timings", {}).items()})

    def _make_backend(self, name: str) -> SwitchBackend:
        options: dict[str, Any] = {"datapath": self.datapath_requested} if name == "ovs" \
            else {"ecmp_seed": self.ecmp_seed, "usid": self.usid}
        return switches.make(name, self.fabric, self.workdir, **options)

    def _start_controller(self) -> None:
        self.status_path = self.workdir / STATUS_FILE
        self.events_path = self.workdir / "controller-events.jsonl"
        self.notify_path = self.workdir / NOTIFY_FILE
        config = {"fabric": self.fabric.params.as_dict(), "status": str(self.status_path),
                  "events": str(self.events_path), "detect_ms": self.detect_ms,
                  "notify": str(self.notify_path), **self.backend.controller_config()}
        config_path = self.workdir / "controller.json"
        files.write_json(config_path, config, indent=None)
        log = open(self.workdir / "controller.log", "w")
        self.controller = subprocess.Popen(
            self.backend.controller_command(config_path),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=str(Path(__file__).resolve().parent.parent))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.controller.poll() is not None:
                raise EmulationError(f"controller exited at start: see {self.workdir / 'controller.log'}")
            if self.backend.controller_listening():
                threading.Thread(target=self._watch_controller, args=(self.controller,),
                                 daemon=True).start()
                return
            time.sleep(0.05)
        raise EmulationError("controller did not listen within 30 s")

    def _watch_controller(self, proc: subprocess.Popen) -> None:
        """Note when the controller dies on its own (not at teardown): a run without it no
        longer has the routing plane it describes."""
        code = proc.wait()
        if not self._stopping:
            self.controller_died = (time.monotonic(), code)

    def controller_death(self) -> tuple[float, int] | None:
        """(monotonic time, exit status) if the controller died while the emulation ran."""
        if self.controller_died is None and self.controller is not None and not self._stopping \
                and self.controller.poll() is not None:
            self.controller_died = (time.monotonic(), self.controller.returncode)
        return self.controller_died

    def _build_mininet(self) -> None:
        from mininet.log import setLogLevel

        setLogLevel("error")
        t0 = time.monotonic()
        net = self._network()
        self.net = net
        self.backend.add_switches(net)
        for host in self.fabric.hosts:
            net.addHost(host.name, ip=None)
        self._pids = {h.name: net[h.name].pid for h in self.fabric.hosts}
        for host in self.fabric.hosts:  # before their NICs exist, so that the NICs inherit them
            hostnet.set_sysctls(self._pids[host.name])
        self.timings["nodes"] = time.monotonic() - t0
        t0 = time.monotonic()
        self._create_links()
        self._add_links()
        net.build()
        self.timings["links"] = time.monotonic() - t0
        t0 = time.monotonic()
        self.backend.start_switches()
        self.timings["switches"] = time.monotonic() - t0

    def _network(self) -> Any:
        from mininet.net import Mininet

        return Mininet(controller=None, build=False, autoSetMacs=False, autoStaticArp=False,
                       waitConnected=False)

    def _add_links(self) -> None:
        """Every link of the model into Mininet, as links that exist already."""
        link_cls = existing_link_class()
        for link in self.fabric.links:
            # Nothing for Mininet to run: no MAC to set (addr None), nothing to bring up.
            self.net.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, cls=link_cls,  # type: ignore[attr-defined]
                             intfName1=link.a_ifname, intfName2=link.b_ifname, addr1=None, addr2=None,
                             params1={"up": None}, params2={"up": None})

    def _create_links(self) -> None:
        """Every veth of the fabric in one `ip -batch`, each end created in its node's
        namespace at the jumbo MTU, a host's end with its MAC and up (Mininet would spend two
        shell round trips per end on this); then every switch-side end up, one netlink socket
        per namespace. All before any switch starts, so no switch sees a stream of new or
        changing interfaces. (The kernel refuses `up` on a veth's peer while it creates the
        pair: the peer has no peer yet.)"""
        pid = {name: node.pid for name, node in self.net.nameToNode.items()}  # type: ignore[attr-defined]
        lines = []
        end = self.backend.port_link_options  # what the backend wants on its ports' ends
        for link in self.fabric.links:
            mac = f" address {self.fabric.host(link.a).nics[link.plane].mac}" \
                if link.kind == "host" else end(link.a, link.a_port)
            up = " up" if link.kind == "host" else ""
            lines.append(f"link add name {link.a_ifname} mtu {LINK_MTU}{mac} netns {pid[link.a]}"
                         f"{up} type veth peer name {link.b_ifname} mtu {LINK_MTU}"
                         f"{end(link.b, link.b_port)} netns {pid[link.b]}")
        result = subprocess.run(["ip", "-batch", "-"], input="".join(f"{x}\n" for x in lines),
                                text=True, capture_output=True)
        if result.returncode != 0:
            raise RuntimeError(f"creating the links failed: {result.stderr.strip()[:400]}")
        netns.run_batches([(ns_pid, ["ip", "-batch", "-"], "".join(f"link set dev {n} up\n" for n in names))
                       for ns_pid, names in self._ports_by_namespace(self._port_owner).items()])

    def _configure_hosts(self) -> None:
        if self.shape_links:
            self._switch_data_plane()
        t0 = time.monotonic()
        entries = list(host_encap.path_entries(self.fabric))
        self.encap = host_encap.HostEncap(len(entries))
        self.encap.fill(entries)
        self.timings["encap_map_s"] = time.monotonic() - t0
        mbps = self.fabric.params.link_mbps
        mtu = self.transport.mtu_payload
        htb = (lambda nics: shaping.host_htb_batch(nics, mbps, shaping.HOST_QUEUE_PACKETS, mtu)) \
            if self.shape_links else None
        # Offload off on both backends: the userspace datapath cannot complete partial
        # checksums, and the eBPF trim recomputes a full one (never a partial seed).
        hostnet.configure_hosts(self.fabric, self._pids, self.encap.route_encap(), offload_off=True,
                                htb=htb, usid=self.usid)
        self.timings["host_net"] = time.monotonic() - t0

    def _wait_flows(self, timeout: float = 120.0) -> None:
        want = len(self.fabric.switches)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.controller is not None and self.controller.poll() is not None:
                raise EmulationError(f"controller died: see {self.workdir / 'controller.log'}")
            if len(files.read_json(self.status_path).get("ready_dpids", ())) >= want:
                return
            time.sleep(0.05)
        raise EmulationError(f"flows not installed on all {want} switches within {timeout:.0f} s")

    def stop(self) -> None:
        """Tear everything down. Idempotent; a second Ctrl-C cannot abort it (it prints "still
        tearing down"); a step that fails does not stop the others, and `torn_down` says
        whether all of them succeeded (if not, the next run or `mrclab clean` finishes)."""
        if self._stopped:
            return
        if self not in _LIVE:  # never started (preflight or the lock refused): nothing is ours
            self._stopped = True
            return
        t0 = time.monotonic()
        failed: list[str] = []
        self._stopping = True
        with teardown_shield():
            if self._run is None:  # a retry after a failed teardown released the lock
                try:
                    self._run = RunContext(clean=False).enter()
                except preflight.PreflightError:
                    return  # another run holds the machine now, and cleaned up when it took it
            for name, step in (("processes", self._stop_procs), ("hosts", self._stop_hosts),
                               ("data plane", self._detach_dataplane),
                               ("switches", self._stop_switches),
                               ("leftovers", cleanup.cleanup_leftovers),  # its own stragglers too
                               ("controller", self._stop_controller)):
                try:
                    step()
                except Exception as exc:  # noqa: BLE001 - every step runs whatever one does
                    failed.append(f"{name}: {exc}")
            self.timings["teardown"] = time.monotonic() - t0
            self.teardown_errors = failed
            self._stopped = not failed
            if self._stopped:
                _LIVE.discard(self)
            if self._run is not None:
                run, self._run = self._run, None
                run.leave()

    @property
    def torn_down(self) -> bool:
        return self._stopped

    def _stop_procs(self) -> None:
        for proc in self.procs:
            _kill_group(proc)

    def _stop_hosts(self) -> None:
        if self.net is not None:
            for host in self.net.hosts:
                try:
                    host.terminate()  # its namespace, and the host ends of its veths, go with it
                except Exception:  # noqa: BLE001 - teardown must go on whatever one host does
                    pass

    def _detach_dataplane(self) -> None:
        self._detach_switch_dataplane()
        if self.encap is not None:
            self.encap.close()  # the hosts' routes that held it went with their namespaces

    def _stop_switches(self) -> None:
        if self.switches is not None:
            try:
                self.switches.stop()
            finally:
                self.timings.update({f"{self.switches.name}_{k}": v for k, v in
                                     getattr(self.switches, "timings", {}).items()})

    def _stop_controller(self) -> None:
        if self.controller is not None:
            _kill_group(self.controller)

    # ----- use ------------------------------------------------------------------------------
    def notify_controller(self, message: dict) -> None:
        """Tell the controller what BFD would see (a switch that silently stopped forwarding)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(json.dumps(message).encode(), str(self.notify_path))

    def controller_events(self) -> list[dict]:
        """What the control plane has logged so far (port_down, baseline_converged, ...)."""
        return [json.loads(line) for line in self.events_path.read_text().splitlines()]

    def pid(self, node: str) -> int:
        """A process in the network namespace of `node`: a host's shell, or for a switch the
        shell Mininet keeps in the namespace its ports live in."""
        if node in self._pids:
            return self._pids[node]
        self.fabric.switch(node)  # FabricError naming the valid names
        return self.net[node].pid  # type: ignore[index]

    def agent_settings(self, host: str) -> dict:
        """What the agent on `host` must know of the emulated fabric: its path table from the
        model (topologies/pathtables.py), whether the switches mark ECN (its congestion
        control's delay rule is for fabrics that do not), whether its NICs are shaped (then it
        paces to them, knowing their token bucket's burst), and the skb->priority of the host
        qdisc's control class (shaping.py)."""
        return {"paths": pathtables.agent_paths(self.fabric, host),
                "ecn_fabric": self.dataplane_info.get("mode") == "ebpf", "nic_pacing": self.shape_links,
                "nic_burst_bytes": shaping.BURST_BYTES if self.shape_links else 0,
                "control_priority": shaping.CLASS_CONTROL if self.shape_links else 0}

    def configure_mptcp(self, host: str) -> None:
        """MPTCP endpoints on `host`, one subflow per plane (topologies/hostnet.py)."""
        hostnet.configure_mptcp(self.fabric, self.fabric.host(host), self.pid(host))

    def remote_cpu_commands(self) -> dict[str, list[str]]:
        """The other machines whose CPU the fidelity verdict reads (a split fabric's servers)."""
        return self.switches.remote_cpu_commands() if self.switches is not None else {}

    def forwarding_pids(self) -> list[int]:
        """The processes that forward the fabric's packets (see SwitchBackend.forwarding_pids)."""
        return self.switches.forwarding_pids() if self.switches is not None else []

    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        """Per-port packet, byte and drop counters of `switch`, keyed by the model's port numbers."""
        return self.backend.port_counters(self.fabric.switch(switch).name)

    def popen(self, node: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start a process inside the namespace of `node` (a host, or a switch to reach its
        ports); it is killed at teardown."""
        proc = subprocess.Popen(netns.command(self.pid(node), argv),
                                start_new_session=True, **kwargs)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def set_link(self, name: str, up: bool) -> float:
        """Cut or restore a link, as a pulled cable would: its upper end (the leaf's port of a
        host link, the spine's of a T0-T1 link) set down, and on a backend that wants it
        (`SwitchBackend.cut_both_ends`) a T0-T1 link's leaf end too; the other end loses its
        carrier. A host's NIC is never set down (that would flush its routes). Returns the
        monotonic time."""
        from pyroute2 import IPRoute

        link = self.fabric.link(name)
        state = "up" if up else "down"
        ends: list[tuple[str, int | None]] = [(link.b_ifname, self.port_namespace(link.b_ifname))]
        if link.kind == "fabric" and self.backend.cut_both_ends:
            ends.append((link.a_ifname, self.port_namespace(link.a_ifname)))
        stamp = 0.0
        for ifname, pid in ends:
            with self._in_port_namespace(pid), IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state=state)
            stamp = stamp or time.monotonic()
        return stamp

    def set_switch(self, name: str, forwarding: bool) -> float:
        """Make switch `name` stop forwarding with its ports still up (the failure no port
        event reveals; how is the backend's: a drop-everything flow straight into OVS, not by
        the controller), or forward again. Returns the monotonic time."""
        self.backend.set_forwarding(self.fabric.switch(name).name, forwarding)
        return time.monotonic()

    def wait_link_state(self, name: str, up: bool, timeout: float = 10.0) -> float:
        """Block until the switches themselves report the switch-side ends of link `name` up
        (or down): carrier changes reach them asynchronously, later on a busy machine. Returns
        the seconds waited; raises EmulationError after `timeout`."""
        link = self.fabric.link(name)
        ends = [(link.b, link.b_ifname)] + ([(link.a, link.a_ifname)] if link.kind == "fabric" else [])
        want = "up" if up else "down"
        t0 = time.monotonic()
        while True:
            states = [self.backend.link_state(switch, end) for switch, end in ends]
            if all(s == want for s in states):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise EmulationError(f"the switches still report {name} as {states} after {timeout:.0f} s")
            time.sleep(0.02)


_LIVE: set[Emulation] = set()  # started and not yet completely torn down


def live_emulations() -> list[Emulation]:
    """Emulations of this process whose teardown has not completed (the CLI's "torn down"
    message is true only when this is empty)."""
    return list(_LIVE)


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
