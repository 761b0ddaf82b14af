"""The host agent's data loop: its QPs' datagrams through real sockets and the sans-IO cores,
the NIC ports as a transmit scheduler, the trace, and the host's queues sampled.

Its loop (endpoints/host/shared.py, for one agent or several in one process) waits once per
turn for a datagram, a timer or a control command, takes the datagrams (`_receive`), then runs
every QP's timers and transmissions (`_service`). Each
EV's datagrams go from this host's NIC to the peer's NIC on the EV's plane, marked with the EV:
the host's encapsulation program wraps them to the path's uSID carrier (endpoints/host/netio.py).
Goodput is binned (endpoints/host/goodput.py) on CLOCK_MONOTONIC, which every namespace shares,
so the runner can line bins up with the faults it injects.

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

import collections
import hashlib
import json
import random
import selectors
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from endpoints.host import netio
from endpoints.host.goodput import GoodputBins
from endpoints.host.paths import PeerPaths
from endpoints.host.qdisc import QdiscReader
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.core import Core, ReceiverCore, SenderCore
from endpoints.protocol.events import as_record
from endpoints.protocol.nicpacer import DEPTH_FRAMES, NicPacer

# Datagrams drained per wake-up before timers and transmits get a turn: small enough that the
# receiver's SACK cadence (sack_every) survives a busy moment, large enough to amortise epoll.
RECV_BURST = 16
# Message contents are windows of one seeded random pattern: drawing every 1 MB message from
# random.Random cost ~4.5 ms, ~4 us per packet sent, and drawing a pattern per QP 3.5 ms a QP,
# two thirds of a second of the agents' process at each step of an all-to-all of 16 RoCE QPs per
# peer (192 QPs). Messages up to this size repeat no byte sequence; longer ones repeat with this
# prime period, never a multiple of a packet size.
PATTERN_BYTES = 1_052_693  # a prime just above 2**20
PATTERN_SEED = 7919
_pattern = b""  # twice PATTERN_BYTES, made on the first post (`_message_data`)
# Host queue sampling (trace) and NIC pacer resynchronisation period: one rtnetlink dump, a
# fraction of a millisecond; faster sampling cost a visible share of the CPU.
HOST_SAMPLE_S = 0.020
# Batched wake-ups, off: with `nic_refill_frames` the NIC pacer lets each port run that many
# frames ahead and wakes its senders once per that many (the host qdisc paces them; each frame
# is stamped with the earliest it can leave, NicPacer's docstring). Stamped by the model alone
# they discarded nearly every RTT sample (the host qdisc's burst let frames out early, so their
# echoes came from the future), which froze NSCC: hence their apparent CPU gain and spray's
# collapse through a cut link. Stamped honestly (the burst, `nic_burst_bytes`, from the
# emulation) the permutation's queues stood from its first second (two runs) and the agents cost
# more, not less (docs/experiments.md, "Where the agents' CPU goes now").
NIC_REFILL_FRAMES = 0.0
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
# A sender's messages hashed per `digest` command (message_digests): about 5 ms of the loop at
# the 1.7 GB/s SHA-256 of the 2-core VM, where one call for a long flow's gigabytes would take
# seconds from every other flow of the process.
DIGEST_CHUNK_BYTES = 8 << 20
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
    digests: dict[int, str] = field(default_factory=dict)  # msn -> sha256 (`message_digests`)
    posted: int = 0  # messages posted (a sender's): the next one's place in the pattern
    undigested: dict[int, tuple[int, int]] = field(default_factory=dict)  # msn -> (place, size)
    stream_until: float = 0.0
    stream_bytes: int = 0  # size of each streamed message
    stream_left: int | None = None  # bytes still to post in a sized transfer (None: timed)
    msg_seed: int = 0
    last_delivered: int = 0
    completed: int = 0  # messages fully acknowledged (sender side)
    due: float | None = 0.0  # its core's next deadline when last polled (0.0: poll it at once)
    touched: bool = False  # a datagram came for it since it was last polled

    @property
    def role(self) -> str:
        return "send" if self.sender is not None else "recv"

class DataLoop:
    """The sockets, the NIC pacer and the QPs (`qps`, opened and closed by the control
    commands), run by endpoints/host/shared.py's loop until `running` is false."""

    def __init__(self, settings: dict[str, Any], config: TransportConfig, link_mbps: float, planes: int,
                 nics: dict[str, int]) -> None:
        """`config`: the agent's transport config; `link_mbps`, `planes`: the fabric's;
        `nics`: this host's NICs, interface name -> plane."""
        self.config = config
        # The NIC ports, shared by this host's QPs (`nic_pacing` false: NICs not shaped, as fast
        # as the agent), and the host qdisc's class for control packets (0: none, one class).
        # MRC datagrams leave the host IPv6-in-IPv6 (the encapsulation's outer header, charged
        # with every frame; the go-back-N baseline's are 40 bytes shorter, a 1% overcharge).
        frame = wire.frame_bytes(self.config.mtu_payload)
        refill = float(settings.get("nic_refill_frames", NIC_REFILL_FRAMES))
        lag = pacer_wake_lag(self.config.frame_time(link_mbps)) \
            if settings.get("nic_lazy_wake", True) else 0.0
        self.pacer = NicPacer(planes, link_mbps * 1e6, frame, extra_bytes=wire.IPV6_HDR,
                              depth=DEPTH_FRAMES + refill, refill=refill + lag,
                              stamp_departure=refill > 0,
                              burst_bytes=int(settings.get("nic_burst_bytes", 0))) \
            if settings.get("nic_pacing", True) else None
        self.control_priority = int(settings.get("control_priority", 0))
        # raw_send: every packet built in Python and sent on the raw socket (the former path,
        # kept for comparison and for kernels that refuse the per-path sockets).
        self.rx_size = wire.data_len(self.config.mtu_payload) + 64  # never truncate a datagram
        self.tx = netio.Transmitter(kernel_checksum=not settings.get("raw_send", False))
        # The local address is not needed (the EV names the path): one control message fewer.
        self.rx = netio.open_receiver(wire.MRC_PORT, pktinfo=False)
        # The control server's sockets; its epoll (itself pollable) sits in the loop's wait
        # (endpoints/host/shared.py) beside the receive socket.
        self.selector = selectors.DefaultSelector()
        self.qps: dict[int, Qp] = {}
        self.backlog = netio.Backlog(self.tx)  # backpressure: per path, bounded
        self.trace = open(settings["trace"], "ab") if settings.get("trace") else None
        # Datagrams still to log (0: off); the hot paths test it once per burst.
        self.packet_log = int(settings.get("packet_log", 0)) if self.trace is not None else 0
        self.stats: collections.Counter[str] = collections.Counter()
        self.running = True
        self.service_all = True  # the next service polls every QP, not only the due ones
        # Host queues: the NICs' root qdiscs by interface index, read every HOST_SAMPLE_S.
        self._nic_plane: dict[int, int] = {}
        self._qreader: QdiscReader | None = None
        try:
            self._qreader = QdiscReader()
            self._nic_plane = {socket.if_nametoindex(name): plane for name, plane in nics.items()}
        except OSError:
            self._qreader = None  # no such interfaces here (a unit test): the model alone
        self._next_host_sample = 0.0
        self._loop_lag = 0.0
        # Wake-ups, the cost that matters on a VM (docs/experiments.md, "What a run costs"):
        # loop turns, those the receive socket woke, datagrams taken and sent; cumulative, in
        # every `host` trace sample and in agent_stats.
        self.wakes = self.rx_wakes = self.rx_dgrams = self.tx_dgrams = 0

    # ----- posting ----------------------------------------------------------------------------
    def post(self, qp: Qp, size: int, now: float) -> int:
        assert qp.sender is not None
        data = _message_data(qp, qp.posted, size)
        msn = qp.sender.send_message(data, now)
        qp.undigested[msn] = (qp.posted, size)  # hashed when the check asks (message_digests)
        qp.posted += 1
        return msn

    def refill(self, qp: Qp, now: float) -> int:
        """Keep two messages not yet transmitted, so the window never waits for a message's
        tail to be acknowledged before the next one is posted; returns how many were posted."""
        posted = 0
        while qp.stream_until > now and qp.sender is not None and qp.sender.unsent_messages < 2:
            size = qp.stream_bytes if qp.stream_left is None else min(qp.stream_bytes, qp.stream_left)
            self.post(qp, size, now)
            posted += 1
            if qp.stream_left is not None:
                qp.stream_left -= size
                if qp.stream_left == 0:
                    qp.stream_until = 0.0  # everything posted: the transfer ends when acked
        return posted

    # ----- data path ------------------------------------------------------------------------
    def _transmit(self, qp: Qp, items: list[tuple[int, bytes]]) -> None:
        paths, planes = qp.paths.tx, qp.paths.plane
        send = self.backlog.send  # NIC backpressure is queued per path, not lost
        log = self.packet_log > 0
        pacer, now = self.pacer, time.monotonic()
        data_max, overhead = wire.DATA_OPCODE_MAX, wire.FRAME_OVERHEAD
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
            if pacer is not None and control:  # the senders charged their own data packets
                pacer.charge(planes[ev], len(payload) + overhead, now)
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
            header: dict[str, int] = wire.fields(datagram)  # "malformed": True is an int too
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
            qp.touched = received = True
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
        """Run the timers and transmissions of every QP that is due: a datagram or a command
        came for it (`touched`), its deadline passed, or `service_all` says each one (one of
        the host's ports changed state, `poll_all`); return the earliest deadline.
        A QP's poll with nothing due does nothing: skipping it saved about 5% of the default
        permutation's CPU per packet (docs/history.md, 2026-12-02)."""
        earliest: float | None = None
        every, self.service_all = self.service_all, False
        qps, served = self.qps, []
        for qp in qps.values():
            due = qp.due
            if not (every or qp.touched or (due is not None and due <= now)):
                if due is not None and (earliest is None or due < earliest):
                    earliest = due
                continue
            qp.touched = False
            core = qp.core
            items = core.poll(now)
            if items:
                self._transmit(qp, items)
                served.append(qp.qpn)
            if qp.receiver is not None:
                for msn, data in qp.receiver.take_completed():
                    qp.digests[msn] = hashlib.sha256(data).hexdigest()
            elif qp.sender is not None:
                qp.completed += len(qp.sender.take_completed())
                # Polled again only for what was just posted: at the same `now` with nothing
                # new, a second poll has nothing to send (its timers ran in the first), and at
                # one or two packets per wake-up it was a third of the sender's loop.
                if qp.stream_until and self.refill(qp, now):
                    items = core.poll(now)
                    if items:
                        self._transmit(qp, items)
            if self.trace is not None:
                for event in core.take_events():
                    self.trace.write(_json_line(as_record(qp.qpn, event)))
            qp.due = deadline = core.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        # The NIC's QP arbiter: round robin. A QP that sent goes last, so the next free slot
        # of a port goes to the QP served least recently; in a fixed order the first QP took
        # every slot while it had data, and an all-to-all's senders all began with one peer.
        for qpn in served:
            qps[qpn] = qps.pop(qpn)
        return earliest

    def _sample_host(self, now: float) -> None:
        """Read the NICs' qdisc backlog: resynchronise the pacer with it, and trace it."""
        # No QP is polled for it: a resynchronised port is never ready sooner (NicPacer.sync),
        # and a sender woken for a port that is not ready yet asks again.
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
                                         "loop": self.loop_counts()}))
        self._loop_lag = 0.0

    def poll_all(self) -> None:
        """Poll every QP at the next service, not only those due (a port changed state)."""
        self.service_all = True

    def loop_counts(self) -> dict[str, int]:
        return {"wakes": self.wakes, "rx_wakes": self.rx_wakes, "rx_dgrams": self.rx_dgrams,
                "tx_dgrams": self.tx_dgrams}

    def close(self) -> None:
        if self._qreader is not None:
            self._qreader.close()
        self.rx.close()
        self.tx.close()
        if self.trace is not None:
            self.trace.close()


_TCLASS_BYTE = 0 if sys.byteorder == "little" else 3  # IPV6_TCLASS arrives as a native int


def _json_line_encoder() -> Callable[[object], bytes]:
    """A trace record as one JSON line, UTF-8, for the trace's thousands of lines a second:
    orjson (a maintained JSON library in Rust), compact like the runner's queue samples; 0.23
    us for an `rtt` record where the standard library's C encoder took 1.49, and the trace's
    encoding was the agents' largest item of Python (docs/experiments.md). The standard
    library's for what orjson refuses (an integer past 64 bits), or where it is missing."""
    def standard(obj: object) -> bytes:
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode()

    try:
        import orjson
    except ImportError:
        return standard
    dumps, options = orjson.dumps, orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS

    def line(obj: object) -> bytes:
        try:
            return dumps(obj, option=options)
        except TypeError:  # orjson.JSONEncodeError is one
            return standard(obj)
    return line


_json_line = _json_line_encoder()


def message_digests(qp: Qp, budget: int | None = None) -> dict[int, str]:
    """msn -> SHA-256 of each message: a receiver's made as each completed, from what arrived; a
    sender's made when asked, from the pattern each was cut from (hashing at post was 14% of the
    streaming sender's CPU, py-spy, docs/experiments.md, for a check the transport never reads).
    `budget`: hash at most about that many bytes now (one message at least), so that the loop
    serving every host's agents never stops long while other flows run (`DIGEST_CHUNK_BYTES`,
    the `digest` command); `undigested` keeps the rest."""
    spent = 0
    while qp.undigested and (budget is None or spent < budget):
        msn = next(iter(qp.undigested))
        place, size = qp.undigested.pop(msn)
        qp.digests[msn] = hashlib.sha256(_message_data(qp, place, size)).hexdigest()
        spent += size
    return qp.digests


def _message_data(qp: Qp, msn_hint: int, size: int) -> bytes | memoryview:
    """Message `msn_hint` of a QP: a window of the seeded pattern at an offset that differs for
    every message and every `data_seed` (both scattered over the pattern by large odd factors),
    so contents are reproducible from `data_seed` and differ between messages and between QPs;
    repeated when the message is longer than the pattern. A view, not a copy: the pattern is
    immutable and lives as long as the process."""
    global _pattern
    if not _pattern:
        one = random.Random(PATTERN_SEED).randbytes(PATTERN_BYTES)
        _pattern = one + one
    start = (msn_hint * 2_654_435_761 + qp.msg_seed * 2_246_822_507) % PATTERN_BYTES
    if size <= PATTERN_BYTES:
        return memoryview(_pattern)[start:start + size]
    reps = -(-(start + size) // PATTERN_BYTES)
    return (_pattern[:PATTERN_BYTES] * reps)[start:start + size]

