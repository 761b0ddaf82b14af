"""The host agent: one process per emulated host, running MRC (and the RoCE-like go-back-N
baseline) QPs over real sockets around the sans-IO cores.

`python -m endpoints.host.agent --config FILE` inside the host's namespace. The experiment runner
drives it through a Unix socket speaking JSON lines (see `endpoints/host/control.py`).

Paths come from the fabric model, like everything else: the EVs of a QP to peer P are the
model's paths from this host to P. Each EV's datagrams go from this host's NIC to P's NIC on the
EV's plane, marked with the EV: the host's encapsulation program wraps them to the path's uSID
carrier (endpoints/host/netio.py). Acknowledgements go back over this host's own paths to the
sender. Goodput is binned (endpoints/host/goodput.py) on
CLOCK_MONOTONIC, which every namespace shares, so the runner can line bins up with the faults
it injects.

The host's NIC ports are a transmit scheduler (`NicPacer`, shared by the host's QPs): an MRC
sender builds a packet only when its port can take one, every packet sent is charged to its
port, and every `HOST_SAMPLE_S` the model is resynchronised with the real qdisc backlog read
over rtnetlink (endpoints/host/qdisc.py). Control packets (SACK, NACK, probes) leave through
sockets whose SO_PRIORITY names the host qdisc's strict-priority class (`control_priority`
setting), as at every switch port: a SACK never queues behind this host's own data.

The trace holds the cores' events, one JSON object per line, a `host` sample every
`HOST_SAMPLE_S` (each NIC's root-qdisc qlen, backlog bytes and drops, the agent's send backlog
and how late its loop ran), and with the
`packet_log` setting the first N datagrams the agent sent and received (event "packet": the
direction, the EV, CE on arrival, and in "hdr" every header field by `wire.fields` name), so a
capture can be checked against what the agent meant: bounded, so a long run pays nothing once
the log is full.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import select
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from endpoints.host import netio
from endpoints.host import overrides as replacements_from
from endpoints.host.control import ControlError, ControlServer
from endpoints.host.goodput import BIN_S, GoodputBins
from endpoints.host.ports import PortWatch
from endpoints.host.qdisc import QdiscReader
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig, with_overrides
from endpoints.protocol.core import Core, ReceiverCore, SenderCore
from endpoints.protocol.events import as_record
from endpoints.protocol.evset import DENIED, EvInfo
from endpoints.protocol.gobackn import GbnReceiver, GbnSender
from endpoints.protocol.nicpacer import DEPTH_FRAMES, NicPacer
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.replaceable import cores
from endpoints.protocol.sender import MrcSender
from topologies.model import Fabric, FabricError, FabricParams, check_number, ev_plane, ev_value

# Datagrams drained per wake-up before timers and transmits get a turn: small enough that the
# receiver's SACK cadence (sack_every) survives a busy moment, large enough to amortise epoll.
RECV_BURST = 16
# Message contents are windows of one seeded random pattern per QP: drawing every 1 MB message
# from random.Random cost ~4.5 ms, ~4 us per packet sent. Messages up to this size repeat no
# byte sequence; longer ones repeat with this prime period, never a multiple of a packet size.
PATTERN_BYTES = 1_052_693  # a prime just above 2**20
MAX_TRANSFER = 1 << 40  # bytes of one sized transfer (`stream` with total_bytes)
# Host queue sampling (trace) and NIC pacer resynchronisation period: one rtnetlink dump, a
# fraction of a millisecond; faster sampling cost a visible share of the CPU.
HOST_SAMPLE_S = 0.020
# Batched wake-ups, off by default: with `nic_refill_frames` the NIC pacer lets each port run
# that many frames ahead and wakes its senders once per that many (the host qdisc paces them;
# each frame is timestamped with its modelled departure), and with `rx_holdoff_frames` the
# receive socket rests that many frame times after a wake-up that took a partial burst, as a NIC
# moderates interrupts. Measured (docs/experiments.md, "What a run costs"): 3 and 1 cut the
# permutation's fixed CPU from 0.45 to 0.15-0.28 of a core and the CPU per packet at 2-5 Mbit/s
# by a fifth, but not at 10 Mbit/s; and they changed results: spray through a cut link fell
# from 0.89 to 0.44-0.47 of its goodput (the modelled departures ran ahead of the real qdisc, so
# SACKs echoed timestamps "from the future" and lost their RTT samples; the rest alone, 0.73).
# Until the departure is read from the kernel rather than modelled, the agents run unbatched.
NIC_REFILL_FRAMES = 0.0
RX_HOLDOFF_FRAMES = 0.0
# Lazy pacer wake-ups (unlike the batching above, the host queue stays within DEPTH_FRAMES and
# frames keep their hand-over timestamps): a sender waiting for a busy port is woken only when
# the port has this much left to send, not as soon as it could take one more frame. Any wake-up
# in between (a datagram arriving, another timer) still fills every port that is ready, and a
# timer wake-up finds both planes ready and fills each with two frames: about one pacing
# wake-up per two frame times instead of one per frame and port (below half a frame left, the
# ready test takes two; 0.45: the encapsulation's header makes a frame charged a little more
# than one). The margin must cover how late the loop may wake: epoll rounds a timeout up to a
# whole millisecond, so at least NIC_WAKE_MIN_S; above DEPTH_FRAMES' worth (fast links) the
# pacer wakes as soon as it can, as before. Setting `nic_lazy_wake` false: the eager wake-ups.
NIC_WAKE_FRAMES = 0.45  # frames a port still holds when its waiting sender is woken
NIC_WAKE_MIN_S = 0.0015  # ... and at least this long: epoll's 1 ms rounding plus scheduling


def pacer_wake_lag(frame_s: float) -> float:
    """Frames a busy port drains below its ready threshold before a waiting sender is woken
    (NicPacer's `refill`), for frames of `frame_s` seconds: DEPTH_FRAMES less the wake margin.

    >>> round(pacer_wake_lag(0.0068), 2), round(pacer_wake_lag(0.0017), 2), pacer_wake_lag(0.0005)
    (1.05, 0.62, 0.0)
    """
    return max(DEPTH_FRAMES - max(NIC_WAKE_FRAMES, NIC_WAKE_MIN_S / frame_s), 0.0)


@dataclass
class PeerPaths:
    evs: list[EvInfo]
    dst: dict[int, tuple[bytes, bytes, str]]  # ev -> (own NIC addr, peer NIC addr, its text)
    encap: bool  # marked with the EV (source-routed, encapsulated) or destination-routed
    # (ev, control) -> socket state, opened on first use; control packets get their own
    # sockets (the host qdisc's priority class)
    tx: dict[tuple[int, bool], netio.TxPath] = field(default_factory=dict)


TRANSPORTS = ("mrc", "spray", "roce")  # roce: go-back-N on one ECMP-hashed path
# Sprayed over the model's paths, IPv6-in-IPv6 to each path's uSID carrier; the others are
# destination-routed, unencapsulated.
SOURCE_ROUTED = ("mrc", "spray")


@dataclass
class Qp:
    qpn: int
    peer: str
    peer_qpn: int
    transport: str  # one of TRANSPORTS
    core: Core  # sender or receiver, whichever is set
    paths: PeerPaths
    sender: SenderCore | None = None
    receiver: ReceiverCore | None = None
    bins: GoodputBins = field(default_factory=GoodputBins)  # receivers: bytes delivered
    digests: dict[int, str] = field(default_factory=dict)  # msn -> sha256 of the message
    stream_until: float = 0.0
    stream_bytes: int = 0  # size of each streamed message
    stream_left: int | None = None  # bytes still to post in a sized transfer (None: timed)
    msg_seed: int = 0
    pattern: bytes = b""  # twice PATTERN_BYTES of seeded random bytes, made on the first post
    last_delivered: int = 0
    completed: int = 0  # messages fully acknowledged (sender side)

    @property
    def role(self) -> str:
        return "send" if self.sender is not None else "recv"


class Agent:
    def __init__(self, settings: dict) -> None:
        self.settings = settings
        # Code in the product's place at its named override points, when the run says so
        # (`replace`; endpoints/protocol/replaceable.py): loaded before anything is opened, so
        # a bad file stops the agent with one line and nothing to clean up.
        replacements = replacements_from.from_settings(settings.get("replace"))
        self.sender_cls, self.receiver_cls = cores(replacements_from.load(replacements))
        self.provenance = replacements_from.provenance(replacements)
        self.fabric = Fabric(FabricParams.from_dict(settings["fabric"]))
        self.host = self.fabric.host(settings["host"])
        overrides = dict(settings.get("transport", {}))
        # What follows from the fabric (RTT target, window ceiling, loss-timer floor, SACK timer)
        # unless the run sets it; `ecn_fabric`: whether the switches mark (the runner says).
        params = self.fabric.params
        self.config = TransportConfig(**overrides).for_fabric(
            params.link_mbps, params.planes, ecn=bool(settings.get("ecn_fabric", True)), keep=overrides)
        # The NIC ports, shared by this host's QPs (`nic_pacing` false: NICs not shaped, as fast
        # as the agent), and the host qdisc's class for control packets (0: none, one class).
        # MRC datagrams leave the host IPv6-in-IPv6 (the encapsulation's outer header, charged
        # with every frame; the go-back-N baseline's are 40 bytes shorter, a 1% overcharge).
        frame = wire.frame_bytes(self.config.mtu_payload)
        refill = float(settings.get("nic_refill_frames", NIC_REFILL_FRAMES))
        lag = pacer_wake_lag(self.config.frame_time(params.link_mbps)) \
            if settings.get("nic_lazy_wake", True) else 0.0
        self.pacer = NicPacer(params.planes, params.link_mbps * 1e6, frame, extra_bytes=wire.IPV6_HDR,
                              depth=DEPTH_FRAMES + refill, refill=refill + lag,
                              stamp_departure=refill > 0) \
            if settings.get("nic_pacing", True) else None
        # (NICs not shaped: datagrams come as fast as the peers send, and resting would only
        # cap the rate.)
        self.rx_holdoff = float(settings.get("rx_holdoff_frames", RX_HOLDOFF_FRAMES)) * \
            self.config.frame_time(params.link_mbps) if self.pacer is not None else 0.0
        self.control_priority = int(settings.get("control_priority", 0))
        self.seed = int(settings.get("seed", 1))
        # raw_send: every packet built in Python and sent on the raw socket (the former path,
        # kept for comparison and for kernels that refuse the per-path sockets).
        self.rx_size = wire.data_len(self.config.mtu_payload) + 64  # never truncate a datagram
        self.tx = netio.Transmitter(kernel_checksum=not settings.get("raw_send", False))
        # The local address is not needed (the EV names the path): one control message fewer.
        self.rx = netio.open_receiver(wire.MRC_PORT, pktinfo=False)
        self.selector = selectors.DefaultSelector()  # the control server's sockets
        self.control = ControlServer(settings["control"], self.selector, self.handle_command)
        # The NIC ports' state from the kernel, told to every core (endpoints/host/ports.py).
        self.ports = PortWatch(self.host, self.selector, lambda: [qp.core for qp in self.qps.values()])
        # The loop waits on an epoll of its own holding the receive socket and the control
        # selector's epoll (itself pollable): the common wake-up, a datagram or a timer, then
        # skips the selectors module's per-call bookkeeping.
        self._wait = select.epoll()
        self._wait.register(self.rx.fileno(), select.EPOLLIN)
        self._wait.register(self.selector.fileno(), select.EPOLLIN)
        self.qps: dict[int, Qp] = {}
        self.backlog = netio.Backlog(self.tx)  # backpressure: per path, bounded
        self.trace = open(settings["trace"], "a") if settings.get("trace") else None
        # Datagrams still to log (0: off); the hot paths test it once per burst.
        self.packet_log = int(settings.get("packet_log", 0)) if self.trace is not None else 0
        self.stats: collections.Counter[str] = collections.Counter()
        self.running = True
        self._paths_cache: dict[tuple[str, str], PeerPaths] = {}
        # Host queues: the NICs' root qdiscs by interface index, read every HOST_SAMPLE_S.
        self._nic_plane: dict[int, int] = {}
        self._qreader: QdiscReader | None = None
        try:
            self._qreader = QdiscReader()
            self._nic_plane = {socket.if_nametoindex(n.ifname): n.plane for n in self.host.nics}
        except OSError:
            self._qreader = None  # no such interfaces here (a unit test): the model alone
        self._next_host_sample = 0.0
        self._loop_lag = 0.0
        # Wake-ups, the cost that matters on a VM (docs/experiments.md, "What a run costs"):
        # loop turns, those the receive socket woke, datagrams taken and sent; cumulative, in
        # every `host` trace sample and in agent_stats.
        self.wakes = self.rx_wakes = self.rx_dgrams = self.tx_dgrams = 0

    # ----- path tables from the model -------------------------------------------------------
    def peer_paths(self, peer: str, transport: str, plane: int, entropy: int = 0) -> PeerPaths:
        """`entropy`: a single-path QP's own share of its EV (the ECMP hash's input), so that
        QPs of one host pair on one plane may take different paths (RoCE with N QPs); 0 for
        every QP otherwise."""
        key = (peer, f"{transport}{plane}/{entropy}")
        if key in self._paths_cache:
            return self._paths_cache[key]
        if transport not in SOURCE_ROUTED:
            # One path per QP: destination routing over the plane's ECMP groups.
            me, them = self.host.nics[plane], self.fabric.host(peer).nics[plane]
            ev = ev_value(plane, 0x3FFF & (self.host.index * 131 + them.plane + entropy * 257))
            table = PeerPaths([EvInfo(ev, plane)],
                              {ev: (me.addr.packed, them.addr.packed, str(them.addr))}, encap=False)
        else:
            evs, dst = [], {}
            for route in self.fabric.routes(self.host.name, peer):
                evs.append(EvInfo(route.ev, route.plane))
                dst[route.ev] = (route.src_addr.packed, route.dst_addr.packed, str(route.dst_addr))
            table = PeerPaths(evs, dst, encap=True)
        self._paths_cache[key] = table
        return table

    # ----- control --------------------------------------------------------------------------
    def handle_command(self, req: dict) -> dict:
        cmd = req.get("cmd")
        now = time.monotonic()
        if self.trace is not None:
            self.trace.flush()  # whoever asks may read the trace next (live EV-state plots)
        if cmd == "ping":
            return {"host": self.host.name, "pid": os.getpid(), "replaced": self.provenance}
        if cmd == "open":
            return self._open(req, now)
        if cmd == "stream":
            # Messages of msg_bytes for `seconds`, or until `total_bytes` are posted (a sized
            # transfer, its last message shorter), whichever comes first.
            qp, _ = self._sender(req)
            qp.stream_bytes = _number(req, "msg_bytes", 1, self.config.max_message)
            sized = req.get("total_bytes") is not None
            qp.stream_left = _number(req, "total_bytes", 1, MAX_TRANSFER) if sized else None
            seconds = _number(req, "seconds", 0, MAX_SECONDS, real=True) \
                if req.get("seconds") is not None or not sized else float("inf")
            qp.stream_until = now + seconds
            self._refill(qp, now)
            return {"qpn": qp.qpn}
        if cmd == "write":
            qp, _ = self._sender(req)
            msn = self._post(qp, _number(req, "bytes", 1, self.config.max_message), now)
            return {"qpn": qp.qpn, "msn": msn}
        if cmd == "restrict":
            return self._restrict(req)
        if cmd == "stop_stream":
            qp, _ = self._sender(req)
            qp.stream_until = 0.0
            return {"qpn": qp.qpn}
        if cmd == "close":
            # An idle QP still probes (its reverse EVs every reverse_probe_interval, its bad EVs
            # every probe_interval): a runner closes what it has measured so it does not load
            # the next measurement.
            qp = self._qp(req)
            del self.qps[qp.qpn]
            return {"qpn": qp.qpn}
        if cmd == "stats":
            return self._stats(self._qp(req))
        if cmd == "evs":  # a sending QP's EV set now (the CLI's `evs`)
            qp, sender = self._sender(req)
            plane = {e.ev: e.plane for e in qp.paths.evs}
            rows = [{"ev": r.ev, "plane": plane.get(r.ev), "state": r.state, "active": r.active,
                     "skips": r.skips, "benched": r.benched,
                     "srtt_ms": None if r.srtt is None else round(r.srtt * 1e3, 3),
                     "bytes_sent": r.bytes_sent} for r in sender.ev_report()]
            return {"qpn": qp.qpn, "peer": qp.peer, "transport": qp.transport, "rows": rows,
                    "bytes_acked": sender.bytes_acked, **self._congestion(sender)}
        if cmd == "progress":  # cheap enough to poll every millisecond (collective steps)
            qp = self._qp(req)
            if qp.receiver is not None:
                return {"qpn": qp.qpn, "messages": len(qp.digests),
                        "bytes": qp.receiver.bytes_delivered}
            assert qp.sender is not None
            # posted and streaming: a sized transfer is done when nothing is left to post and
            # every posted message is acknowledged.
            return {"qpn": qp.qpn, "messages": qp.completed, "bytes": qp.sender.bytes_acked,
                    "posted": len(qp.digests), "streaming": qp.stream_until > now}
        if cmd == "agent_stats":
            return {"counters": dict(self.stats), "backlog": len(self.backlog),
                    "backlog_overflow": self.backlog.overflow,
                    "send_dropped": self.tx.dropped, "send_errors": dict(self.tx.errors),
                    "qps": sorted(self.qps),
                    "kernel_checksum_paths": sum(p.sock is not None for p in self.tx.paths.values()),
                    "raw_paths": sum(p.sock is None for p in self.tx.paths.values()),
                    "loop": self._loop_counts()}
        if cmd == "shutdown":
            self.running = False
            return {}
        raise ControlError(f"unknown command {cmd!r}: use open, stream, write, stop_stream, "
                           f"restrict, stats, evs, progress, close, agent_stats, ping or shutdown")

    def _qp(self, req: dict) -> Qp:
        qpn = _number(req, "qpn", 1, wire.QPN_MASK)
        qp = self.qps.get(qpn)
        if qp is None:
            raise ControlError(f"no QP {qpn} on {self.host.name}: open it first")
        return qp

    def _sender(self, req: dict) -> tuple[Qp, SenderCore]:
        qp = self._qp(req)
        if qp.sender is None:
            raise ControlError(f"QP {qp.qpn} on {self.host.name} is a {qp.role} QP")
        return qp, qp.sender

    def _restrict(self, req: dict) -> dict:
        """Force a sending MRC or spray QP onto some of its paths: every other EV DENIED, as an
        operator would deny them (ecn-balance forces a second flow onto a path the first one
        sprays over). `keep`: the paths' labels, comma-separated (`p0/s0,p1/s1`; `p0/direct`
        for a same-leaf path), as `Route.label` names them."""
        qp, sender = self._sender(req)
        if not isinstance(sender, MrcSender):
            raise ControlError(f"restrict applies to mrc and spray QPs; QP {qp.qpn} is {qp.transport}")
        keep = req.get("keep")
        if not isinstance(keep, str) or not keep.strip(","):
            raise ControlError(f"keep must be path labels like p0/s0,p1/s1, got {keep!r}")
        wanted = set(keep.split(","))
        states = sender.ev_states()
        routes = [r for r in self.fabric.routes(self.host.name, qp.peer) if r.ev in states]
        unknown = sorted(wanted - {r.label for r in routes})
        if unknown:
            raise ControlError(f"restrict: QP {qp.qpn} ({self.host.name}->{qp.peer}) has no path "
                               f"{unknown[0]}; its paths: {', '.join(r.label for r in routes)}")
        kept = [r.ev for r in routes if r.label in wanted]
        denied = []
        for route in routes:
            if route.ev not in kept and states[route.ev] != DENIED:
                sender.deny_ev(route.ev)
                denied.append(route.ev)
        return {"qpn": qp.qpn, "kept": kept, "denied": denied}

    def _open(self, req: dict, now: float) -> dict:
        qpn = _number(req, "qpn", 1, wire.QPN_MASK)
        peer_qpn = _number(req, "peer_qpn", 1, wire.QPN_MASK)
        if qpn in self.qps:
            raise ControlError(f"QP {qpn} is already open on {self.host.name}")
        peer = str(req.get("peer", ""))
        if peer == self.host.name:
            raise ControlError("a QP's peer must be another host")
        self.fabric.host(peer)  # raises FabricError with the valid names
        transport = req.get("transport", "mrc")
        role = req.get("role")
        if transport not in TRANSPORTS or role not in ("send", "recv"):
            raise ControlError(f"transport must be {', '.join(TRANSPORTS)}, role send or recv")
        plane = _number(req, "plane", 0, self.fabric.params.planes - 1, default=0)
        overrides = req.get("config") or {}
        if not isinstance(overrides, dict):
            raise ControlError("config must be an object of transport parameters")
        base = with_overrides(self.config, overrides, per_qp=True)  # ValueError names the problem
        entropy = _number(req, "entropy", 0, 0xFF, default=0)
        paths = self.peer_paths(peer, transport, plane, entropy)
        # The cores' seed: from the runner (reproducible whatever the QPN), else from the QPN.
        seed = _number(req, "seed", 0, MAX_SEED, default=self.seed * 1_000_003 + qpn)
        psn = _number(req, "psn", 0, wire.PSN_MASK, default=0)  # initial PSN, both ends agree
        sender: SenderCore | None = None
        receiver: ReceiverCore | None = None
        if transport in ("mrc", "spray"):
            # spray: the same sender with its per-path state off (what the state machine adds)
            config = base if transport == "mrc" else replace(base, path_state=False)
            if role == "send":
                sender = self.sender_cls(qpn, peer_qpn, paths.evs, config, seed, psn, pacer=self.pacer)
            else:
                # Per-EV state only for the sender's real paths to us (from the model).
                forward = [r.ev for r in self.fabric.routes(peer, self.host.name)]
                receiver = self.receiver_cls(qpn, peer_qpn, paths.evs, config, seed, psn, forward)
        else:
            ev = paths.evs[0].ev
            if role == "send":
                sender = GbnSender(qpn, peer_qpn, ev, base, seed, psn)
            else:
                receiver = GbnReceiver(qpn, peer_qpn, ev, base, seed, psn)
        core: Core = sender if sender is not None else receiver  # type: ignore[assignment]
        core.set_local_ports(self.ports.mask, now)
        self.qps[qpn] = Qp(qpn, peer, peer_qpn, transport, core, paths, sender, receiver,
                           msg_seed=_number(req, "data_seed", 0, MAX_SEED, default=seed))
        # The classes at work, so a run can see its replacements are the ones in use.
        classes = {"core": type(core).__name__}
        if isinstance(core, MrcSender):
            classes.update(evset=type(core.evs).__name__, cc=type(core.cc).__name__)
        return {"qpn": qpn, "paths": len(paths.evs), "classes": classes}

    def _post(self, qp: Qp, size: int, now: float) -> int:
        assert qp.sender is not None
        data = _message_data(qp, len(qp.digests), size)
        msn = qp.sender.send_message(data, now)
        qp.digests[msn] = hashlib.sha256(data).hexdigest()
        return msn

    def _refill(self, qp: Qp, now: float) -> int:
        """Keep two messages not yet transmitted, so the window never waits for a message's
        tail to be acknowledged before the next one is posted; returns how many were posted."""
        posted = 0
        while qp.stream_until > now and qp.sender is not None and qp.sender.unsent_messages < 2:
            size = qp.stream_bytes if qp.stream_left is None else min(qp.stream_bytes, qp.stream_left)
            self._post(qp, size, now)
            posted += 1
            if qp.stream_left is not None:
                qp.stream_left -= size
                if qp.stream_left == 0:
                    qp.stream_until = 0.0  # everything posted: the transfer ends when acked
        return posted

    def _stats(self, qp: Qp) -> dict:
        out = {"qpn": qp.qpn, "peer": qp.peer, "transport": qp.transport, "role": qp.role,
               "paths": len(qp.paths.evs), "stats": dict(qp.core.stats),
               "bins": qp.bins.as_json(), "bin_s": BIN_S,
               "digests": {str(k): v for k, v in qp.digests.items()}}
        if qp.receiver is not None:
            out["bytes_delivered"] = qp.receiver.bytes_delivered
        # Tables keyed by a packet's EV hold only the peer's real paths (never attacker-chosen).
        if isinstance(qp.core, MrcReceiver):
            out["per_ev_entries"] = len(qp.core.ev_high)
        elif isinstance(qp.core, MrcSender):
            out["per_ev_entries"] = len(qp.core.ev_rtt)
        if qp.sender is not None:
            out["bytes_acked"] = qp.sender.bytes_acked
            out["messages_acked"] = qp.completed
            out["ev_states"] = {str(ev): s for ev, s in qp.sender.ev_states().items()}
            out.update(self._congestion(qp.sender))
        return out

    @staticmethod
    def _congestion(sender: SenderCore) -> dict:
        cc = sender.cc
        if cc is None:
            return {}
        return {"congestion": {"cwnd_pkts": round(cc.cwnd, 1), "srtt_ms": round(cc.srtt * 1e3, 2),
                               "base_rtt_ms": round(cc.base_rtt * 1e3, 2),
                               "target_ms": round(cc.target * 1e3, 2), "decreases": cc.decreases}}

    # ----- data path ------------------------------------------------------------------------
    def _transmit(self, qp: Qp, items: list[tuple[int, bytes]]) -> None:
        paths = qp.paths.tx
        send = self.backlog.send  # NIC backpressure is queued per path, not lost
        log = self.packet_log > 0
        pacer, now = self.pacer, time.monotonic()
        data_max, overhead = wire.DATA_OPCODE_MAX, wire.FRAME_OVERHEAD
        paced = qp.transport != "roce"  # the MRC sender charged its own data packets
        self.tx_dgrams += len(items)
        for ev, payload in items:
            control = payload[0] > data_max
            key = (ev, control)
            path = paths.get(key)
            if path is None:
                # MRC's packets ride the trimmable class; the RoCE baseline's do not. Control
                # packets take the host qdisc's priority class.
                tclass = netio.ECN_ECT0 if qp.transport == "roce" else wire.DATA_TCLASS
                path = paths[key] = self.tx.path(*qp.paths.dst[ev], ev, tclass=tclass,
                                                 mark=ev if qp.paths.encap else 0,
                                                 priority=self.control_priority if control else 0)
            if pacer is not None and (control or not paced):
                pacer.charge(ev_plane(ev), len(payload) + overhead, now)
            send(path, payload)
            if log:
                self._log_packet("tx", qp.qpn, ev, payload, None)

    def _log_packet(self, direction: str, qpn: int | None, ev: int, datagram: bytes,
                    ce: bool | None) -> None:
        """One "packet" trace line (see the module docstring); off the hot path once full.
        `qpn`: the local QP (None: a datagram for no open QP, or not MRC)."""
        if self.packet_log <= 0 or self.trace is None:
            return
        self.packet_log -= 1
        try:
            header: dict = wire.fields(datagram)
        except wire.MalformedPacket:
            header = {"len": len(datagram), "malformed": True}
        record = {"qpn": qpn, "event": "packet", "t": time.monotonic(), "dir": direction, "ev": ev,
                  "hdr": header}
        if ce is not None:
            record["ce"] = int(ce)
        if self.packet_log == 0:
            record["log_full"] = True  # the last one: what follows was not logged
        self.trace.write(_json_line(record))

    def _receive(self, now: float) -> int:
        """Take up to RECV_BURST datagrams; how many were taken."""
        # The per-datagram work is inlined (netio.parse_ancillary, the EV from the source port
        # and the flow label, wire.qpn_of's test: an opcode in the vendor range 0xE0-0xFF is
        # one compare, then the version byte):
        # at tens of thousands of datagrams per second, function calls are a visible share.
        recvmsg, size, space = self.rx.recvmsg, self.rx_size, netio.CMSG_SPACE
        flowinfo, tclass_kind, tclass_byte = netio.IPV6_FLOWINFO, netio.IPV6_TCLASS, _TCLASS_BYTE
        qps, stats = self.qps, self.stats
        min_len, version_off, version = wire.COMMON.size, wire.VERSION_OFF, wire.VERSION
        # opcode & 0xE0 == 0xE0 (the vendor range) is opcode >= 0xE0: one compare
        vendor_min, qpn_at = wire.OPCODE_VENDOR_MASK, wire.QPN_OFF
        log = self.packet_log > 0
        received, taken = False, 0
        while taken < RECV_BURST:
            try:
                data, anc, _flags, addr = recvmsg(size, space)
            except BlockingIOError:
                break
            taken += 1
            label = tclass = 0
            for _level, kind, value in anc:  # only IPPROTO_IPV6 messages are enabled
                if kind == flowinfo:
                    label = int.from_bytes(value[2:4], "big")  # the label's low 16 bits
                elif kind == tclass_kind:
                    tclass = value[tclass_byte]
            ev, ce = (label << 16) | addr[1], (tclass & 3) == netio.ECN_CE
            if len(data) < min_len or data[0] < vendor_min or data[version_off] != version:
                stats["malformed"] += 1  # not MRC (wire.is_mrc)
                if log:
                    self._log_packet("rx", None, ev, data, ce)
                continue
            qp = qps.get(int.from_bytes(data[qpn_at:qpn_at + 3], "big"))
            if log:  # a datagram for no open QP too: it was on the wire all the same
                self._log_packet("rx", None if qp is None else qp.qpn, ev, data, ce)
            if qp is None:
                stats["unknown_qp"] += 1
                continue
            qp.core.on_datagram(data, ev, now, ce)
            received = True
        if received:
            # Goodput bins once per burst, not per datagram: the burst shares `now`, so its bin.
            for qp in qps.values():
                if qp.receiver is not None:
                    delivered = qp.receiver.bytes_delivered
                    if delivered != qp.last_delivered:
                        qp.bins.add(now, delivered - qp.last_delivered)
                        qp.last_delivered = delivered
        return taken

    def _service(self, now: float) -> float | None:
        """Run every QP's timers and transmissions; return the earliest deadline."""
        earliest: float | None = None
        for qp in self.qps.values():
            core = qp.core
            items = core.poll(now)
            if items:
                self._transmit(qp, items)
            if qp.receiver is not None:
                for msn, data in qp.receiver.take_completed():
                    qp.digests[msn] = hashlib.sha256(data).hexdigest()
            elif qp.sender is not None:
                qp.completed += len(qp.sender.take_completed())
                # Polled again only for what was just posted: at the same `now` with nothing
                # new, a second poll has nothing to send (its timers ran in the first), and at
                # one or two packets per wake-up it was a third of the sender's loop.
                if qp.stream_until and self._refill(qp, now):
                    items = core.poll(now)
                    if items:
                        self._transmit(qp, items)
            if self.trace is not None:
                for event in core.take_events():
                    self.trace.write(_json_line(as_record(qp.qpn, event)))
            deadline = core.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    def run(self) -> None:
        deadline: float | None = None
        rx = self.rx.fileno()
        backlogged = self.backlog.queues  # truthy while a path waits (Backlog.__bool__, inline)
        holdoff, resting_until = self.rx_holdoff, 0.0
        monotonic, receive = time.monotonic, self._receive
        while self.running:
            now = monotonic()
            timeout = 0.05 if deadline is None else min(max(deadline - now, 0.0), 0.05)
            if backlogged:
                timeout = min(timeout, 0.0002)
            if now < resting_until:
                # The receive socket rests: wait for a deadline or a command only, then take
                # whatever arrived meanwhile in one burst.
                for key, _ in self.selector.select(min(timeout, resting_until - now)):
                    key.data(key)
                now = monotonic()
                taken = receive(now)
                self.rx_dgrams += taken
                # Rest again after a partial burst; nothing came, or a full burst: no rest.
                resting_until = now + holdoff if 0 < taken < RECV_BURST else 0.0
            else:
                for fd, _ in self._wait.poll(timeout):  # rounded up to whole ms, as selectors does
                    if fd == rx:
                        now = monotonic()
                        taken = receive(now)
                        self.rx_wakes += 1
                        self.rx_dgrams += taken
                        if 0 < taken < RECV_BURST and holdoff:  # (0: never rests)
                            resting_until = now + holdoff
                    else:
                        for key, _ in self.selector.select(0):
                            key.data(key)
            self.wakes += 1
            if backlogged:
                self.backlog.flush()
            now = time.monotonic()
            if deadline and now - deadline > self._loop_lag:  # 0.0: "at once", not a time
                self._loop_lag = now - deadline
            deadline = self._service(now)
            if now >= self._next_host_sample:
                self._sample_host(now)
        self.close()

    def _sample_host(self, now: float) -> None:
        """Read the NICs' qdisc backlog: resynchronise the pacer with it, and trace it."""
        self._next_host_sample = now + HOST_SAMPLE_S
        nics: dict[str, list[int]] = {}
        if self._qreader is not None:
            try:
                for q in self._qreader.read(roots_only=True):
                    plane = self._nic_plane.get(q.ifindex)
                    if plane is not None:
                        nics[str(plane)] = [q.qlen, q.backlog, q.drops]
                        if self.pacer is not None:
                            self.pacer.sync(plane, q.backlog, now)
            except OSError:
                pass  # a dump interrupted (interfaces going away at teardown)
        if self.trace is not None:
            self.trace.write(_json_line({"qpn": None, "event": "host", "t": now, "nics": nics,
                                         "backlog": len(self.backlog),
                                         "loop_lag": round(self._loop_lag, 6),
                                         "loop": self._loop_counts()}))
        self._loop_lag = 0.0

    def _loop_counts(self) -> dict[str, int]:
        return {"wakes": self.wakes, "rx_wakes": self.rx_wakes, "rx_dgrams": self.rx_dgrams,
                "tx_dgrams": self.tx_dgrams}

    def close(self) -> None:
        if self._qreader is not None:
            self._qreader.close()
        self.control.close()
        self._wait.close()
        self.rx.close()
        self.tx.close()
        if self.trace is not None:
            self.trace.close()


_TCLASS_BYTE = 0 if sys.byteorder == "little" else 3  # IPV6_TCLASS arrives as a native int


def _json_line_encoder() -> Callable[[object], str]:
    """`json.dumps(obj) + "\n"`, the same text, for the trace's hundreds of lines a second:
    json.dumps builds a new C encoder on every call, half its cost for a record this small;
    this one is built once with dumps' own settings, less the circular-reference check (a
    trace record is flat). Plain json.dumps where the C encoder is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return lambda obj: json.dumps(obj) + "\n"
    encode = make(None, json.JSONEncoder().default, json.encoder.encode_basestring_ascii, None,
                  ": ", ", ", False, False, True)  # indent, separators, sort_keys, skipkeys, allow_nan
    return lambda obj: "".join(encode(obj, 0)) + "\n"


_json_line = _json_line_encoder()


def _message_data(qp: Qp, msn_hint: int, size: int) -> bytes | memoryview:
    """Message `msn_hint` of a QP: a window of the QP's seeded pattern at an offset that differs
    for every message, so contents are reproducible from `data_seed` and differ between
    messages; repeated when the message is longer than the pattern. A view, not a copy: the
    pattern is immutable and lives as long as the QP."""
    if not qp.pattern:
        one = random.Random(qp.msg_seed * 7919).randbytes(PATTERN_BYTES)
        qp.pattern = one + one
    start = (msn_hint * 2_654_435_761 + qp.msg_seed) % PATTERN_BYTES
    if size <= PATTERN_BYTES:
        return memoryview(qp.pattern)[start:start + size]
    reps = -(-(start + size) // PATTERN_BYTES)
    return (qp.pattern[:PATTERN_BYTES] * reps)[start:start + size]


MAX_SECONDS = 86_400.0  # a stream's length
MAX_SEED = 2**63 - 1


def _number(req: dict, name: str, lo: float, hi: float, real: bool = False,
            default: object = None) -> Any:
    """Field `name` of a request through the one validator (topologies.model.check_number):
    a whole number in [lo, hi], or with `real` a finite number in (lo, hi]."""
    value = req.get(name, default)
    try:
        return check_number(name, value, lo, hi, integral=not real, lo_open=real)
    except FabricError as exc:
        raise ControlError(str(exc)) from None



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MRC host agent")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        settings = json.load(fh)
    try:
        agent = Agent(settings)
    except replacements_from.OverrideError as exc:
        print(f"agent: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "running", False))
    # MRCLAB_AGENT_PROFILE=DIR: the agent's Python profile (cProfile) written to
    # DIR/agent-HOST.prof when it ends, for `make bench`'s cost breakdown (experiments/tools/cost_bench.py).
    profile_dir = os.environ.get("MRCLAB_AGENT_PROFILE")
    profiler = None
    if profile_dir:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.close()
    finally:
        if profiler is not None and profile_dir:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"agent-{agent.host.name}.prof"))
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main())
