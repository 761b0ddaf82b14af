"""The transports a run compares and which planes each one uses: facts that the API (which
starts the flows) and the analysis (which reads what the fabric carried for them) share, kept
here, below both, so that neither imports the other for them."""

from __future__ import annotations

from topologies.model import FabricError

TRANSPORTS = ("mrc", "roce", "spray", "tcp", "mptcp")  # the runner's, the tables' columns' order
MULTIPATH = frozenset({"mrc", "spray", "mptcp"})  # use every plane; the others are pinned to plane 0
BASELINE_PLANE = 0
# How the hosts' agents run: every one in one process (the default: a third less CPU per packet,
# endpoints/host/shared.py), or a process in each host.
AGENT_PROCESSES = ("shared", "per-host")


def check_agent_processes(name: str) -> str:
    """`name` if it is one of AGENT_PROCESSES; else FabricError naming them."""
    if name not in AGENT_PROCESSES:
        raise FabricError(f"unknown agent processes {name!r}: use one of {', '.join(AGENT_PROCESSES)}")
    return name


def planes_used(transport: str, planes: int) -> tuple[int, ...]:
    """The planes `transport` sends on in a fabric of `planes` planes.

    >>> planes_used("mrc", 3), planes_used("roce", 3)
    ((0, 1, 2), (0,))
    """
    return tuple(range(planes)) if transport in MULTIPATH else (BASELINE_PLANE,)
