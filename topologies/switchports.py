"""A running emulation's switch ports: where each switch-side interface lives (the namespace
its backend keeps it in) and what runs on every switch egress port: HTB at the link rate with
a strict-priority control class, and the ECN-marking / trimming eBPF program where it loads
(topologies/dataplane/), drop-tail FIFOs otherwise.

`SwitchPorts` is a part of `Emulation` (topologies/emulation.py), kept apart by job: it reads
the emulation's fabric, transport parameters and switch backend, declared below, and a split
fabric's emulation (topologies/cluster.py) overrides where the ports are reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace

from endpoints.protocol.config import TransportConfig
from topologies import netns, preflight, shaping
from topologies.dataplane.attach import DataPlane
from topologies.dataplane.ports import PortSpec, switch_ports
from topologies.model import Fabric
from topologies.switches import SwitchBackend


class SwitchPorts:
    """The switch-port half of an `Emulation`."""

    fabric: Fabric
    transport: TransportConfig
    dataplane_mode: str  # auto, ebpf or droptail
    dataplane: DataPlane | None  # when the eBPF program runs
    dataplane_info: dict  # what ran at the switch egress ports, recorded in every summary
    switches: SwitchBackend | None
    timings: dict[str, float]
    _port_owner: dict[str, str]  # switch-side interface -> the switch it belongs to

    @property
    def backend(self) -> SwitchBackend:
        raise NotImplementedError  # the emulation's, once started

    @contextmanager
    def _in_port_namespace(self, pid: int | None) -> Iterator[None]:
        with netns.inside(pid) if pid is not None else nullcontext():
            yield

    def _ports_by_namespace(self, ports: Iterable[str]) -> dict[int | None, list[str]]:
        """Switch-side interfaces grouped by the namespace holding them (a process in it, or
        None for this process's own)."""
        groups: dict[int | None, list[str]] = {}
        for name in ports:
            groups.setdefault(self.port_namespace(name), []).append(name)
        return groups

    def port_command(self, ifname: str) -> list[str]:
        """argv prefix running a command where the switch-side interface `ifname` lives."""
        pid = self.port_namespace(ifname)
        return netns.command(pid, []) if pid is not None else []

    def port_namespace(self, ifname: str) -> int | None:
        """Where the switch-side interface `ifname` lives (see SwitchBackend.port_namespace)."""
        return self.backend.port_namespace(self._port_owner[ifname])

    def _switch_data_plane(self) -> None:
        """Every switch egress port: HTB at the link rate with a strict-priority control class,
        and, where eBPF loads, the ECN-marking / trimming program (topologies/dataplane/);
        drop-tail FIFOs otherwise, said plainly in `dataplane_info`."""
        from topologies import dataplane

        mbps = self.fabric.params.link_mbps
        names = [n for n, _ in self._switch_egress()]
        mtu = self.transport.mtu_payload
        queue = shaping.SWITCH_QUEUE_PACKETS
        reason = dataplane.available() if self.dataplane_mode != "droptail" else "asked for"
        headroom = 1 if reason is not None else 10
        t0 = time.monotonic()
        self._switch_port_batches(names, lambda group: shaping.switch_htb_batch(
            group, mbps, queue, shaping.BURST_BYTES, mtu, fifo_headroom=headroom))
        self.timings["switch_htb"] = time.monotonic() - t0
        if reason is not None:
            if self.dataplane_mode == "ebpf":
                raise preflight.PreflightError(f"the eBPF data plane cannot run here: {reason}")
            why = ("asked for (--dataplane droptail)" if reason == "asked for"
                   else f"eBPF unavailable: {reason}")
            self.dataplane_info = {"mode": "droptail", "reason": why}
            return
        specs = self.switch_port_specs()
        t0 = time.monotonic()
        where = self._attach_dataplane(specs)
        self.timings["switch_ebpf"] = time.monotonic() - t0
        th = specs[0]
        self.dataplane_info = {"mode": "ebpf", "trim": True, "mark_bytes": th.mark_bytes,
                               "trim_bytes": th.trim_bytes, "drop_bytes": th.drop_bytes,
                               "queue_packets": queue, **where}

    def _switch_port_batches(self, names: list[str], script: Callable[[list[str]], str]) -> None:
        """`tc -batch` of `script(ports)` in every namespace holding some of these switch ports."""
        netns.run_batches([(pid, ["tc", "-batch", "-"], script(group))
                           for pid, group in self._ports_by_namespace(names).items()])

    def _attach_dataplane(self, specs: list[PortSpec]) -> dict:
        """The eBPF program on every switch egress port; what the summary adds about where."""
        from topologies import dataplane

        self.dataplane = dataplane.attach_ports(specs)
        return {}

    def _switch_egress(self) -> list[tuple[str, bool]]:
        """(ifname, faces a host) of every switch egress port."""
        ports = []
        for link in self.fabric.links:
            ports.append((link.b_ifname, link.kind == "host"))
            if link.kind == "fabric":
                ports.append((link.a_ifname, False))
        return ports

    def switch_port_specs(self) -> list[PortSpec]:
        """What the eBPF program is told about each switch egress port: the model's ports, the
        link rate, and thresholds from this run's transport parameters (those the agents get);
        once started, each port's namespace."""
        specs = self._port_specs()
        if self.switches is None:
            return specs
        return [replace(spec, netns_pid=self.port_namespace(spec.ifname)) for spec in specs]

    def _port_specs(self) -> list[PortSpec]:
        return switch_ports(self._switch_egress(), self.fabric.params.link_mbps,
                            shaping.SWITCH_QUEUE_PACKETS, self.transport)

    def dataplane_counters(self) -> dict[str, dict[str, int]]:
        """Per-port counters of the eBPF program (empty when it does not run)."""
        return self.dataplane.counters() if self.dataplane is not None else {}

    def set_trimming(self, enabled: bool) -> None:
        if self.dataplane is None:
            raise preflight.PreflightError("trimming needs the eBPF data plane, which is not running "
                                           f"({self.dataplane_info.get('reason', 'drop-tail')})")
        self.dataplane.set_trim(enabled)
        self.dataplane_info["trim"] = enabled

    def _detach_switch_dataplane(self) -> None:
        if self.dataplane is not None:  # before the switches go
            self.dataplane.detach(remove_filters=not (self.switches is not None and
                                                      self.switches.removes_port_namespaces))
