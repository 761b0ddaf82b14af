"""The hosts' MRC encapsulation (mrc_encap.bpf.c): one load per emulation, pinned in a private
directory under the run's pin root (so `topologies/cleanup.py` finds it if the run is killed),
its map (inner source, inner destination, EV) -> uSID carrier filled from the fabric model
before any host sends. Hosts attach it with one route per plane (`route_encap`).

The map holds every path of every host pair (`path_entries`): nothing depends on when QPs
open, and it is the data the model already produces (`Route.src_addr`, `Route.dst_addr`,
`Route.ev`, `Route.address`). It is made at that size before the program is loaded
(bpf.SizedMap): with the object's ceiling (4M entries) its buckets alone took 64 MB, and each
packet's lookup cost about four times a switch port's (perf, the default permutation).
Entries go in with BPF_MAP_UPDATE_BATCH (one syscall per thousands) where the kernel has it
(5.6+), one by one otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import struct
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from topologies.dataplane.bpf import (
    BPF_MAP_LOOKUP_ELEM,
    BPF_MAP_UPDATE_ELEM,
    SizedMap,
    _bpf,
    _MapElemAttr,
    _obj_get,
    load_pinned,
)
from topologies.dataplane.build import ENCAP_OBJECT
from topologies.model import Fabric

BPF_MAP_UPDATE_BATCH = 26
BPF_F_NO_PREALLOC = 1  # the C map's flag: entries allocated as they are added
KEY = struct.Struct("=16s16sI")  # struct path_key: inner source, inner destination, EV
CARRIER_BYTES = 16
# Room the program needs in front of the packet for its outer header (iproute2's `headroom`).
OUTER_HEADER = 40
STAT_NAMES = ("encapsulated", "passed", "no_path", "error")  # the C program's enum, in order
BATCH = 4096  # map entries per BPF_MAP_UPDATE_BATCH
# What a kernel without BPF_MAP_UPDATE_BATCH (or without it for this map type) answers.
_NO_BATCH = (errno.EINVAL, errno.EOPNOTSUPP, 524)  # 524: the kernel's ENOTSUPP


class _BatchAttr(ctypes.Structure):
    _fields_ = [("in_batch", ctypes.c_uint64), ("out_batch", ctypes.c_uint64),
                ("keys", ctypes.c_uint64), ("values", ctypes.c_uint64),
                ("count", ctypes.c_uint32), ("map_fd", ctypes.c_uint32),
                ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


Entry = tuple[bytes, bytes, int, bytes]  # (inner source, inner destination, EV, carrier), packed


def path_entries(fabric: Fabric) -> Iterator[Entry]:
    """Every path of every host pair as a map entry."""
    for src, dst in fabric.host_pairs():
        for route in fabric.routes(src, dst):
            yield route.src_addr.packed, route.dst_addr.packed, route.ev, route.address.packed


class HostEncap:
    """The program loaded and pinned, its maps open. `close()` unpins; the kernel frees the
    program once no route holds it (the hosts' routes go with their namespaces)."""

    def __init__(self, capacity: int, obj: Path = ENCAP_OBJECT) -> None:
        """`capacity`: the paths the map will hold (`path_entries`), its size."""
        self.capacity = max(capacity, 1)
        self.pin_dir = load_pinned(obj, "lwt_xmit", "encap", sized=(
            SizedMap("mrc_paths", KEY.size, CARRIER_BYTES, self.capacity, BPF_F_NO_PREALLOC),))
        self.prog_path = self.pin_dir / "prog"
        self._fds: list[int] = []
        self.entries = 0
        try:
            self.paths_fd = _obj_get(self.pin_dir / "mrc_paths")
            self._fds.append(self.paths_fd)
            self.stats_fd = _obj_get(self.pin_dir / "mrc_encap_stats")
            self._fds.append(self.stats_fd)
        except BaseException:
            self.close()
            raise

    def route_encap(self) -> str:
        """What an `ip route` line takes to send through the program."""
        return f"encap bpf xmit pinned {self.prog_path} headroom {OUTER_HEADER}"

    def fill(self, entries: Iterable[Entry]) -> int:
        """Add (or replace) entries; returns how many."""
        added = 0
        chunk: list[Entry] = []
        for entry in entries:
            chunk.append(entry)
            if len(chunk) == BATCH:
                added += self._update(chunk)
                chunk = []
        if chunk:
            added += self._update(chunk)
        self.entries += added
        return added

    def _update(self, chunk: list[Entry]) -> int:
        keys = b"".join(KEY.pack(src, dst, ev) for src, dst, ev, _ in chunk)
        values = b"".join(carrier for *_, carrier in chunk)
        kbuf = ctypes.create_string_buffer(keys, len(keys))
        vbuf = ctypes.create_string_buffer(values, len(values))
        attr = _BatchAttr(keys=ctypes.addressof(kbuf), values=ctypes.addressof(vbuf),
                          count=len(chunk), map_fd=self.paths_fd)
        try:
            _bpf(BPF_MAP_UPDATE_BATCH, attr)
            return len(chunk)
        except OSError as exc:
            if exc.errno not in _NO_BATCH:
                raise
        for i in range(len(chunk)):  # a kernel without batch operations (updates are idempotent)
            key = ctypes.create_string_buffer(keys[i * KEY.size:(i + 1) * KEY.size], KEY.size)
            value = ctypes.create_string_buffer(chunk[i][3], CARRIER_BYTES)
            _bpf(BPF_MAP_UPDATE_ELEM, _MapElemAttr(map_fd=self.paths_fd, key=ctypes.addressof(key),
                                                   value=ctypes.addressof(value)))
        return len(chunk)

    def max_entries(self) -> int:
        """The path map's size as the kernel holds it."""
        shown = subprocess.run(["bpftool", "-j", "map", "show", "pinned", str(self.pin_dir / "mrc_paths")],
                               capture_output=True, text=True, check=True)
        return int(json.loads(shown.stdout)["max_entries"])

    def carrier(self, src: bytes, dst: bytes, ev: int) -> bytes | None:
        """The carrier the program would push for this inner header and mark (None: dropped)."""
        key = ctypes.create_string_buffer(KEY.pack(src, dst, ev), KEY.size)
        value = ctypes.create_string_buffer(CARRIER_BYTES)
        try:
            _bpf(BPF_MAP_LOOKUP_ELEM, _MapElemAttr(map_fd=self.paths_fd, key=ctypes.addressof(key),
                                                   value=ctypes.addressof(value)))
        except FileNotFoundError:
            return None
        return value.raw

    def stats(self) -> dict[str, int]:
        """Packets the program encapsulated, passed (unmarked), dropped for want of a path,
        and failed on, summed over CPUs."""
        ncpu = _possible_cpus()
        out = {}
        for i, name in enumerate(STAT_NAMES):
            key = ctypes.create_string_buffer(struct.pack("=I", i), 4)
            value = ctypes.create_string_buffer(8 * ncpu)
            _bpf(BPF_MAP_LOOKUP_ELEM, _MapElemAttr(map_fd=self.stats_fd, key=ctypes.addressof(key),
                                                   value=ctypes.addressof(value)))
            out[name] = sum(struct.unpack(f"={ncpu}Q", value.raw))
        return out

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        shutil.rmtree(self.pin_dir, ignore_errors=True)

    def __enter__(self) -> HostEncap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _possible_cpus() -> int:
    """Per-CPU map values are sized by the possible CPUs (not the online ones)."""
    try:
        text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    except OSError:
        return os.cpu_count() or 1
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def unavailable() -> str | None:
    """None when the host encapsulation can be loaded here, else why not, naming the fix (the
    kernel's own refusal shows when the first host route is added)."""
    from topologies.dataplane.build import stale

    if os.geteuid() != 0:
        return "loading eBPF needs root"
    if shutil.which("bpftool") is None:
        return "bpftool not found: run `make setup`"
    why = stale()
    if why is not None:
        return f"{why}: run `make setup` (needs clang and libbpf-dev)"
    return None
