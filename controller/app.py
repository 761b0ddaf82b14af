"""The os-ken application: installs the tables from `tables.py` and runs the baseline routing plane.

SRv6 forwarding is installed once per switch and never touched again: port changes are not
even looked at for it. The baseline reacts to port status like a routing protocol would: a
link seen down is withdrawn from the leaves' ECMP groups only after `detect_ms` (BFD-like by
default), and put back the same delay after it comes up again. What to withdraw and when is
`routing.py`'s (shared with the kernel routers' control plane); this app carries it out.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import nicira_ext, ofproto_v1_3

from controller.routing import Change, RoutingPlane, parse_notification
from controller.tables import (
    ETH_TYPE_IPV6,
    FlowSpec,
    GroupSpec,
    baseline_groups,
    switch_tables,
)
from topologies import files, procnet
from topologies.model import DEFAULT_DETECT_MS, Fabric, FabricParams

if TYPE_CHECKING:  # os-ken ships no type hints: these name what the untyped values are
    from os_ken.controller.controller import Datapath
    from os_ken.ofproto.ofproto_v1_3_parser import OFPFlowMod

LOG = logging.getLogger("mrclab.controller")

# Set by controller.run before os-ken instantiates the app.
SETTINGS: dict[str, Any] = {}


class MrcFabricController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fabric = Fabric(FabricParams.from_dict(SETTINGS["fabric"]))
        self.status_path: str = SETTINGS["status"]
        self.events_path: str = SETTINGS["events"]
        self.detect_s: float = SETTINGS.get("detect_ms", DEFAULT_DETECT_MS) / 1000.0
        self.lock = threading.Lock()
        self.datapaths: dict[int, Datapath] = {}
        self.ready: set[int] = set()
        self.routing = RoutingPlane(self.fabric, self.detect_s)  # guarded by self.lock
        Path(self.events_path).write_text("")
        if SETTINGS.get("switch_pids") is None and SETTINGS.get("switch_rundir") is None:
            LOG.warning("no ovs-vswitchd pid given: any local process may connect as a switch")
        self._write_status()
        if SETTINGS.get("notify"):
            threading.Thread(target=self._notify_loop, args=(SETTINGS["notify"],), daemon=True).start()

    # ----- failures no port event reveals ---------------------------------------------------
    def _notify_loop(self, path: str) -> None:
        """A switch that silently stops forwarding keeps its ports up: nothing in OpenFlow says
        so. BFD sessions over its links would; the fault injector tells us what they would
        see, on a Unix datagram socket, and the same detection delay applies."""
        if os.path.lexists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        old = os.umask(0o177)  # root's only, in the run's private (0700) folder besides
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        while True:
            try:
                name, down = parse_notification(sock.recv(4096), self.fabric)
            except ValueError as exc:
                LOG.warning("ignoring notification: %s", exc)
                continue
            with self.lock:
                change = self.routing.switch(name, down)
            if change is not None:
                self._changed(change)

    def _changed(self, change: Change) -> None:
        """Log a change of state, and come back when the routing plane acts on it."""
        self._log_event(change.event, **change.record())
        # Like BFD/BGP: the routing plane acts only after its detection delay, and only on the
        # state that still holds then.
        with self.lock:
            timer = self.routing.schedule(change, time.monotonic())
        hub.spawn_after(self.detect_s, self._converge, timer.at)

    # ----- bookkeeping ----------------------------------------------------------------------
    def _log_event(self, kind: str, **fields: object) -> None:
        record = {"t": time.monotonic(), "event": kind, **fields}
        with open(self.events_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")

    def _write_status(self) -> None:
        files.write_json(self.status_path, {
            "ready_dpids": sorted(self.ready),
            "switches": len(self.fabric.switches),
            "withdrawn_links": sorted(self.routing.withdrawn),
            "detect_ms": self.detect_s * 1000,
            "pid": os.getpid(),
        }, indent=None)

    # ----- switch start-up ------------------------------------------------------------------
    def _refusal(self, dp: Datapath) -> str | None:
        """Why an OpenFlow connection is not one of the run's switches, or None. The peer
        socket must belong to the run's ovs-vswitchd (anyone local can reach a loopback port;
        on the Unix socket the peer's pid comes with the connection and must be an
        ovs-vswitchd serving a run folder under `switch_rundir`), its datapath id must be one
        of the fabric's, and not connected already."""
        switch = self.fabric.switch_by_dpid(dp.id)
        if switch is None:
            return f"datapath {dp.id:016x} is not one of the fabric's"
        old = self.datapaths.get(dp.id)
        if old is not None and old is not dp and old.is_active:
            return f"{switch.name} is already connected"
        rundir = SETTINGS.get("switch_rundir")
        if rundir is not None:
            if not procnet.is_daemon_under(int(dp.address[1]), "ovs-vswitchd", rundir):
                return f"the peer (pid {dp.address[1]}) is not an ovs-vswitchd of the run"
            return None
        pids = SETTINGS.get("switch_pids")
        if pids is not None:
            owner = procnet.peer_owner(int(dp.address[1]), int(SETTINGS["port"]), pids)
            if owner is None:
                return f"the peer ({dp.address[0]}:{dp.address[1]}) is not the run's ovs-vswitchd"
        return None

    def _ours(self, dp: Datapath) -> bool:
        """A datapath whose connection was accepted (see `_refusal`)."""
        return dp.id is not None and self.datapaths.get(dp.id) is dp

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)  # type: ignore[untyped-decorator]
    def on_features(self, ev: ofp_event.EventOFPSwitchFeatures) -> None:
        dp = ev.msg.datapath
        why = self._refusal(dp)
        if why is not None:
            LOG.warning("refused an OpenFlow connection: %s", why)
            self._log_event("refused_connection", reason=why)
            dp.close()
            return
        switch = self.fabric.switch_by_dpid(dp.id)
        assert switch is not None
        self.datapaths[dp.id] = dp
        parser, ofp = dp.ofproto_parser, dp.ofproto
        # Start from empty tables: a reconnecting switch must not keep stale state.
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        flows, groups = switch_tables(self.fabric, switch)
        for group in groups:
            self._send_group(dp, group, ofp.OFPGC_ADD)
        for flow in flows:
            dp.send_msg(self._flow_mod(dp, flow))
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)  # type: ignore[untyped-decorator]
    def on_barrier(self, ev: ofp_event.EventOFPBarrierReply) -> None:
        if not self._ours(ev.msg.datapath):
            return
        with self.lock:
            if ev.msg.datapath.id not in self.ready:
                self.ready.add(ev.msg.datapath.id)
                self._write_status()

    def _flow_mod(self, dp: Datapath, flow: FlowSpec) -> OFPFlowMod:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        match: dict[str, object] = {"eth_type": ETH_TYPE_IPV6}
        if flow.ipv6_dst is not None:
            match["ipv6_dst"] = (str(flow.ipv6_dst.network_address), str(flow.ipv6_dst.netmask))
        actions = []
        for action in flow.actions:
            if action.kind == "shift_usid":
                # uN (RFC 9800): the 80 bits after block+own uSID move up 16 bits, the last
                # 16 bits become zero. OVS fixes the UDP checksum for the rewritten address.
                actions.append(parser.NXActionRegMove(src_field="ipv6_dst", dst_field="ipv6_dst",
                                                      n_bits=80, src_ofs=0, dst_ofs=16))
                actions.append(parser.NXActionRegLoad(ofs_nbits=nicira_ext.ofs_nbits(0, 15),
                                                      dst="ipv6_dst", value=0))
            elif action.kind == "dec_ttl":
                actions.append(parser.OFPActionDecNwTtl())
            elif action.kind == "set_eth_src":
                actions.append(parser.OFPActionSetField(eth_src=action.arg))
            elif action.kind == "set_eth_dst":
                actions.append(parser.OFPActionSetField(eth_dst=action.arg))
            elif action.kind == "output":
                actions.append(parser.OFPActionOutput(action.arg))
            elif action.kind == "group":
                actions.append(parser.OFPActionGroup(action.arg))
            else:  # pragma: no cover - tables.py only produces the kinds above
                raise ValueError(f"unknown action {action.kind}")
        inst = []
        if actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        if flow.goto is not None:
            inst.append(parser.OFPInstructionGotoTable(flow.goto))
        return parser.OFPFlowMod(dp, cookie=flow.cookie, table_id=flow.table,
                                 priority=flow.priority, match=parser.OFPMatch(**match),
                                 instructions=inst)

    def _send_group(self, dp: Datapath, group: GroupSpec, command: int) -> None:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                    actions=[parser.OFPActionOutput(port)]) for port in group.ports]
        dp.send_msg(parser.OFPGroupMod(dp, command=command, type_=ofp.OFPGT_SELECT,
                                       group_id=group.group_id, buckets=buckets))

    # ----- baseline routing plane -----------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)  # type: ignore[untyped-decorator]
    def on_port_status(self, ev: ofp_event.EventOFPPortStatus) -> None:
        msg = ev.msg
        switch = self.fabric.switch_by_dpid(msg.datapath.id)
        if switch is None or not self._ours(msg.datapath):
            return
        ofp = msg.datapath.ofproto
        port = msg.desc.port_no
        down = bool(msg.desc.state & ofp.OFPPS_LINK_DOWN) or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN) \
            or msg.reason == ofp.OFPPR_DELETE
        with self.lock:
            change = self.routing.port(switch.name, port, down)
        if change is not None:
            self._changed(change)

    def _converge(self, at: float) -> None:
        """A timer set for `at` fired: carry out what the routing plane decides then."""
        with self.lock:
            decisions = self.routing.due(at)
        for decision in decisions:
            for dpid, dp in self.datapaths.items():
                switch = self.fabric.switch_by_dpid(dpid)
                if switch is None or switch.plane not in decision.planes:
                    continue
                for group in baseline_groups(self.fabric, switch, decision.withdrawn):
                    self._send_group(dp, group, dp.ofproto.OFPGC_MODIFY)
            self._log_event("baseline_converged", **decision.record())
            with self.lock:
                self._write_status()
