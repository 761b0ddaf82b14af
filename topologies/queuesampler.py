"""Queue occupancy sampled while a run goes on: every switch egress port and every host NIC.

Switch ports, every `switch_interval`: the real queue (the HTB root qdisc's packets and bytes,
one rtnetlink dump per namespace holding switch ports) and, with the eBPF data plane, the
program's virtual queue drained to the sampling instant (what ECN marks and trims are decided
on). Host NICs, every `host_interval`: each NIC's root qdisc (HTB at the link rate), a queue no
switch marks but every RTT sample includes. Lines of JSON, appended while `active` is set:

    switch-queues.jsonl  {"t": monotonic s, "ports": {ifname: [packets, bytes, vq bytes|null]}}
    host-queues.jsonl    {"t": monotonic s, "hosts": {host: {plane: [packets, bytes, drops]}}}

The defaults (50 ms, 20 ms) are the periods at which sampling did not show in the CPU of a
saturated 2-core VM (at 20 / 10 ms it did); `cost()` reports what it took (thread CPU time),
so each run records the sampler's own load.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any

from endpoints.host.qdisc import QdiscReader
from topologies import netns

SWITCH_INTERVAL_S = 0.05
HOST_INTERVAL_S = 0.02


class _Namespace:
    """One netlink socket inside a namespace, and the interfaces of interest there by index."""

    def __init__(self, pid: int | None, names: dict[str, Any]) -> None:
        self.names: dict[int, Any] = {}
        with netns.inside(pid) if pid is not None else nullcontext():
            self.reader = QdiscReader()
            for ifname, key in names.items():
                try:
                    self.names[socket.if_nametoindex(ifname)] = key
                except OSError:
                    pass  # not there (yet): it is simply not sampled

    def read(self) -> dict[Any, list[int]]:
        return {self.names[q.ifindex]: [q.qlen, q.backlog, q.drops]
                for q in self.reader.read(roots_only=True) if q.ifindex in self.names}


class QueueSampler:
    """Samples `em`'s switch ports and host NICs into `folder` from a thread of this process.
    Start with `start()` (or as a context manager); nothing is written unless `active` is set."""

    def __init__(self, em: Any, folder: Path, switch_interval: float = SWITCH_INTERVAL_S,
                 host_interval: float | None = HOST_INTERVAL_S) -> None:
        """`host_interval` None: no host NIC samples (when the agents trace their own)."""
        self.em, self.folder = em, folder
        self.switch_interval, self.host_interval = switch_interval, host_interval
        self.active = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._switch_ns: list[_Namespace] = []
        self._host_ns: dict[str, _Namespace] = {}
        self._cpu = {"switch": 0.0, "host": 0.0}
        self._samples = {"switch": 0, "host": 0}
        self._wall: dict[str, list[float]] = {"switch": [], "host": []}
        self._late: list[float] = []
        self._errors = 0

    def start(self) -> QueueSampler:
        by_ns: dict[int | None, dict[str, Any]] = {}
        for spec in self.em.switch_port_specs():
            by_ns.setdefault(spec.netns_pid, {})[spec.ifname] = spec.ifname
        try:
            self._switch_ns = [_Namespace(pid, names) for pid, names in by_ns.items()]
            for host in self.em.fabric.hosts if self.host_interval is not None else ():
                self._host_ns[host.name] = _Namespace(
                    self.em.pid(host.name), {nic.ifname: str(nic.plane) for nic in host.nics})
        except BaseException:
            self._close_readers()
            raise
        self._thread = threading.Thread(target=self._run, name="queue-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and close the sockets (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._close_readers()

    def __enter__(self) -> QueueSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_readers(self) -> None:
        for ns in [*self._switch_ns, *self._host_ns.values()]:
            ns.reader.close()
        self._switch_ns, self._host_ns = [], {}

    # ----- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        with open(self.folder / "switch-queues.jsonl", "a") as sw, \
                open(self.folder / "host-queues.jsonl", "a") as hs:
            host_interval = self.host_interval or float("inf")
            next_switch = time.monotonic()
            next_host = next_switch + host_interval
            while True:
                due = min(next_switch, next_host)
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                now = time.monotonic()
                if not self.active.is_set():  # look again soon: sample as soon as a run starts
                    next_switch, next_host = now + self.switch_interval, now + host_interval
                    continue
                self._late.append(now - due)
                if now >= next_host:
                    next_host = max(next_host + host_interval, now)
                    self._sample("host", hs, self._hosts)
                if now >= next_switch:
                    next_switch = max(next_switch + self.switch_interval, now)
                    self._sample("switch", sw, self._switches)

    def _sample(self, kind: str, out: IO[str], read: Any) -> None:
        # A sample's time lies between two moments `active` was set: within the window the
        # runner records around it (summary traces.sampling), however late this thread runs.
        if not self.active.is_set():
            return
        cpu, wall = time.thread_time(), time.monotonic()
        if not self.active.is_set():
            return
        try:
            line = read(wall)
        except OSError:
            self._errors += 1
            return
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._cpu[kind] += time.thread_time() - cpu
        self._wall[kind].append(time.monotonic() - wall)
        self._samples[kind] += 1

    def _switches(self, t: float) -> dict:
        ports: dict[str, list] = {}
        for ns in self._switch_ns:
            for name, (qlen, backlog, _drops) in ns.read().items():
                ports[name] = [qlen, backlog, None]
        dp = self.em.dataplane
        if dp is not None:
            for name, vq in dp.virtual_queues().items():
                ports.setdefault(name, [0, 0, None])[2] = vq
        return {"t": round(t, 4), "ports": ports}

    def _hosts(self, t: float) -> dict:
        return {"t": round(t, 4), "hosts": {host: ns.read() for host, ns in self._host_ns.items()}}

    # ----- what it cost ------------------------------------------------------------------------
    def cost(self, seconds: float | None = None) -> dict:
        """The sampler's own load: samples taken, CPU time of its thread, milliseconds per
        sample (median, 99th percentile) and, over `seconds` of sampling, its share of a core."""
        out: dict[str, Any] = {"switch_interval_s": self.switch_interval,
                               "host_interval_s": self.host_interval, "errors": self._errors}
        for kind in ("switch", "host"):
            wall = sorted(self._wall[kind])
            out[kind] = {"samples": self._samples[kind], "cpu_s": round(self._cpu[kind], 4),
                         "ms_p50": round(wall[len(wall) // 2] * 1e3, 3) if wall else None,
                         "ms_p99": round(wall[int(len(wall) * 0.99)] * 1e3, 3) if wall else None}
        cpu = self._cpu["switch"] + self._cpu["host"]
        out["cpu_s"] = round(cpu, 4)
        if seconds:
            out["core_share_pct"] = round(100 * cpu / seconds, 2)
        late = sorted(self._late)
        out["late_ms_p99"] = round(late[int(len(late) * 0.99)] * 1e3, 2) if late else None
        return out
