"""The emulator as the Python API (experiments/api/) sees it: the one door from the API into
topologies/ besides the pure model (topologies/model.py), the run context (runctx.py) and the
emulator's error types (preflight.py); tests/unit/test_layers.py holds the API to it.

`Emulator` lists every operation and fact a Testbed, its fault injector, captures and flows
use of a running emulation, and nothing else, so the emulator behind it can change without
the API noticing. Both kinds of emulation satisfy it (mypy checks `_KINDS`): one machine's
(topologies/emulation.py) and a fabric split over servers (topologies/cluster.py). The layers
above the API (the runner, scenarios, tools, labs) that read the switches themselves reach the
whole emulation through `whole`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from endpoints.protocol.config import TransportConfig
from topologies.cleanup import NFT_TABLE
from topologies.cluster import SplitEmulation, make_emulation
from topologies.emulation import Emulation
from topologies.files import private_dir, read_json
from topologies.model import DEFAULT_DETECT_MS, Fabric

# What else the API takes from topologies/: the fault injector's nftables table (cleanup.py
# removes what a killed run left in it), and private work folders and JSON results (files.py).
__all__ = ["NFT_TABLE", "Emulator", "emulator", "private_dir", "read_json", "whole"]


class Emulator(Protocol):
    """A fabric's emulation, as the API drives it."""

    # ----- facts ------------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The model it emulates."""

    @property
    def net(self) -> Any:
        """The Mininet network (`Testbed.net`), once started."""

    @property
    def switch_backend(self) -> str:
        """The switch backend's name, once started."""

    @property
    def switch_choice(self) -> str:
        """Why that backend (with `auto`: which it passed over, and why)."""

    @property
    def datapath(self) -> str:
        """OVS's datapath ("" for a backend without one)."""

    # ----- lifecycle --------------------------------------------------------------------------
    def start(self) -> None: ...

    def stop(self) -> None:
        """Idempotent: kills every process started in a node."""

    def controller_death(self) -> tuple[float, int] | None: ...

    # ----- nodes ------------------------------------------------------------------------------
    def pid(self, node: str) -> int:
        """A process in the network namespace of host or switch `node`."""

    def popen(self, node: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[Any]:
        """A process started in the namespace of `node`, killed at teardown."""

    def agent_settings(self, host: str) -> dict[str, Any]:
        """What the agent on `host` must know of the fabric: its path table, whether the
        switches mark ECN, whether its NICs are shaped, the host's control priority class."""

    def configure_mptcp(self, host: str) -> None: ...

    # ----- the CPU sampler --------------------------------------------------------------------
    def forwarding_pids(self) -> list[int]: ...

    def remote_cpu_commands(self) -> dict[str, list[str]]: ...

    # ----- faults -----------------------------------------------------------------------------
    def set_link(self, name: str, up: bool) -> float: ...

    def set_switch(self, name: str, forwarding: bool) -> float: ...

    def notify_controller(self, message: dict[str, Any]) -> None: ...

    def port_command(self, ifname: str) -> list[str]:
        """argv prefix running a command where switch-side interface `ifname` lives."""


# Held to the face by mypy: a kind of emulation that lacks an operation does not type-check.
_KINDS: tuple[type[Emulator], ...] = (Emulation, SplitEmulation)


def emulator(fabric: Fabric, workdir: Path, servers: Sequence[str] = (), *, datapath: str = "auto",
             detect_ms: float = DEFAULT_DETECT_MS, dataplane_mode: str = "auto",
             transport: TransportConfig | None = None, switch: str = "auto",
             ecmp_seed: int | None = 1) -> Emulator:
    """The emulation of `fabric` (not started), on this machine or split over `servers` (the
    head first: topologies/cluster.py), as the API sees it; `ecmp_seed` (the run's seed) keys
    the baseline's ECMP hash where the switches can seed it."""
    return make_emulation(fabric, workdir, tuple(servers), datapath=datapath, detect_ms=detect_ms,
                          dataplane_mode=dataplane_mode, transport=transport, switch=switch,
                          ecmp_seed=ecmp_seed)


def whole(em: Emulator) -> Emulation:
    """The whole emulation behind the face (`Testbed.em`), for the layers above the API that
    read the switches themselves: their counters, the data plane, timings."""
    assert isinstance(em, Emulation), f"{em!r} is not an emulation"
    return em
