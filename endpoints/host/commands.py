"""The host agent's control commands: the requests the runner sends over the control channel
(endpoints/host/control.py), each a QP operation on the data loop (endpoints/host/dataloop.py).

    ping, open, stream, write, write_many, stop_stream, restrict, close, stats, digest, evs,
    progress, progress_many, agent_stats, shutdown

`write_many` and `progress_many` are `write` and `progress` for several QPs in one request: a
collective's step posts to and waits on every QP at once (an all-to-all with 16 RoCE QPs per
peer has 48 per host), and a request a QP, each a round trip to the agents' process, made the
step's own bookkeeping tens of milliseconds long.

`open` builds a QP's sans-IO core (MRC, spray or go-back-N, sender or receiver) on its path
table (endpoints/host/paths.py); the others post messages, read counters or change a QP. Every
number in a request goes through the one validator (`check_number`); a bad request is refused
with one sentence (ControlError) and changes nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from endpoints.host.control import ControlError
from endpoints.host.dataloop import DIGEST_CHUNK_BYTES, DataLoop, Qp, message_digests
from endpoints.host.goodput import BIN_S
from endpoints.host.paths import TRANSPORTS, PathTable
from endpoints.host.ports import PortWatch
from endpoints.numbercheck import check_number
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig, with_overrides
from endpoints.protocol.core import Core, ReceiverCore, SenderCore
from endpoints.protocol.evset import DENIED
from endpoints.protocol.gobackn import GbnReceiver, GbnSender
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender

MAX_TRANSFER = 1 << 40  # bytes of one sized transfer (`stream` with total_bytes)
MAX_SECONDS = 86_400.0  # a stream's length
MAX_SEED = 2**63 - 1
MAX_MANY = 1024  # QPs in one write_many or progress_many request (its line within MAX_LINE)


class AgentCommands:
    """`handle` answers one request; the QPs it opens run in `loop`."""

    def __init__(self, loop: DataLoop, paths: PathTable, ports: PortWatch, config: TransportConfig,
                 seed: int, cores: tuple[type[MrcSender], type[MrcReceiver]],
                 provenance: dict[str, dict[str, str]]) -> None:
        self.loop = loop
        self.paths = paths
        self.name = paths.name
        self.ports = ports
        self.config = config
        self.seed = seed
        self.sender_cls, self.receiver_cls = cores
        self.provenance = provenance

    def handle(self, req: dict[str, Any]) -> dict[str, object]:
        cmd = req.get("cmd")
        now = time.monotonic()
        if self.loop.trace is not None:
            self.loop.trace.flush()  # whoever asks may read the trace next (live EV-state plots)
        if cmd == "ping":
            return {"host": self.name, "pid": os.getpid(), "replaced": self.provenance}
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
            self.loop.refill(qp, now)
            qp.touched = True  # polled at the next service (it has messages to send)
            return {"qpn": qp.qpn}
        if cmd == "write":
            qp, _ = self._sender(req)
            size = _number(req, "bytes", 1, self.config.max_message)
            return {"qpn": qp.qpn, "msn": self._post(qp, size, now)}
        if cmd == "write_many":  # qpns, sizes: each checked before any is posted
            largest = self.config.max_message
            qpns, sizes = _list(req, "qpns"), _list(req, "sizes")
            if len(sizes) != len(qpns):
                raise ControlError(f"sizes must give one size per QP: {len(qpns)} QPs, {len(sizes)} sizes")
            posts = [(self._sender({"qpn": qpn})[0], _number({"bytes": size}, "bytes", 1, largest))
                     for qpn, size in zip(qpns, sizes, strict=True)]
            return {"msns": [self._post(qp, size, now) for qp, size in posts]}
        if cmd == "restrict":
            return self._restrict(req)
        if cmd == "stop_stream":
            qp, _ = self._sender(req)
            qp.stream_until = 0.0
            qp.touched = True
            return {"qpn": qp.qpn}
        if cmd == "close":
            # An idle QP still probes (its reverse EVs every reverse_probe_interval, its bad EVs
            # every probe_interval): a runner closes what it has measured so it does not load
            # the next measurement.
            qp = self._qp(req)
            del self.loop.qps[qp.qpn]
            if self.loop.pacer is not None:
                self.loop.pacer.leave_all(qp.qpn)  # its place in a port's line (NicPacer.turn)
            return {"qpn": qp.qpn}
        if cmd == "stats":
            digests = req.get("digests", True)
            if not isinstance(digests, bool):
                raise ControlError(f"digests must be true or false, got {digests!r}")
            return self._stats(self._qp(req), digests)
        if cmd == "evs":  # a sending QP's EV set now (the CLI's `evs`)
            qp, sender = self._sender(req)
            plane = {e.ev: e.plane for e in qp.paths.evs}
            rows = [{"ev": r.ev, "plane": plane.get(r.ev), "state": r.state, "active": r.active,
                     "skips": r.skips, "benched": r.benched,
                     "srtt_ms": None if r.srtt is None else round(r.srtt * 1e3, 3),
                     "bytes_sent": r.bytes_sent} for r in sender.ev_report()]
            return {"qpn": qp.qpn, "peer": qp.peer, "transport": qp.transport, "rows": rows,
                    "bytes_acked": sender.bytes_acked, **self._congestion(sender)}
        if cmd == "digest":  # a sender's next messages hashed, a few ms at most (flows.result)
            qp = self._qp(req)
            message_digests(qp, DIGEST_CHUNK_BYTES)
            return {"qpn": qp.qpn, "pending": len(qp.undigested)}
        if cmd == "progress":  # cheap enough to poll every millisecond (collective steps)
            return _progress(self._qp(req), now)
        if cmd == "progress_many":  # qpns: each QP's `progress`, in that order
            qps = [self._qp({"qpn": qpn}) for qpn in _list(req, "qpns")]
            return {"progress": [_progress(qp, now) for qp in qps]}
        if cmd == "agent_stats":
            loop = self.loop
            return {"counters": dict(loop.stats), "backlog": len(loop.backlog),
                    "backlog_overflow": loop.backlog.overflow,
                    "send_dropped": loop.tx.dropped, "send_errors": dict(loop.tx.errors),
                    "qps": sorted(loop.qps),
                    "kernel_checksum_paths": sum(p.sock is not None for p in loop.tx.paths.values()),
                    "raw_paths": sum(p.sock is None for p in loop.tx.paths.values()),
                    "loop": loop.loop_counts()}
        if cmd == "shutdown":
            self.loop.running = False
            return {}
        raise ControlError(f"unknown command {cmd!r}: use open, stream, write, write_many, "
                           f"stop_stream, restrict, stats, evs, progress, progress_many, close, "
                           f"agent_stats, ping or shutdown")

    def _post(self, qp: Qp, size: int, now: float) -> int:
        """One message posted on `qp`, which is polled at the next service; its MSN."""
        msn = self.loop.post(qp, size, now)
        qp.touched = True
        return msn

    def _qp(self, req: dict[str, Any]) -> Qp:
        qpn = _number(req, "qpn", 1, wire.QPN_MASK)
        qp = self.loop.qps.get(qpn)
        if qp is None:
            raise ControlError(f"no QP {qpn} on {self.name}: open it first")
        return qp

    def _sender(self, req: dict[str, Any]) -> tuple[Qp, SenderCore]:
        qp = self._qp(req)
        if qp.sender is None:
            raise ControlError(f"QP {qp.qpn} on {self.name} is a {qp.role} QP")
        return qp, qp.sender

    def _restrict(self, req: dict[str, Any]) -> dict[str, object]:
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
        routes = [(ev, label) for ev, label in self.paths.labels(qp.peer) if ev in states]
        unknown = sorted(wanted - {label for _, label in routes})
        if unknown:
            raise ControlError(f"restrict: QP {qp.qpn} ({self.name}->{qp.peer}) has no path "
                               f"{unknown[0]}; its paths: {', '.join(label for _, label in routes)}")
        kept = [ev for ev, label in routes if label in wanted]
        denied = []
        for ev, _ in routes:
            if ev not in kept and states[ev] != DENIED:
                sender.deny_ev(ev)
                denied.append(ev)
        qp.touched = True
        return {"qpn": qp.qpn, "kept": kept, "denied": denied}

    def _open(self, req: dict[str, Any], now: float) -> dict[str, object]:
        qpn = _number(req, "qpn", 1, wire.QPN_MASK)
        peer_qpn = _number(req, "peer_qpn", 1, wire.QPN_MASK)
        if qpn in self.loop.qps:
            raise ControlError(f"QP {qpn} is already open on {self.name}")
        peer = str(req.get("peer", ""))
        if peer == self.name:
            raise ControlError("a QP's peer must be another host")
        self.paths.check_peer(peer)  # raises an error naming the valid hosts
        transport = req.get("transport", "mrc")
        role = req.get("role")
        if transport not in TRANSPORTS or role not in ("send", "recv"):
            raise ControlError(f"transport must be {', '.join(TRANSPORTS)}, role send or recv")
        plane = _number(req, "plane", 0, self.paths.planes - 1, default=0)
        overrides = req.get("config") or {}
        if not isinstance(overrides, dict):
            raise ControlError("config must be an object of transport parameters")
        base = with_overrides(self.config, overrides, per_qp=True)  # ValueError names the problem
        entropy = _number(req, "entropy", 0, 0xFF, default=0)
        paths = self.paths.peer_paths(peer, transport, plane, entropy)
        # The cores' seed: from the runner (reproducible whatever the QPN), else from the QPN.
        seed = _number(req, "seed", 0, MAX_SEED, default=self.seed * 1_000_003 + qpn)
        psn = _number(req, "psn", 0, wire.PSN_MASK, default=0)  # initial PSN, both ends agree
        sender: SenderCore | None = None
        receiver: ReceiverCore | None = None
        if transport in ("mrc", "spray"):
            # spray: the same sender with its per-path state off (what the state machine adds)
            config = base if transport == "mrc" else replace(base, path_state=False)
            if role == "send":
                sender = self.sender_cls(qpn, peer_qpn, paths.evs, config, seed, psn, pacer=self.loop.pacer)
            else:
                # Per-EV state only for the sender's real paths to us (from the model).
                forward = self.paths.forward_evs(peer)
                receiver = self.receiver_cls(qpn, peer_qpn, paths.evs, config, seed, psn, forward)
        else:
            ev = paths.evs[0].ev
            if role == "send":
                sender = GbnSender(qpn, peer_qpn, ev, base, seed, psn, pacer=self.loop.pacer,
                                   plane=paths.evs[0].plane)
            else:
                receiver = GbnReceiver(qpn, peer_qpn, ev, base, seed, psn)
        core: Core = sender if sender is not None else receiver  # type: ignore[assignment]
        core.set_local_ports(self.ports.mask, now)
        self.loop.qps[qpn] = Qp(qpn, peer, peer_qpn, transport, core, paths, sender, receiver,
                           msg_seed=_number(req, "data_seed", 0, MAX_SEED, default=seed))
        # The classes at work, so a run can see its replacements are the ones in use.
        classes = {"core": type(core).__name__}
        if isinstance(core, MrcSender):
            classes.update(evset=type(core.evs).__name__, cc=type(core.cc).__name__)
        return {"qpn": qpn, "paths": len(paths.evs), "classes": classes}

    def _stats(self, qp: Qp, digests: bool = True) -> dict[str, object]:
        """`digests` false leaves the messages' digests out (a sender makes them when asked):
        what a caller sampling CPU in the middle of a stream asks for."""
        out = {"qpn": qp.qpn, "peer": qp.peer, "transport": qp.transport, "role": qp.role,
               "paths": len(qp.paths.evs), "stats": dict(qp.core.stats),
               "bins": qp.bins.as_json(), "bin_s": BIN_S,
               "digests": {str(k): v for k, v in message_digests(qp).items()} if digests else {}}
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
    def _congestion(sender: SenderCore) -> dict[str, object]:
        cc = sender.cc
        if cc is None:
            return {}
        return {"congestion": {"cwnd_pkts": round(cc.cwnd, 1), "srtt_ms": round(cc.srtt * 1e3, 2),
                               "base_rtt_ms": round(cc.base_rtt * 1e3, 2),
                               "target_ms": round(cc.target * 1e3, 2), "decreases": cc.decreases}}


def _progress(qp: Qp, now: float) -> dict[str, object]:
    """Messages completed and bytes through: a receiver's delivered, a sender's acknowledged
    (with what it posted and whether it still streams: a sized transfer is done when nothing is
    left to post and every posted message is acknowledged)."""
    if qp.receiver is not None:
        return {"qpn": qp.qpn, "messages": len(qp.digests), "bytes": qp.receiver.bytes_delivered}
    assert qp.sender is not None
    return {"qpn": qp.qpn, "messages": qp.completed, "bytes": qp.sender.bytes_acked,
            "posted": qp.posted, "streaming": qp.stream_until > now}


def _list(req: dict[str, Any], name: str) -> list[Any]:
    """Field `name`: a list of 1 to MAX_MANY items (each checked by the caller)."""
    value = req.get(name)
    if not isinstance(value, list) or not 0 < len(value) <= MAX_MANY:
        raise ControlError(f"{name} must be a list of 1 to {MAX_MANY} numbers")
    return value


def _number(req: dict[str, Any], name: str, lo: float, hi: float, real: bool = False,
            default: object = None) -> Any:
    """Field `name` of a request through the one validator (endpoints/numbercheck.py): a whole
    number in [lo, hi], or with `real` a finite number in (lo, hi]."""
    return check_number(name, req.get(name, default), lo, hi, integral=not real, lo_open=real,
                        error=ControlError)
