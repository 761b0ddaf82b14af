"""The console's fault commands (experiments/shell/console.py): cut, restore, fail, recover,
loss, flap, faults, and Mininet's `link a b up|down` as a cut or a restore. Each goes through
the Testbed's fault injector, so every fault is in the session's timeline."""

from __future__ import annotations

from collections.abc import Callable

from experiments.api.testbed import Testbed
from experiments.shell.text import Usage, parse_positive, parse_probability
from topologies.model import Fabric


class FaultCommands:
    """A mixin of `MrcCli`: the `do_COMMAND` of each fault command."""

    bed: Testbed
    fabric: Fabric

    # MrcCli's (annotations only: the lookup goes on to MrcCli's own)
    _say: Callable[[str], None]
    _args: Callable[[str, int | tuple[int, ...], str], list[str]]

    # ----- faults --------------------------------------------------------------------------
    def do_cut(self, line: str) -> None:
        """cut LINK: take LINK down at both ends, like a pulled cable (p0l0-p0s1, h0-p0l0).

        A host link (h0-p0l0) is that host's NIC port on one plane: its agent sees the port
        down and MRC peers are told in its SACKs and probes (port status)."""
        (name,) = self._args(line, 1, "cut LINK")
        self.bed.faults.cut_link(self.fabric.link(name).name)
        self._say(f"{name} cut")

    def do_restore(self, line: str) -> None:
        """restore LINK: bring a cut LINK back up."""
        (name,) = self._args(line, 1, "restore LINK")
        self.bed.faults.restore_link(self.fabric.link(name).name)
        self._say(f"{name} restored")

    def do_fail(self, line: str) -> None:
        """fail SWITCH: SWITCH stops forwarding while its ports stay up (no port event shows it)."""
        (name,) = self._args(line, 1, "fail SWITCH")
        self.bed.faults.fail_switch(self.fabric.switch(name).name)
        self._say(f"{name} no longer forwards (its ports stay up)")

    def do_recover(self, line: str) -> None:
        """recover SWITCH: a failed SWITCH forwards again."""
        (name,) = self._args(line, 1, "recover SWITCH")
        self.bed.faults.restore_switch(self.fabric.switch(name).name)
        self._say(f"{name} forwards again")

    def do_loss(self, line: str) -> None:
        """loss LINK P: random drop with probability P (0.2 or 20%) both ways; P 0 removes it.

        LINK is a T0-T1 link (p0l0-p0s1); the drop is an nftables rule on both of its ends."""
        name, text = self._args(line, 2, "loss LINK P")
        link = self.fabric.link(name)
        p = parse_probability(text)
        if p == 0:
            self.bed.faults.clear_loss(link.name)
            self._say(f"{name}: no more random loss")
        else:
            self.bed.faults.set_loss(link.name, p)
            self._say(f"{name} drops {p:.1%} of packets each way")

    def do_flap(self, line: str) -> None:
        """flap LINK [DOWN_MS [PERIOD_MS [COUNT]]] | flap LINK stop | flap stop

        Cut LINK for DOWN_MS (300) every PERIOD_MS (1000), COUNT times (until stopped by
        default), in the background; `flap LINK stop` (or `flap stop` for all) ends it, link up."""
        args = self._args(line, (1, 2, 3, 4), "flap LINK [DOWN_MS [PERIOD_MS [COUNT]]] | flap [LINK] stop")
        if args == ["stop"]:
            self.bed.faults.stop_flapping()
            self._say("no link flaps now")
            return
        name = self.fabric.link(args[0]).name
        if args[1:] == ["stop"]:
            self.bed.faults.stop_flapping(name)
            self._say(f"{name} no longer flaps (up)")
            return
        down = parse_positive(args[1], "down time (ms)") if len(args) > 1 else 300.0
        period = parse_positive(args[2], "period (ms)") if len(args) > 2 else 1000.0
        count = None
        if len(args) > 3:
            if not args[3].isdigit() or int(args[3]) < 1:
                raise Usage(f"bad count {args[3]!r}: a whole number of flaps, 1 or more")
            count = int(args[3])
        self.bed.faults.flap_link(name, down / 1000, period / 1000, count)
        self._say(f"{name} flaps: down {down:g} ms every {period:g} ms"
                  + (f", {count} times" if count else f" until `flap {name} stop`"))

    def do_faults(self, line: str) -> None:
        """faults: what is faulted now (cut links, failed switches, lossy and flapping links)."""
        self._args(line, 0, "faults")
        now = self.bed.faults.active()
        lines = [f"cut: {' '.join(now['down_links'])}" if now["down_links"] else "",
                 f"failed: {' '.join(now['failed_switches'])}" if now["failed_switches"] else "",
                 "lossy: " + " ".join(f"{n} ({p:g})" for n, p in now["lossy"].items())
                 if now["lossy"] else "",
                 "flapping: " + " ".join(f"{n} ({f['down_s'] * 1e3:g}/{f['period_s'] * 1e3:g} ms, "
                                         f"{f['flaps']} so far)" for n, f in now["flapping"].items())
                 if now["flapping"] else ""]
        self._say("\n".join(x for x in lines if x) or "no faults: every link and switch works")

    def do_link(self, line: str) -> None:
        """link NODE1 NODE2 up|down: Mininet's command, as `restore` / `cut` of that link."""
        args = self._args(line, 3, "link NODE1 NODE2 up|down")
        if args[2] not in ("up", "down"):
            raise Usage("link NODE1 NODE2 up|down")
        name = self._link_between(args[0], args[1])
        (self.do_restore if args[2] == "up" else self.do_cut)(name)

    def _link_between(self, a: str, b: str) -> str:
        for link in self.fabric.links:
            if {link.a, link.b} == {a, b}:
                return link.name
        raise Usage(f"no link between {a} and {b} (links are like p0l0-p0s1, h0-p0l0)")
