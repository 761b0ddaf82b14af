"""`python -m experiments.tools.floor_bench`: the floor under the agents' CPU per packet, the
emulated fabric's own cost in the default permutation with C endpoints in the agents' place.

The permutation's fabric at each link rate (kernel routers or OVS, the switches' eBPF data
plane, every port shaped as in a run), and in each host, per plane, an `mrcblast` sender
offering its permutation peer data frames at `OFFERED_SHARE` of the link (MRC's spray: every
spine's route, `dataplane_bench.EVS_PER_PATH` EVs) through the host's own qdisc, and an
`mrcblast` sink. No acknowledgements, no Python on the data path: what the machine spends per
delivered data packet here is what any transport would pay before its own work, the
reference issue 19's cost model asks for beside `cost_bench`'s figures (docs/experiments.md,
"The floor: the fabric's own cost"). Writes results/bench/floor.json; quiet machine only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from endpoints.protocol import wire
from experiments.analysis import fidelity
from experiments.api import traffic
from experiments.outdir import REPO
from experiments.scenarios import scenario
from experiments.tools.dataplane_bench import BLAST, PAYLOAD, _arrived, _machine, _snmp6, frames
from topologies import files, preflight, runctx, switches
from topologies.emulation import Emulation
from topologies.model import Fabric, build
from topologies.preflight import PreflightError

OUT = REPO / "results" / "bench" / "floor.json"
OFFERED_SHARE = 0.9  # of each host link's frames per second: no queue stands, nothing drops
WARMUP_S = 1.5
SEED = 3  # the permutation cost_bench measures (its SEED)
BACKGROUND_S = 1.0  # the machine watched before each rate, nothing of ours running
QUIET_CORES = 0.1  # busier than this before a rate: the figure counts someone else's work too


def frame_rate(fabric: Fabric, frame_len: int) -> float:
    """Frames a second one host link carries, of `frame_len` bytes (the Ethernet frame the
    host's qdisc shapes).

    >>> round(frame_rate(build(link_mbps=10.0), 4246))  # a 4 KB payload's frame in its carrier
    294
    """
    return fabric.params.link_mbps * 1e6 / 8 / frame_len


def busy_cores(seconds: float) -> float:
    """The machine's busy cores over the next `seconds` (/proc/stat)."""
    busy0, total0 = _machine()
    time.sleep(seconds)
    busy1, total1 = _machine()
    return (busy1 - busy0) / max(total1 - total0, 1) * (os.cpu_count() or 1)


def measure(fabric: Fabric, backend: str, seconds: float, seed: int, workdir: Path) -> dict[str, Any]:
    """One rate: the permutation's senders and sinks for `seconds` after `WARMUP_S`; the
    machine's busy cores per delivered data packet, and how busy it was before."""
    background = busy_cores(BACKGROUND_S)
    names = [h.name for h in fabric.hosts]
    perm = traffic.derangement(names, seed)
    em = Emulation(fabric, workdir, dataplane_mode="ebpf", switch=backend)
    procs: list[subprocess.Popen] = []
    with em:
        try:
            sinks = {dst: em.popen(dst, [str(BLAST), "recv", str(wire.MRC_PORT), str(seconds * 4 + 30),
                                         str(PAYLOAD)], stdout=subprocess.PIPE, text=True)
                     for dst in perm.values()}
            procs += sinks.values()
            for sink in sinks.values():
                assert sink.stdout is not None
                sink.stdout.readline()  # {"mode": "ready"}
            pps = 0.0
            for src, dst in perm.items():
                for plane in range(fabric.params.planes):
                    path = workdir / f"frames-{src}-p{plane}.bin"
                    path.write_bytes(frames(fabric, src, dst, plane))
                    frame_len = int.from_bytes(path.read_bytes()[:2], "little")
                    pps = OFFERED_SHARE * frame_rate(fabric, frame_len)
                    procs.append(em.popen(src, [str(BLAST), "send", fabric.host(src).nics[plane].ifname,
                                                str(path), str(WARMUP_S + seconds + 1.0), f"{pps:.1f}"],
                                          stdout=subprocess.PIPE, text=True))
            time.sleep(WARMUP_S)
            sink_pids = [em.pid(dst) for dst in sinks]

            def sample() -> tuple[int, tuple[int, int], float]:
                return sum(_arrived(_snmp6(p)) for p in sink_pids), _machine(), time.monotonic()

            a0, (busy0, total0), t0 = sample()
            time.sleep(seconds)
            a1, (busy1, total1), t1 = sample()
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.communicate(timeout=10)
        setup = round(em.setup_seconds, 2)
    dt = t1 - t0
    delivered = (a1 - a0) / dt
    busy = (busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1)
    offered = pps * fabric.params.planes * len(names)
    # The C endpoints' own CPU is in the figure and is not split out: their system time carries
    # the fabric's forwarding, which runs inline in their sends.
    return {"link_mbps": fabric.params.link_mbps, "fabric": fabric.params.as_dict(), "seed": seed,
            "backend": backend, "window_s": round(dt, 2), "offered_pps": round(offered),
            "delivered_pps": round(delivered), "delivery_ratio": round(delivered / offered, 4),
            "machine_busy_cores": round(busy, 3), "endpoint_processes": len(procs),
            "us_per_packet": round(busy / delivered * 1e6, 1) if delivered else None,
            "background_cores": round(background, 3), "quiet": background <= QUIET_CORES,
            "setup_seconds": setup}


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_raise()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,25,50", help="link rates in Mbit/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=6.0, help="each rate's measured window")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--switch", default="auto", help="switch backend (auto: what runs take here)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        rates = []
    try:
        if not rates or any(not r > 0 for r in rates) or not args.seconds > 0:
            raise PreflightError(f"--rates must be positive Mbit/s, comma-separated (got {args.rates!r}), "
                                 f"and --seconds positive")
        preflight.check_all()
        backend = switches.resolve(args.switch)
        if not os.access(BLAST, os.X_OK):
            raise PreflightError(f"{BLAST.relative_to(REPO)} is missing: run `make setup`")
    except PreflightError as exc:
        print(f"floor_bench: error: {exc}", file=sys.stderr)
        return 2
    params = scenario("permutation").fabric
    runs = []
    for i, rate in enumerate(rates, 1):
        left = (len(rates) - i + 1) * (args.seconds + 8)  # each rate's set-up and teardown: a few s
        print(f"[floor {i}/{len(rates)}] permutation at {rate:g} Mbit/s with C endpoints "
              f"({args.seconds:g} s; about {left:.0f} s left)", flush=True)
        fabric = build(planes=params.planes, leaves=params.leaves, spines=params.spines,
                       hosts_per_leaf=params.hosts_per_leaf, link_mbps=rate)
        with runctx.scratch_dir("mrclab-floor-") as workdir:
            r = measure(fabric, backend, args.seconds, args.seed, workdir)
        runs.append(r)
        print(f"  {r['delivered_pps']:,} data packets/s delivered ({r['delivery_ratio']:.1%} of offered), "
              f"{r['machine_busy_cores']:.2f} cores busy: {r['us_per_packet']} us per packet", flush=True)
        if not r["quiet"]:
            print(f"  warning: the machine was {r['background_cores']:.2f} cores busy before this rate "
                  f"began: the figure counts that work too (quiet: {QUIET_CORES} or less)", flush=True)
    out = {"runs": runs, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "software": fidelity.software_versions(), "machine": {"cpus": os.cpu_count()}}
    files.write_json(args.out, out)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
