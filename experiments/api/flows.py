"""One long-lived flow per transport, started and measured the same way for all of them.

* `mrc`, `roce`, `spray`: QPs in the host agents (endpoints/host/agent.py). `roce` is the go-back-N
  baseline on one ECMP-hashed path of plane 0; `spray` is MRC's sender with its per-path state
  switched off (every packet sprayed over every path, lost ones resent, no EV ever benched).
* `tcp`: Linux TCP (cubic, whatever the kernel defaults to) over the ECMP baseline of plane 0.
* `mptcp`: Linux MPTCP, one subflow per plane (the server announces its other planes'
  addresses; see `topologies.hostnet.configure_mptcp`).

Every flow reports delivered bytes in goodput bins on CLOCK_MONOTONIC, `data_ok` (the
receiver's bytes match what the sender wrote, SHA-256 per message for the agents, a
deterministic byte pattern for TCP/MPTCP; and for the agents, every message the sender saw
acknowledged arrived) and `delivered` (anything arrived at all). A flow runs for a time
(`start(seconds)`) or carries a set number of bytes (`start(nbytes=...)`); `progress()` and
`goodput()` read it live.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from endpoints.host.control import AgentClient
from endpoints.host.tcpflow import DATA_OK as SERVER_DATA_OK
from experiments.analysis.transports import BASELINE_PLANE
from experiments.outdir import REPO
from topologies.face import Emulator, read_json

SIZED_LIMIT_S = 24 * 3600.0  # a sized transfer's time limit: it ends when its bytes are through


class Progress(NamedTuple):
    """A flow as it is now."""
    bytes_done: int  # acknowledged to the sender (agent flows) or received (TCP, MPTCP)
    nbytes: int | None  # what a sized transfer carries in all; None for a timed flow
    done: bool  # nothing left to send and everything sent is through


def ev_timeline(trace: Path, qpn: int) -> list[list]:
    """[t, ev, old, new] state changes of one QP from an agent trace."""
    if not trace.exists():
        return []
    out = []
    for line in trace.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line may still be being written
        if rec.get("qpn") == qpn and rec.get("event") == "ev_state":
            out.append([rec["t"], rec["ev"], rec["old"], rec["new"]])
    return out


def _check_start(seconds: float | None, nbytes: int | None) -> None:
    if (seconds is None) == (nbytes is None):
        raise ValueError("start a flow with seconds or with nbytes, one of them")
    if seconds is not None and not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1):
        raise ValueError(f"nbytes must be a whole number >= 1, got {nbytes!r}")


@dataclass
class FlowResult:
    transport: str
    src: str
    dst: str
    bins: dict[int, int]  # goodput bin (endpoints.host.goodput.bin_of) -> bytes delivered
    data_ok: bool  # no wrong byte, and everything the sender saw acknowledged arrived
    bytes_delivered: int
    detail: dict = field(default_factory=dict)
    delivered: bool = True  # anything arrived at all (a scenario says whether it had to)


class AgentFlow:
    """A QP pair in two agents (QP number `qpn` on both), streaming `msg_bytes` messages.
    `config`: this QP's transport parameters that differ from the agents' own; `trace`: the
    sender's agent trace, where its EV state changes are read."""

    def __init__(self, agents: dict[str, AgentClient], transport: str, src: str, dst: str,
                 qpn: int, msg_bytes: int = 256 * 1024, config: dict | None = None,
                 trace: Path | None = None, psn: int = 0, seed: int | None = None,
                 number: int | None = None, plane: int = BASELINE_PLANE, entropy: int = 0) -> None:
        """`psn`: the initial PSN of both ends; `seed`: the cores' (by default the agents derive
        it from the QPN); `number`: the flow's in its testbed (by default its QPN); `plane`
        and `entropy`: a single-path QP's plane and its share of the ECMP hash (one of a host
        pair's N RoCE QPs, each hashed on its own; MRC sprays over every plane whatever they
        are)."""
        self.agents, self.transport, self.src, self.dst = agents, transport, src, dst
        self.qpn, self.msg_bytes, self.trace = qpn, msg_bytes, trace
        self.number = qpn if number is None else number
        self.nbytes: int | None = None
        self.closed = False
        self.final: FlowResult | None = None  # kept by `result()`: read after `close()`
        opts: dict[str, object] = {"psn": psn}
        if seed is not None:
            opts["seed"] = seed
        if config:
            opts["config"] = config
        if entropy:
            opts["entropy"] = entropy
        agents[dst].call("open", qpn=qpn, peer=src, peer_qpn=qpn, transport=transport, role="recv",
                         plane=plane, **opts)
        agents[src].call("open", qpn=qpn, peer=dst, peer_qpn=qpn, transport=transport, role="send",
                         plane=plane, **opts)

    def start(self, seconds: float | None = None, nbytes: int | None = None) -> None:
        """Stream for `seconds`, or carry `nbytes` in all (messages of `msg_bytes`)."""
        _check_start(seconds, nbytes)
        self.nbytes = nbytes
        self.agents[self.src].call("stream", qpn=self.qpn, msg_bytes=self.msg_bytes, seconds=seconds,
                                   total_bytes=nbytes)

    def write(self, nbytes: int) -> int:
        return self.agents[self.src].call("write", qpn=self.qpn, bytes=nbytes)["msn"]

    def completed(self) -> int:
        """Messages the receiver has completed (the runner polls this for collective steps)."""
        return self.agents[self.dst].call("progress", qpn=self.qpn)["messages"]

    def progress(self) -> Progress:
        if self.closed:
            got = self.final.bytes_delivered if self.final else 0
            return Progress(got, self.nbytes, True)
        p = self.agents[self.src].call("progress", qpn=self.qpn)
        return Progress(p["bytes"], self.nbytes, not p["streaming"] and p["messages"] == p["posted"])

    def goodput(self) -> dict[int, int]:
        """Bytes delivered so far per goodput bin (endpoints.host.goodput.bin_of)."""
        if self.closed:
            return dict(self.final.bins) if self.final else {}
        got = self.agents[self.dst].call("stats", qpn=self.qpn)
        return {int(k): v for k, v in got["bins"].items()}

    def evs(self) -> dict:
        """The sender's EV set now: "rows" (ev, plane, state, active, skips, benched, srtt_ms,
        bytes_sent per EV), "bytes_acked", and "congestion" (cwnd, RTTs) where there is one."""
        if self.closed:
            raise ValueError(f"flow {self.number} is closed: its QPs are gone")
        return self.agents[self.src].call("evs", qpn=self.qpn)

    def ev_history(self) -> tuple[list[list], list[int]]:
        """([t, ev, old, new] state changes so far, every EV of the set): from the sender's trace."""
        changes = ev_timeline(self.trace, self.qpn) if self.trace is not None else []
        evs = [row["ev"] for row in self.evs()["rows"]] if not self.closed else \
            sorted({c[1] for c in changes})
        return changes, evs

    def restrict(self, keep: Sequence[tuple[int, int | None]]) -> list[int]:
        """Force the sender onto the paths over (plane, spine) in `keep` (spine None: a
        same-leaf path): every other EV DENIED. Returns the EVs kept."""
        if self.closed:
            raise ValueError(f"flow {self.number} is closed: its QPs are gone")
        labels = ",".join(f"p{plane}/{'direct' if spine is None else f's{spine}'}" for plane, spine in keep)
        return self.agents[self.src].call("restrict", qpn=self.qpn, keep=labels)["kept"]

    def stop(self) -> None:
        """Post no more messages; what is posted still completes."""
        if not self.closed:
            self.agents[self.src].call("stop_stream", qpn=self.qpn)

    def close(self) -> None:
        """Remove both QPs from their agents (after `result`): idle QPs still probe."""
        if self.closed:
            return
        self.closed = True
        for host in (self.src, self.dst):
            self.agents[host].call("close", qpn=self.qpn)

    def result(self) -> FlowResult:
        if self.closed:
            if self.final is None:
                raise ValueError(f"flow {self.number} was closed before its result was read")
            return self.final
        # The sender hashes what it sent a few ms at a time, so the agents' process keeps
        # serving every other flow meanwhile (`digest`), then says it all (`stats`).
        while self.agents[self.src].call("digest", qpn=self.qpn)["pending"]:
            pass
        sent = self.agents[self.src].call("stats", qpn=self.qpn)
        got = self.agents[self.dst].call("stats", qpn=self.qpn)
        digests = got["digests"]
        acked = int(sent.get("messages_acked", 0))
        # End to end, both ways: every message the receiver completed has the sender's SHA-256,
        # and every message the sender saw acknowledged (MSNs 0 .. acked-1: completions are in
        # order) was completed by the receiver with that SHA-256. Whether a flow that completed
        # nothing fails is its scenario's call (`delivered`): an incast crowd may be starved.
        data_ok = all(sent["digests"].get(m) == d for m, d in digests.items()) and \
            all(digests.get(str(m)) == sent["digests"].get(str(m)) for m in range(acked))
        detail = {"sender_stats": sent.get("stats", {}), "receiver_stats": got.get("stats", {}),
                  "messages_completed": len(digests), "messages_acked": acked}
        if "ev_states" in sent:
            states = sent["ev_states"]
            detail["ev_states_at_end"] = {s: sum(1 for v in states.values() if v == s)
                                          for s in sorted(set(states.values()))}
        if "congestion" in sent:
            detail["congestion_at_end"] = sent["congestion"]
        self.final = FlowResult(self.transport, self.src, self.dst,
                                {int(k): v for k, v in got["bins"].items()}, data_ok,
                                got.get("bytes_delivered", 0), detail, delivered=bool(digests))
        return self.final


class TcpFlow:
    """Linux TCP or MPTCP between two hosts' plane-0 baseline addresses (endpoints/host/tcpflow.py)."""

    def __init__(self, em: Emulator, workdir: Path, transport: str, src: str, dst: str,
                 port: int, number: int = 0) -> None:
        self.em, self.transport, self.src, self.dst, self.port = em, transport, src, dst, port
        self.number = number
        self.nbytes: int | None = None
        self.mptcp = transport == "mptcp"
        self.server_out = workdir / f"{transport}-{port}-server.json"
        self.client_out = workdir / f"{transport}-{port}-client.json"
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []  # [server, client] once started

    def start(self, seconds: float | None = None, nbytes: int | None = None) -> None:
        """Send for `seconds`, or `nbytes` and then close."""
        _check_start(seconds, nbytes)
        self.nbytes = nbytes
        limit = seconds if seconds is not None else SIZED_LIMIT_S
        sized = ["--bytes", str(nbytes)] if nbytes is not None else []
        fabric = self.em.fabric
        dst_addr = str(fabric.host(self.dst).nics[BASELINE_PLANE].addr)
        flag = ["--mptcp"] if self.mptcp else []
        log = open(self.workdir / f"{self.transport}-{self.port}.log", "w")
        base = [sys.executable, "-m", "endpoints.host.tcpflow"]
        # MPTCP: joins arrive at the server's other planes' addresses, so listen on all of them.
        bind = "::" if self.mptcp else dst_addr
        self.procs.append(self.em.popen(self.dst, [*base, "server", "--bind", bind, "--port",
                                                   str(self.port), "--seconds", str(limit + 3),
                                                   "--out", str(self.server_out), *flag],
                                        stdout=log, stderr=log, cwd=str(REPO)))
        self.procs.append(self.em.popen(self.src, [*base, "client", "--connect", dst_addr, "--port",
                                                   str(self.port), "--seconds", str(limit),
                                                   "--out", str(self.client_out), *sized, *flag],
                                        stdout=log, stderr=log, cwd=str(REPO)))

    def _server_result(self) -> dict:
        return read_json(self.server_out)

    def progress(self) -> Progress:
        data = self._server_result()
        return Progress(int(data.get("bytes", 0)), self.nbytes, bool(data.get("done")))

    def goodput(self) -> dict[int, int]:
        return {int(k): v for k, v in self._server_result().get("bins", {}).items()}

    def stop(self) -> None:
        """End the client now if it still runs (a sized transfer stopped early), then let the
        server see the end of the stream and write its result."""
        if len(self.procs) == 2 and self.procs[1].poll() is None:
            self.procs[1].send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()  # a stuck peer; teardown kills it anyway

    def close(self) -> None:
        """The processes exit by themselves at the end of their run."""

    def result(self) -> FlowResult:
        data = self._server_result() or {"error": "the server wrote no result"}
        bins = {int(k): v for k, v in data.get("bins", {}).items()}
        detail = {"error": data["error"]} if "error" in data else {}
        received = int(data.get("bytes", 0))
        # The stream matched the pattern; a connection that carried nothing (starved) has no
        # wrong byte either, but one that never connected is a failure.
        ok = bool(data.get(SERVER_DATA_OK)) or (received == 0 and "error" not in data)
        return FlowResult(self.transport, self.src, self.dst, bins, ok, received, detail,
                          delivered=received > 0)


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


def _by_agent(flows: Sequence[AgentFlow], end: str) -> dict[str, list[int]]:
    """The flows' places, grouped by the agent at their `end` ("src" or "dst")."""
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(flows):
        groups.setdefault(getattr(f, end), []).append(i)
    return groups


def write_all(flows: Sequence[AgentFlow], sizes: Sequence[int]) -> list[int]:
    """Post a message of `sizes[i]` bytes on each flow at once, one request per sending agent
    (`write_many`); each message's MSN. A request per QP, one round trip after another, made an
    all-to-all step with 16 RoCE QPs per peer start its last QP tens of ms after its first."""
    msns = [0] * len(flows)
    for src, places in _by_agent(flows, "src").items():
        got = flows[places[0]].agents[src].call(
            "write_many", qpns=[flows[i].qpn for i in places], sizes=[sizes[i] for i in places])["msns"]
        for i, msn in zip(places, got, strict=True):
            msns[i] = msn
    return msns


def completed_all(flows: Sequence[AgentFlow]) -> list[int]:
    """`AgentFlow.completed` of each flow, one request per receiving agent (`progress_many`)."""
    done = [0] * len(flows)
    for dst, places in _by_agent(flows, "dst").items():
        got = flows[places[0]].agents[dst].call("progress_many", qpns=[flows[i].qpn for i in places])
        for i, p in zip(places, got["progress"], strict=True):
            done[i] = p["messages"]
    return done
