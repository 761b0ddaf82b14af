"""Lab 8's checker: the lab's own capture (results/lab-08/, made by RUN: an incast's receiver,
trimming on, then drop-tail) is there and holds something to read; then the student's parser
against the product's wire format (endpoints/protocol/wire.py) on every packet of that capture
and on made-up packets that tell the usual mistakes apart (PSNs and QPs with their top bits
set, AckReq set, bitmaps with bit 63 set or wrapping past 2**24, every NACK reason, packets
that are not MRC); then the student's display filters, run by tshark with the shipped dissector
over the capture and over a made-up capture of every kind of packet, against the frames the
wire format says they should pick. No number is written here: every answer comes from the
capture being read."""

from __future__ import annotations

import ast
import os
import random
import shutil
import socket
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from endpoints.protocol import wire
from experiments.api import traffic
from labs.checker import Check, CheckFailed, Context, Lab, pcapfile
from topologies.model import build

REPO = Path(__file__).resolve().parents[2]
OUT = "results/lab-08"  # the lab's own run: no other run writes here
# The run: a small fabric of kernel routers, three senders into one receiver (trimming at its
# leaf's port: NACKs), then the same as drop-tail (real losses: holes in SACKs, retransmissions).
FABRIC = build(planes=1, leaves=2, spines=2, hosts_per_leaf=3, link_mbps=10)
SENDERS = 3
RECEIVER = traffic.incast_roles([h.name for h in FABRIC.hosts], SENDERS).receiver
RUN = (f"sudo make experiment-incast ARGS=\"--planes {FABRIC.params.planes} --leaves "
       f"{FABRIC.params.leaves} --spines {FABRIC.params.spines} --hosts-per-leaf "
       f"{FABRIC.params.hosts_per_leaf} --link-mbps {FABRIC.params.link_mbps:g} --transports mrc "
       f"--senders {SENDERS} --duration 2 --fault-at 0.5 --fault-end 1.5 --capture {RECEIVER} "
       f"--out {OUT}\"")
# What the student's parser may not import: the product's decoders, or a library's.
NOT_YOURS = ("endpoints", "experiments", "topologies", "labs", "scapy", "dpkt", "pyshark")
RANDOM_CASES = 200  # random SACKs and BTHs after the capture's and the made-up ones


def results() -> Path:
    """The run to read: results/lab-08 (or $LAB_RESULTS, for a run kept elsewhere)."""
    return Path(os.environ.get("LAB_RESULTS", REPO / OUT))


# ----- the truth, from the product's wire format --------------------------------------------------
def mrc_in(ip: bytes) -> bytes | None:
    """The MRC datagram inside an IPv6 packet (through IPv6-in-IPv6), as the checker reads it."""
    while len(ip) >= wire.IPV6_HDR and ip[0] >> 4 == 6 and ip[6] == socket.IPPROTO_IPV6:
        ip = ip[wire.IPV6_HDR:]
    if len(ip) < wire.IPV6_HDR or ip[0] >> 4 != 6 or ip[6] != socket.IPPROTO_UDP:
        return None
    udp = ip[wire.IPV6_HDR:]
    if len(udp) < wire.UDP_HDR or struct.unpack_from("!H", udp, 2)[0] != wire.MRC_PORT:
        return None
    return udp[wire.UDP_HDR:struct.unpack_from("!H", udp, 4)[0]]


def bth_of(d: bytes) -> tuple[int, int, int]:
    opcode, _, _, word1, word2 = wire.BTH.unpack_from(d)
    return opcode, word1 & wire.QPN_MASK, word2 & wire.PSN_MASK


def received(sack: wire.Sack) -> list[int]:
    return [(sack.base + i) & wire.PSN_MASK for i in range(64) if sack.bitmap >> i & 1]


def is_trimmed_nack(d: bytes) -> bool:
    nack = wire.decode(d) if d[0] == wire.OP_NACK else None
    return isinstance(nack, wire.Nack) and nack.reason in (wire.NACK_TRIMMED, wire.NACK_TRIMMED_LASTHOP)


def is_retransmission(d: bytes) -> bool:
    return d[0] in wire.DATA_OPCODES and bool(d[wire.FLAGS_OFF] & wire.F_RETRANSMIT)


def has_hole(d: bytes) -> bool:
    """A zero bit below the bitmap's highest set bit (the dissector's `mrc.sack.missing`)."""
    sack = wire.decode(d) if d[0] == wire.OP_SACK else None
    return isinstance(sack, wire.Sack) and sack.bitmap & (sack.bitmap + 1) != 0


def what(d: bytes | None) -> str:
    """A datagram in words, for a failure's line."""
    if d is None:
        return "no MRC datagram"
    if len(d) < wire.BTH_LEN:
        return f"{len(d)} bytes"
    op, qpn, psn = bth_of(d)
    name = wire.OPCODE_NAMES.get(op, f"opcode {op:#04x}")
    flags = d[wire.FLAGS_OFF] if len(d) > wire.FLAGS_OFF else 0
    words = [w for bit, w in ((wire.F_RETRANSMIT, "retransmitted"), (wire.F_TRIMMED, "trimmed"),
                              (wire.F_TRIMMED_LASTHOP, "at the last hop")) if flags & bit]
    pkt = wire.decode(d) if op in (wire.OP_NACK, wire.OP_SACK) and len(d) >= wire.NACK_LEN else None
    if isinstance(pkt, wire.Nack):
        words.append(wire.NACK_REASON_NAMES[pkt.reason])
    if isinstance(pkt, wire.Sack):
        words.append(f"cack {pkt.cack}, base {pkt.base}, bitmap {pkt.bitmap:#018x}")
    return f"{name} QP {qpn:#x} PSN {psn}" + (f" ({', '.join(words)})" if words else "")


# ----- made-up packets ---------------------------------------------------------------------------
SRC, DST, CARRIER = (socket.inet_pton(socket.AF_INET6, a)
                      for a in ("fd00::1", "fd00::2", "fc00:0:1400:2400::"))


def ip6(next_header: int, payload: bytes, dst: bytes = DST) -> bytes:
    return struct.pack("!IHBB", 6 << 28, len(payload), next_header, 64) + SRC + dst + payload


def udp6(sport: int, dport: int, payload: bytes, encapsulated: bool) -> bytes:
    inner = ip6(socket.IPPROTO_UDP, struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)
    return ip6(socket.IPPROTO_IPV6, inner, CARRIER) if encapsulated else inner


def made_up_datagrams() -> list[tuple[str, bytes]]:
    """(what, datagram): every kind of MRC packet, fields with their top bits set."""
    rng = random.Random(8)
    out: list[tuple[str, bytes]] = []
    top = (wire.PSN_MASK, wire.PSN_MASK - 1, 0x800001, 0)
    for i, op in enumerate(sorted(wire.DATA_OPCODES)):
        for flags in (0, wire.F_ACK_REQ, wire.F_RETRANSMIT | wire.F_ACK_REQ, wire.F_RETRANSMIT):
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 90)))
            pkt = wire.encode_data(op, flags, 0xFFFFFF - i, top[(i + flags) % 4], i, 0, 4096,
                                   payload, tsval=rng.getrandbits(32))
            out.append(("a made-up data packet", pkt))
            out.append(("a made-up trimmed data packet", wire.trimmed(pkt, last_hop=bool(i & 1))))
    sacks = [(100, 100, 0), (100, 100, 0b110), (100, 140, 0b1111), (7, 7, 1 << 63 | 0b10),
             (wire.PSN_MASK - 2, wire.PSN_MASK - 2, 0b11010), (wire.PSN_MASK, wire.PSN_MASK, 1 << 63)]
    sacks += [(c, c + rng.randrange(3), rng.getrandbits(64)) for c in
              (rng.randrange(wire.PSN_MASK - 2) for _ in range(6))]
    for cack, base, bitmap in sacks:
        out.append(("a made-up SACK", wire.encode_sack(rng.randrange(1 << 24), cack, base, bitmap,
                                                       rng.getrandbits(32), rng.getrandbits(32))))
    for reason in sorted(wire.NACK_REASONS):
        for flags in (0, wire.F_ECN_ECHO):
            out.append(("a made-up NACK", wire.encode_nack(
                rng.randrange(1 << 24), rng.randrange(1 << 24), reason, rng.getrandbits(32),
                rng.getrandbits(32), cack=rng.randrange(1 << 24), flags=flags)))
    for op in (wire.OP_EV_PROBE, wire.OP_EV_PROBE_REPLY):
        out.append(("a made-up probe", wire.encode_probe(op, 0xABCDEF, 1, 2, 0x1C005)))
    return out


def made_up_packets() -> list[tuple[str, bytes]]:
    """(what, IPv6 packet): the made-up datagrams, encapsulated and plain, and packets that are
    not MRC (another UDP port, MRC's port as the source, ICMPv6, a hop-by-hop header, IPv4)."""
    out = []
    for i, (w, d) in enumerate(made_up_datagrams()):
        enc = i % 3 != 2
        out.append((f"{w} ({'encapsulated' if enc else 'plain IPv6'})",
                    udp6(0xC000 + i, wire.MRC_PORT, d, enc)))
    d = made_up_datagrams()[0][1]
    out += [("a UDP datagram to port 9 from port 4791", udp6(wire.MRC_PORT, 9, d, True)),
            ("a UDP datagram to port 4792", udp6(0xC001, wire.MRC_PORT + 1, d, False)),
            ("an ICMPv6 echo", ip6(58, b"\x80\x00\x00\x00" + bytes(8))),
            ("an encapsulated ICMPv6 echo", ip6(socket.IPPROTO_IPV6, ip6(58, bytes(12)), CARRIER)),
            ("an MLD report behind a hop-by-hop header", ip6(0, bytes(8) + b"\x8f" + bytes(27))),
            ("an IPv4 packet", bytes([0x45]) + bytes(19) + struct.pack("!HHHH", 1, wire.MRC_PORT, 8, 0))]
    return out


# ----- the capture -------------------------------------------------------------------------------
class Capture:
    """A capture read once: frames (number, IP packet, its MRC datagram or None)."""

    def __init__(self, label: str, path: Path, frames: list[tuple[int, bytes, str]]) -> None:
        self.label, self.path = label, path
        self.frames = [(n, ip, mrc_in(ip), w) for n, ip, w in frames]

    def datagrams(self) -> list[tuple[str, bytes]]:
        return [(f"frame {n} of {self.label}", d) for n, _, d, _ in self.frames if d is not None]


def capture(ctx: Context) -> Capture:
    if "capture" not in ctx.shared:
        path = results() / f"{RECEIVER}.pcap"
        if not path.exists():
            where = path.parent.relative_to(REPO) if path.parent.is_relative_to(REPO) else path.parent
            raise CheckFailed(f"no capture {where}/{path.name}: run `{RUN}` first (about a minute)")
        try:
            frames = pcapfile.frames(path)
        except pcapfile.CaptureError as exc:
            raise CheckFailed(f"{exc}: run `{RUN}` again") from None
        ctx.shared["capture"] = Capture("your capture", path, [(n, ip, "") for n, ip in frames])
    return ctx.shared["capture"]  # type: ignore[no-any-return]


def made_up(ctx: Context) -> Capture:
    """The made-up packets as a capture of their own (a temporary pcap, gone with the run)."""
    if "made_up" not in ctx.shared:
        folder = Path(tempfile.mkdtemp(prefix="mrclab-lab08-"))
        ctx.closers.append(lambda: shutil.rmtree(folder, ignore_errors=True))
        packets = made_up_packets()
        path = pcapfile.write(folder / "made-up.pcap", [ip for _, ip in packets])
        ctx.shared["made_up"] = Capture("the made-up capture", path,
                                        [(i + 1, ip, w) for i, (w, ip) in enumerate(packets)])
    return ctx.shared["made_up"]  # type: ignore[no-any-return]


def capture_present(ctx: Context) -> str:
    cap = capture(ctx)
    mine = {n for n, _, d, _ in cap.frames if d is not None}
    try:
        # an ICMPv6 error quoting an MRC packet (a late one to a closed port) is no MRC frame
        theirs = pcapfile.select(cap.path, "mrc && !icmpv6")
    except pcapfile.CaptureError as exc:
        raise CheckFailed(str(exc)) from None
    if mine != theirs:  # a capture the dissector reads otherwise: not one this lab knows
        raise CheckFailed(f"tshark finds {len(theirs)} MRC frames in {cap.path.name}, the checker "
                          f"{len(mine)}: run `{RUN}` again")
    datagrams = [d for _, d in cap.datagrams()]
    count = {
        "data packets": sum(d[0] in wire.DATA_OPCODES for d in datagrams),
        "trimmed": sum(d[0] in wire.DATA_OPCODES and bool(d[wire.FLAGS_OFF] & wire.F_TRIMMED)
                       for d in datagrams),
        "retransmitted": sum(map(is_retransmission, datagrams)),
        "SACKs": sum(d[0] == wire.OP_SACK for d in datagrams),
        "NACKs for a trim": sum(map(is_trimmed_nack, datagrams)),
    }
    lacking = [k for k, v in count.items() if v == 0]
    if lacking:
        raise CheckFailed(f"{cap.path.name} holds no {', no '.join(lacking)}: not the lab's incast; "
                          f"run `{RUN}`")
    return (f"{len(cap.frames)} frames, {len(datagrams)} MRC: " +
            ", ".join(f"{v} {k}" for k, v in count.items()))


def own_parser(ctx: Context) -> str:
    path = ctx.path("mrc_parser.py")
    if not path.exists():
        raise CheckFailed(f"mrc_parser.py is missing from {path.parent}")
    tree = ast.parse(path.read_text(), "mrc_parser.py")
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            if name.split(".")[0] in NOT_YOURS:
                raise CheckFailed(f"mrc_parser.py:{node.lineno} imports {name}: the parser must "
                                  f"decode the bytes itself")
    return "mrc_parser.py decodes the bytes itself (no product or packet library imported)"


def _shown(d: bytes | None) -> str:
    return "None" if d is None else f"{len(d)} bytes starting {bytes(d[:8]).hex(' ')}"


def datagrams(ctx: Context) -> str:
    parser = ctx.module("mrc_parser")
    cap = capture(ctx)
    cases = [(f"frame {n} of your capture", ip, d) for n, ip, d, _ in cap.frames]
    for w, ip in made_up_packets():
        cases.append((w, ip, mrc_in(ip)))
        if len(ip) > 120:  # a snap length of 120 bytes: the start of the packet only
            cases.append((f"{w}, cut to 120 bytes by the capture", ip[:120], mrc_in(ip[:120])))
    for w, ip, want in cases:
        got = parser.mrc_datagram(ip)
        if (None if got is None else bytes(got)) != want:
            raise CheckFailed(f"mrc_datagram of {w} gives {_shown(got)}; the packet holds "
                              f"{_shown(want)}: {what(want)}")
    mine = len(cap.datagrams())
    found = sum(d is not None for _, _, d in cases) - mine
    return (f"the datagram of each of your capture's {mine} MRC packets and {found} made-up ones "
            f"(some cut short), None for the {len(cases) - mine - found} packets that hold none")


def _all_datagrams(ctx: Context, keep: Callable[[bytes], bool]) -> list[tuple[str, bytes]]:
    """The capture's datagrams, then the made-up ones, that `keep` says."""
    made = made_up_datagrams()
    return [(w, d) for w, d in capture(ctx).datagrams() + made if keep(d)]


def bth_fields(ctx: Context) -> str:
    parser = ctx.module("mrc_parser")
    rng = random.Random(2)
    cases = _all_datagrams(ctx, lambda d: len(d) >= wire.BTH_LEN)
    for _ in range(RANDOM_CASES):
        d = wire.encode_nack(rng.randrange(1 << 24), rng.randrange(1 << 24), 1,
                             flags=rng.choice((0, wire.F_ACK_REQ)))
        cases.append(("a made-up NACK" + (" with AckReq set" if d[wire.ACKREQ_OFF] else ""), d))
    for w, d in cases:
        got = tuple(parser.bth(d))
        want = bth_of(d)
        if got != want:
            raise CheckFailed(f"bth() of {w} is {_bth(got)}; its BTH says {_bth(want)}")
    return f"opcode, QP and PSN right in {len(cases)} datagrams"


def _bth(t: tuple[Any, ...]) -> str:
    try:
        return f"opcode {t[0]:#04x}, qpn {t[1]:#x}, psn {t[2]}"
    except (IndexError, TypeError, ValueError):
        return repr(t)


def sack_bitmaps(ctx: Context) -> str:
    parser = ctx.module("mrc_parser")
    rng = random.Random(3)
    cases = _all_datagrams(ctx, lambda d: d[0] == wire.OP_SACK)
    real = sum(w.startswith("frame") for w, _ in cases)
    for _ in range(RANDOM_CASES):
        base = rng.randrange(1 << 24)
        cases.append(("a made-up SACK", wire.encode_sack(1, base, base, rng.getrandbits(64), 0, 0)))
    holes = 0
    for w, d in cases:
        sack = wire.decode(d)
        assert isinstance(sack, wire.Sack)
        want = received(sack)
        got = list(parser.sack_received(d))
        if got != want:
            raise CheckFailed(f"sack_received of {w} (base {sack.base}, bitmap {sack.bitmap:#018x}) "
                              f"is {_few(got)}; the bitmap says {_few(want)}")
        holes += w.startswith("frame") and has_hole(d)
    return (f"every bitmap read right ({real} SACKs of your capture, {holes} with a hole; "
            f"{len(cases) - real} made up)")


def _few(psns: list[int]) -> str:
    return "[" + ", ".join(map(str, psns[:6])) + (f", ... {len(psns)} in all]" if len(psns) > 6 else "]")


def nack_reasons(ctx: Context) -> str:
    parser = ctx.module("mrc_parser")
    cases = _all_datagrams(ctx, lambda d: d[0] == wire.OP_NACK)
    seen: dict[str, int] = {}
    for w, d in cases:
        nack = wire.decode(d)
        assert isinstance(nack, wire.Nack)
        want = wire.NACK_REASON_NAMES[nack.reason]
        got = parser.nack_reason(d)
        if got != want:
            raise CheckFailed(f"nack_reason of {w} is {got!r}; its reason code {nack.reason} is {want}")
        if w.startswith("frame"):
            seen[want] = seen.get(want, 0) + 1
    return "every reason right; your capture: " + ", ".join(f"{n} {r}" for r, n in sorted(seen.items()))


def _filter_check(name: str, todo: int, words: str,
                  truth: Callable[[bytes], bool]) -> Callable[[Context], str]:
    """The check of the display filter `name` (TODO `todo`): tshark picks exactly the frames of
    the capture and the made-up one that `truth` says, `words` being what they are."""
    def check(ctx: Context) -> str:
        text = getattr(ctx.module("filters"), name)
        if not isinstance(text, str) or not text.strip():
            raise CheckFailed(f"{name} is {text!r}: write a display filter (TODO {todo})")
        counts = []
        for cap in (capture(ctx), made_up(ctx)):
            try:
                picked = pcapfile.select(cap.path, text)
            except pcapfile.CaptureError as exc:
                raise CheckFailed(f"{exc} (TODO {todo})") from None
            want = {n for n, _, d, _ in cap.frames if d is not None and truth(d)}
            wrong = sorted(picked - want)
            if wrong or picked != want:
                n = wrong[0] if wrong else sorted(want - picked)[0]
                _, ip, d, w = cap.frames[n - 1]
                shown = f"{w}: {what(d)}" if w else what(d)
                raise CheckFailed(f"{name} = {text!r} picks {len(picked)} frames of {cap.label}, "
                                  f"which holds {len(want)} {words}; it "
                                  f"{'picks' if wrong else 'misses'} frame {n}, {shown}")
            counts.append(len(want))
        return f"{name} picks the {counts[0]} {words} of your capture (and the {counts[1]} made up)"
    return check


FILTER_HINT = ("tshark -r CAPTURE -X lua_script:experiments/tools/wireshark/mrc.lua -Y FILTER "
               "shows what a filter picks; ")

LAB = Lab(__file__, "Reading MRC on the wire", files=("mrc_parser.py", "filters.py"), checks=[
    Check("capture-present", capture_present,
          f"the run takes about a minute and needs root: `{RUN}` writes {OUT}/{RECEIVER}.pcap, "
          f"which no other run touches"),
    Check("own-parser", own_parser,
          "TODOs 1-4 are yours to write from the byte layout (docs/wire-format.md): no import of "
          "the product's wire format, the dissector or a packet library"),
    Check("mrc-datagrams", datagrams,
          "TODO 1: skip 40 bytes per IPv6 header while the next header (byte 6) is 41; at 17 comes "
          "UDP: destination port (bytes 2-3) 4791, the datagram after its 8 bytes, up to its length",
          needs=("capture-present",)),
    Check("bth-fields", bth_fields,
          "TODO 2: opcode byte 0, destination QP bytes 5-7, PSN bytes 9-11, big-endian (byte 8 "
          "holds the AckReq bit, not the PSN)", needs=("capture-present",)),
    Check("sack-bitmaps", sack_bitmaps,
          "TODO 3: base in bytes 16-19, bitmap in bytes 20-27, both big-endian; bit i, counted "
          "from the least significant, is PSN base + i, modulo 2**24", needs=("capture-present",)),
    Check("nack-reasons", nack_reasons,
          "TODO 4: the reason code is byte 16, the top byte of the word after the MRCETH (the "
          "24 bits below it are the cumulative ACK); codes 1-6 in docs/wire-format.md",
          needs=("capture-present",)),
    Check("filter-trimmed-nacks",
          _filter_check("TRIMMED_NACKS", 5, "NACKs for a trimmed packet", is_trimmed_nack),
          "TODO 5: " + FILTER_HINT + "a NACK's reason is mrc.nack.reason; a trim anywhere is "
          "TRIMMED or TRIMMED_LASTHOP", needs=("capture-present",)),
    Check("filter-retransmissions",
          _filter_check("RETRANSMISSIONS", 6, "retransmissions", is_retransmission),
          "TODO 6: " + FILTER_HINT + "a boolean field is present in every packet that has the "
          "flags byte, set or not: compare it with 1", needs=("capture-present",)),
    Check("filter-sack-holes",
          _filter_check("SACKS_WITH_HOLES", 7, "SACKs with a hole", has_hole),
          "TODO 7: " + FILTER_HINT + "the dissector lists a SACK's missing PSNs in mrc.sack.missing, "
          "present (maybe empty) in every SACK", needs=("capture-present",)),
])
