"""One long-lived flow per transport, started and measured the same way for all of them.

* `mrc`, `roce`, `spray`: QPs in the host agents (endpoints/host/agent.py). `roce` is the go-back-N
  baseline on one ECMP-hashed path of plane 0; `spray` is MRC's sender with its per-path state
  switched off (every packet sprayed over every path, lost ones resent, no EV ever benched).
* `tcp`: Linux TCP (cubic, whatever the kernel defaults to) over the ECMP baseline of plane 0.
* `mptcp`: Linux MPTCP, one subflow per plane (the server announces its other planes'
  addresses; see `topologies.hostnet.configure_mptcp`).

Every flow reports delivered bytes in goodput bins on CLOCK_MONOTONIC and `data_ok`: the
receiver's bytes match what the sender wrote (SHA-256 per message for the agents, a
deterministic byte pattern for TCP/MPTCP).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from endpoints.host.control import AgentClient
from topologies.emulation import Emulation

TRANSPORTS = ("mrc", "roce", "spray", "tcp", "mptcp")
MULTIPATH = {"mrc", "spray", "mptcp"}  # use every plane; the others are pinned to plane 0
BASELINE_PLANE = 0
REPO = Path(__file__).resolve().parent.parent


def planes_used(transport: str, planes: int) -> tuple[int, ...]:
    return tuple(range(planes)) if transport in MULTIPATH else (BASELINE_PLANE,)


@dataclass
class FlowResult:
    transport: str
    src: str
    dst: str
    bins: dict[int, int]  # goodput bin (endpoints.host.goodput.bin_of) -> bytes delivered
    data_ok: bool
    bytes_delivered: int
    detail: dict = field(default_factory=dict)


class AgentFlow:
    """A QP pair in two agents, streaming `msg_bytes` messages until stopped."""

    def __init__(self, agents: dict[str, AgentClient], transport: str, src: str, dst: str,
                 qpn: int, msg_bytes: int = 256 * 1024) -> None:
        self.agents, self.transport, self.src, self.dst = agents, transport, src, dst
        self.qpn, self.msg_bytes = qpn, msg_bytes
        agents[dst].call("open", qpn=qpn, peer=src, peer_qpn=qpn, transport=transport, role="recv",
                         plane=BASELINE_PLANE)
        agents[src].call("open", qpn=qpn, peer=dst, peer_qpn=qpn, transport=transport, role="send",
                         plane=BASELINE_PLANE)

    def start(self, seconds: float) -> None:
        self.agents[self.src].call("stream", qpn=self.qpn, msg_bytes=self.msg_bytes, seconds=seconds)

    def write(self, nbytes: int) -> int:
        return self.agents[self.src].call("write", qpn=self.qpn, bytes=nbytes)["msn"]

    def completed(self) -> int:
        """Messages the receiver has completed (the runner polls this for collective steps)."""
        return self.agents[self.dst].call("progress", qpn=self.qpn)["messages"]

    def stop(self) -> None:
        self.agents[self.src].call("stop_stream", qpn=self.qpn)

    def close(self) -> None:
        """Remove both QPs from their agents (after `result`): idle QPs still probe."""
        for host in (self.src, self.dst):
            self.agents[host].call("close", qpn=self.qpn)

    def result(self) -> FlowResult:
        sent = self.agents[self.src].call("stats", qpn=self.qpn)
        got = self.agents[self.dst].call("stats", qpn=self.qpn)
        digests = got["digests"]
        # Every message the receiver completed has the sender's SHA-256. A flow starved of all
        # goodput (a crowd sender in an incast) completes none: that is no wrong byte, and
        # `messages_completed` says how much was checked.
        data_ok = all(sent["digests"].get(m) == d for m, d in digests.items())
        detail = {"sender_stats": sent.get("stats", {}), "receiver_stats": got.get("stats", {}),
                  "messages_completed": len(digests)}
        if "ev_states" in sent:
            states = sent["ev_states"]
            detail["ev_states_at_end"] = {s: sum(1 for v in states.values() if v == s)
                                          for s in sorted(set(states.values()))}
        if "congestion" in sent:
            detail["congestion_at_end"] = sent["congestion"]
        return FlowResult(self.transport, self.src, self.dst,
                          {int(k): v for k, v in got["bins"].items()}, data_ok,
                          got.get("bytes_delivered", 0), detail)


class TcpFlow:
    """Linux TCP or MPTCP between two hosts' plane-0 baseline addresses (endpoints/host/tcpflow.py)."""

    def __init__(self, em: Emulation, workdir: Path, transport: str, src: str, dst: str,
                 port: int) -> None:
        self.em, self.transport, self.src, self.dst, self.port = em, transport, src, dst, port
        self.mptcp = transport == "mptcp"
        self.server_out = workdir / f"{transport}-{port}-server.json"
        self.client_out = workdir / f"{transport}-{port}-client.json"
        self.workdir = workdir
        self.procs: list = []

    def start(self, seconds: float) -> None:
        fabric = self.em.fabric
        dst_addr = str(fabric.host(self.dst).nics[BASELINE_PLANE].baseline_addr)
        flag = ["--mptcp"] if self.mptcp else []
        log = open(self.workdir / f"{self.transport}-{self.port}.log", "w")
        base = [sys.executable, "-m", "endpoints.host.tcpflow"]
        # MPTCP: joins arrive at the server's other planes' addresses, so listen on all of them.
        bind = "::" if self.mptcp else dst_addr
        self.procs.append(self.em.popen(self.dst, [*base, "server", "--bind", bind, "--port",
                                                   str(self.port), "--seconds", str(seconds + 3),
                                                   "--out", str(self.server_out), *flag],
                                        stdout=log, stderr=log, cwd=str(REPO)))
        self.procs.append(self.em.popen(self.src, [*base, "client", "--connect", dst_addr, "--port",
                                                   str(self.port), "--seconds", str(seconds),
                                                   "--out", str(self.client_out), *flag],
                                        stdout=log, stderr=log, cwd=str(REPO)))

    def stop(self) -> None:
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a stuck peer is killed at teardown anyway
                proc.terminate()

    def close(self) -> None:
        """The processes exit by themselves at the end of their run."""

    def result(self) -> FlowResult:
        try:
            data = json.loads(self.server_out.read_text())
        except (OSError, ValueError):
            data = {"error": "the server wrote no result"}
        bins = {int(k): v for k, v in data.get("bins", {}).items()}
        detail = {"error": data["error"]} if "error" in data else {}
        received = int(data.get("bytes", 0))
        # The stream matched the pattern; a connection that carried nothing (starved) has no
        # wrong byte either, but one that never connected is a failure.
        ok = bool(data.get("data_ok")) or (received == 0 and "error" not in data)
        return FlowResult(self.transport, self.src, self.dst, bins, ok, received, detail)


Flow = AgentFlow | TcpFlow


def finish(flows: Sequence[Flow]) -> list[FlowResult]:
    """Stop each flow, read what it measured, and close it (idle QPs would keep probing and
    load the next measurement)."""
    results = []
    for f in flows:
        f.stop()
        results.append(f.result())
        f.close()
    return results
