"""`python -m experiments.tools.bench`: the host agent's packet rate per CPU core.

Two real agents (`python -m endpoints.host.agent`), a sender and a receiver, run in two network
namespaces joined by one veth pair per plane (benchnet.py): no OVS, no link shaping, so the
agents and not the links are the bottleneck. One MRC QP streams for `--seconds`, `--runs` times
(a fresh QP each time); the runner reads each agent's CPU time (utime + stime, /proc/PID/stat)
and its transport counters at the start and the end of every window.

What is counted: data packets per CPU-second of the process handling them; the sender's first
transmissions plus retransmissions, the receiver's data packets received (duplicates included).
`agent_pps_per_core` is the lower of the two (the side that needs more CPU per packet), from the
run with the median headline. SACKs, NACKs and probes are reported as `other_packets`, not in
the headline. Caveat: this kernel has no IRQ time accounting and veth delivers in the sending
process's softirq, so part of each side's kernel receive work is charged to the other side;
`pair_data_pps_per_cpu_s` (packets over both agents' CPU time) does not depend on that split.

A separate, shorter run under cProfile gives the top functions by own time; the profiler slows
the agents down, so its rates are not the measurement. Namespaces and agents are removed on
every exit path, Ctrl-C and SIGTERM included; the JSON is written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from endpoints.host.control import AgentClient
from experiments.analysis import fidelity
from experiments.api.testbed import wait_for_agents
from experiments.outdir import REPO, RESULTS
from experiments.scenarios.schema import DATA_OK
from experiments.tools.benchnet import RECEIVER, SENDER, BenchNet
from topologies import cleanup, files, runctx
from topologies.model import Fabric, FabricParams
from topologies.pathtables import agent_paths

DEFAULT_OUT = RESULTS / "bench" / "agent.json"
GOAL_PPS_PER_CORE = 100_000  # issue 19: the streaming sender, data packets per CPU-second
MSG_BYTES = 1 << 20
TOP_FUNCTIONS = 15
IDLE_FUNCTIONS = ("<method 'poll' of 'select.epoll' objects>",
                  "<method 'select' of 'select.epoll' objects>")

SENDER_DATA = ("sent", "retransmitted")
SENDER_OTHER = ("sacks", "nacks", "probes_sent", "probe_replies")
RECEIVER_DATA = ("packets",)
RECEIVER_OTHER = ("sacks", "nacks")


class BenchError(RuntimeError):
    """The bench could not run (no root, an agent failed to start...)."""


# ----- the numbers (pure, unit-tested) ------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    """One agent's cumulative CPU time and transport counters at one instant."""
    t: float  # CLOCK_MONOTONIC
    user_s: float
    system_s: float
    stats: dict[str, int]
    payload_bytes: int = 0  # receiver: bytes delivered; sender: bytes acknowledged
    sleeps: int = 0  # voluntary context switches: each is a wait in epoll (or a blocked call)


def _per_s(count: float, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def side_result(start: Sample, end: Sample, data_keys: tuple[str, ...],
                other_keys: tuple[str, ...]) -> dict:
    """Rates of one agent between two samples: data packets (the sum of `data_keys` counters)
    and all packets (plus `other_keys`) per CPU-second."""
    user = end.user_s - start.user_s
    system = end.system_s - start.system_s
    cpu = user + system
    wall = end.t - start.t

    def delta(key: str) -> int:
        return end.stats.get(key, 0) - start.stats.get(key, 0)

    data = sum(delta(k) for k in data_keys)
    other = sum(delta(k) for k in other_keys)
    return {
        "cpu_s": round(cpu, 3), "user_s": round(user, 3), "system_s": round(system, 3),
        "wall_s": round(wall, 3), "cpu_utilisation": round(cpu / wall, 3) if wall > 0 else 0.0,
        "data_packets": data, "other_packets": other,
        "data_pps_per_cpu_s": _per_s(data, cpu),
        "all_packets_per_cpu_s": _per_s(data + other, cpu),
        "data_pps_wall": _per_s(data, wall),
        "sleeps": end.sleeps - start.sleeps,  # wake-ups cost a loop iteration each
        "data_packets_per_wakeup": round(data / (end.sleeps - start.sleeps), 1)
        if end.sleeps > start.sleeps else None,
        "goodput_mbps": round(8 * (end.payload_bytes - start.payload_bytes) / wall / 1e6, 1)
        if wall > 0 else 0.0,
        "counters": {k: delta(k) for k in (*data_keys, *other_keys)},
    }


def compute_result(sender: tuple[Sample, Sample], receiver: tuple[Sample, Sample]) -> dict:
    """The headline: data packets per CPU-second of the busier side (the lower rate)."""
    snd = side_result(*sender, SENDER_DATA, SENDER_OTHER)
    rcv = side_result(*receiver, RECEIVER_DATA, RECEIVER_OTHER)
    bound = "sender" if snd["data_pps_per_cpu_s"] <= rcv["data_pps_per_cpu_s"] else "receiver"
    headline = min(snd["data_pps_per_cpu_s"], rcv["data_pps_per_cpu_s"])
    return {"agent_pps_per_core": headline, "bound_by": bound,
            "meets_goal": headline >= GOAL_PPS_PER_CORE,
            "pair_data_pps_per_cpu_s": _per_s(rcv["data_packets"], snd["cpu_s"] + rcv["cpu_s"]),
            "sender": snd, "receiver": rcv}


def median_run(runs: list[dict]) -> dict:
    """The run whose headline is the median (the lower middle one for an even count)."""
    if not runs:
        raise ValueError("no runs")
    ranked = sorted(runs, key=lambda r: r["agent_pps_per_core"])
    return ranked[(len(ranked) - 1) // 2]


def data_ok(sent_digests: dict[str, str], got_digests: dict[str, str]) -> bool:
    """Every message the receiver completed is byte-identical to the one posted (SHA-256)."""
    return bool(got_digests) and all(sent_digests.get(m) == d for m, d in got_digests.items())


def top_functions(stats: pstats.Stats, n: int = TOP_FUNCTIONS, per_packet: int = 0) -> dict:
    """The `n` functions with the most own time; waiting in epoll is left out of the shares."""
    rows = []
    busy = idle = 0.0
    for (filename, line, name), (_cc, calls, own, cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name in IDLE_FUNCTIONS:
            idle += own
            continue
        busy += own
        label = name if filename == "~" else f"{_short(filename)}:{line}({name})"
        rows.append((own, label, calls, cum))
    rows.sort(reverse=True)
    out = []
    for own, label, calls, cum in rows[:n]:
        entry = {"function": label, "calls": calls, "own_s": round(own, 4),
                 "cumulative_s": round(cum, 4),
                 "share_pct": round(100 * own / busy, 1) if busy else 0.0}
        if per_packet:
            entry["own_us_per_data_packet"] = round(1e6 * own / per_packet, 2)
        out.append(entry)
    return {"busy_s": round(busy, 3), "idle_in_epoll_s": round(idle, 3), "top_by_own_time": out}


def _short(filename: str) -> str:
    path = Path(filename)
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return "/".join(path.parts[-2:])


# ----- machine facts ------------------------------------------------------------------------
def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) seconds of process `pid`, threads included (fields 14 and 15 of stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def voluntary_switches(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ----- running the agents -------------------------------------------------------------------
@dataclass
class Agents:
    clients: dict[str, AgentClient]
    pids: dict[str, int]
    profiles: dict[str, Path]


@contextlib.contextmanager
def agents(net: BenchNet, workdir: Path, seed: int, transport: dict, raw_send: bool,
           profile: bool, paced: bool = False) -> Iterator[Agents]:
    procs: dict[str, subprocess.Popen] = {}
    clients: dict[str, AgentClient] = {}
    profiles: dict[str, Path] = {}
    kind = "prof" if profile else "run"
    try:
        for host in (RECEIVER, SENDER):
            tag = f"{host}-{kind}"
            settings = {"paths": agent_paths(net.fabric, host),
                        "control": str(workdir / f"{tag}.sock"),
                        "trace": str(workdir / f"{tag}-trace.jsonl"), "seed": seed,
                        "transport": transport, "raw_send": raw_send,
                        # unshaped veths: the agents are the bottleneck, unless they pace
                        # their NICs at the link rate as in a scenario (`paced`)
                        "nic_pacing": paced}
            config = workdir / f"{tag}.json"
            config.write_text(json.dumps(settings))
            if profile:
                profiles[host] = workdir / f"{tag}.prof"
                argv = [sys.executable, "-c", _PROFILED_AGENT, str(config), str(profiles[host])]
            else:
                argv = [sys.executable, "-m", "endpoints.host.agent", "--config", str(config)]
            procs[host] = net.popen(host, argv, workdir / f"{tag}.log")
            clients[host] = AgentClient(str(settings["control"]))
        wait_for_agents(clients, lambda host: workdir / f"{host}-{kind}.log", BenchError)
        yield Agents(clients, {h: p.pid for h, p in procs.items()}, profiles)
        for client in clients.values():  # a clean exit, so cProfile writes its file
            with contextlib.suppress(OSError, ConnectionError):
                client.call("shutdown")
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    finally:
        for client in clients.values():
            client.close()
        for proc in procs.values():
            _stop(proc)


# The agent under cProfile with a CPU-time clock: a wall clock would also charge a call for the
# time its process sat preempted (a send that wakes the peer on a busy 2-core machine).
_PROFILED_AGENT = """
import cProfile, sys, time
from endpoints.host import agent
prof = cProfile.Profile(time.thread_time)
try:
    prof.runcall(agent.main, ["--config", sys.argv[1]])
finally:
    prof.dump_stats(sys.argv[2])
"""


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()  # the agent stops its loop on SIGTERM
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _sample(client: AgentClient, pid: int, qpn: int) -> Sample:
    reply = client.call("stats", qpn=qpn, digests=False)  # the check's hashing is not the window's
    user, system = cpu_times(pid)
    payload = reply.get("bytes_delivered", reply.get("bytes_acked", 0))
    return Sample(time.monotonic(), user, system, reply["stats"], payload, voluntary_switches(pid))


def stream_once(ag: Agents, qpn: int, seconds: float, msg_bytes: int,
                cpu: fidelity.CpuSampler | None = None) -> dict:
    """Open QP `qpn` on both agents, stream for `seconds`, let the tail drain; rates + checks."""
    rcv, snd = ag.clients[RECEIVER], ag.clients[SENDER]
    rcv.call("open", qpn=qpn, peer=SENDER, peer_qpn=qpn, transport="mrc", role="recv")
    opened = snd.call("open", qpn=qpn, peer=RECEIVER, peer_qpn=qpn, transport="mrc", role="send")
    s0, r0 = _sample(snd, ag.pids[SENDER], qpn), _sample(rcv, ag.pids[RECEIVER], qpn)
    snd.call("stream", qpn=qpn, msg_bytes=msg_bytes, seconds=seconds)
    time.sleep(max(s0.t + seconds - time.monotonic(), 0.0))
    s1, r1 = _sample(snd, ag.pids[SENDER], qpn), _sample(rcv, ag.pids[RECEIVER], qpn)
    result = compute_result((s0, s1), (r0, r1))
    deadline = time.monotonic() + 5.0  # the posted tail finishes, so every message is checked
    last = -1
    while time.monotonic() < deadline:
        acked = snd.call("stats", qpn=qpn, digests=False).get("bytes_acked", 0)
        if acked == last:
            break
        last = acked
        time.sleep(0.2)
    send_stats, recv_stats = snd.call("stats", qpn=qpn), rcv.call("stats", qpn=qpn)
    result["transfer"] = {
        "qpn": qpn, "paths": opened["paths"],
        DATA_OK: data_ok(send_stats["digests"], recv_stats["digests"]),
        "messages_completed": len(recv_stats["digests"]),
        "bytes_delivered": recv_stats["bytes_delivered"],
        "goodput_mbps_in_window": result["receiver"]["goodput_mbps"],
        "sender_stats": send_stats["stats"], "receiver_stats": recv_stats["stats"],
        "congestion_at_end": send_stats.get("congestion"),
        "agent_counters": {h: c.call("agent_stats") for h, c in ag.clients.items()},
    }
    if cpu is not None:
        result["machine_cpu_idle_mean_pct"] = cpu.mean_idle(s0.t, s1.t)
    return result


def run_bench(seconds: float = 5.0, runs: int = 3, profile_seconds: float = 2.0, planes: int = 4,
              spines: int = 2, link_mbps: float = 10.0, msg_bytes: int = MSG_BYTES,
              seed: int = 1, raw_send: bool = False, transport: dict | None = None,
              out: Path = DEFAULT_OUT, quiet: bool = False, paced: bool = False) -> dict:
    """`paced`: the agents pace their NIC ports at `link_mbps` per plane, as in every scenario:
    the sender then builds one or two packets per wake-up, so its per-wake work counts in the
    per-packet figure (unpaced, a wake-up sends dozens)."""
    if os.geteuid() != 0:
        raise BenchError("the bench creates network namespaces: run it as root (sudo)")
    if shutil.which("ip") is None:
        raise BenchError("iproute2's `ip` is missing: apt-get install iproute2")
    params = FabricParams(planes=planes, leaves=2, spines=spines, hosts_per_leaf=1,
                          link_mbps=link_mbps)
    fabric = Fabric(params)
    transport = dict(transport or {})
    load_before = os.getloadavg()
    results: list[dict] = []
    profile = None
    # Under the run lock, in a registered work folder, in namespaces named for the clean-up.
    with runctx.scratch_dir("mrclab-bench-") as workdir, \
            BenchNet(fabric, f"{cleanup.NETNS_PREFIX}b{os.getpid()}") as net:
        with fidelity.CpuSampler() as cpu, \
                agents(net, workdir, seed, transport, raw_send, False, paced) as ag:
            for i in range(runs):
                results.append(stream_once(ag, i + 1, seconds, msg_bytes, cpu))
        if profile_seconds > 0:
            with agents(net, workdir, seed, transport, raw_send, True, paced) as ag:
                prof_run = stream_once(ag, 1, profile_seconds, msg_bytes)
            profile = _profile_summary(ag.profiles, prof_run, profile_seconds)
    best = median_run(results)
    result = {
        "agent_pps_per_core": best["agent_pps_per_core"],
        "goal_pps_per_core": GOAL_PPS_PER_CORE,
        **{k: v for k, v in best.items() if k != "agent_pps_per_core"},
        DATA_OK: all(r["transfer"][DATA_OK] for r in results),
        "runs": [{"agent_pps_per_core": r["agent_pps_per_core"],
                  "sender_data_pps_per_cpu_s": r["sender"]["data_pps_per_cpu_s"],
                  "receiver_data_pps_per_cpu_s": r["receiver"]["data_pps_per_cpu_s"],
                  "pair_data_pps_per_cpu_s": r["pair_data_pps_per_cpu_s"],
                  DATA_OK: r["transfer"][DATA_OK],
                  "machine_cpu_idle_mean_pct": r.get("machine_cpu_idle_mean_pct")}
                 for r in results],
        "counted": ("data packets per CPU-second (utime + stime from /proc/PID/stat) of each agent "
                    "process over the streaming window: sender = first transmissions + "
                    "retransmissions, receiver = data packets received (duplicates included); "
                    "agent_pps_per_core is the lower of the two, from the median of `runs`. "
                    "SACK/NACK/probe packets are in other_packets only. pair_data_pps_per_cpu_s = "
                    "data packets received / (sender + receiver CPU seconds)."),
        "caveats": ("no IRQ time accounting on this kernel and veth delivers in the sender's "
                    "softirq: some of each side's kernel receive work is charged to the other "
                    "side. The machine is shared: see machine_cpu_idle_mean_pct per run."),
        "config": {"seconds": seconds, "runs": runs, "profile_seconds": profile_seconds,
                   "fabric": params.as_dict(), "sender": SENDER, "receiver": RECEIVER,
                   "message_bytes": msg_bytes, "seed": seed, "transport_overrides": transport,
                   "nic_pacing": paced,
                   "send_path": "raw socket, Python checksum" if raw_send
                   else "per-path UDP sockets, kernel checksum",
                   "network": "two namespaces, one veth pair per plane, TX checksum offload off, "
                              "no OVS, no shaping" + (", the agents pacing their NICs at "
                                                      "link_mbps per plane" if paced else "")},
        "machine": {"cpu_model": cpu_model(), "cpus": os.cpu_count(),
                    "loadavg_before": [round(x, 2) for x in load_before]},
        "software": fidelity.software_versions(),
        "profile": profile,
    }
    files.write_json(out, result)
    if not quiet:
        print(format_summary(result, out))
    return result


def _profile_summary(files: dict[str, Path], run: dict, seconds: float) -> dict:
    out: dict = {"method": f"cProfile (thread CPU-time clock) over a separate {seconds} s run, "
                           "agent start-up included; the profiler slows the agents several-fold, "
                           "most for code with many small calls, so shares are indicative"}
    for host, role in ((SENDER, "sender"), (RECEIVER, "receiver")):
        path = files.get(host)
        if path is None or not path.exists():
            out[role] = None
            continue
        out[role] = top_functions(pstats.Stats(str(path)), per_packet=run[role]["data_packets"])
        out[role]["data_pps_per_cpu_s_under_profiler"] = run[role]["data_pps_per_cpu_s"]
    return out


def format_summary(result: dict, out: Path) -> str:
    s, r = result["sender"], result["receiver"]
    runs = ", ".join(f"{x['agent_pps_per_core']:.0f}" for x in result["runs"])
    lines = [
        f"agent_pps_per_core {result['agent_pps_per_core']:.0f} (goal {GOAL_PPS_PER_CORE}, "
        f"bound by the {result['bound_by']}; median of runs: {runs})",
        f"  sender   {s['data_pps_per_cpu_s']:>9.0f} data pkt/CPU-s  ({s['data_packets']} in "
        f"{s['cpu_s']} CPU-s, user {s['user_s']} sys {s['system_s']}, {s['cpu_utilisation']:.0%} busy)",
        f"  receiver {r['data_pps_per_cpu_s']:>9.0f} data pkt/CPU-s  ({r['data_packets']} in "
        f"{r['cpu_s']} CPU-s, user {r['user_s']} sys {r['system_s']}, {r['cpu_utilisation']:.0%} busy)",
        f"  pair {result['pair_data_pps_per_cpu_s']:.0f} data pkt per CPU-s of both agents; "
        f"data_ok={result['data_ok']}, {result['transfer']['goodput_mbps_in_window']} Mbit/s",
    ]
    prof = result.get("profile") or {}
    for role in ("sender", "receiver"):
        if prof.get(role):
            top = ", ".join(f"{e['function']} {e['share_pct']}%"
                            for e in prof[role]["top_by_own_time"][:4])
            lines.append(f"  {role} profile: {top}")
    lines.append(f"results: {out}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_raise()  # its clean-up runs on Ctrl-C and SIGTERM, even as a background job
    parser = argparse.ArgumentParser(prog="python -m experiments.tools.bench",
                                     description="MRC host agent packets per CPU core")
    parser.add_argument("--seconds", type=float, default=5.0, help="each measured window")
    parser.add_argument("--runs", type=int, default=3, help="measured windows (median reported)")
    parser.add_argument("--profile-seconds", type=float, default=2.0,
                        help="length of the separate cProfile run (0: none)")
    parser.add_argument("--planes", type=int, default=4)
    parser.add_argument("--spines", type=int, default=2)
    parser.add_argument("--link-mbps", type=float, default=10.0,
                        help="nominal only (no shaping): sets the agents' RTT target floor, and "
                             "with --paced their NIC rate per plane")
    parser.add_argument("--paced", action="store_true",
                        help="the agents pace their NICs at --link-mbps per plane, as in a "
                             "scenario (CPU per packet in the one-or-two-packets-per-wake regime)")
    parser.add_argument("--msg-bytes", type=int, default=MSG_BYTES)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--raw-send", action="store_true",
                        help="agents send on the raw socket with Python checksums (comparison)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.seconds > 0 or args.profile_seconds < 0 or args.runs < 1 or args.msg_bytes < 1:
        parser.error("--seconds must be > 0, --runs and --msg-bytes >= 1, --profile-seconds >= 0")
    try:
        run_bench(args.seconds, args.runs, args.profile_seconds, args.planes, args.spines,
                  args.link_mbps, args.msg_bytes, args.seed, args.raw_send, out=args.out,
                  paced=args.paced)
    except (BenchError, ValueError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; namespaces and agents removed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
