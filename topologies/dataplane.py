"""Switch data plane: ECN marking, packet trimming and a priority class at every egress port.

This kernel has no RED, fq or netem, so an eBPF program (topologies/bpf/mrc_qos.bpf.c) at each
switch port's tc clsact egress hook does what an MRC switch does: a virtual queue per port,
draining at the port's rate, decides CE marks, trims and drops; the program steers control
packets and trimmed headers into HTB class 1:2, which `htb_priority_batch` makes strictly
higher priority than the data class 1:3.

Loading: `bpftool prog load` once per network namespace (pinned under /sys/fs/bpf/mrclab/),
then `tc filter ... bpf da object-pinned` on every port: the verifier runs once, not per port,
and tc needs no ELF support. Maps are read and written with bpf(2) through ctypes.

Use from the emulation::

    ports = switch_ports([(ifname, faces_host), ...], link_mbps, queue_packets)
    dp = attach(ports)          # after the HTB qdiscs exist (htb_priority_batch)
    dp.counters()               # {ifname: {"packets": .., "marked": .., ...}}
    dp.detach()

`python -m topologies.dataplane build` compiles the object (scripts/setup.sh runs it);
`python -m topologies.dataplane check` says whether this machine can load it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from endpoints import wire
from endpoints.config import TransportConfig
from endpoints.netio import MRC_PORT, udp6_checksum

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "topologies" / "bpf" / "mrc_qos.bpf.c"
OBJECT = REPO / "build" / "mrc_qos.bpf.o"
FLAGS_FILE = OBJECT.with_suffix(".flags")  # the -D flags the object was built with
BPFFS = Path("/sys/fs/bpf")
PIN_ROOT = BPFFS / "mrclab"
SECTION = "tc"

# ----- defaults, and why ------------------------------------------------------------------------
# Thresholds are in bytes of backlog at the port (this packet included), counted in full data
# frames so that they mean the same queueing delay at any link rate (frames x 8 / rate).
FRAME_OVERHEAD = 14 + 40 + 8  # Ethernet + IPv6 + UDP: skb->len at tc egress includes Ethernet
MARK_PACKETS = 5  # just below NSCC's 6-frame target delay (endpoints/agent.py): ECN comes first
TRIM_PACKETS = 15  # well past the target: cut payloads before the FIFO gets near full
CONTROL_QUEUE_FACTOR = 4  # control FIFO, in data-queue packets: headers are ~10x smaller
# The drop threshold is the data FIFO's capacity (queue_packets full frames): the vq decides
# drops before the real pfifo would, so what the FIFO tail-drops is never trimmable MRC data.

# Priority classes under the HTB root 1: (emulation.py's shaping): 1:1 is the link-rate parent.
HTB_HANDLE = 1
CLASS_CONTROL = (HTB_HANDLE << 16) | 2  # skb->priority naming an HTB leaf selects it directly
CLASS_DATA = (HTB_HANDLE << 16) | 3
FILTER_PREF = 4791  # our tc filter's preference on clsact egress, to delete exactly it
FLAG_LAST_HOP = 1  # port faces a host: no ECN marks (the MRC paper marks everywhere else)
FLAG_TRIM = 2
RATE_SHIFT = 32  # fixed point for bytes/ns and the vq: exact to 0.01% even at 0.01 Mbit/s
VQ_CAP_BYTES = 1 << 30  # as in the C program; thresholds must stay below it


def frame_bytes(mtu_payload: int | None = None) -> int:
    """skb->len of a full MRC data frame at a switch egress."""
    payload = TransportConfig().mtu_payload if mtu_payload is None else mtu_payload
    return FRAME_OVERHEAD + wire.DATA_HDR + payload


def trimmed_bytes() -> int:
    return FRAME_OVERHEAD + wire.DATA_HDR


class Thresholds(NamedTuple):
    mark_bytes: int
    trim_bytes: int
    drop_bytes: int


def default_thresholds(queue_packets: int, mtu_payload: int | None = None) -> Thresholds:
    """mark < trim < drop in whole frames, squeezed to fit a small queue."""
    if queue_packets < 3:
        raise ValueError(f"queue_packets={queue_packets}: need at least 3 to mark, trim and drop")
    frame = frame_bytes(mtu_payload)
    trim = min(TRIM_PACKETS, queue_packets - 1)
    mark = min(MARK_PACKETS, trim - 1)
    return Thresholds(mark * frame, trim * frame, queue_packets * frame)


def rate_fp(rate_bps: float) -> int:
    """The port rate as the C program wants it: bytes per ns, fixed point << RATE_SHIFT."""
    if not rate_bps > 0:
        raise ValueError(f"rate_bps must be positive, got {rate_bps!r}")
    return max(1, round(rate_bps / 8e9 * (1 << RATE_SHIFT)))


def _member_offset(fmt: struct.Struct, index: int) -> int:
    return struct.calcsize(fmt.format[:1 + index])  # "!" + the first `index` single-char fields


def cflags() -> list[str]:
    """-D flags for the C program: the MRC layout from endpoints/wire.py, never hand-copied."""
    if wire.COMMON.format[:5] != "!BBBB":
        raise RuntimeError("wire.COMMON no longer starts with opcode, flags, magic, version bytes")
    values = {
        "MRC_PORT": MRC_PORT,
        "MRC_COMMON_LEN": wire.COMMON.size,
        "MRC_DATA_HDR": wire.DATA_HDR,
        "MRC_OPCODE_OFF": _member_offset(wire.COMMON, 0),
        "MRC_FLAGS_OFF": _member_offset(wire.COMMON, 1),
        "MRC_MAGIC_OFF": _member_offset(wire.COMMON, 2),
        "MRC_VERSION_OFF": _member_offset(wire.COMMON, 3),
        "MRC_MAGIC": wire.MAGIC,
        "MRC_VERSION": wire.VERSION,
        "MRC_F_TRIMMED": wire.F_TRIMMED,
        "MRC_F_TRIMMED_LASTHOP": wire.F_TRIMMED_LASTHOP,
        "MRC_TRIM_DSCP": wire.TRIM_DSCP,
        "MRC_DATA_OPCODE_MAX": wire.DATA_OPCODE_MAX,
        "CLASS_CONTROL": CLASS_CONTROL,
        "CLASS_DATA": CLASS_DATA,
        "RATE_SHIFT": RATE_SHIFT,
        "FLAG_LAST_HOP": FLAG_LAST_HOP,
        "FLAG_TRIM": FLAG_TRIM,
    }
    return [f"-D{name}={value}" for name, value in values.items()]


# ----- build ------------------------------------------------------------------------------------
def stale() -> str | None:
    """Why the object must be (re)built, or None when it is current."""
    if not OBJECT.exists():
        return f"{OBJECT.relative_to(REPO)} does not exist"
    if SOURCE.stat().st_mtime > OBJECT.stat().st_mtime:
        return f"{SOURCE.name} is newer than its object"
    try:
        if FLAGS_FILE.read_text().split() != cflags():
            return "the MRC constants (endpoints/wire.py) changed"
    except OSError:
        return "its build flags are unknown"
    return None


def build(force: bool = False) -> tuple[bool, str]:
    """Compile the object if stale. (ok, message); never raises for a missing compiler."""
    why = "forced" if force else stale()
    if why is None:
        return True, f"{OBJECT.relative_to(REPO)} up to date"
    clang = shutil.which("clang")
    if clang is None:
        return False, "clang not found"
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    includes = [f"-I/usr/include/{multiarch}"] if Path(f"/usr/include/{multiarch}").is_dir() else []
    OBJECT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OBJECT.with_suffix(".tmp")
    # -g: the maps need BTF (bpf_spin_lock in a map value).
    cmd = [clang, "-O2", "-g", "-target", "bpf", "-Wall", *includes, *cflags(), "-c", str(SOURCE),
           "-o", str(tmp)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        return False, f"clang failed ({why}): {result.stderr.strip()[-600:]}"
    os.replace(tmp, OBJECT)
    FLAGS_FILE.write_text("\n".join(cflags()) + "\n")
    return True, f"built {OBJECT.relative_to(REPO)} ({why})"


# ----- bpf(2) through ctypes --------------------------------------------------------------------
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "armv7l": 386, "ppc64le": 361,
            "s390x": 351, "i686": 357}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 1, 2, 3
BPF_OBJ_GET, BPF_PROG_TEST_RUN, BPF_OBJ_GET_INFO_BY_FD = 7, 10, 15


class _MapElemAttr(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _ObjGetAttr(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32),
                ("file_flags", ctypes.c_uint32)]


class _InfoAttr(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32),
                ("info", ctypes.c_uint64)]


class _TestRunAttr(ctypes.Structure):
    _fields_ = [("prog_fd", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("data_in", ctypes.c_uint64), ("data_out", ctypes.c_uint64),
                ("repeat", ctypes.c_uint32), ("duration", ctypes.c_uint32),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_uint64), ("ctx_out", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    if _SYS_BPF is None:
        raise OSError(f"bpf(2) syscall number unknown on {platform.machine()}")
    ret = _libc.syscall(_SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf cmd {cmd}: {os.strerror(err)}")
    return ret


def _addr(buf: ctypes.Array) -> int:
    return ctypes.addressof(buf)


def _obj_get(path: Path) -> int:
    name = ctypes.create_string_buffer(str(path).encode())
    return _bpf(BPF_OBJ_GET, _ObjGetAttr(pathname=_addr(name)))


def _map_value_size(fd: int) -> int:
    info = ctypes.create_string_buffer(80)  # struct bpf_map_info: type, id, key_size, value_size..
    _bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(bpf_fd=fd, info_len=len(info), info=_addr(info)))
    return struct.unpack_from("=I", info, 12)[0]


class _Map:
    def __init__(self, path: Path, fmt: str) -> None:
        self.fmt = struct.Struct(fmt)
        self.fd = _obj_get(path)
        size = _map_value_size(self.fd)
        if size != self.fmt.size:  # the C structs and the Python formats must agree
            os.close(self.fd)
            raise RuntimeError(f"{path.name}: value size {size}, Python expects {self.fmt.size}")

    def update(self, key: int, *values: int) -> None:
        k = ctypes.create_string_buffer(struct.pack("=I", key), 4)
        v = ctypes.create_string_buffer(self.fmt.pack(*values), self.fmt.size)
        _bpf(BPF_MAP_UPDATE_ELEM, _MapElemAttr(map_fd=self.fd, key=_addr(k), value=_addr(v)))

    def lookup(self, key: int) -> tuple[int, ...] | None:
        k = ctypes.create_string_buffer(struct.pack("=I", key), 4)
        v = ctypes.create_string_buffer(self.fmt.size)
        try:
            _bpf(BPF_MAP_LOOKUP_ELEM, _MapElemAttr(map_fd=self.fd, key=_addr(k), value=_addr(v)))
        except FileNotFoundError:
            return None
        return self.fmt.unpack(v.raw)

    def delete(self, key: int) -> None:
        k = ctypes.create_string_buffer(struct.pack("=I", key), 4)
        try:
            _bpf(BPF_MAP_DELETE_ELEM, _MapElemAttr(map_fd=self.fd, key=_addr(k)))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        os.close(self.fd)


# Value layouts of the C structs port_cfg, port_state (lock, pad, vq_fp, last_ns), port_counters.
CFG_FMT = "=QIIII"
STATE_FMT = "=IIQQ"
COUNTER_NAMES = ("packets", "bytes", "marked", "trimmed", "dropped", "control", "vq_max",
                 "other_packets", "other_bytes")
COUNTERS_FMT = "=" + "Q" * len(COUNTER_NAMES)
FROZEN = (1 << 64) - 1  # last_ns in the future: the vq stops draining (deterministic tests)
TC_ACT_OK, TC_ACT_SHOT = 0, 2
_SKB_CTX = 192  # sizeof(struct __sk_buff); priority at 32, ifindex at 40


# ----- ports ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PortSpec:
    ifname: str
    netns_pid: int | None  # None: this process's namespace (switch ports in Mininet)
    rate_bps: float
    mark_bytes: int
    trim_bytes: int
    drop_bytes: int
    last_hop: bool = False  # faces a host: never ECN-mark
    trim: bool = True  # False: drop-tail above drop_bytes, as a switch without trimming

    def validate(self) -> None:
        rate_fp(self.rate_bps)
        if not 0 <= self.mark_bytes <= self.trim_bytes <= self.drop_bytes < VQ_CAP_BYTES:
            raise ValueError(f"{self.ifname}: need 0 <= mark <= trim <= drop < {VQ_CAP_BYTES} "
                             f"bytes, got {self.mark_bytes}/{self.trim_bytes}/{self.drop_bytes}")

    def config_values(self) -> tuple[int, int, int, int, int]:
        flags = (FLAG_LAST_HOP if self.last_hop else 0) | (FLAG_TRIM if self.trim else 0)
        return rate_fp(self.rate_bps), self.mark_bytes, self.trim_bytes, self.drop_bytes, flags


def switch_ports(ports: Iterable[tuple[str, bool]], link_mbps: float, queue_packets: int,
                 netns_pid: int | None = None, trim: bool = True,
                 mtu_payload: int | None = None) -> list[PortSpec]:
    """PortSpecs with the default thresholds for (ifname, faces_host) switch-side ports."""
    th = default_thresholds(queue_packets, mtu_payload)
    return [PortSpec(name, netns_pid, link_mbps * 1e6, th.mark_bytes, th.trim_bytes,
                     th.drop_bytes, last_hop=faces_host, trim=trim) for name, faces_host in ports]


def htb_priority_batch(intfs: Sequence[str], mbps: float, queue_packets: int,
                       burst_bytes: int, mtu_payload: int | None = None,
                       fifo_headroom: int = 1) -> str:
    """`tc -batch` lines: HTB root 1: at link rate (1:1) with a strict-priority control class
    1:2 and the data class 1:3, which also takes whatever the program does not classify.

    Strictness: 1:2's own rate is the link rate and prio 0, so it never has to borrow and HTB
    always serves it first; 1:3 is guaranteed only a token 1% and borrows the rest from 1:1
    (total overshoot at most that 1% while both are busy). `fifo_headroom`: with the eBPF
    program enforcing the buffer, the real FIFO is made this many times deeper, so that it
    never tail-drops what the program's queue model (draining at exactly the link rate, a
    little faster than HTB on a busy host) has just decided to keep or to trim."""
    frame = frame_bytes(mtu_payload)
    floor_kbit = max(8, round(mbps * 10))
    lines = []
    for intf in intfs:
        common = f"burst {burst_bytes} cburst {burst_bytes} quantum {frame}"
        lines += [
            f"qdisc replace dev {intf} root handle {HTB_HANDLE}: htb default {CLASS_DATA & 0xFFFF}",
            f"class add dev {intf} parent 1: classid 1:1 htb rate {mbps}mbit "
            f"burst {burst_bytes} cburst {burst_bytes}",
            f"class add dev {intf} parent 1:1 classid 1:2 htb rate {mbps}mbit ceil {mbps}mbit "
            f"prio 0 {common}",
            f"class add dev {intf} parent 1:1 classid 1:3 htb rate {floor_kbit}kbit "
            f"ceil {mbps}mbit prio 1 {common}",
            f"qdisc add dev {intf} parent 1:2 handle 12: pfifo limit "
            f"{queue_packets * CONTROL_QUEUE_FACTOR}",
            f"qdisc add dev {intf} parent 1:3 handle 13: pfifo limit {queue_packets * fifo_headroom}",
        ]
    return "\n".join(lines) + "\n"


# ----- one loaded program -----------------------------------------------------------------------
class RunResult(NamedTuple):
    verdict: int  # TC_ACT_OK or TC_ACT_SHOT
    frame: bytes  # the frame as the program left it
    priority: int  # skb->priority afterwards


def _ensure_bpffs() -> None:
    with open("/proc/mounts") as mounts:
        if any(line.split()[1:3] == [str(BPFFS), "bpf"] for line in mounts):
            return
    subprocess.run(["mount", "-t", "bpf", "bpf", str(BPFFS)], check=True, capture_output=True)


_seq = itertools.count()


class Program:
    """One load of the object: the program and its three maps, pinned in a private directory.
    Ports are keyed by ifindex, so every port attached to one Program must share a namespace."""

    def __init__(self, obj: Path = OBJECT) -> None:
        _ensure_bpffs()
        self.pin_dir = PIN_ROOT / f"{os.getpid()}-{next(_seq)}"
        self.pin_dir.mkdir(parents=True, exist_ok=True)
        self.prog_path = self.pin_dir / "prog"
        self._maps: list[_Map] = []
        self.prog_fd = -1
        try:
            result = subprocess.run(
                ["bpftool", "prog", "load", str(obj), str(self.prog_path), "type", "classifier",
                 "pinmaps", str(self.pin_dir)], capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"bpftool prog load failed: {result.stderr.strip()[-800:]}")
            self.prog_fd = _obj_get(self.prog_path)
            self.cfg = _Map(self.pin_dir / "mrc_cfg", CFG_FMT)
            self._maps.append(self.cfg)
            self.state = _Map(self.pin_dir / "mrc_state", STATE_FMT)
            self._maps.append(self.state)
            self.ctr = _Map(self.pin_dir / "mrc_counters", COUNTERS_FMT)
            self._maps.append(self.ctr)
        except BaseException:
            self.close()
            raise

    def configure(self, ifindex: int, spec: PortSpec) -> None:
        spec.validate()
        self.state.update(ifindex, 0, 0, 0, 0)
        self.ctr.update(ifindex, *([0] * len(COUNTER_NAMES)))
        self.cfg.update(ifindex, *spec.config_values())  # last: the program needs all three

    def unconfigure(self, ifindex: int) -> None:
        for m in (self.cfg, self.state, self.ctr):
            m.delete(ifindex)

    def counters(self, ifindex: int) -> dict[str, int]:
        values = self.ctr.lookup(ifindex)
        out = dict(zip(COUNTER_NAMES, values or [0] * len(COUNTER_NAMES), strict=True))
        state = self.state.lookup(ifindex)
        out["vq_bytes"] = (state[2] >> RATE_SHIFT) if state else 0  # as of the last packet
        return out

    def set_queue(self, ifindex: int, vq_bytes: int, frozen: bool = False) -> None:
        """Set a port's virtual backlog; `frozen` stops it draining (for deterministic tests)."""
        last = FROZEN if frozen else time.monotonic_ns()  # bpf_ktime_get_ns is CLOCK_MONOTONIC
        self.state.update(ifindex, 0, 0, vq_bytes << RATE_SHIFT, last)

    def reset_counters(self, ifindex: int) -> None:
        self.ctr.update(ifindex, *([0] * len(COUNTER_NAMES)))

    def run(self, frame: bytes, ifindex: int = 1) -> RunResult:
        """Run one frame through the program in the kernel (BPF_PROG_TEST_RUN) as if sent on
        `ifindex` of this namespace (1, loopback, needs no device)."""
        data_in = ctypes.create_string_buffer(bytes(frame), len(frame))
        data_out = ctypes.create_string_buffer(len(frame) + 256)
        ctx = bytearray(_SKB_CTX)
        struct.pack_into("=I", ctx, 40, ifindex)
        ctx_in = ctypes.create_string_buffer(bytes(ctx), _SKB_CTX)
        ctx_out = ctypes.create_string_buffer(_SKB_CTX)
        attr = _TestRunAttr(prog_fd=self.prog_fd, data_size_in=len(frame),
                            data_size_out=len(data_out), data_in=_addr(data_in),
                            data_out=_addr(data_out), repeat=1, ctx_size_in=_SKB_CTX,
                            ctx_size_out=_SKB_CTX, ctx_in=_addr(ctx_in), ctx_out=_addr(ctx_out))
        _bpf(BPF_PROG_TEST_RUN, attr)
        priority = struct.unpack_from("=I", ctx_out.raw, 32)[0]
        return RunResult(attr.retval, data_out.raw[:attr.data_size_out], priority)

    def close(self) -> None:
        """Unpin and close: the kernel frees the program once no tc filter holds it."""
        for m in self._maps:
            m.close()
        self._maps.clear()
        if self.prog_fd >= 0:
            os.close(self.prog_fd)
            self.prog_fd = -1
        shutil.rmtree(self.pin_dir, ignore_errors=True)


# ----- reference model --------------------------------------------------------------------------
_L3, _L4, _MRC = 14, 14 + 40, 14 + 40 + 8
TRIM_LEN = _MRC + wire.DATA_HDR


def classify(frame: bytes) -> tuple[str, bool, bool]:
    """(kind, trimmable, ect) as the C program sees an Ethernet frame: kind is "data",
    "control" or "other" (anything it does not parse, which it never changes)."""
    n = len(frame)
    if n < _MRC + wire.COMMON.size or frame[12:14] != b"\x86\xdd" or frame[_L3] >> 4 != 6 \
            or frame[_L3 + 6] != 17:
        return "other", False, False
    mrc = frame[_MRC:_MRC + wire.COMMON.size]
    dport, udp_len = struct.unpack_from("!H H", frame, _L4 + 2)
    ip_plen = struct.unpack_from("!H", frame, _L3 + 4)[0]
    if dport != MRC_PORT or mrc[2] != wire.MAGIC or mrc[3] != wire.VERSION \
            or udp_len != ip_plen or udp_len < 8 + wire.COMMON.size or _L4 + udp_len > n:
        return "other", False, False
    ecn = (frame[_L3 + 1] >> 4) & 3
    ect = ecn in (1, 2)
    if mrc[0] > wire.DATA_OPCODE_MAX or mrc[1] & wire.F_TRIMMED:
        return "control", False, ect
    dscp = ((frame[_L3] & 0x0F) << 2) | (frame[_L3 + 1] >> 6)
    return "data", udp_len > 8 + wire.DATA_HDR and dscp == wire.TRIM_DSCP, ect


def trim_frame(frame: bytes, last_hop: bool = False) -> bytes:
    """A data frame cut as the program cuts it: lengths fixed, TRIMMED (and on a port facing
    a host TRIMMED_LASTHOP) set, checksum valid."""
    out = bytearray(frame[:TRIM_LEN])
    l4len = 8 + wire.DATA_HDR
    struct.pack_into("!H", out, _L3 + 4, l4len)
    struct.pack_into("!HH", out, _L4 + 4, l4len, 0)
    out[_MRC + 1] |= wire.F_TRIMMED | (wire.F_TRIMMED_LASTHOP if last_hop else 0)
    check = udp6_checksum(bytes(out[_L3 + 8:_L3 + 24]), bytes(out[_L3 + 24:_L3 + 40]),
                          bytes(out[_L4:]))
    struct.pack_into("!H", out, _L4 + 6, check)
    return bytes(out)


def reference(frame: bytes, vq_bytes: int, spec: PortSpec, priority: int = 0) -> tuple[RunResult, int]:
    """What the program does to `frame` on a port with backlog `vq_bytes` and no draining:
    (result, backlog afterwards). The integration tests hold the kernel to this model."""
    kind, trimmable, ect = classify(frame)
    q = vq_bytes + len(frame)
    admitted, verdict, out, prio = len(frame), TC_ACT_OK, frame, priority
    if kind == "other":
        admitted = 0 if q > spec.drop_bytes else admitted
    elif kind == "control":
        prio = CLASS_CONTROL
    elif q > spec.trim_bytes and spec.trim and trimmable:
        admitted, out, prio = TRIM_LEN, trim_frame(frame, spec.last_hop), CLASS_CONTROL
    elif q > spec.drop_bytes:
        admitted, verdict = 0, TC_ACT_SHOT
    else:
        prio = CLASS_DATA
        if q > spec.mark_bytes and ect and not spec.last_hop:
            out = frame[:_L3 + 1] + bytes([frame[_L3 + 1] | 0x30]) + frame[_L3 + 2:]
    return RunResult(verdict, out, prio), min(vq_bytes + admitted, VQ_CAP_BYTES)


# ----- attach to ports --------------------------------------------------------------------------
@contextmanager
def _in_netns(pid: int | None) -> Iterator[None]:
    if pid is None:
        yield
        return
    from topologies import netns

    with netns.inside(pid):
        yield


def _netns_key(pid: int | None) -> int:
    return os.stat(f"/proc/{pid}/ns/net" if pid is not None else "/proc/thread-self/ns/net").st_ino


def _clsact_devices() -> set[str]:
    out = subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True)
    try:
        return {q["dev"] for q in json.loads(out.stdout or "[]") if q.get("kind") == "clsact"}
    except ValueError:
        return set()


@dataclass
class _Group:
    pid: int | None
    program: Program
    ports: dict[str, int]  # ifname -> ifindex
    own_clsact: set[str]  # clsact qdiscs we added (and so remove)
    specs: dict[str, PortSpec] = field(default_factory=dict)


class DataPlane:
    """The program attached to a set of ports. `detach()` is idempotent."""

    def __init__(self) -> None:
        self._groups: list[_Group] = []
        self._where: dict[str, _Group] = {}

    def _attach_group(self, pid: int | None, specs: list[PortSpec]) -> None:
        program = Program()
        group = _Group(pid, program, {}, set())
        self._groups.append(group)  # before anything can fail: detach() undoes what was done
        with _in_netns(pid):
            existing = _clsact_devices()
            for spec in specs:
                group.ports[spec.ifname] = ifindex = _if_index(spec.ifname)
                group.specs[spec.ifname] = spec
                program.configure(ifindex, spec)
            lines = []
            for spec in specs:
                if spec.ifname not in existing:
                    lines.append(f"qdisc add dev {spec.ifname} clsact")
                    group.own_clsact.add(spec.ifname)
                lines.append(f"filter replace dev {spec.ifname} egress pref {FILTER_PREF} handle 1 "
                             f"bpf da object-pinned {program.prog_path}")
            _tc_batch(lines)
        for spec in specs:
            self._where[spec.ifname] = group

    def counters(self) -> dict[str, dict[str, int]]:
        return {name: g.program.counters(idx) for g in self._groups for name, idx in g.ports.items()}

    def reset(self) -> None:
        """Zero every port's counters and virtual queue (between experiment phases)."""
        for g in self._groups:
            for idx in g.ports.values():
                g.program.reset_counters(idx)
                g.program.set_queue(idx, 0)

    def set_trim(self, enabled: bool) -> None:
        """Switch trimming on or off on every port at once (drop-tail when off), so one
        emulation can compare both; the virtual queues carry on."""
        for g in self._groups:
            for name, idx in g.ports.items():
                spec = g.specs[name] = replace(g.specs[name], trim=enabled)
                g.program.configure(idx, spec)

    def program(self, ifname: str) -> tuple[Program, int]:
        group = self._where[ifname]
        return group.program, group.ports[ifname]

    def detach(self) -> None:
        for g in self._groups:
            try:
                with _in_netns(g.pid):
                    lines = [f"filter del dev {n} egress pref {FILTER_PREF}" for n in g.ports
                             if n not in g.own_clsact]
                    lines += [f"qdisc del dev {n} clsact" for n in sorted(g.own_clsact)]
                    _tc_batch(lines, force=True)  # devices may be gone with their namespace
            except OSError:
                pass  # the namespace's process has exited: its devices went with it
            g.program.close()
        self._groups.clear()
        self._where.clear()

    def __enter__(self) -> DataPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


def _if_index(ifname: str) -> int:
    try:
        return socket.if_nametoindex(ifname)
    except OSError:
        raise RuntimeError(f"no interface {ifname!r} in this namespace") from None


def _tc_batch(lines: list[str], force: bool = False) -> None:
    if not lines:
        return
    cmd = ["tc", "-force", "-batch", "-"] if force else ["tc", "-batch", "-"]
    result = subprocess.run(cmd, input="\n".join(lines) + "\n", text=True, capture_output=True)
    if result.returncode != 0 and not force:
        raise RuntimeError(f"tc -batch failed: {result.stderr.strip()[:400]}")


def attach(ports: list[PortSpec]) -> DataPlane:
    """Load the program (once per namespace), configure every port and attach it at egress.
    All or nothing: on failure whatever was attached is removed and the error raised."""
    reason = available()
    if reason is not None:
        raise RuntimeError(f"eBPF data plane unavailable: {reason}")
    names = [p.ifname for p in ports]
    for spec in ports:
        spec.validate()
    groups: dict[int, list[PortSpec]] = {}
    for spec in ports:
        groups.setdefault(_netns_key(spec.netns_pid), []).append(spec)
    for specs in groups.values():
        keys = [s.ifname for s in specs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"an interface is listed twice: {sorted(names)}")
    dp = DataPlane()
    try:
        for specs in groups.values():
            dp._attach_group(specs[0].netns_pid, specs)
    except BaseException:
        dp.detach()
        raise
    return dp


# ----- can this machine do it? ------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def available() -> str | None:
    """None when the program can be loaded here, else the reason (cached; `available.cache_clear()`
    after a build). Loads it once into a scratch pin to prove the verifier accepts it."""
    if os.geteuid() != 0:
        return "loading eBPF needs root"
    for tool in ("tc", "bpftool"):
        if shutil.which(tool) is None:
            return f"{tool} not found: run `make setup`"
    why = stale()
    if why is not None:
        return f"{why}: run `make setup` (needs clang and libbpf-dev)"
    try:
        Program().close()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"this kernel does not load it: {exc}"
    return None


def cleanup_leftovers() -> int:
    """Remove pins left by processes that died without detach(); their tc filters went with
    the interfaces. Returns how many pin directories were removed."""
    removed = 0
    if not PIN_ROOT.is_dir():
        return 0
    for entry in PIN_ROOT.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "build":
        ok, message = build(force="--force" in argv)
        if ok:
            print(f"setup: data plane: {message}")
        else:
            print(f"setup: warning: eBPF data plane not built ({message}): the emulation falls "
                  f"back to plain HTB queues (no ECN marking, no trimming)")
        return 0  # optional component: setup goes on either way
    if cmd == "cflags":
        print(" ".join(cflags()))
        return 0
    if cmd == "check":
        reason = available()
        print("eBPF data plane: " + ("available" if reason is None else f"unavailable: {reason}"))
        return 0 if reason is None else 1
    print("usage: python -m topologies.dataplane {build [--force] | check | cflags}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
