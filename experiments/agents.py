"""Start host agents inside an emulation and reach them over their control sockets."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from endpoints.control import AgentClient
from topologies.emulation import Emulation

REPO = Path(__file__).resolve().parent.parent


def start_agents(em: Emulation, hosts: list[str], workdir: Path, seed: int,
                 transport: dict | None = None) -> dict[str, AgentClient]:
    clients = {}
    for host in hosts:
        settings = {"host": host, "fabric": em.fabric.params.as_dict(),
                    "control": str(workdir / f"{host}.sock"), "trace": str(workdir / f"{host}-trace.jsonl"),
                    "seed": seed, "transport": transport or {}}
        config = workdir / f"agent-{host}.json"
        config.write_text(json.dumps(settings))
        log = open(workdir / f"agent-{host}.log", "w")
        em.popen(host, [sys.executable, "-m", "endpoints.agent", "--config", str(config)],
                 stdout=log, stderr=log, cwd=str(REPO))
        clients[host] = AgentClient(settings["control"])
    wait_for_agents(clients, lambda host: workdir / f"agent-{host}.log")
    return clients


def wait_for_agents(clients: dict[str, AgentClient], log_of: Callable[[str], Path],
                    error: type[Exception] = RuntimeError) -> None:
    """Connect to every started agent; one that does not answer within 20 s raises `error`
    with the tail of its log."""
    for host, client in clients.items():
        try:
            client.connect(wait=20)
        except TimeoutError as exc:
            log = log_of(host).read_text()[-800:]
            raise error(f"agent on {host} did not start: {log}") from exc
