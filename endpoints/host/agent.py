"""The host agent: one process per emulated host, running MRC (and the go-back-N baseline) QPs
over real sockets around the sans-IO core.

`python -m endpoints.host.agent --config FILE` inside the host's namespace. The experiment runner
drives it through a Unix socket speaking JSON lines (see `endpoints/host/control.py`).

Paths come from the fabric model, like everything else: the EVs of a QP to peer P are the
model's paths from this host to P (EV -> SRv6 destination address); acknowledgements go back
over this host's own paths to the sender. Goodput is binned per 10 ms on CLOCK_MONOTONIC,
which every namespace shares, so the runner can line bins up with the faults it injects.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace

from endpoints.host import netio
from endpoints.host.control import ControlError, ControlServer
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.evset import EvInfo
from endpoints.protocol.gobackn import GbnReceiver, GbnSender
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from topologies.model import Fabric, FabricParams, ev_value

BIN_S = 0.010
# Datagrams drained per wake-up before timers and transmits get a turn: small enough that the
# receiver's SACK cadence (sack_every) survives a busy moment, large enough to amortise epoll.
RECV_BURST = 16
# Message contents are windows of one seeded random pattern per QP: drawing every 1 MB message
# from random.Random cost ~4.5 ms, ~4 us per packet sent. Messages up to this size repeat no
# byte sequence; longer ones repeat with this prime period, never a multiple of a packet size.
PATTERN_BYTES = 1_052_693  # a prime just above 2**20


TARGET_QUEUE_PACKETS = 6  # NSCC target: this many full frames of queueing at the link rate


def target_delay_for(link_mbps: float, mtu_payload: int) -> float:
    """The RTT target's floor from the fabric's link rate. Emulated links (HTB) shape rate but
    not per-packet serialisation, so an idle path's RTT is sub-millisecond whatever the rate;
    the target must allow a few packets of queueing at the bottleneck to keep it busy."""
    frame_bits = (mtu_payload + 40 + 62) * 8
    return TARGET_QUEUE_PACKETS * frame_bits / (link_mbps * 1e6)


@dataclass
class PeerPaths:
    evs: list[EvInfo]
    dst: dict[int, tuple[bytes, bytes, str]]  # ev -> (src packed, dst packed, dst text)
    tx: dict[int, netio.TxPath] = field(default_factory=dict)  # ev -> socket state, on first use


@dataclass
class Qp:
    qpn: int
    peer: str
    peer_qpn: int
    transport: str  # "mrc" | "gbn"
    role: str  # "send" | "recv"
    core: object
    paths: PeerPaths
    bins: collections.Counter = field(default_factory=collections.Counter)
    digests: dict[int, str] = field(default_factory=dict)  # msn -> sha256 of the message
    stream_until: float = 0.0
    stream_bytes: int = 0
    msg_seed: int = 0
    pattern: bytes = b""  # twice PATTERN_BYTES of seeded random bytes, made on the first post
    last_delivered: int = 0
    completed: int = 0  # messages fully acknowledged (sender side)


class Agent:
    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.fabric = Fabric(FabricParams.from_dict(settings["fabric"]))
        self.host = self.fabric.host(settings["host"])
        overrides = dict(settings.get("transport", {}))
        if "target_delay_min" not in overrides:
            mtu = overrides.get("mtu_payload", TransportConfig.mtu_payload)
            overrides["target_delay_min"] = target_delay_for(self.fabric.params.link_mbps, mtu)
        self.config = TransportConfig(**overrides)
        self.seed = int(settings.get("seed", 1))
        # raw_send: every packet built in Python and sent on the raw socket (the former path,
        # kept for comparison and for kernels that refuse the per-path sockets).
        self.rx_size = self.config.mtu_payload + wire.DATA_HDR + 64  # never truncate a datagram
        self.tx = netio.Transmitter(kernel_checksum=not settings.get("raw_send", False))
        # The local address is not needed (the EV names the path): one control message fewer.
        self.rx = netio.open_receiver(wire.MRC_PORT, pktinfo=False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.rx, selectors.EVENT_READ, "rx")
        self.control = ControlServer(settings["control"], self.selector, self.handle_command)
        self.qps: dict[int, Qp] = {}
        self.backlog: collections.deque[tuple[netio.TxPath, bytes]] = collections.deque()
        self.trace = open(settings["trace"], "a") if settings.get("trace") else None
        self.stats = collections.Counter()
        self.running = True
        self._paths_cache: dict[tuple[str, str], PeerPaths] = {}

    # ----- path tables from the model -------------------------------------------------------
    def peer_paths(self, peer: str, transport: str, plane: int) -> PeerPaths:
        key = (peer, f"{transport}{plane}")
        if key in self._paths_cache:
            return self._paths_cache[key]
        if transport == "gbn":
            # One path per QP: destination routing over the plane's ECMP groups.
            me, them = self.host.nics[plane], self.fabric.host(peer).nics[plane]
            ev = ev_value(plane, 0x3FFF & (self.host.index * 131 + them.plane))
            table = PeerPaths([EvInfo(ev, plane)],
                              {ev: (me.baseline_addr.packed, them.baseline_addr.packed,
                                    str(them.baseline_addr))})
        else:
            evs, dst = [], {}
            for route in self.fabric.routes(self.host.name, peer):
                evs.append(EvInfo(route.ev, route.plane))
                dst[route.ev] = (route.src_addr.packed, route.address.packed, str(route.address))
            table = PeerPaths(evs, dst)
        self._paths_cache[key] = table
        return table

    # ----- control --------------------------------------------------------------------------
    def handle_command(self, req: dict) -> dict:
        cmd = req.get("cmd")
        now = time.monotonic()
        if cmd == "ping":
            return {"host": self.host.name, "pid": os.getpid()}
        if cmd == "open":
            return self._open(req, now)
        if cmd == "stream":
            qp = self._qp(req, "send")
            qp.stream_bytes = _positive_int(req, "msg_bytes", 1 << 30)
            qp.stream_until = now + _positive_float(req, "seconds")
            self._refill(qp, now)
            return {"qpn": qp.qpn}
        if cmd == "write":
            qp = self._qp(req, "send")
            msn = self._post(qp, _positive_int(req, "bytes", 1 << 30), now)
            return {"qpn": qp.qpn, "msn": msn}
        if cmd == "stop_stream":
            qp = self._qp(req, "send")
            qp.stream_until = 0.0
            return {"qpn": qp.qpn}
        if cmd == "close":
            # An idle QP still probes (reverse EVs every 20 ms, bad EVs every 5 ms): a runner
            # closes what it has measured so it does not load the next measurement.
            qp = self._qp(req, None)
            del self.qps[qp.qpn]
            return {"qpn": qp.qpn}
        if cmd == "stats":
            return self._stats(self._qp(req, None))
        if cmd == "progress":  # cheap enough to poll every millisecond (collective steps)
            qp = self._qp(req, None)
            done = len(qp.digests) if qp.role == "recv" else qp.completed
            return {"qpn": qp.qpn, "messages": done, "bytes": getattr(qp.core, "bytes_delivered", 0)
                    if qp.role == "recv" else getattr(qp.core, "bytes_acked", 0)}
        if cmd == "agent_stats":
            return {"counters": dict(self.stats), "backlog": len(self.backlog),
                    "raw_send_dropped": self.tx.dropped, "send_errors": dict(self.tx.errors),
                    "qps": sorted(self.qps),
                    "kernel_checksum_paths": sum(p.sock is not None for p in self.tx.paths.values()),
                    "raw_paths": sum(p.sock is None for p in self.tx.paths.values())}
        if cmd == "shutdown":
            self.running = False
            return {}
        raise ControlError(f"unknown command {cmd!r}: use open, stream, write, stop_stream, "
                           f"stats, progress, close, agent_stats, ping or shutdown")

    def _qp(self, req: dict, role: str | None) -> Qp:
        qpn = _positive_int(req, "qpn", 0xFFFFFF)
        qp = self.qps.get(qpn)
        if qp is None:
            raise ControlError(f"no QP {qpn} on {self.host.name}: open it first")
        if role is not None and qp.role != role:
            raise ControlError(f"QP {qpn} on {self.host.name} is a {qp.role} QP")
        return qp

    def _open(self, req: dict, now: float) -> dict:
        qpn = _positive_int(req, "qpn", 0xFFFFFF)
        peer_qpn = _positive_int(req, "peer_qpn", 0xFFFFFF)
        if qpn in self.qps:
            raise ControlError(f"QP {qpn} is already open on {self.host.name}")
        peer = str(req.get("peer", ""))
        if peer == self.host.name:
            raise ControlError("a QP's peer must be another host")
        self.fabric.host(peer)  # raises FabricError with the valid names
        transport = req.get("transport", "mrc")
        role = req.get("role")
        if transport not in ("mrc", "gbn", "spray") or role not in ("send", "recv"):
            raise ControlError("transport must be mrc, spray or gbn, role send or recv")
        plane = int(req.get("plane", 0))
        if not 0 <= plane < self.fabric.params.planes:
            raise ControlError(f"plane must be 0..{self.fabric.params.planes - 1}")
        paths = self.peer_paths(peer, transport, plane)
        seed = self.seed * 1_000_003 + qpn
        if transport in ("mrc", "spray"):
            # spray: the same sender with its per-path state off (what the state machine adds)
            config = self.config if transport == "mrc" else replace(self.config, path_state=False)
            core = (MrcSender(qpn, peer_qpn, paths.evs, config, seed) if role == "send"
                    else MrcReceiver(qpn, peer_qpn, paths.evs, config, seed))
        else:
            ev = paths.evs[0].ev
            core = (GbnSender(qpn, peer_qpn, ev, self.config, seed) if role == "send"
                    else GbnReceiver(qpn, peer_qpn, ev, self.config, seed))
        self.qps[qpn] = Qp(qpn, peer, peer_qpn, transport, role, core, paths,
                           msg_seed=int(req.get("data_seed", seed)))
        return {"qpn": qpn, "paths": len(paths.evs)}

    def _post(self, qp: Qp, size: int, now: float) -> int:
        data = _message_data(qp, len(qp.digests), size)
        msn = qp.core.send_message(data, now)
        qp.digests[msn] = hashlib.sha256(data).hexdigest()
        return msn

    def _refill(self, qp: Qp, now: float) -> None:
        # Keep two messages not yet transmitted, so the window never waits for a message's
        # tail to be acknowledged before the next one is posted.
        while qp.stream_until > now and qp.core.unsent_messages < 2:
            self._post(qp, qp.stream_bytes, now)

    def _stats(self, qp: Qp) -> dict:
        core = qp.core
        out = {"qpn": qp.qpn, "peer": qp.peer, "transport": qp.transport, "role": qp.role,
               "paths": len(qp.paths.evs), "stats": dict(getattr(core, "stats", {})),
               "bins": {str(k): v for k, v in sorted(qp.bins.items())}, "bin_s": BIN_S,
               "digests": {str(k): v for k, v in qp.digests.items()}}
        if qp.role == "recv":
            out["bytes_delivered"] = core.bytes_delivered
        else:
            out["bytes_acked"] = getattr(core, "bytes_acked", 0)
            out["messages_acked"] = qp.completed
            if hasattr(core, "ev_states"):
                states = core.ev_states()
                out["ev_states"] = {str(ev): s for ev, s in states.items()}
            cc = getattr(core, "cc", None)
            if cc is not None:
                out["congestion"] = {"cwnd_pkts": round(cc.cwnd, 1), "srtt_ms": round(cc.srtt * 1e3, 2),
                                     "base_rtt_ms": round(cc.base_rtt * 1e3, 2),
                                     "target_ms": round(cc.target * 1e3, 2), "decreases": cc.decreases}
        return out

    # ----- data path ------------------------------------------------------------------------
    def _transmit(self, qp: Qp, items: list[tuple[int, bytes]]) -> None:
        paths = qp.paths.tx
        send = self.tx.send
        backlog = self.backlog
        for ev, payload in items:
            path = paths.get(ev)
            if path is None:
                # MRC's packets ride the trimmable class; the RoCE baseline's do not.
                tclass = netio.ECN_ECT0 if qp.transport == "gbn" else wire.DATA_TCLASS
                path = paths[ev] = self.tx.path(*qp.paths.dst[ev], ev, tclass=tclass)
            if backlog or not send(path, payload):
                backlog.append((path, payload))  # NIC backpressure, not loss

    def _flush_backlog(self) -> None:
        while self.backlog:
            path, payload = self.backlog[0]
            if not self.tx.send(path, payload):
                self.tx.dropped -= 1  # a retry later, not a drop
                return
            self.backlog.popleft()

    def _receive(self, now: float) -> None:
        # The per-datagram work is inlined (netio.parse_ancillary, ev_from_wire, wire.qpn_of):
        # at tens of thousands of datagrams per second, function calls are a visible share.
        recvmsg, size, space = self.rx.recvmsg, self.rx_size, netio.CMSG_SPACE
        flowinfo, tclass_kind, tclass_byte = netio.IPV6_FLOWINFO, netio.IPV6_TCLASS, _TCLASS_BYTE
        qps, stats = self.qps, self.stats
        received = False
        for _ in range(RECV_BURST):
            try:
                data, anc, _flags, addr = recvmsg(size, space)
            except BlockingIOError:
                break
            label = tclass = 0
            for _level, kind, value in anc:  # only IPPROTO_IPV6 messages are enabled
                if kind == flowinfo:
                    label = int.from_bytes(value[2:4], "big")  # the label's low 16 bits
                elif kind == tclass_kind:
                    tclass = value[tclass_byte]
            if len(data) < wire.COMMON.size or data[2] != wire.MAGIC or data[3] != wire.VERSION:
                stats["malformed"] += 1  # not MRC (wire.qpn_of's test)
                continue
            qp = qps.get(int.from_bytes(data[5:8], "big"))
            if qp is None:
                stats["unknown_qp"] += 1
                continue
            qp.core.on_datagram(data, (label << 16) | addr[1], now, (tclass & 3) == netio.ECN_CE)
            received = True
        if received:
            # Goodput bins once per burst, not per datagram: the burst shares `now`, so its bin.
            for qp in qps.values():
                if qp.role == "recv":
                    delivered = qp.core.bytes_delivered
                    if delivered != qp.last_delivered:
                        qp.bins[int(now / BIN_S)] += delivered - qp.last_delivered
                        qp.last_delivered = delivered

    def _service(self, now: float) -> float | None:
        """Run every QP's timers and transmissions; return the earliest deadline."""
        earliest: float | None = None
        for qp in self.qps.values():
            core = qp.core
            items = core.poll(now)
            if items:
                self._transmit(qp, items)
            if qp.role == "recv":
                for msn, data in core.take_completed():
                    qp.digests[msn] = hashlib.sha256(data).hexdigest()
            else:
                qp.completed += len(core.take_completed())
                if qp.stream_until:
                    self._refill(qp, now)
                    items = core.poll(now)
                    if items:
                        self._transmit(qp, items)
            if self.trace is not None:
                for event in core.take_events():
                    self.trace.write(json.dumps([qp.qpn, *event]) + "\n")
            deadline = core.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    def run(self) -> None:
        deadline: float | None = None
        while self.running:
            now = time.monotonic()
            timeout = 0.05 if deadline is None else min(max(deadline - now, 0.0), 0.05)
            if self.backlog:
                timeout = min(timeout, 0.0002)
            for key, _ in self.selector.select(timeout):
                if key.data == "rx":
                    self._receive(time.monotonic())
                else:
                    key.data(key)
            self._flush_backlog()
            deadline = self._service(time.monotonic())
        self.close()

    def close(self) -> None:
        self.control.close()
        self.rx.close()
        self.tx.close()
        if self.trace is not None:
            self.trace.close()


_TCLASS_BYTE = 0 if sys.byteorder == "little" else 3  # IPV6_TCLASS arrives as a native int


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


def _positive_int(req: dict, name: str, maximum: int) -> int:
    value = req.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= maximum:
        raise ControlError(f"{name} must be a whole number in 1..{maximum}, got {value!r}")
    return value


def _positive_float(req: dict, name: str) -> float:
    value = req.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ControlError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MRC host agent")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        settings = json.load(fh)
    agent = Agent(settings)
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "running", False))
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.close()
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main())
