"""Start-up cost of the emulation, measured: `python -m experiments.tools.startup_bench`.

Builds the two fabrics the start-up goals are set for (16 hosts x 4 planes: <= 15 s; 64 hosts x 8
planes: <= 90 s, "ready" meaning switches up, host networking done and every flow installed),
probes a sample of paths through each (so "ready" is proven, not assumed) and records
set-up and teardown times in results/bench/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from experiments.analysis.fidelity import software_versions
from experiments.outdir import RESULTS
from experiments.tools.check_fabric import check_fabric
from topologies import files, runctx
from topologies.model import FabricParams, build
from topologies.switches import CHOICES

BENCH_RESULTS = RESULTS / "bench"
SHAPES = {
    "16x4": (FabricParams(planes=4, leaves=4, spines=2, hosts_per_leaf=4), 15.0),
    "64x8": (FabricParams(planes=8, leaves=8, spines=4, hosts_per_leaf=8), 90.0),
}


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_raise()  # Ctrl-C and SIGTERM tear the emulation down, even as a background job
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--sample-pairs", type=int, default=24)
    parser.add_argument("--switch", choices=CHOICES, default="auto", help="switch backend")
    parser.add_argument("--out", type=Path, default=BENCH_RESULTS / "startup.json")
    args = parser.parse_args(argv)
    runs = {}
    for name in args.shapes.split(","):
        params, target = SHAPES[name]
        fabric = build(params)
        started = time.monotonic()
        result = check_fabric(fabric, None, args.sample_pairs, seed=1, switch=args.switch)
        runs[name] = {
            "fabric": params.as_dict(), "hosts": result["hosts"], "switches": result["switches"],
            "links": result["links"], "setup_seconds": result["setup_seconds"],
            "target_seconds": target, "within_target": result["setup_seconds"] <= target,
            "teardown_seconds": result["teardown_seconds"], "paths_probed": result["paths_total"],
            "paths_ok": result["ok"], "wall_seconds": round(time.monotonic() - started, 1),
            "datapath": result["datapath"], "switch_backend": result["switch_backend"],
        }
        print(json.dumps({name: runs[name]}), flush=True)
    out = {"runs": runs, "software": software_versions(), "cpus": os.cpu_count(),
           "machine": platform.machine()}
    files.write_json(args.out, out)
    return 0 if all(r["within_target"] and r["paths_ok"] for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
