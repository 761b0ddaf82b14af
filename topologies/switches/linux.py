"""Linux kernel routers as switches: each switch a network namespace whose kernel forwards with
its own SRv6 (`seg6local End flavors next-csid` for the switch's uSID, static /48 routes to its
neighbours, the baseline's ECMP as multipath routes), installed from the same tables-as-data
the OpenFlow controller uses. Not implemented yet: this backend is being built separately."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from topologies import preflight
from topologies.switches.base import SwitchBackend

NOT_YET = "the Linux kernel switch backend (--switch linux) is not implemented yet: use --switch ovs"


class LinuxBackend(SwitchBackend):
    name = "linux"

    def __init__(self, fabric: Any, workdir: Path, **options: Any) -> None:
        raise preflight.PreflightError(NOT_YET)

    @classmethod
    def unavailable(cls) -> str | None:
        return NOT_YET

    def start_instances(self) -> None:
        raise NotImplementedError

    def controller_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def controller_command(self, config: Path) -> list[str]:
        raise NotImplementedError

    def controller_listening(self) -> bool:
        raise NotImplementedError

    def add_switches(self, net: Any) -> None:
        raise NotImplementedError

    def start_switches(self) -> None:
        raise NotImplementedError

    def port_namespace(self, switch: str) -> int | None:
        raise NotImplementedError

    def forwarding_pids(self) -> list[int]:
        raise NotImplementedError

    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        raise NotImplementedError

    def link_state(self, switch: str, ifname: str) -> str:
        raise NotImplementedError

    def set_forwarding(self, switch: str, forwarding: bool) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError
