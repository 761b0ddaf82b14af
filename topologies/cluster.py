"""A fabric split over servers (`--servers head,s1,...`) on Mininet's cluster edition
(`mininet.examples.cluster`, shipped with Debian's mininet): the network is a `MininetCluster`,
the hosts stay on the head and each plane's kernel routers run on the server
`topologies/placement.py` gives it, as the cluster edition's remote nodes (`RemoteMixin`: one ssh
session per node, its shell in a namespace made by `mnexec` over there). T0-T1 links are veths
on their server; host links cross machines as VXLAN tunnels, a `RemoteGRELink` whose tunnel is
VXLAN (GRE is not in every kernel, and the cluster edition's GRE links cap the MTU at 1450: an
MRC frame is ~4.2 KB). Each server with planes runs the kernel routers' control plane for its
own routers (`controller.run --backend linux` over ssh, from the same checkout path), and gets
its switch ports shaped (HTB, from the same `tc -batch` scripts) and the eBPF program attached
(`python -m topologies.dataplane attach` there).

What each server needs: this checkout at the same path with `make setup` done, root's ssh login
from the head with a key (`MRCLAB_SSH_CONFIG`: an ssh_config file used for every connection,
e.g. the one `topologies/cluster_lab.py` writes), sudo and mnexec (Debian's mininet).

A switch failure there is real there: the router stops forwarding (its sysctl, through its
shell) and the notify message reaches that server's control plane over ssh, as the head's own
reaches a local one. At teardown the servers' control-plane events (and logs) are fetched into
the run's files, merged and tagged with their server.

A cut host link takes the carrier of the host's tunnel end too (protodown), as unsplit; a
capture of a remote port runs tcpdump there over ssh, its pcap streamed back.

The eBPF program's maps are pinned in each server's run folder (a BPF file system mounted
there), its counters read and its trimming switched over ssh (topologies/remote_dataplane.py).

Limits (docs/cluster.md): kernel routers only; the remote ports' virtual queues are not sampled.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from topologies import cleanup, netns, placement, servers
from topologies.cluster_nodes import classes
from topologies.dataplane import usid
from topologies.dataplane.ports import PortSpec
from topologies.emulation import Emulation, existing_link_class
from topologies.model import LINK_MTU, Fabric
from topologies.preflight import EmulationError, PreflightError
from topologies.remote_dataplane import RemoteDataPlane
from topologies.runctx import RunContext, run_id
from topologies.servers import CHECKOUT, server_run, ssh_command, survey_servers
from topologies.switches.base import BOOT_ID, NOTIFY_FILE, REMOTE_CPU_INTERVAL_S, STATUS_FILE
from topologies.switches.linux import LinuxBackend

# VXLAN over IPv4 adds 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14): a tunnel
# carries LINK_MTU frames unfragmented where the network between the servers carries
# LINK_MTU + TUNNEL_OVERHEAD; the outer packets are fragmented where it carries less.
TUNNEL_OVERHEAD = 50
SSH_FAILED = 255  # ssh's exit status for its own errors (the remote command's otherwise)
PARALLEL_SSH = 8  # ssh sessions at once for per-router batches (see docs/cluster.md on MaxSessions)
# What a teardown gives the run's processes on a server to end with their ssh sessions before
# it kills them (the control plane had this long before; cleanup.KILL_WAIT_S bounds the rest).
END_GRACE_S = 5.0


class SplitLinuxBackend(LinuxBackend):
    """The kernel routers of the planes placed on other servers, as remote nodes."""

    def __init__(self, fabric: Fabric, workdir: Path, split: placement.Placement,
                 server_ips: dict[str, str], ecmp_seed: int | None = None, usid: str | None = None) -> None:
        super().__init__(fabric, workdir, ecmp_seed=ecmp_seed, usid=usid)
        self.placement = split
        self.server_ips = server_ips
        self.servers = [s for s in split.servers[1:] if split.planes_on(s)]
        self.folders = {s: workdir / f"server-{s}" for s in self.servers}  # the same path there
        self.controllers: dict[str, subprocess.Popen] = {}

    def server_of(self, switch: str) -> str:
        return self.placement.server_of_plane(self.fabric.switch(switch).plane)

    def start_instances(self) -> None:
        for server in self.servers:
            RunContext.register_server(self.server_ips[server], str(self.folders[server]))
            folder = shlex.quote(str(self.folders[server]))
            result = server_run(self.server_ips[server], f"rm -rf {folder} && mkdir -p -m 700 {folder}")
            if result.returncode != 0:
                raise EmulationError(f"making {folder} on {server}: {result.stderr.strip()[:200]}")

    def start_controllers(self, base: dict[str, Any]) -> None:
        """One control plane per server, for the routers there, its files in its folder."""
        for server in self.servers:
            folder = self.folders[server]
            config = {**base, "status": str(folder / STATUS_FILE),
                      "events": str(folder / "controller-events.jsonl"),
                      "notify": str(folder / NOTIFY_FILE), "routers": str(folder / "routers.json")}
            self._put(server, folder / "controller.json", json.dumps(config))
            self.start_controller(server)

    def ssh_errors(self, server: str) -> Path:
        """Where the head keeps what ssh said of the control plane's session to `server`."""
        return self.workdir / f"ssh-controller-{server}.err"

    def start_controller(self, server: str) -> None:
        """The control plane on `server` (its config already there), over a session of its own."""
        folder = self.folders[server]
        command = (f"cd {shlex.quote(str(CHECKOUT))} && exec {shlex.join(['env', *cleanup.run_marker()])} "
                   f"{shlex.quote(sys.executable)} -m "
                   f"controller.run --backend linux --config {shlex.quote(str(folder / 'controller.json'))} "
                   f"> {shlex.quote(str(folder / 'controller.log'))} 2>&1")
        # A terminal: when the head's ssh goes (a teardown, or the head killed), the
        # controller over there gets SIGHUP and its parent goes.
        with open(self.ssh_errors(server), "w") as errors:
            self.controllers[server] = subprocess.Popen(
                ssh_command(self.server_ips[server], command, tty=True), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)

    def _put(self, server: str, path: Path, text: str) -> None:
        """Write `text` to `path` on `server` whole: a reader polling for the file (the control
        plane waits for routers.json) never sees it empty or half written. A CI rehearsal's
        control plane read routers.json between `cat`'s open and its write, and exited."""
        part = shlex.quote(f"{path}.part")
        result = server_run(self.server_ips[server], f"cat > {part} && mv -f {part} {shlex.quote(str(path))}",
                            stdin=text)
        if result.returncode != 0:
            raise EmulationError(f"writing {path} on {server}: {result.stderr.strip()[:200]}")

    def log_tail(self, server: str) -> str:
        """The last line of the control plane's log on `server` ("" if it cannot be read)."""
        path = shlex.quote(str(self.folders[server] / "controller.log"))
        try:
            result = server_run(self.server_ips[server], f"tail -n 1 {path}", timeout=10)
        except subprocess.TimeoutExpired:
            return ""
        return result.stdout.strip() if result.returncode == 0 else ""

    def fetch(self, server: str, name: str) -> str | None:
        """File `name` of the run's folder on `server` (None if it cannot be read)."""
        return servers.read_text(self.server_ips[server], str(self.folders[server] / name))

    def read_status(self, server: str) -> dict:
        path = shlex.quote(str(self.folders[server] / STATUS_FILE))
        result = server_run(self.server_ips[server], f"cat {path}", timeout=10)
        try:
            return json.loads(result.stdout) if result.returncode == 0 else {}
        except ValueError:
            return {}

    def add_switches(self, net: Any) -> None:
        from topologies.switches.routers import ROUTER_SYSCTLS

        router_cls, _ = classes()
        self.net = net
        routers = [net.addSwitch(sw.name, cls=router_cls, inNamespace=True, dpid=f"{sw.dpid:016x}",
                                 server=self.server_of(sw.name),
                                 serverIP=self.server_ips[self.server_of(sw.name)], user="root")
                   for sw in self.fabric.switches]
        sysctls = " ".join(f"{key.replace('/', '.')}={value}" for key, value in ROUTER_SYSCTLS.items())
        for router in routers:
            router.finish_shell()
            self.pids[router.name] = router.pid  # the server's pid
            router.cmd(f"sysctl -qw {sysctls}")
            self.seed_ecmp_in_shell(router)

    def run_in(self, jobs: list[tuple[str, list[str], str]]) -> None:
        """Run each (switch, argv, stdin) in the namespace of that switch, on its server,
        PARALLEL_SSH at a time (one ssh session each, over the server's shared connection)."""
        for start in range(0, len(jobs), PARALLEL_SSH):
            procs = []
            for switch, argv, _ in jobs[start:start + PARALLEL_SSH]:
                remote = f"nsenter --target {self.pids[switch]} --net {shlex.join(argv)}"
                procs.append(subprocess.Popen(ssh_command(self.server_ips[self.server_of(switch)], remote),
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            failed = []
            for (switch, argv, stdin), proc in zip(jobs[start:start + PARALLEL_SSH], procs, strict=True):
                _, err = proc.communicate(stdin, timeout=60)
                if proc.returncode != 0:
                    failed.append(f"{switch}: {argv[0]}: {err.strip()[:200]}")
            if failed:
                raise EmulationError("; ".join(failed[:3]))

    def server_batch(self, server: str, argv: list[str], stdin: str) -> None:
        """Run argv with `stdin` in a server's own namespace."""
        result = server_run(self.server_ips[server], shlex.join(argv), stdin=stdin)
        if result.returncode != 0:
            raise EmulationError(f"{server}: {argv[0]}: {result.stderr.strip()[:300]}")

    def start_switches(self) -> None:
        jobs = []
        for sw in self.fabric.switches:
            lines = ["link set dev lo up"] + [
                f"link set dev {self.fabric.port_ifname(sw.name, p)} up" for p in self.fabric.ports(sw.name)]
            jobs.append((sw.name, ["ip", "-batch", "-"], "\n".join(lines) + "\n"))
            if self.usid == usid.EBPF:  # the head's kernel decides for every server
                ports = [self.fabric.port_ifname(sw.name, p) for p in self.fabric.ports(sw.name)]
                jobs.append((sw.name, ["tc", "-batch", "-"],
                             usid.ingress_script(ports, usid.END_SECTION)))
        self.run_in(jobs)
        for server in self.servers:  # the control plane over there waits for this
            pids = {sw.name: self.pids[sw.name] for sw in self.fabric.switches
                    if self.server_of(sw.name) == server}
            self._put(server, self.folders[server] / "routers.json", json.dumps(pids))

    def port_namespace(self, switch: str) -> int | None:
        raise EmulationError(f"{switch} runs on {self.server_of(switch)}: its namespace is not "
                             f"on this machine")

    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        return self.net_dev_counters(switch, self.net[switch].cmd("cat /proc/net/dev"))

    def port_command(self, switch: str) -> list[str]:
        """argv prefix running a command in `switch`'s namespace, on its server."""
        return ssh_command(self.server_ips[self.server_of(switch)],
                           f"nsenter --target {self.pids[switch]} --net")

    def link_state(self, switch: str, ifname: str) -> str:
        status = self.read_status(self.server_of(switch))
        if not status:
            return ""
        return "down" if ifname in status.get("ports_down", []) else "up"

    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        said = self.net[switch].cmd(f"sysctl -qw net.ipv6.conf.all.forwarding={1 if forwarding else 0}")
        if said.strip():
            raise EmulationError(f"{switch} on {self.server_of(switch)}: {said.strip()[:200]}")

    def set_port(self, switch: str, ifname: str, up: bool) -> None:
        self.net[switch].cmd(f"ip link set dev {ifname} {'up' if up else 'down'}")

    def stop(self) -> None:
        super().stop()  # each router's ssh session: its shell and namespace go over there
        for proc in self.controllers.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.controllers.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        # The control plane and the router shells end when their ssh sessions go (SIGHUP, which
        # a loaded server may deliver late): given a grace, what is left of the run there is
        # killed, then any port that an interrupted start left outside its router's namespace,
        # and only then its folder goes.
        held = run_id()
        code = (f"from topologies import cleanup; cleanup.kill_marked(only={held!r}, grace={END_GRACE_S}); "
                f"cleanup.delete_veths()")
        end = f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -c {shlex.quote(code)}; " \
            if held else ""
        for server in self.servers:
            folder = shlex.quote(str(self.folders[server]))
            server_run(self.server_ips[server], f"{end}{servers.unmount_pins(folder)}; rm -rf {folder}",
                       timeout=30)

    def remote_cpu_commands(self) -> dict[str, list[str]]:
        # A terminal: the loop over there ends with the head's ssh (SIGHUP), as the controller.
        marker = cleanup.run_marker()
        loop = (f"{shlex.join(['export', *marker])}; " if marker else "") + \
            f"cat {BOOT_ID}; while :; do head -1 /proc/stat; sleep {REMOTE_CPU_INTERVAL_S}; done"
        return {server: ssh_command(self.server_ips[server], loop, tty=True) for server in self.servers}

    def info(self) -> dict[str, Any]:
        return {**super().info(), "remote_servers": self.servers, "tunnel": "vxlan",
                "tunnel_mtu": LINK_MTU}


class SplitEmulation(Emulation):
    """An emulation whose switches run on other servers (see the module docstring)."""

    def start(self) -> None:
        if self.switch_requested not in ("auto", "linux"):
            raise PreflightError(f"--servers: a split fabric runs the linux switch backend only "
                                 f"(asked for {self.switch_requested})")
        self.switch_requested = "linux"
        # Their addresses, and what each kernel says of seg6local: one uN for all of them
        self._server_ips, self.seg6local_refused = survey_servers(self.placement)
        super().start()

    def _make_backend(self, name: str) -> LinuxBackend:
        return SplitLinuxBackend(self.fabric, self.workdir, self.placement, self._server_ips,
                                 ecmp_seed=self.ecmp_seed, usid=self.usid)

    @property
    def split_backend(self) -> SplitLinuxBackend:
        assert isinstance(self.switches, SplitLinuxBackend)
        return self.switches

    def _start_controller(self) -> None:
        backend = self.split_backend
        backend.start_controllers({"fabric": self.fabric.params.as_dict(), "detect_ms": self.detect_ms,
                                   "usid": backend.usid})
        self.controller = next(iter(backend.controllers.values()))
        self.status_path = self.workdir / STATUS_FILE  # the head's: none (no switch here)
        self.events_path = self.workdir / "controller-events.jsonl"
        self.notify_path = self.workdir / NOTIFY_FILE
        self.events_path.write_text("")

    def _network(self) -> Any:
        from mininet.examples.cluster import MininetCluster, RemoteHost

        servers = ["localhost", *self.split_backend.servers]
        ips = {"localhost": "127.0.0.1", **self._server_ips}
        # It makes $HOME/.ssh/mn for ssh control sockets it never uses here: in the run's
        # folder, not in root's home, where a killed run would leave it.
        home = os.environ.get("HOME")
        os.environ["HOME"] = str(self.workdir)
        try:
            return MininetCluster(controller=None, build=False, autoSetMacs=False,
                                  autoStaticArp=False, waitConnected=False, servers=servers,
                                  serverIP=ips, user="root", precheck=False,
                                  host=functools.partial(RemoteHost, user="root"))
        finally:
            if home is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = home

    def _create_links(self) -> None:
        """T0-T1 links: one `ip -batch` per server, veths made in their routers' namespaces
        there. Host links: the cluster edition's tunnels (VxlanLink), made as Mininet adds them."""
        backend = self.split_backend
        by_server: dict[str, list[str]] = {}
        end = backend.port_link_options
        for link in self.fabric.fabric_links():
            by_server.setdefault(backend.server_of(link.a), []).append(
                f"link add name {link.a_ifname} mtu {LINK_MTU}{end(link.a, link.a_port)} netns "
                f"{backend.pids[link.a]} type veth peer name {link.b_ifname} mtu {LINK_MTU}"
                f"{end(link.b, link.b_port)} netns {backend.pids[link.b]}")
        for server, lines in by_server.items():
            backend.server_batch(server, ["ip", "-batch", "-"], "".join(f"{x}\n" for x in lines))

    def _add_links(self) -> None:
        _, vxlan = classes()
        existing = existing_link_class()
        backend = self.split_backend
        for link in self.fabric.links:
            if link.kind == "host":
                ends = {link.a: f" address {self.fabric.host(link.a).nics[link.plane].mac}",
                        link.b: backend.port_link_options(link.b, link.b_port)}
                self.net.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, cls=vxlan,  # type: ignore[attr-defined]
                                 intfName1=link.a_ifname, intfName2=link.b_ifname, addr1=None,
                                 addr2=None, ends=ends, params1={"up": None}, params2={"up": None})
            else:
                self.net.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, cls=existing,  # type: ignore[attr-defined]
                                 intfName1=link.a_ifname, intfName2=link.b_ifname, addr1=None,
                                 addr2=None, params1={"up": None}, params2={"up": None})

    def _switch_port_batches(self, names: list[str], script: Any) -> None:
        backend = self.split_backend
        by_switch: dict[str, list[str]] = {}
        for name in names:
            by_switch.setdefault(self._port_owner[name], []).append(name)
        backend.run_in([(switch, ["tc", "-batch", "-"], script(group))
                        for switch, group in by_switch.items()])

    def switch_port_specs(self) -> list[PortSpec]:
        return self._port_specs()  # no local namespaces: the servers' pids go with each spec

    def _attach_dataplane(self, specs: list[PortSpec]) -> dict:
        """The eBPF program on every remote port, loaded and attached over there (one load per
        server: the ports' ifindexes are unique), pinned in the server's run folder; read and
        switched from here over ssh (topologies/remote_dataplane.py)."""
        backend = self.split_backend
        by_server: dict[str, list[dict]] = {}
        for spec in specs:
            switch = self._port_owner[spec.ifname]
            by_server.setdefault(backend.server_of(switch), []).append(
                {**asdict(spec), "netns_pid": backend.pids[switch]})
        for server, items in by_server.items():
            python = (f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -m "
                      f"topologies.dataplane attach {shlex.quote(str(backend.folders[server]))}")
            result = server_run(self._server_ips[server], python, stdin=json.dumps(items))
            if result.returncode != 0:
                raise EmulationError(f"attaching the eBPF program on {server}: "
                                     f"{(result.stderr.strip().splitlines() or ['failed'])[-1][:300]}")
        self.dataplane = RemoteDataPlane({s: (self._server_ips[s], backend.folders[s]) for s in by_server})
        return {"remote": sorted(by_server)}

    def dataplane_counters(self) -> dict[str, dict[str, int]]:
        """Every server's ports, one ssh call per server; a server not read is named in the
        summary's `dataplane.counters`."""
        counters = super().dataplane_counters()
        if isinstance(self.dataplane, RemoteDataPlane) and self.dataplane.unread:
            self.dataplane_info["counters"] = "not read from " + "; ".join(
                f"{s}: {why}" for s, why in self.dataplane.unread.items())
        else:
            self.dataplane_info.pop("counters", None)
        return counters

    def _wait_flows(self, timeout: float = 120.0) -> None:
        backend = self.split_backend
        want = {s: sum(1 for sw in self.fabric.switches if backend.server_of(sw.name) == s)
                for s in backend.servers}
        deadline = time.monotonic() + timeout
        restarted: set[str] = set()
        while time.monotonic() < deadline:
            for server, proc in list(backend.controllers.items()):
                if proc.poll() is None:
                    continue
                said = backend.ssh_errors(server).read_text(errors="replace").strip().splitlines()
                if proc.returncode == SSH_FAILED and server not in restarted:
                    # ssh's own failure (its session, not the control plane: a CI rehearsal's
                    # first split run lost it once): one more session
                    restarted.add(server)
                    backend.start_controller(server)
                    continue
                raise EmulationError(
                    f"the control plane on {server} exited (status {proc.returncode}"
                    + (f"; ssh: {said[-1][:200]}" if said else "")
                    + (f"; its log: {last[:300]}" if (last := backend.log_tail(server)) else "")
                    + f"): see {backend.folders[server] / 'controller.log'} there")
            if all(len(backend.read_status(s).get("ready_dpids", ())) >= n for s, n in want.items()):
                return
            time.sleep(0.2)
        raise EmulationError(f"flows not installed on the servers' switches within {timeout:.0f} s")

    def set_link(self, name: str, up: bool) -> float:
        """The upper end set down or up on its server, as unsplit; for a host link, the host's
        end (a VXLAN device here, whose carrier a remote cut does not touch) also loses or gets
        back its carrier (`protodown`: still up, NO-CARRIER, as a veth whose peer went down), so
        the host's port watcher sees its NIC port go down as unsplit (t0-failure, port faults)."""
        link = self.fabric.link(name)
        self.split_backend.set_port(link.b, link.b_ifname, up)
        stamp = time.monotonic()
        if link.kind == "host":
            argv = ["ip", "link", "set", "dev", link.a_ifname, "protodown", "off" if up else "on"]
            done = subprocess.run(netns.command(self._pids[link.a], argv), capture_output=True, text=True)
            if done.returncode != 0:
                raise EmulationError(f"{link.a_ifname} protodown: {done.stderr.strip()[:200]}")
        return stamp

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """A host's process here; a remote switch's over ssh in its namespace there (a capture
        of its port): it ends (SIGTERM there) when its stdin closes, or when the ssh session
        goes with a killed head. Its output comes back through ssh (tcpdump's pcap on stdout)."""
        backend = self.split_backend
        if node in self._pids or node not in backend.pids:
            return super().popen(node, argv, **kwargs)
        remote = (f"nsenter --target {backend.pids[node]} --net {shlex.join(argv)} & "
                  f"read _; kill -TERM $! 2>/dev/null; wait $!")
        proc = subprocess.Popen(ssh_command(self._server_ips[backend.server_of(node)], remote),
                                start_new_session=True, stdin=subprocess.PIPE, **kwargs)
        self.procs.append(proc)
        return proc

    def port_command(self, ifname: str) -> list[str]:
        return self.split_backend.port_command(self._port_owner[ifname])

    def pid(self, node: str) -> int:
        if node in self._pids:
            return self._pids[node]
        raise EmulationError(f"{node} runs on {self.split_backend.server_of(node)}: "
                             f"no process of it on this machine")

    def notify_controller(self, message: dict) -> None:
        """What the head's notify socket gets unsplit, to the notify socket of the control plane
        of the server its switch runs on (of every server, for a message naming none there)."""
        backend = self.split_backend
        name = message.get("switch")
        on = {sw.name: backend.server_of(sw.name) for sw in self.fabric.switches}
        for server in [on[name]] if name in on else backend.servers:
            socket_path = str(backend.folders[server] / NOTIFY_FILE)
            why = servers.notify(self._server_ips[server], socket_path, message)
            if why is not None:
                raise EmulationError(f"telling the control plane on {server} of {message}: {why}")

    def controller_events(self) -> list[dict]:
        """Every server's control-plane events, fetched over ssh and merged (servers.merge_events),
        also into the head's events file, which the run's traces keep."""
        backend = self.split_backend
        texts = {s: backend.fetch(s, "controller-events.jsonl") for s in backend.servers}
        events = servers.merge_events({s: text for s, text in texts.items() if text is not None})
        self.events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
        return events

    def _stop_switches(self) -> None:
        """The servers' events and control-plane logs fetched while their folders are there."""
        try:
            if self.switches is not None:
                backend = self.split_backend
                for server in backend.servers:
                    log = backend.fetch(server, "controller.log")
                    if log is not None:
                        (self.workdir / f"controller-{server}.log").write_text(log)
                self.controller_events()
        finally:
            super()._stop_switches()


def make_emulation(fabric: Fabric, workdir: Path, servers: list[str] | tuple[str, ...] | None = None,
                   **kwargs: Any) -> Emulation:
    """An Emulation, or a SplitEmulation when `servers` puts switches on other machines."""
    if servers and placement.place(fabric, tuple(servers)).split:
        return SplitEmulation(fabric, workdir, servers=servers, **kwargs)
    return Emulation(fabric, workdir, servers=servers, **kwargs)


