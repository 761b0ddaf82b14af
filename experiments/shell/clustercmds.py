"""The console's commands from Mininet's cluster edition (`mininet.examples.clustercli.ClusterCLI`):
`status` (every node's shell still running: a remote router's is an ssh session) and `placement`
(which server runs which node), its own code over this network. Its third, `plot` (the nodes
drawn by placement in a window), is not offered: the session's `plot` has that name, and it
needs a display, networkx and pygraphviz; `placement plot` says so in one line."""

from __future__ import annotations

from typing import Any

from experiments.shell.text import Usage


class ClusterCommands:
    """A mixin of `MrcCli` (whose `mn` is the network)."""

    mn: Any

    def do_status(self, line: str) -> None:
        """status: whether every node's shell still runs (on a split fabric a remote router's
        is its ssh session): Mininet's cluster edition's command."""
        from mininet.examples.clustercli import ClusterCLI

        ClusterCLI.do_status(self, line)

    def do_placement(self, line: str) -> None:
        """placement: the nodes each server runs (`--servers`): Mininet's cluster edition's
        command; without --servers, everything runs here."""
        if line.strip():
            raise Usage("Mininet's placement plot (the cluster edition's `plot`) is not offered: it "
                        "needs a display, networkx and pygraphviz; `placement` lists the same")
        if not hasattr(self.mn, "servers"):
            names = [n.name for n in (*self.mn.hosts, *self.mn.switches)]
            print(f"localhost: {' '.join(names)}")
            return
        from mininet.examples.clustercli import ClusterCLI

        ClusterCLI.do_placement(self, line)
