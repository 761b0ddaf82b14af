"""Attaching the program to switch ports: one load per network namespace (or one for all of
them, when the ports' ifindexes are unique over every namespace, as the kernel-router backend
makes them: the maps are keyed by ifindex), a tc filter at clsact egress on every port,
per-port configuration in the maps; counters, trimming on/off, and a detach that removes
exactly what was added. `available()` says whether this machine can do it at all."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from topologies import netns
from topologies.dataplane.bpf import PIN_ROOT, Program
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
    """Devices of the calling thread's namespace that have a clsact qdisc (netlink, no process:
    asked once per namespace)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        return {names.get(q["index"], "") for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "clsact"}


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

    def _attach_group(self, pid: int | None, specs: list[PortSpec], program: Program,
                      jobs: list[tuple[int | None, list[str], str]]) -> None:
        """Configure `specs` in `program`'s maps; their tc lines go into `jobs` (run later, all
        namespaces side by side)."""
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
        jobs.append((pid, ["tc", "-batch", "-"], "".join(f"{line}\n" for line in lines)))
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

    def record(self) -> dict[str, dict]:
        """Where each port's program is pinned, its ifindex and spec: what `pinned` needs to
        reach them from another process (a JSON-able dict)."""
        return {name: {"pin": str(g.program.pin_dir), "ifindex": idx, "spec": asdict(g.specs[name])}
                for g in self._groups for name, idx in g.ports.items()}

    @classmethod
    def pinned(cls, record: dict[str, dict]) -> DataPlane:
        """The ports of a `record()`, their programs opened from their pins (left attached and
        pinned by `detach()`): the counters, trimming and resets of a data plane another
        process attached."""
        dp = cls()
        programs: dict[str, _Group] = {}
        try:
            for name, entry in record.items():
                group = programs.get(entry["pin"])
                if group is None:
                    program = Program(pinned=Path(entry["pin"]))
                    group = programs[entry["pin"]] = _Group(None, program, {}, set())
                    dp._groups.append(group)
                group.ports[name] = entry["ifindex"]
                group.specs[name] = PortSpec(**entry["spec"])
                dp._where[name] = group
        except BaseException:
            dp.detach(remove_filters=False)
            raise
        return dp

    def program(self, ifname: str) -> tuple[Program, int]:
        group = self._where[ifname]
        return group.program, group.ports[ifname]

    def detach(self, remove_filters: bool = True) -> None:
        """Remove the filters and clsact qdiscs added (`remove_filters=False`: the ports are
        going away with their namespaces, and the filters with them) and unpin the programs."""
        for g in self._groups:
            if not remove_filters:
                continue
            try:
                with _in_netns(g.pid):
                    lines = [f"filter del dev {n} egress pref {FILTER_PREF}" for n in g.ports
                             if n not in g.own_clsact]
                    lines += [f"qdisc del dev {n} clsact" for n in sorted(g.own_clsact)]
                    tc_batch(lines, force=True)  # devices may be gone with their namespace
            except OSError:
                pass  # the namespace's process has exited: its devices went with it
        for program in {id(g.program): g.program for g in self._groups}.values():
            program.close()
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


def attach_ports(ports: list[PortSpec], pin_root: Path = PIN_ROOT) -> DataPlane:
    """Load the program (once per namespace), configure every port and attach it at egress.
    All or nothing: on failure whatever was attached is removed and the error raised.
    `pin_root`: the BPF file system the loads are pinned in (see bpf.load_pinned)."""
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
        # One load for every namespace where no two ports share an ifindex; else one each.
        indexes: list[int] = []
        for specs in groups.values():
            with _in_netns(specs[0].netns_pid):
                indexes += [_if_index(s.ifname) for s in specs]
        unique = len(groups) > 1 and len(set(indexes)) == len(indexes)
        shared = Program(root=pin_root) if unique else None
        jobs: list[tuple[int | None, list[str], str]] = []
        for specs in groups.values():
            dp._attach_group(specs[0].netns_pid, specs, shared or Program(root=pin_root), jobs)
        netns.run_batches(jobs)
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
