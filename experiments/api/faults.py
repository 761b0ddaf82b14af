"""Fault injection on a running emulation, every action time-stamped on CLOCK_MONOTONIC.

* link cut / restore: as a pulled cable (`Emulator.set_link`: the link's upper end down, the
  other losing its carrier); the switches report the ports down and the baseline's routing
  plane reacts after its detection delay. A host link is a host's NIC port on one plane: the
  host's agent sees its NIC lose carrier (port status, endpoints/host/ports.py).
* switch failure: the switch stops forwarding while its ports stay up (`Emulator.set_switch`),
  the failure no port event reveals. The baseline controller is told, as its BFD sessions over
  that switch would tell it, and reacts after the same detection delay.
* lossy link: random drop with probability p on both directions of a link (or one: the egress
  of its end on one switch, as loss on one EV's path), with an nftables netdev egress rule
  (`numgen random`), which works on kernels without netem.
* loss at every NIC (`set_nic_loss`, the MRC paper's Fig. 16): random drop with probability p
  of what every host sends and receives on every plane, by rules on each host link's switch
  port (egress towards the host, ingress from it): the hosts' own stacks stay untouched.
* flapping link: cut and restored on a period, in a background thread, until stopped.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field

from topologies.face import NFT_TABLE, Emulator
from topologies.model import FabricError

LOSS_SCALE = 1_000_000


class FaultError(RuntimeError):
    """A fault could not be injected; the message says why."""


@dataclass
class FaultInjector:
    """Injects faults and keeps the timeline of what it did: {"t" (monotonic), "action",
    "target", details}, in order; `active()` says what is faulted now."""
    em: Emulator
    timeline: list[dict] = field(default_factory=list)
    _lossy: dict[str, float] = field(default_factory=dict)  # link -> drop probability
    _nic_loss: float | None = None  # every host link's drop probability (set_nic_loss)
    _down: set[str] = field(default_factory=set)  # links cut (by hand or by a flapper, now)
    _failed: set[str] = field(default_factory=set)  # switches not forwarding
    _flappers: dict[str, _Flapper] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # flappers run in threads

    def _record(self, action: str, target: str, t: float | None = None, **extra: object) -> float:
        stamp = time.monotonic() if t is None else t
        with self._lock:
            self.timeline.append({"t": stamp, "action": action, "target": target, **extra})
        return stamp

    def active(self) -> dict:
        """What is faulted now: "down_links", "failed_switches" (sorted names), "lossy" (link ->
        drop probability), "nic_loss" (every NIC's, None without), "flapping" (link -> its
        down time, period and flaps so far)."""
        with self._lock:
            return {"down_links": sorted(self._down), "failed_switches": sorted(self._failed),
                    "lossy": dict(self._lossy), "nic_loss": self._nic_loss,
                    "flapping": {n: {"down_s": f.down_s, "period_s": f.period_s, "flaps": f.flaps}
                                 for n, f in self._flappers.items() if f.is_alive()}}

    # ----- links ----------------------------------------------------------------------------
    def cut_link(self, name: str) -> float:
        self._not_flapping(name)
        return self._set_link(name, up=False)

    def restore_link(self, name: str) -> float:
        self._not_flapping(name)
        return self._set_link(name, up=True)

    def _set_link(self, name: str, up: bool) -> float:
        stamp = self._record("restore" if up else "cut", name, self.em.set_link(name, up=up))
        with self._lock:
            (self._down.discard if up else self._down.add)(name)
        return stamp

    def _not_flapping(self, name: str) -> None:
        flapper = self._flappers.get(name)
        if flapper is not None and flapper.is_alive():
            raise FaultError(f"{name} is flapping: stop that first")

    def flap_link(self, name: str, down_s: float = 0.3, period_s: float = 1.0,
                  count: int | None = None) -> None:
        """Cut link `name` for `down_s` every `period_s`, `count` times (until `stop_flapping`
        by default), in the background; every cut and restore goes into the timeline."""
        link = self.em.fabric.link(name)  # FabricError naming the valid forms
        if not 0 < down_s < period_s:
            raise FabricError(f"a flap needs 0 < down time < period, got {down_s} s and {period_s} s")
        if count is not None and count < 1:
            raise FabricError(f"flap count must be 1 or more, got {count}")
        self._not_flapping(link.name)
        flapper = _Flapper(self, link.name, down_s, period_s, count)
        self._flappers[link.name] = flapper
        flapper.start()

    def stop_flapping(self, name: str | None = None) -> None:
        """Stop the flapping of link `name` (every link by default), leaving it up."""
        names = list(self._flappers) if name is None else [name]
        for n in names:
            flapper = self._flappers.pop(n, None)
            if flapper is not None:
                flapper.halt.set()
                flapper.join()

    # ----- switches -------------------------------------------------------------------------
    def fail_switch(self, name: str) -> float:
        return self._set_switch(name, forwarding=False)

    def restore_switch(self, name: str) -> float:
        return self._set_switch(name, forwarding=True)

    def _set_switch(self, name: str, forwarding: bool) -> float:
        try:
            stamp = self._record("restore_switch" if forwarding else "fail_switch", name,
                                 self.em.set_switch(name, forwarding=forwarding))
        except RuntimeError as exc:
            raise FaultError(str(exc)) from None
        with self._lock:
            (self._failed.discard if forwarding else self._failed.add)(name)
        self.em.notify_controller({"cmd": "switch_up" if forwarding else "switch_down", "switch": name})
        return stamp

    # ----- random loss ----------------------------------------------------------------------
    def set_loss(self, name: str, probability: float, from_switch: str | None = None) -> float:
        """Drop with `probability` what link `name` carries, both ways, or only what switch
        `from_switch` (one of its ends) sends into it."""
        if not 0.0 <= probability <= 1.0:
            raise FabricError(f"loss probability must be in [0, 1], got {probability}")
        link = self.em.fabric.link(name)
        if link.kind != "fabric":
            raise FabricError(f"{name} is a host link: random loss applies to T0-T1 links")
        ends = loss_ends(link.a, link.a_ifname, link.b, link.b_ifname, from_switch)
        threshold = round(probability * LOSS_SCALE)
        for ifname in ends:  # each end in its switch's namespace
            chain = f"loss_{ifname.replace('-', '_')}"
            _nft(self._where(ifname), "\n".join([
                f"add table netdev {NFT_TABLE}",
                f"add chain netdev {NFT_TABLE} {chain} "
                f"{{ type filter hook egress device \"{ifname}\" priority 0; policy accept; }}",
                f"flush chain netdev {NFT_TABLE} {chain}",
                f"add rule netdev {NFT_TABLE} {chain} numgen random mod {LOSS_SCALE} < {threshold} "
                f"counter drop"]))
        with self._lock:
            self._lossy[name] = probability
        extra: dict[str, object] = {"probability": probability}
        if from_switch is not None:
            extra["from"] = from_switch
        return self._record("loss", name, None, **extra)

    def set_nic_loss(self, probability: float) -> float:
        """Drop with `probability` what every host's NIC sends and what it receives, on every
        plane: an egress rule (towards the host) and an ingress rule (from it) on each host
        link's leaf port. `clear_nic_loss` (or `clear_loss()`) removes them."""
        if not 0.0 <= probability <= 1.0:
            raise FabricError(f"loss probability must be in [0, 1], got {probability}")
        threshold = round(probability * LOSS_SCALE)
        for link in self._host_links():
            ifname = link.b_ifname  # the leaf's end (`a` is the host)
            script = [f"add table netdev {NFT_TABLE}"]
            for hook, chain in (("egress", _chain(ifname)), ("ingress", _chain(ifname, "in"))):
                script += [f"add chain netdev {NFT_TABLE} {chain} {{ type filter hook {hook} device "
                           f"\"{ifname}\" priority 0; policy accept; }}",
                           f"flush chain netdev {NFT_TABLE} {chain}",
                           f"add rule netdev {NFT_TABLE} {chain} numgen random mod {LOSS_SCALE} < "
                           f"{threshold} counter drop"]
            _nft(self._where(ifname), "\n".join(script))
        with self._lock:
            self._nic_loss = probability
        return self._record("nic_loss", "every host link", None, probability=probability)

    def clear_nic_loss(self) -> None:
        """Remove every NIC's loss rules; the timeline records how many packets they dropped."""
        if self._nic_loss is None:
            return
        counts = self.loss_counters()
        dropped = 0
        for link in self._host_links():
            ifname = link.b_ifname
            for chain in (_chain(ifname), _chain(ifname, "in")):
                dropped += counts.get(chain.removeprefix("loss_"), 0)
                _nft(self._where(ifname), f"delete chain netdev {NFT_TABLE} {chain}", check=False)
        with self._lock:
            self._nic_loss = None
        self._record("nic_loss_cleared", "every host link", dropped=dropped)
        if not self._lossy:
            for prefix in self._loss_namespaces():
                _nft(prefix, f"delete table netdev {NFT_TABLE}", check=False)

    def clear_loss(self, name: str | None = None) -> None:
        """Remove the loss rules of link `name` (all by default); the timeline records what
        each rule dropped."""
        if name is None:
            self.clear_nic_loss()
        names = sorted(self._lossy) if name is None else [self.em.fabric.link(name).name]
        counts = self.loss_counters() if names else {}
        for n in names:
            link = self.em.fabric.link(n)
            for ifname in (link.a_ifname, link.b_ifname):
                _nft(self._where(ifname), f"delete chain netdev {NFT_TABLE} "
                     f"loss_{ifname.replace('-', '_')}", check=False)
            with self._lock:
                self._lossy.pop(n, None)
            ifnames = [ifname.replace("-", "_") for ifname in (link.a_ifname, link.b_ifname)]
            self._record("loss_cleared", n, dropped={i: counts[i] for i in ifnames if i in counts})
        if not self._lossy and self._nic_loss is None:
            for prefix in self._loss_namespaces():
                _nft(prefix, f"delete table netdev {NFT_TABLE}", check=False)

    def _host_links(self) -> list:
        return [link for link in self.em.fabric.links if link.kind == "host"]

    def _where(self, ifname: str) -> tuple[str, ...]:
        """The argv prefix that runs a command where switch port `ifname` lives (its
        namespace; on a split fabric, on its server)."""
        return tuple(self.em.port_command(ifname))

    def _loss_namespaces(self) -> set[tuple[str, ...]]:
        """Every namespace that holds a fabric link's switch port (where loss rules may be)."""
        return {self._where(ifname) for link in self.em.fabric.fabric_links()
                for ifname in (link.a_ifname, link.b_ifname)}

    def loss_counters(self) -> dict[str, int]:
        """Packets the loss rules dropped, per interface."""
        counts, chain = {}, None
        for prefix in self._loss_namespaces():
            argv = [*prefix, "nft", "list", "table", "netdev", NFT_TABLE]
            out = subprocess.run(argv, capture_output=True, text=True).stdout
            for line in out.splitlines():
                line = line.strip()
                if line.startswith("chain "):
                    chain = line.split()[1]
                elif "counter packets" in line and chain:
                    counts[chain.removeprefix("loss_")] = int(line.split("counter packets")[1].split()[0])
        return counts

    def close(self) -> None:
        """Stop every flapper and remove every loss rule (cuts and switch failures go with the
        emulation)."""
        self.stop_flapping()
        self.clear_loss()


class _Flapper(threading.Thread):
    """One link's flapping: cut, `down_s` later restore, every `period_s` from the first cut."""

    def __init__(self, injector: FaultInjector, name: str, down_s: float, period_s: float,
                 count: int | None) -> None:
        super().__init__(name=f"flap-{name}", daemon=True)
        self.injector, self.link, self.down_s, self.period_s = injector, name, down_s, period_s
        self.count, self.flaps = count, 0
        self.halt = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        start = time.monotonic()
        try:
            while not self.halt.is_set() and (self.count is None or self.flaps < self.count):
                self.injector._set_link(self.link, up=False)
                self.halt.wait(self.down_s)
                self.injector._set_link(self.link, up=True)
                self.flaps += 1
                self.halt.wait(max(start + self.flaps * self.period_s - time.monotonic(), 0.0))
        except Exception as exc:  # noqa: BLE001 - the emulation went away under it: say so, end
            self.error = exc


def loss_ends(a: str, a_ifname: str, b: str, b_ifname: str, from_switch: str | None) -> tuple[str, ...]:
    """The switch ports whose egress drops: both ends of link a-b, or `from_switch`'s only.

    >>> loss_ends("p0l0", "p0l0-eth2", "p0s1", "p0s1-eth1", "p0l0")
    ('p0l0-eth2',)
    """
    if from_switch is None:
        return a_ifname, b_ifname
    if from_switch not in (a, b):
        raise FabricError(f"{from_switch} is not an end of link {a}-{b}: loss one way is sent by {a} or {b}")
    return (a_ifname,) if from_switch == a else (b_ifname,)


def _chain(ifname: str, suffix: str = "") -> str:
    """The nftables chain of a loss rule on port `ifname` (`suffix` "in": its ingress one).

    >>> _chain("p0l0-eth1", "in")
    'loss_p0l0_eth1_in'
    """
    return f"loss_{ifname.replace('-', '_')}{'_' + suffix if suffix else ''}"


def _nft(prefix: tuple[str, ...], script: str, check: bool = True) -> None:
    """`nft -f -` with `script`, run after `prefix` (Emulator.port_command: where a port is)."""
    result = subprocess.run([*prefix, "nft", "-f", "-"], input=script, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise FaultError(f"nftables refused the loss rule: {result.stderr.strip()[:300]} "
                         f"(needs a kernel with netdev egress hooks, 5.16 or newer)")
