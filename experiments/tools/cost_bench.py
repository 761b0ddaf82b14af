"""`python -m experiments.tools.cost_bench`: the whole machine's CPU per delivered data packet.

The figure that bounds every run: the default permutation (MRC only, the default backend) at two
or more link rates, each a real `mrclab run permutation`. While each flow runs, the machine's CPU
(/proc/stat: user, nice, system, irq, softirq; steal apart) and every process's (/proc/PID/stat:
the agents, the runner, the control plane, the rest) are read over the steady window; the data
packets delivered come from the run's own summary (goodput over the payload size). A least-squares
line through the rates splits the cost into what grows with the rate (`marginal_us_per_packet`)
and what does not (`fixed_cores`); `us_per_packet` at each rate is the whole cost over the
packets. Physical references measured beside it: a bare Python UDP send-and-receive loop on this
machine, and the kernel routers' packet-hops/s with the C sender where `make bench` measured it.

`--calibrate`: the short form (`make setup` runs it when the cached one is stale), written to
results/calibration-BACKEND.json (experiments/analysis/calibration.py) with the machine's
fingerprint; the full form writes results/bench/cost.json. `--profile`: one more run with each
agent under cProfile, the top functions by own time over all agents added to the result.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from endpoints.protocol.config import TransportConfig
from experiments.analysis import calibration, standing
from experiments.outdir import REPO, RESULTS
from experiments.scenarios import SCENARIOS
from experiments.scenarios.permutation import THROUGHPUT_FRACTION, THROUGHPUT_MBPS
from topologies import cleanup, files, runctx

OUT = RESULTS / "bench" / "cost.json"
DATAPLANE = RESULTS / "bench" / "dataplane.json"
WARM_S = 1.5  # after the flow starts: every flow has found its rate (permutation's STEADY_FROM_S)
TAIL_S = 0.5  # left out before the flow's end
CALIBRATE_RATES = (5.0, 10.0)
CALIBRATE_SECONDS = 5.0  # the calm phase
# The fastest rate's run lasts long enough for the permutation's queues to stand and be read
# after (experiments/analysis/standing.py): at 10 Mbit/s they stood 3-11.4 s in, and a reading
# needs `standing.STANDING_SETTLE_S` + `standing.MIN_WINDOW_S` after the onset (14 s missed an
# onset at 11.4 s).
CALIBRATE_STANDING_SECONDS = 20.0
SAMPLE_S = 0.5  # CPU readings through a run, split afterwards into its calm and standing phases
PHASE_FIELDS = ("window_s", "delivered_data_pps", "busy_cores", "agents_process_cores", "us_per_packet",
                "background_cores", "steal_cores")
SEED = 3  # ECMP collides on the default fabric with this seed; the cost reference is measured with it
# The processes busy (calibration.busy_pids) in the second before a run are the machine's
# background load (another program, a busy loop): their CPU during the run is not the run's, nor
# that of any other process the run did not start (`strangers`).
BACKGROUND_WINDOW_S = 1.0
MIN_RATE = 1.0  # Mbit/s: the calibration halves its lowest rate down to this for a faithful pair
IDLE_S, SETTLE_S = 4.0, 2.0  # `idle_cost`'s window, and the wait before it


Procs = dict[int, calibration.ProcessTimes]  # one reading of every process (calibration.processes)


class Sample(NamedTuple):
    """One reading during a run: when, the machine's CPU times, every process's, and the run's
    own processes then (`cleanup.marked_processes`: gone by the time the run is read)."""
    t: float
    machine: list[int]
    procs: Procs
    marked: frozenset[int]


def _ticks(procs: Procs) -> dict[int, int]:
    return {pid: user + system for pid, (_cmd, user, system) in procs.items()}


def _role(cmd: str) -> str:
    if "endpoints.host.agent" in cmd:
        return "agents"
    if "experiments.cli" in cmd:
        return "runner"
    if "controller.run" in cmd:
        return "control_plane"
    return "other"


def background() -> set[int]:
    """The processes keeping the machine busy now (over `BACKGROUND_WINDOW_S`), this one apart:
    what a run's CPU figure must leave out."""
    before = calibration.process_ticks()
    time.sleep(BACKGROUND_WINDOW_S)
    return calibration.busy_pids(before, calibration.process_ticks(), BACKGROUND_WINDOW_S) - {os.getpid()}


def strangers(busy_before: set[int], after: Procs, runner: int,
              marked: frozenset[int] | None = None) -> set[int]:
    """The user-space processes of two readings that are not the run's: busy before it started,
    or unmarked (every process a run starts carries `cleanup.MARKER`; its runner, which set the
    marker in its own environment once started, is `runner`). A program started during the run
    (a compiler, a test suite) counts too: on a CI rehearsal one such added 0.4 of a core to a
    calibration run and doubled the fit's fixed part. Kernel threads (no command line: the
    forwarding, softirq) are the run's."""
    mine = set(cleanup.marked_processes() if marked is None else marked) | {runner, os.getpid()}
    return busy_before | {pid for pid, (cmd, _, _) in after.items() if cmd and pid not in mine}


def _since(before: Procs, after: Procs) -> dict[int, int]:
    """`_ticks(before)`, with a process started between the readings at 0 (all its CPU is in it)."""
    return {**{pid: 0 for pid in after}, **_ticks(before)}


def _split(before: Procs, after: Procs, seconds: float) -> dict[str, dict[str, float]]:
    """Cores each role used between two readings, user and system apart."""
    hz = os.sysconf("SC_CLK_TCK")
    roles: dict[str, dict[str, float]] = {}
    for pid, (cmd, user, system) in after.items():
        if pid in before:
            r = roles.setdefault(_role(cmd), {"user": 0.0, "system": 0.0})
            r["user"] += (user - before[pid][1]) / hz / seconds
            r["system"] += (system - before[pid][2]) / hz / seconds
    return {k: {m: round(v, 3) for m, v in r.items()} for k, r in sorted(roles.items())}


def _busiest_agents(before: Procs, after: Procs, seconds: float) -> float:
    """The busiest agents' process's share of one core between two readings: a process of
    several hosts' agents (endpoints/host/shared.py) is one thread, saturated at one core
    while the machine may idle (capacity.AGENTS_PROCESS_SHARE)."""
    hz = os.sysconf("SC_CLK_TCK")
    busy = [(user + system - before[pid][1] - before[pid][2]) / hz / seconds
            for pid, (cmd, user, system) in after.items() if _role(cmd) == "agents" and pid in before]
    return round(max(busy, default=0.0), 3)


def _sample() -> Sample:
    return Sample(time.monotonic(), calibration.machine_times(), calibration.processes(),
                  frozenset(cleanup.marked_processes()))


def _reading(s0: Sample, s1: Sample, busy_before: set[int], runner: int) -> dict[str, Any]:
    """Machine and per-role CPU between two samples, other programs' busy processes apart."""
    seconds = s1.t - s0.t
    busy, steal = calibration.busy_fraction(s0.machine, s1.machine)
    d = [b - a for a, b in zip(s0.machine, s1.machine, strict=True)]
    cores = os.cpu_count() or 1
    other = calibration.cores_used(strangers(busy_before, s1.procs, runner, s1.marked),
                                   _since(s0.procs, s1.procs), _ticks(s1.procs), seconds)
    return {"window_s": round(seconds, 2),
            "agents_process_cores": _busiest_agents(s0.procs, s1.procs, seconds),
            "busy_cores": round(max(busy * cores - other, 0.0), 3),
            "background_cores": round(other, 3),
            "steal_cores": round(steal * cores, 3),
            "softirq_cores": round(d[6] / (sum(d) or 1) * cores, 3),
            "by_role": _split(s0.procs, s1.procs, seconds)}


def measure(rate: float, seconds: float, seed: int, backend: str, out: Path,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """One permutation run at `rate`: machine and per-role CPU, sampled every `SAMPLE_S`, and
    the data packets delivered, over its calm phase (from `WARM_S` after the flow started until
    its queues stood, experiments/analysis/standing.py) and over its standing-queue phase where
    the run lasted into one (`standing.phases`); the calm phase's figures are the run's (the fit's).
    The CPU of processes that were already busy before the run (see `background`) is measured
    apart and left out of `busy_cores`."""
    busy_before = background()
    argv = [sys.executable, "-m", "experiments.cli", "run", "permutation", "--switch", backend,
            "--transports", "mrc", "--duration", f"{seconds:g}", "--seed", str(seed),
            "--link-mbps", f"{rate:g}", "--agents", "shared", "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    samples: list[Sample] = []
    lines = []
    start = 0.0
    for line in proc.stdout:
        lines.append(line)
        if "mrc: running" in line and not samples:
            start = time.monotonic()
            end = start + max(seconds - TAIL_S, WARM_S + 1.0)
            while True:
                samples.append(_sample())
                left = end - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(SAMPLE_S, left))
    if proc.wait() != 0 or len(samples) < 2:
        raise RuntimeError(f"the permutation at {rate:g} Mbit/s failed:\n{''.join(lines[-15:])}")
    summary = json.loads((out / "summary.json").read_text())
    mrc = summary["transports"]["mrc"]
    payload = TransportConfig().mtu_payload  # the permutation runs the default transport
    flow0 = summary["traces"]["windows"]["mrc"][0]
    goodput = [(flow0 + float(row["t_s"]), float(row["mrc_mbps"]))
               for row in csv.DictReader((out / "timeseries.csv").open())]
    onset = standing.onset(out / "traces")
    calm, stood = standing.phases([x.t for x in samples], start + WARM_S, onset)
    if calm is None and stood is None:  # too short to split: the whole window
        calm = (0, len(samples) - 1)
    found: dict[str, dict[str, Any]] = {}
    for name, span in (("calm", calm), ("standing_queues", stood)):
        if span is None:
            continue
        s0, s1 = samples[span[0]], samples[span[1]]
        r = _reading(s0, s1, busy_before, proc.pid)
        pps = standing.window_pps(goodput, s0.t, s1.t, payload) or mrc[THROUGHPUT_MBPS] * 1e6 / 8 / payload
        found[name] = {"delivered_data_pps": round(pps), **r,
                       "us_per_packet": round(r["busy_cores"] / pps * 1e6, 1)}
    fid = summary["fidelity"]
    # a run whose queues stood too soon to read a calm phase gives its standing one
    main = found["calm"] if "calm" in found else found["standing_queues"]
    return {"link_mbps": rate, **main,
            "queues_stood_s": None if onset is None else round(onset - flow0, 2),
            "phases": {k: {f: v[f] for f in PHASE_FIELDS} for k, v in found.items()},
            THROUGHPUT_FRACTION: mrc[THROUGHPUT_FRACTION], "faithful": fid["faithful"],
            "cpu_idle_p10_pct": fid["per_transport"]["mrc"]["cpu_idle_p10_pct"]}


def fit(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Least squares of busy cores on delivered packets/s: fixed cores + marginal us/packet,
    over the faithful runs where there are two (a saturated machine's cores stop growing with
    the rate, which would bend the line)."""
    used = [r for r in runs if r["faithful"]]
    used = used if len(used) >= 2 else runs
    xs = [r["delivered_data_pps"] for r in used]
    ys = [r["busy_cores"] for r in used]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if n > 1 and sxx else 0.0
    return {"fixed_cores": round(my - slope * mx, 3), "marginal_us_per_packet": round(slope * 1e6, 1),
            "fitted_rates": [r["link_mbps"] for r in used]}


def python_udp_loop_us(packets: int = 20000, size: int = 4096) -> float:
    """CPU microseconds per datagram of a bare Python loop sending `size`-byte datagrams to a
    socket of its own on the loopback and reading each back."""
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind(("::1", 0))
        tx.connect(rx.getsockname()[:2])
        payload = b"\0" * size
        start = time.process_time()
        for _ in range(packets):
            tx.send(payload)
            rx.recv(size + 64)
        return round((time.process_time() - start) / packets * 1e6, 2)
    finally:
        rx.close()
        tx.close()


def _profile(rate: float, seconds: float, seed: int, backend: str, work: Path) -> list[dict[str, Any]]:
    folder = work / "profile"
    folder.mkdir()
    measure(rate, seconds, seed, backend, work / "profiled", env={"MRCLAB_AGENT_PROFILE": str(folder)})
    stats = pstats.Stats(*glob.glob(str(folder / "agent-*.prof")))
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for k, v in raw.items() if k[2] != "poll" and "epoll" not in k[2]) or 1.0
    rows = sorted(((k, v) for k, v in raw.items() if "poll' of 'select.epoll" not in k[2]
                   and k[2] != "select"), key=lambda kv: -kv[1][2])[:20]
    return [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})" if k[0] != "~" else k[2],
             "calls": v[1], "own_s": round(v[2], 3), "share_pct": round(v[2] / total * 100, 1)}
            for k, v in rows]


def lower_rate(runs: list[dict[str, Any]]) -> float | None:
    """The next rate to try when fewer than two runs were faithful (a loaded or slow machine):
    half the lowest tried, or None below `MIN_RATE` or once two are faithful."""
    if sum(1 for r in runs if r["faithful"]) >= 2 or not runs:
        return None
    rate = min(r["link_mbps"] for r in runs) / 2
    return rate if rate >= MIN_RATE else None


def idle_cost(backend: str) -> dict[str, float]:
    """The cores the machine spends with no data moving, read directly: the default
    permutation's fabric up, then with every host's agent running too (`IDLE_S` each, after
    `SETTLE_S`), other programs' CPU left out. What does not grow with the
    rate; the fit's intercept (`fixed_cores`) is more, as it also holds a per-packet cost that
    falls with the rate (fewer wake-ups per packet)."""
    from experiments.api.testbed import Testbed
    from topologies.model import build

    out: dict[str, float] = {}
    cores = os.cpu_count() or 1
    with Testbed(build(SCENARIOS["permutation"].fabric), switch=backend) as tb:
        for key in ("fabric_cores", "fabric_and_agents_cores"):
            if key == "fabric_and_agents_cores":
                tb.prepare(["mrc"])
            time.sleep(SETTLE_S)
            m0, p0, t0 = calibration.machine_times(), calibration.processes(), time.monotonic()
            time.sleep(IDLE_S)
            m1, p1, t1 = calibration.machine_times(), calibration.processes(), time.monotonic()
            busy, steal = calibration.busy_fraction(m0, m1)
            # Counted up from what is the fabric's (the processes it started, this one, the
            # kernel's threads, interrupts), not down from the machine: with so little to
            # count, a stranger's short job that ended within the window (a type checker, a
            # test) would be all of the figure.
            d = [b - a for a, b in zip(m0, m1, strict=True)]
            irq = (d[5] + d[6]) / (sum(d) or 1) * cores
            ours = set(cleanup.marked_processes()) | {os.getpid()} | {
                pid for pid, (cmd, _, _) in p1.items() if not cmd}
            used = calibration.cores_used(ours, _since(p0, p1), _ticks(p1), t1 - t0) + irq
            out[key] = round(used, 3)
            out[key.replace("_cores", "_steal_cores")] = round(steal * cores, 3)
            out[key.replace("_cores", "_background_cores")] = round(max(busy * cores - used, 0.0), 3)
    return out


def run(rates: list[float], seconds: float, seed: int, backend: str, profile: bool,
        say: Any = print, adapt: bool = False, standing_seconds: float | None = None) -> dict[str, Any]:
    """Each rate in turn; with `adapt`, lower rates after them until two runs are faithful
    (`lower_rate`), so that the fit stands on faithful runs; with `standing_seconds`, the
    fastest rate's run that long (`standing.standing_cost` reads its standing-queue phase)."""
    runs: list[dict[str, Any]] = []
    todo = list(rates)
    with tempfile.TemporaryDirectory(prefix="mrclab-cost-") as tmp:
        work = Path(tmp)
        while todo:
            rate = todo.pop(0)
            n = len(runs) + 1
            total = n + len(todo)
            long = standing_seconds if standing_seconds and rate == max(rates) else seconds
            left = (len(todo) + 1) * (seconds + 9) + long - seconds
            say(f"[cost {n}/{total}] permutation at {rate:g} Mbit/s ({long:g} s; about "
                f"{left:.0f} s left)")
            runs.append(measure(rate, long, seed, backend, work / f"r{n}"))
            r = runs[-1]
            verdict = "faithful" if r["faithful"] else "NOT faithful"
            extra = f"; {r['background_cores']:.2f} cores busy with other programs, left out" \
                if r["background_cores"] >= calibration.BUSY_MIN_CORES else ""
            say(f"  {r['delivered_data_pps']:,} data packets/s delivered, {r['busy_cores']:.2f} cores "
                f"busy: {r['us_per_packet']:.0f} us per packet ({verdict}{extra})")
            stood = r["phases"].get("standing_queues")
            if stood is not None:
                say(f"  queues stood {r['queues_stood_s']:g} s in; after: {stood['delivered_data_pps']:,} "
                    f"packets/s, {stood['busy_cores']:.2f} cores busy ({stood['us_per_packet']:.0f} us "
                    f"per packet), the agents' process {stood['agents_process_cores']:.2f} of a core")
            if adapt and not todo:
                lower = lower_rate(runs)
                if lower is not None:
                    say(f"  fewer than two faithful runs: one more at {lower:g} Mbit/s")
                    todo.append(lower)
        result: dict[str, Any] = {
            "method": "whole-machine CPU (/proc/stat, steal apart, other programs' busy processes "
                      "apart) over each run's calm phase (before its queues stood) against the data "
                      "packets delivered in it; fixed + marginal by least squares; the standing-queue "
                      "phase's cost against it where a run lasted into one (standing_queues)",
            "scenario": "permutation", "transports": ["mrc"],
            "fabric": SCENARIOS["permutation"].fabric.as_dict(),
            "backend": backend, "agents": "shared", "seed": seed, "seconds": seconds, "runs": runs,
            **fit(runs), "standing_queues": standing.standing_cost(runs),
            "fingerprint": calibration.fingerprint(backend),
            "references": {"python_udp_loop_us_per_datagram": python_udp_loop_us()}}
        dp = files.read_json(DATAPLANE).get(backend, {})
        if isinstance(dp, dict):
            result["references"]["dataplane_packet_hops_per_s"] = {
                name: r.get("packet_hops_per_s") for name, r in dp.items() if isinstance(r, dict)}
        # what no data costs: the calibration's curve starts there (capacity.cost_points)
        say("[cost] the fabric, then the agents too, with no data moving")
        result["idle"] = idle_cost(backend)
        if profile:
            # at the fastest faithful rate: a saturated machine's profile is the queueing's
            rate = max([r["link_mbps"] for r in runs if r["faithful"]] or [rates[0]])
            say(f"[cost] one more run at {rate:g} Mbit/s with the agents under cProfile")
            result["profile_link_mbps"] = rate
            result["profile_top"] = _profile(rate, seconds, seed, backend, work)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.tools.cost_bench",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--rates", default="5,10", help="link rates in Mbit/s, comma-separated (two or more)")
    p.add_argument("--seconds", type=float, default=16.0,
                   help="each run's flow (long enough for the queues to stand: the cost that matters)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--switch", default="auto", help="switch backend (auto: what runs take here)")
    p.add_argument("--profile", action="store_true", help="one more run with the agents profiled")
    p.add_argument("--calibrate", action="store_true",
                   help="the short form, cached as this machine's calibration of the backend "
                        "(results/calibration-BACKEND.json)")
    p.add_argument("--if-stale", action="store_true", help="with --calibrate: only when the cache is stale")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    try:
        rates = sorted({float(x) for x in args.rates.split(",")})
    except ValueError:
        rates = []
    if len(rates) < 2 or not all(0 < r <= 1000 for r in rates) or not 1 <= args.seconds <= 120:
        print("cost_bench: error: --rates needs two or more rates in (0, 1000] Mbit/s and --seconds "
              "1-120", file=sys.stderr)
        return 2
    from topologies import switches  # needs the machine (which backends exist)
    backend = switches.resolve(args.switch)
    if args.calibrate:
        if args.if_stale and not calibration.stale(backend):
            print(f"calibration: up to date ({calibration.cache_path(backend).relative_to(REPO)})")
            return 0
        if args.if_stale and not cleanup.lock_free():
            # `make setup` beside a run: its CPU would read as this machine's cost, and the
            # calibration's runs would take the emulation from a suite's next run
            print(f"calibration: stale, not measured now (`make setup` measures it once that run "
                  f"has ended): {cleanup.busy_message(cleanup.holder())}")
            return 0
        rates, seconds = list(CALIBRATE_RATES), CALIBRATE_SECONDS
    else:
        seconds = args.seconds
    runctx.interrupts_raise()
    result = run(rates, seconds, args.seed, backend, args.profile and not args.calibrate,
                 adapt=args.calibrate,
                 standing_seconds=CALIBRATE_STANDING_SECONDS if args.calibrate else None)
    target = calibration.cache_path(backend) if args.calibrate else Path(args.out)
    files.write_json(target, result)
    print(f"fixed {result['fixed_cores']:.2f} cores + {result['marginal_us_per_packet']:.0f} us per "
          f"delivered data packet ({backend}, seed {args.seed}); a bare Python UDP loop "
          f"{result['references']['python_udp_loop_us_per_datagram']} us per datagram")
    if "idle" in result:
        print(f"with no data moving: the fabric {result['idle']['fabric_cores']:.2f} cores, with the "
              f"agents {result['idle']['fabric_and_agents_cores']:.2f}")
    print(f"results: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
