"""Packet captures: tcpdump writing a pcap, run in the network namespace of whatever owns the
interface (a host, or the switch side of a link), so Wireshark can read the fabric's traffic.

Targets: a host (`h1`: every NIC of it, Linux "any" capture), a host NIC (`h1-eth0`), or a switch
port (`p0l0-eth3`, the switch's end of a link). The capture is packet-buffered (`-U`), so the file
is readable while it grows; `stop()` ends it and returns the packet count tcpdump reports.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from topologies.face import Emulator
from topologies.model import Fabric, FabricError

START_TIMEOUT_S = 5.0  # tcpdump says "listening on" once the socket is open


def resolve(fabric: Fabric, target: str) -> tuple[str, str]:
    """(node whose namespace holds it, interface name or "any") for a capture target."""
    if target in {h.name for h in fabric.hosts}:
        return target, "any"
    for host in fabric.hosts:
        for nic in host.nics:
            if nic.ifname == target:
                return host.name, target
    for link in fabric.links:
        if link.b_ifname == target:
            return link.b, target
        if link.kind == "fabric" and link.a_ifname == target:
            return link.a, target
    raise FabricError(f"cannot capture {target!r}: name a host (h1), a host NIC (h1-eth0) or a "
                      f"switch port (p0l0-eth3)")


class Capture:
    """One running tcpdump; `snaplen` 0 keeps whole packets."""

    def __init__(self, em: Emulator, target: str, path: Path, snaplen: int, workdir: Path) -> None:
        self.em, self.target, self.path = em, target, Path(path).resolve()
        self.node, self.ifname = resolve(em.fabric, target)
        if isinstance(snaplen, bool) or not isinstance(snaplen, int) or snaplen < 0:
            raise FabricError(f"snaplen must be a whole number >= 0, got {snaplen!r}")
        self.snaplen = snaplen
        self.log = workdir / f"capture-{target}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen | None = None
        self.packets: int | None = None  # tcpdump's count, once stopped

    def start(self) -> None:
        if shutil.which("tcpdump") is None:
            raise FabricError("tcpdump is not installed: run `make setup` (or apt-get install tcpdump)")
        if not self.path.parent.is_dir():
            raise FabricError(f"cannot write {self.path}: {self.path.parent} is not a folder")
        # -Z root: stay root (tcpdump would drop to its own user); -U: every packet reaches the
        # file as it is captured.
        # The pcap comes on stdout, written here: the same for a switch port on another server
        # (tcpdump runs there, over ssh: topologies/cluster.py) as for a local one.
        argv = ["tcpdump", "-i", self.ifname, "-w", "-", "-U", "-n", "-Z", "root",
                "-s", str(self.snaplen)]
        with open(self.log, "w") as log, open(self.path, "wb") as pcap:
            self.proc = self.em.popen(self.node, argv, stdout=pcap, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "listening on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise FabricError(f"tcpdump did not start on {self.target}: "
                                  f"{self.log.read_text().strip()[-300:]}")
            time.sleep(0.02)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """End the capture (idempotent); the packets tcpdump wrote, if it said."""
        if self.proc is None:
            return self.packets
        if self.proc.poll() is None:
            if self.proc.stdin is not None:  # a remote one: it ends when its stdin closes
                self.proc.stdin.close()
            else:
                self.proc.send_signal(signal.SIGINT)  # tcpdump flushes the file and prints its counts
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        found = re.search(r"(\d+) packets? captured", self.log.read_text())
        self.packets = int(found.group(1)) if found else None
        return self.packets
