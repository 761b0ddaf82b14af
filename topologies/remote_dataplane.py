"""The eBPF data plane of a split fabric's servers (topologies/cluster.py), as the head sees it:
the program is attached on each server by `python -m topologies.dataplane attach FOLDER` and
stays pinned in that server's run folder (a BPF file system mounted in it); its counters are read,
its counters reset and its trimming switched by `python -m topologies.dataplane pinned FOLDER
ACTION` over ssh: one session and one Python start per server for all of its ports, never one
per port. The same interface as a local `DataPlane`, so summaries, the incast's drop-tail
variant and resets between phases work split as unsplit.

Not read over there: the ports' virtual queues between packets (`virtual_queues` is empty), which
the queue sampler would ask for every few milliseconds; one ssh call each would not keep up.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from topologies.dataplane.attach import DataPlane
from topologies.preflight import EmulationError
from topologies.servers import CHECKOUT, server_run


def pinned_command(folder: Path, action: str) -> str:
    """The shell command, run on a server, doing `action` on the data plane pinned in `folder`."""
    return (f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -m "
            f"topologies.dataplane pinned {shlex.quote(str(folder))} {action}")


class RemoteDataPlane(DataPlane):
    """The program on the ports of every server in `folders` (server -> its address and run
    folder there). `unread`: the servers whose last counter read failed, with why."""

    def __init__(self, folders: dict[str, tuple[str, Path]]) -> None:
        super().__init__()
        self.folders = folders
        self.unread: dict[str, str] = {}

    def _each(self, action: str) -> dict[str, subprocess.CompletedProcess | str]:
        """`action` on every server at once; each one's finished ssh, or why it did not finish."""
        def run(server: str) -> subprocess.CompletedProcess | str:
            address, folder = self.folders[server]
            try:
                return server_run(address, pinned_command(folder, action), timeout=30)
            except subprocess.TimeoutExpired:
                return "no answer within 30 s"
        with ThreadPoolExecutor(max_workers=max(1, len(self.folders))) as pool:
            return dict(zip(self.folders, pool.map(run, self.folders), strict=True))

    @staticmethod
    def _why(result: subprocess.CompletedProcess | str) -> str | None:
        if isinstance(result, str):
            return result
        if result.returncode == 0:
            return None
        return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1][:300]

    def _everywhere(self, action: str) -> None:
        failed = {s: why for s, r in self._each(action).items() if (why := self._why(r)) is not None}
        if failed:
            raise EmulationError(f"the eBPF data plane's {action} on "
                                 + "; ".join(f"{s}: {why}" for s, why in failed.items()))

    def counters(self) -> dict[str, dict[str, int]]:
        """Every server's ports, as a local DataPlane's; a server that cannot be read is left out
        and named in `unread`."""
        out: dict[str, dict[str, int]] = {}
        self.unread = {}
        for server, result in self._each("counters").items():
            why = self._why(result)
            if why is None:
                assert not isinstance(result, str)
                try:
                    out.update(json.loads(result.stdout))
                    continue
                except ValueError:
                    why = f"unreadable answer {result.stdout[:80]!r}"
            self.unread[server] = why
        return out

    def virtual_queues(self) -> dict[str, int]:
        return {}  # see the module docstring

    def reset(self) -> None:
        self._everywhere("reset")

    def set_trim(self, enabled: bool) -> None:
        self._everywhere("trim-on" if enabled else "trim-off")

    def detach(self, remove_filters: bool = True) -> None:
        """Nothing here: the routers take the filters, the folder's removal the pins."""
