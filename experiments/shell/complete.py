"""Tab completion for the console's MRC commands (experiments/shell/console.py): host,
switch, link, flow and capture-target names where each command takes them."""

from __future__ import annotations

from collections.abc import Callable

from experiments.analysis.transports import TRANSPORTS
from experiments.api.flows import AgentFlow
from experiments.api.testbed import Testbed
from topologies.model import Fabric


class Completion:
    """A mixin of `MrcCli`: `complete_COMMAND` for each MRC command (the `cmd` module's way)."""

    bed: Testbed
    fabric: Fabric
    hosts: list[str]
    switches: list[str]
    links: list[str]
    ended: dict[int, str]

    def _open_agent_flows(self) -> list[AgentFlow]:
        return [f for f in self.bed.flows if isinstance(f, AgentFlow) and not f.closed]

    def _complete(self, line: str, begidx: int, text: str, *positions: Callable[[], list[str]],
                  extra: Callable[[], list[str]] | None = None) -> list[str]:
        index = len(line[:begidx].split()) - 1  # which argument is being typed
        choices = positions[index]() if index < len(positions) else (extra() if extra else [])
        return [c for c in choices if c.startswith(text)]

    def complete_paths(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: self.hosts, lambda: self.hosts)

    def complete_send(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        words = line[:begidx].split()
        if words and words[-1] in ("--transport", "-t"):
            return [t for t in TRANSPORTS if t.startswith(text)]
        return self._complete(line, begidx, text, lambda: self.hosts, lambda: self.hosts,
                              lambda: ["1M", "20M", "200M"],
                              extra=lambda: ["--transport", "--background", "--param"])

    def complete_evs(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: self.hosts,
                              lambda: [str(f.number) for f in self._open_agent_flows()])

    def complete_stop(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: ["all"] + [
            str(f.number) for f in self.bed.flows if f.number not in self.ended])

    def complete_cut(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: self.links)

    complete_restore = complete_loss = complete_cut

    def complete_flap(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: ["stop"] + self.links, lambda: ["stop"])

    def complete_fail(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self._complete(line, begidx, text, lambda: self.switches)

    complete_recover = complete_fail

    def complete_capture(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        def targets() -> list[str]:
            nics = [n.ifname for h in self.fabric.hosts for n in h.nics]
            ports = sorted({link.b_ifname for link in self.fabric.links} |
                           {link.a_ifname for link in self.fabric.links if link.kind == "fabric"})
            return ["stop"] + self.hosts + nics + ports
        return self._complete(line, begidx, text, targets)

    def complete_link(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        nodes = lambda: self.hosts + self.switches  # noqa: E731
        return self._complete(line, begidx, text, nodes, nodes, lambda: ["up", "down"])
