"""Start host agents inside an emulation and reach them over their control sockets."""

from __future__ import annotations

import json
import sys
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
    for host, client in clients.items():
        try:
            client.connect(wait=20)
        except TimeoutError as exc:
            log = (workdir / f"agent-{host}.log").read_text()[-800:]
            raise RuntimeError(f"agent on {host} did not start: {log}") from exc
    return clients
