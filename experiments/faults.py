"""Fault injection on a running emulation, every action time-stamped on CLOCK_MONOTONIC.

* link cut / restore: both ends of the veth pair down / up, as a pulled cable; OVS reports the
  ports down and the baseline's routing plane reacts after its detection delay.
* switch failure: the switch stops forwarding while its ports stay up (`Emulation.set_switch`),
  the failure no port event reveals. The baseline controller is told, as its BFD sessions over
  that switch would tell it, and reacts after the same detection delay.
* lossy link: random drop with probability p on both directions of a link, with an nftables
  netdev egress rule (`numgen random`), which works on kernels without netem.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

from topologies.emulation import Emulation
from topologies.model import FabricError

NFT_TABLE = "mrclab_faults"
LOSS_SCALE = 1_000_000


class FaultError(RuntimeError):
    """A fault could not be injected; the message says why."""


@dataclass
class FaultInjector:
    """Injects faults and keeps the timeline of what it did: {"t" (monotonic), "action",
    "target", details}, in order."""
    em: Emulation
    timeline: list[dict] = field(default_factory=list)
    _lossy: set[str] = field(default_factory=set)

    def _record(self, action: str, target: str, t: float | None = None, **extra: object) -> float:
        stamp = time.monotonic() if t is None else t
        self.timeline.append({"t": stamp, "action": action, "target": target, **extra})
        return stamp

    # ----- links ----------------------------------------------------------------------------
    def cut_link(self, name: str) -> float:
        return self._record("cut", name, self.em.set_link(name, up=False))

    def restore_link(self, name: str) -> float:
        return self._record("restore", name, self.em.set_link(name, up=True))

    # ----- switches -------------------------------------------------------------------------
    def fail_switch(self, name: str) -> float:
        try:
            stamp = self._record("fail_switch", name, self.em.set_switch(name, forwarding=False))
        except RuntimeError as exc:
            raise FaultError(str(exc)) from None
        self.em.notify_controller({"cmd": "switch_down", "switch": name})
        return stamp

    def restore_switch(self, name: str) -> float:
        try:
            stamp = self._record("restore_switch", name, self.em.set_switch(name, forwarding=True))
        except RuntimeError as exc:
            raise FaultError(str(exc)) from None
        self.em.notify_controller({"cmd": "switch_up", "switch": name})
        return stamp

    # ----- random loss ----------------------------------------------------------------------
    def set_loss(self, name: str, probability: float) -> float:
        if not 0.0 <= probability <= 1.0:
            raise FabricError(f"loss probability must be in [0, 1], got {probability}")
        link = self.em.fabric.link(name)
        if link.kind != "fabric":
            raise FabricError(f"{name} is a host link: random loss applies to T0-T1 links")
        threshold = round(probability * LOSS_SCALE)
        rules = [f"add table netdev {NFT_TABLE}"]
        for ifname in (link.a_ifname, link.b_ifname):
            chain = f"loss_{ifname.replace('-', '_')}"
            rules += [
                f"add chain netdev {NFT_TABLE} {chain} "
                f"{{ type filter hook egress device \"{ifname}\" priority 0; policy accept; }}",
                f"flush chain netdev {NFT_TABLE} {chain}",
                f"add rule netdev {NFT_TABLE} {chain} numgen random mod {LOSS_SCALE} < {threshold} "
                f"counter drop",
            ]
        _nft("\n".join(rules))
        self._lossy.add(name)
        return self._record("loss", name, probability=probability)

    def clear_loss(self, name: str | None = None) -> None:
        """Remove the loss rules of link `name` (all by default); the timeline records what
        each rule dropped."""
        names = sorted(self._lossy) if name is None else [name]
        counts = self.loss_counters() if names else {}
        for n in names:
            link = self.em.fabric.link(n)
            ifnames = [ifname.replace("-", "_") for ifname in (link.a_ifname, link.b_ifname)]
            for ifname in ifnames:
                _nft(f"delete chain netdev {NFT_TABLE} loss_{ifname}", check=False)
            self._lossy.discard(n)
            self._record("loss_cleared", n, dropped={i: counts[i] for i in ifnames if i in counts})
        if not self._lossy:
            _nft(f"delete table netdev {NFT_TABLE}", check=False)

    def loss_counters(self) -> dict[str, int]:
        """Packets the loss rules dropped, per interface."""
        out = subprocess.run(["nft", "list", "table", "netdev", NFT_TABLE], capture_output=True,
                             text=True).stdout
        counts, chain = {}, None
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("chain "):
                chain = line.split()[1]
            elif "counter packets" in line and chain:
                counts[chain.removeprefix("loss_")] = int(line.split("counter packets")[1].split()[0])
        return counts

    def close(self) -> None:
        self.clear_loss()


def _nft(script: str, check: bool = True) -> None:
    result = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise FaultError(f"nftables refused the loss rule: {result.stderr.strip()[:300]} "
                         f"(needs a kernel with netdev egress hooks, 5.16 or newer)")
