"""The console's commands from Mininet's cluster edition (`mininet.examples.clustercli.ClusterCLI`):
`status` (every node's shell still running: a remote router's is an ssh session; its own code
misread the head's hosts, below) and `placement` (which server runs which node, its own code
over this network). Its third, `plot` (the nodes
drawn by placement in a window), is not offered: the session's `plot` has that name, and it
needs a display, networkx and pygraphviz; `placement plot` says so in one line."""

from __future__ import annotations

import os
from typing import Any

from mininet.log import output

from experiments.shell.text import Usage


def _exit_code(node: Any) -> int | None:
    """None while `node`'s shell runs, else its launcher's exit status. ClusterCLI's own
    `status` polls the launcher only, and the cluster edition's local nodes (the hosts on the
    head) start their shell through an `mnexec` that forks it off and exits 0: it called every
    such host exited. Here a local node whose launcher is gone is asked by its shell's pid."""
    code = node.shell.poll()
    if code is None or getattr(node, "isRemote", False) or not node.pid:
        return code
    try:
        os.kill(node.pid, 0)
    except ProcessLookupError:
        return code
    return None


class ClusterCommands:
    """A mixin of `MrcCli` (whose `mn` is the network)."""

    mn: Any

    def do_status(self, line: str) -> None:
        """status: whether every node's shell still runs (on a split fabric a remote router's
        is its ssh session): Mininet's cluster edition's command."""
        exited = [(node, code) for node in (*self.mn.hosts, *self.mn.switches)
                  if (code := _exit_code(node)) is not None]
        for node, code in exited:
            output(f"{node} has exited with code {code}\n")
        if not exited:
            output("All nodes are still running.\n")

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
