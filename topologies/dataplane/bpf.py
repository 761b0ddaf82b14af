"""The kernel side of the data plane through bpf(2) and bpftool: loading and pinning the
program, its three maps (per-port config, queue state, counters) and test runs of single
frames (BPF_PROG_TEST_RUN). ctypes only: no libbpf binding is needed for this much."""

from __future__ import annotations

import ctypes
import itertools
import os
import platform
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from topologies.dataplane.build import OBJECT
from topologies.dataplane.ports import RATE_SHIFT, PortSpec
from topologies.dataplane.reference import RunResult

BPFFS = Path("/sys/fs/bpf")
PIN_ROOT = BPFFS / "mrclab"

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


# Value layouts of the C structs port_cfg, port_state (lock, pad, vq_fp, last_ns, ctl_tokens_fp,
# ctl_last_ns), port_counters.
CFG_FMT = "=QIIIIQII"
STATE_FMT = "=IIQQQQ"
COUNTER_NAMES = ("packets", "bytes", "marked", "trimmed", "dropped", "control", "vq_max",
                 "other_packets", "other_bytes", "demoted")
COUNTERS_FMT = "=" + "Q" * len(COUNTER_NAMES)
FROZEN = (1 << 64) - 1  # last_ns in the future: the vq stops draining (deterministic tests)
_SKB_CTX = 192  # sizeof(struct __sk_buff); mark at 8, priority at 32, ifindex at 40


def _ensure_bpffs() -> None:
    with open("/proc/mounts") as mounts:
        if any(line.split()[1:3] == [str(BPFFS), "bpf"] for line in mounts):
            return
    subprocess.run(["mount", "-t", "bpf", "bpf", str(BPFFS)], check=True, capture_output=True)


_seq = itertools.count()


@dataclass(frozen=True)
class SizedMap:
    """A hash map of the object's made by the loader at the size a run needs, for the program to
    use in place of the object's own (whose `max_entries` is only a ceiling): a hash map's
    buckets follow max_entries, allocated or not, so a ceiling of millions is tens of MB of
    buckets that every lookup reaches into at random. Its shape must be the object's."""
    name: str
    key_bytes: int
    value_bytes: int
    entries: int
    flags: int = 0  # BPF_F_NO_PREALLOC is 1

    def create_argv(self, path: str) -> list[str]:
        return ["bpftool", "map", "create", path, "type", "hash", "key", str(self.key_bytes),
                "value", str(self.value_bytes), "entries", str(max(self.entries, 1)),
                "name", self.name, "flags", str(self.flags)]


def load_pinned(obj: Path, prog_type: str, tag: str = "", root: Path = PIN_ROOT,
                sized: tuple[SizedMap, ...] = ()) -> Path:
    """A new pin directory of this process, `root/<pid>-<tag><n>` (the clean-up removes
    those of dead processes under PIN_ROOT by that pid; another `root` is a BPF file system
    its owner removes), with `obj` loaded by bpftool into it: the program pinned as `prog`, its
    maps beside it under their own names (each of `sized` made first, pinned also as
    `sized_NAME`). RuntimeError with bpftool's words if the kernel refuses it, the directory
    removed."""
    if root == PIN_ROOT:
        _ensure_bpffs()
    pin_dir = root / f"{os.getpid()}-{tag}{next(_seq)}"
    pin_dir.mkdir(parents=True, exist_ok=True)
    # Paths relative to `root`: libbpf turns every "." of a map's pin path into "_" (a split
    # fabric's server folder holds its dotted address), the name here has none.
    made = {m.name: f"{pin_dir.name}/sized_{m.name}" for m in sized}
    steps = [m.create_argv(made[m.name]) for m in sized]
    steps.append(["bpftool", "prog", "load", str(obj.resolve()), f"{pin_dir.name}/prog",
                  "type", prog_type,
                  *[w for name, path in made.items() for w in ("map", "name", name, "pinned", path)],
                  "pinmaps", pin_dir.name])
    for argv in steps:
        result = subprocess.run(argv, capture_output=True, text=True, cwd=root)
        if result.returncode != 0:
            shutil.rmtree(pin_dir, ignore_errors=True)
            raise RuntimeError(f"bpftool {argv[1]} {argv[2]} of {obj.name} failed: "
                               f"{result.stderr.strip()[-800:]}")
    return pin_dir


class Program:
    """One load of the object: the program and its three maps, pinned in a private directory.
    Ports are keyed by ifindex, so every port attached to one Program must share a namespace.
    `pinned`: open a load that is already pinned there (another process's, e.g. a split
    fabric's server reading the program its attach left), which `close()` leaves pinned."""

    def __init__(self, obj: Path = OBJECT, root: Path = PIN_ROOT, pinned: Path | None = None) -> None:
        self._owned = pinned is None
        self.pin_dir = load_pinned(obj, "classifier", root=root) if pinned is None else pinned
        self.prog_path = self.pin_dir / "prog"
        self._maps: list[_Map] = []
        self.prog_fd = -1
        try:
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
        # An empty queue and a full control budget, refilling from now.
        self.state.update(ifindex, 0, 0, 0, 0, spec.control_burst_bytes << RATE_SHIFT,
                          time.monotonic_ns())
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
        """Set a port's virtual backlog; `frozen` stops it draining (for deterministic tests).
        The control budget is left as it is."""
        last = FROZEN if frozen else time.monotonic_ns()  # bpf_ktime_get_ns is CLOCK_MONOTONIC
        old = self.state.lookup(ifindex) or (0, 0, 0, 0, 0, time.monotonic_ns())
        self.state.update(ifindex, 0, 0, vq_bytes << RATE_SHIFT, last, old[4], old[5])

    def set_control_budget(self, ifindex: int, tokens_bytes: int, frozen: bool = False) -> None:
        """Set a port's control budget; `frozen` stops it refilling (for deterministic tests)."""
        last = FROZEN if frozen else time.monotonic_ns()
        old = self.state.lookup(ifindex) or (0, 0, 0, time.monotonic_ns(), 0, 0)
        self.state.update(ifindex, 0, 0, old[2], old[3], tokens_bytes << RATE_SHIFT, last)

    def reset_counters(self, ifindex: int) -> None:
        self.ctr.update(ifindex, *([0] * len(COUNTER_NAMES)))

    def run(self, frame: bytes, ifindex: int = 1, mark: int = 0) -> RunResult:
        """Run one frame through the program in the kernel (BPF_PROG_TEST_RUN) as if sent on
        `ifindex` of this namespace (1, loopback, needs no device) with skb->mark `mark`. A
        redirect is only reported (TC_ACT_REDIRECT), not carried out."""
        data_in = ctypes.create_string_buffer(bytes(frame), len(frame))
        data_out = ctypes.create_string_buffer(len(frame) + 256)
        ctx = bytearray(_SKB_CTX)
        struct.pack_into("=I", ctx, 8, mark)
        struct.pack_into("=I", ctx, 40, ifindex)
        ctx_in = ctypes.create_string_buffer(bytes(ctx), _SKB_CTX)
        ctx_out = ctypes.create_string_buffer(_SKB_CTX)
        attr = _TestRunAttr(prog_fd=self.prog_fd, data_size_in=len(frame),
                            data_size_out=len(data_out), data_in=_addr(data_in),
                            data_out=_addr(data_out), repeat=1, ctx_size_in=_SKB_CTX,
                            ctx_size_out=_SKB_CTX, ctx_in=_addr(ctx_in), ctx_out=_addr(ctx_out))
        _bpf(BPF_PROG_TEST_RUN, attr)
        mark_out, = struct.unpack_from("=I", ctx_out.raw, 8)
        priority, = struct.unpack_from("=I", ctx_out.raw, 32)
        return RunResult(attr.retval, data_out.raw[:attr.data_size_out], priority, mark_out)

    def close(self) -> None:
        """Close, and unpin a load of its own: the kernel frees the program once no pin and no
        tc filter holds it."""
        for m in self._maps:
            m.close()
        self._maps.clear()
        if self.prog_fd >= 0:
            os.close(self.prog_fd)
            self.prog_fd = -1
        if self._owned:
            shutil.rmtree(self.pin_dir, ignore_errors=True)


