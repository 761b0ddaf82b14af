"""The host agent: one per emulated host, running MRC (and the RoCE-like go-back-N
baseline) QPs over real sockets around the sans-IO cores.

`python -m endpoints.host.agent --config FILE` inside the host's namespace; with several
`--config` files, whose settings name each host's namespace (`netns`), every host's agent in one
process (endpoints/host/shared.py: the testbed's default, as it costs the machine a third less
per packet). The experiment runner
drives it through a Unix socket speaking JSON lines (endpoints/host/control.py); the commands
are endpoints/host/commands.py, the loop that moves the datagrams endpoints/host/dataloop.py.

Paths come from the fabric model, like everything else, but as data: the testbed computes this
host's path table from the model (topologies/pathtables.py) and hands it over in the settings
(`paths`); the EVs of a QP to peer P are the model's paths from this host to P
(endpoints/host/paths.py). Acknowledgements go back over this host's own paths to the sender.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import socket
import sys
from typing import Any

from endpoints.host import overrides as replacements_from
from endpoints.host import shared
from endpoints.host.commands import AgentCommands
from endpoints.host.control import ControlServer
from endpoints.host.dataloop import DataLoop
from endpoints.host.nsenter import entered
from endpoints.host.paths import PathTable
from endpoints.host.ports import PortWatch
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.replaceable import cores


class Agent:
    """The data loop, its control commands and the host's port watch, wired from the settings."""

    def __init__(self, settings: dict[str, Any]) -> None:
        # Code in the product's place at its named override points, when the run says so
        # (`replace`; endpoints/protocol/replaceable.py): loaded before anything is opened, so
        # a bad file stops the agent with one line and nothing to clean up.
        replacements = replacements_from.from_settings(settings.get("replace"))
        classes = cores(replacements_from.load(replacements))
        self.paths = PathTable(settings["paths"])
        self.name = self.paths.name
        overrides = dict(settings.get("transport", {}))
        # What follows from the fabric (RTT target, window ceiling, loss-timer floor, SACK timer)
        # unless the run sets it; `ecn_fabric`: whether the switches mark (the runner says).
        paths = self.paths
        config = TransportConfig(**overrides).for_fabric(
            paths.link_mbps, paths.planes, ecn=bool(settings.get("ecn_fabric", True)), keep=overrides)
        self.loop = DataLoop(settings, config, paths.link_mbps, paths.planes, paths.nics)
        loop = self.loop
        # The NIC ports' state from the kernel, told to every core (endpoints/host/ports.py),
        # each of which is then polled.
        ports = PortWatch(self.paths.nics, loop.selector, lambda: [qp.core for qp in loop.qps.values()],
                          on_change=loop.poll_all)
        self.commands = AgentCommands(loop, self.paths, ports, config, int(settings.get("seed", 1)),
                                      classes, replacements_from.provenance(replacements))
        self.control = ControlServer(settings["control"], loop.selector, self.commands.handle)

    def close(self) -> None:
        self.control.close()
        self.loop.close()


def make_agents(configs: list[dict[str, Any]]) -> list[Agent]:
    """An agent per settings, each made inside the namespace its `netns` names (a path:
    /proc/PID/ns/net, /run/netns/NAME; none: this process's), where the sockets it opens later
    are opened too; every agent made so far is closed if one fails."""
    agents: list[Agent] = []
    try:
        for settings in configs:
            ns = settings.get("netns")
            if ns is None:
                agents.append(Agent(settings))
                continue
            with entered(str(ns)):
                agent = Agent(settings)
            agent.loop.tx.namespace = functools.partial(entered, str(ns))
            agents.append(agent)
    except BaseException:
        for agent in agents:
            agent.close()
        raise
    return agents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MRC host agent")
    parser.add_argument("--config", required=True, action="append",
                        help="an agent's settings (JSON); several: one process runs them all")
    args = parser.parse_args(argv)
    configs = []
    for path in args.config:
        with open(path) as fh:
            configs.append(json.load(fh))
    try:
        agents = make_agents(configs)
    except replacements_from.OverrideError as exc:
        print(f"agent: error: {exc}", file=sys.stderr)
        return 2

    def stop(*_: object) -> None:
        for agent in agents:
            agent.loop.running = False

    signal.signal(signal.SIGTERM, stop)
    # MRCLAB_AGENT_PROFILE=DIR: the agent's Python profile (cProfile) written to
    # DIR/agent-HOST.prof when it ends (one file for a process of several agents, named by
    # the first), for `make bench`'s cost breakdown (experiments/tools/cost_bench.py).
    profile_dir = os.environ.get("MRCLAB_AGENT_PROFILE")
    profiler = None
    if profile_dir:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    try:
        shared.run([agent.loop for agent in agents])
    except KeyboardInterrupt:
        pass
    finally:
        if profiler is not None and profile_dir:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"agent-{agents[0].name}.prof"))
        for agent in agents:
            agent.close()
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    sys.exit(main())
