"""Attaching the program to switch ports: one load per network namespace, a tc filter at
clsact egress on every port, per-port configuration in the maps; counters, trimming on/off,
and a detach that removes exactly what was added. `available()` says whether this machine can
do it at all."""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from topologies import netns
from topologies.dataplane.bpf import Program
from topologies.dataplane.build import stale
from topologies.dataplane.ports import PortSpec, rate_fp, vq_now
from topologies.shaping import tc_batch

FILTER_PREF = 4791  # our tc filter's preference on clsact egress, to delete exactly it


@contextmanager
def _in_netns(pid: int | None) -> Iterator[None]:
    if pid is None:
        yield
        return
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
            tc_batch(lines)
        for spec in specs:
            self._where[spec.ifname] = group

    def counters(self) -> dict[str, dict[str, int]]:
        return {name: g.program.counters(idx) for g in self._groups for name, idx in g.ports.items()}

    def virtual_queues(self) -> dict[str, int]:
        """Every port's virtual backlog (bytes) drained to now: what the next packet's mark,
        trim or drop is decided on (the counters' vq_bytes is as of the last packet). One map
        lookup per port: the drain rate is the port's spec."""
        out: dict[str, int] = {}
        for g in self._groups:
            now = time.monotonic_ns()  # bpf_ktime_get_ns is CLOCK_MONOTONIC
            for name, idx in g.ports.items():
                state = g.program.state.lookup(idx)
                if state is not None:
                    out[name] = vq_now(state[2], state[3], now, rate_fp(g.specs[name].rate_bps))
        return out

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

    def detach(self, remove_filters: bool = True) -> None:
        """Unpin the programs; `remove_filters` False when the ports' namespaces are about to
        go (and their filters with them)."""
        for g in self._groups:
            if not remove_filters:
                g.program.close()
                continue
            try:
                with _in_netns(g.pid):
                    lines = [f"filter del dev {n} egress pref {FILTER_PREF}" for n in g.ports
                             if n not in g.own_clsact]
                    lines += [f"qdisc del dev {n} clsact" for n in sorted(g.own_clsact)]
                    tc_batch(lines, force=True)  # devices may be gone with their namespace
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


def attach_ports(ports: list[PortSpec]) -> DataPlane:
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
        # One load (a verifier run) and one tc batch per namespace, several namespaces at once:
        # the work is in bpftool, tc and the kernel, so threads use every core.
        with ThreadPoolExecutor(max_workers=4) as pool:
            for done in [pool.submit(dp._attach_group, specs[0].netns_pid, specs)
                         for specs in groups.values()]:
                done.result()
    except BaseException:
        dp.detach()
        raise
    return dp


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
