"""The control plane of the Linux kernel-router backend (`python -m controller.run --backend
linux`): what `app.py` does for OVS, with netlink instead of OpenFlow, and the same status file,
events file and notify socket, so an emulation waits for and talks to it the same way.

* Install: every router's neighbours and routes from the tables-as-data (`kernel_tables.py`),
  one `ip -6 -batch` per router namespace, several at a time; then every switch is "ready".
* Port status: one NETLINK_ROUTE socket per router namespace, subscribed to link events, opened
  inside it (setns) and served by one loop. A port is up while it is both administratively up
  and has carrier (a veth whose peer is set down keeps IFF_UP and loses IFF_LOWER_UP).
* A port that comes back up gets its neighbour and every route through it back at once: the
  kernel deleted them when the port was set down (a router re-activates its static routes when
  an interface comes up: not a routing-protocol action, so no detection delay). Only then does
  the status file show the port up.
* The baseline's ECMP: after `detect_ms`, and only on the state that still holds then, every
  router of the planes concerned gets the multipath routes `baseline_groups` gives for the
  links then down, diffed against what it has (only changed routes are replaced). What to
  withdraw and when is `routing.py`'s, shared with the os-ken app; this loop carries it out.
* A switch that silently stopped forwarding is reported on the notify socket, as BFD would.
* The emulation that started it going away (a killed run) ends it too: its sockets would keep
  the routers' namespaces alive.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import selectors
import socket
import time
from pathlib import Path
from typing import Any

from controller import kernel_tables as kt
from controller.routing import Change, Convergence, RoutingPlane, parse_notification
from endpoints.host.ports import IFF_LOWER_UP, IFF_UP, RTMGRP_LINK, parse_link_events
from topologies import files, netns
from topologies.dataplane.usid import KERNEL
from topologies.model import DEFAULT_DETECT_MS, Fabric, FabricParams, Switch

LOG = logging.getLogger("mrclab.kernel-controller")

PARALLEL = 8  # ip -batch processes at once: process start-up overlaps, the kernel's rtnl
# lock serialises the rest


class KernelController:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.fabric = Fabric(FabricParams.from_dict(settings["fabric"]))
        self.status_path = settings["status"]
        self.events_path = settings["events"]
        self.notify_path = settings["notify"]
        self.routers_path = Path(settings["routers"])
        self.usid = settings.get("usid", KERNEL)  # where the routers' End runs (dataplane/usid.py)
        self.detect_s = float(settings.get("detect_ms", DEFAULT_DETECT_MS)) / 1000.0
        self.parent = os.getppid()
        self.pids: dict[str, int] = {}
        self.switches: list[Switch] = list(self.fabric.switches)
        self.port_of: dict[str, tuple[str, int]] = {}  # ifname -> (switch, port)
        for sw in self.fabric.switches:
            for port in self.fabric.ports(sw.name):
                self.port_of[self.fabric.port_ifname(sw.name, port)] = (sw.name, port)
        self.ready: list[int] = []
        self.routing = RoutingPlane(self.fabric, self.detect_s)
        # What each router holds of the baseline (dst -> route), to replace only what changes.
        self.installed: dict[str, dict[str, kt.KRoute]] = {}
        self.selector = selectors.DefaultSelector()
        Path(self.events_path).write_text("")
        self._write_status()

    # ----- bookkeeping ----------------------------------------------------------------------
    def _log_event(self, kind: str, **fields: object) -> None:
        with open(self.events_path, "a") as fh:
            fh.write(json.dumps({"t": time.monotonic(), "event": kind, **fields}) + "\n")

    def _write_status(self) -> None:
        files.write_json(self.status_path, {
            "ready_dpids": self.ready,
            "switches": len(self.fabric.switches),
            "withdrawn_links": sorted(self.routing.withdrawn),
            "detect_ms": self.detect_s * 1000,
            "pid": os.getpid(),
            "backend": "linux",
            # What the routers' ports are as this controller last saw (and acted on) them.
            "ports_down": sorted(self.fabric.port_ifname(sw, port) for sw, port in self.routing.port_down),
        }, indent=None)

    def _parent_alive(self) -> bool:
        return os.getppid() == self.parent

    # ----- start-up -------------------------------------------------------------------------
    def run(self) -> None:
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        notify.bind(self.notify_path)  # the emulation waits for this file: we are listening
        notify.setblocking(False)
        self.selector.register(notify, selectors.EVENT_READ, None)
        while not self.routers_path.exists():  # written once the routers' ports are up
            if not self._parent_alive():
                return
            time.sleep(0.02)
        self.pids = {name: int(pid) for name, pid in json.loads(self.routers_path.read_text()).items()}
        # The routers it is given: all of them, or on a fabric split over servers those of the
        # planes on this one (topologies/cluster.py runs one control plane per server).
        self.switches = [sw for sw in self.fabric.switches if sw.name in self.pids]
        for sw in self.switches:
            # Subscribed before anything is installed: no port change goes unseen.
            with netns.inside(self.pids[sw.name]):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.bind((0, RTMGRP_LINK))
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, sw.name)
        t0 = time.monotonic()
        netns.run_batches([(self.pids[sw.name], ["ip", "-6", "-batch", "-"],
                            "\n".join(kt.router_script(self.fabric, sw, usid=self.usid)) + "\n")
                           for sw in self.switches], parallel=PARALLEL)
        for sw in self.switches:
            self.installed[sw.name] = {r.dst: r for r in kt.kernel_routes(self.fabric, sw) if r.baseline}
        LOG.info("routes of %d routers installed in %.2f s", len(self.switches),
                 time.monotonic() - t0)
        self.ready = sorted(sw.dpid for sw in self.switches)
        self._write_status()
        self._loop()

    # ----- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while self._parent_alive():
            timeout = 0.1
            deadline = self.routing.next_deadline()
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - time.monotonic()))
            for key, _ in self.selector.select(timeout):
                if key.data is None:
                    self._notifications(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._link_events(key.data, key.fileobj)  # type: ignore[arg-type]
            for decision in self.routing.due(time.monotonic()):
                self._converge(decision)

    def _link_events(self, switch: str, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                LOG.warning("%s: link events overran the socket: reading the ports again", switch)
                self._resync(switch)
                continue
            for ifname, usable in parse_link_events(data):
                self._port_event(switch, ifname, usable)

    def _resync(self, switch: str) -> None:
        from pyroute2 import IPRoute

        with netns.inside(self.pids[switch]), IPRoute() as ipr:
            links = ipr.get_links()
        for link in links:
            flags = link["flags"]
            self._port_event(switch, link.get_attr("IFLA_IFNAME") or "",
                             bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP))

    def _port_event(self, switch: str, ifname: str, usable: bool) -> None:
        where = self.port_of.get(ifname)
        if where is None or where[0] != switch:
            return
        change = self.routing.port(switch, where[1], not usable)
        if change is None:
            return
        self._log_event(change.event, **change.record())
        if not change.down:
            self._restore_port(self.fabric.switch(switch), where[1])
        self._write_status()
        self._schedule(change)

    def _schedule(self, change: Change) -> None:
        # Like BFD/BGP: the routing plane acts only after its detection delay, and only on the
        # state that still holds then; the loop waits for the timer.
        self.routing.schedule(change, time.monotonic())

    def _notifications(self, sock: socket.socket) -> None:
        while True:
            try:
                raw = sock.recv(4096)
            except BlockingIOError:
                return
            try:
                name, down = parse_notification(raw, self.fabric)
            except ValueError as exc:
                LOG.warning("ignoring notification: %s", exc)
                continue
            change = self.routing.switch(name, down)
            if change is not None:
                self._log_event(change.event, **change.record())
                self._schedule(change)

    # ----- actions --------------------------------------------------------------------------
    def _install(self, jobs: list[tuple[str, list[str]]]) -> list[str]:
        """Run route lines in routers' namespaces; errors (a port set down meanwhile) are
        logged and returned, not fatal: the port's return puts its routes back."""
        errors = []
        try:
            netns.run_batches([(self.pids[name], ["ip", "-6", "-force", "-batch", "-"],
                                "\n".join(lines) + "\n") for name, lines in jobs if lines],
                              parallel=PARALLEL)
        except RuntimeError as exc:
            errors.append(str(exc))
            LOG.warning("%s", exc)
        return errors

    def _restore_port(self, sw: Switch, port: int) -> None:
        routes = kt.routes_via(kt.kernel_routes(self.fabric, sw, self.routing.withdrawn), port)
        lines = [kt.neighbour_line(self.fabric, sw, port),
                 *kt.route_lines(self.fabric, sw, routes, self.usid)]
        t0 = time.monotonic()
        errors = self._install([(sw.name, lines)])
        self.installed[sw.name].update({r.dst: r for r in routes if r.baseline})
        self._log_event("port_routes_restored", switch=sw.name, port=port, routes=len(routes),
                        seconds=round(time.monotonic() - t0, 4), errors=errors)

    def _converge(self, decision: Convergence) -> None:
        """Carry out a decision of the routing plane: the routers of its planes get the
        baseline's multipath routes for the links it withdraws, only those that change."""
        f = self.fabric
        jobs, count = [], 0
        for sw in self.switches:
            if sw.plane not in decision.planes:
                continue
            want = [r for r in kt.kernel_routes(f, sw, decision.withdrawn) if r.baseline]
            diff = [r for r in want if self.installed[sw.name].get(r.dst) != r]
            if diff:
                jobs.append((sw.name, kt.route_lines(f, sw, diff, self.usid)))
                count += len(diff)
                self.installed[sw.name].update({r.dst: r for r in diff})
        t0 = time.monotonic()
        errors = self._install(jobs)
        self._log_event("baseline_converged", **decision.record(), routers=len(jobs), routes=count,
                        seconds=round(time.monotonic() - t0, 4), errors=errors)
        self._write_status()


def main(settings: dict[str, Any]) -> int:
    KernelController(settings).run()
    return 0
