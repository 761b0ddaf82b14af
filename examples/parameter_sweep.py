"""A transport parameter sweep on one fabric: how many EVs an MRC QP needs to ride through a
link cut (needs root). Each QP gets its own `ev_set_size` (per-QP parameters); the fabric
(4 planes x 2 spines: 8 paths) stays up between runs.

    sudo .venv/bin/python examples/parameter_sweep.py [--sizes 2,4,8] [--out DIR]
"""

import argparse
import dataclasses
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.analysis.metrics import BIN_S, mean, series  # noqa: E402
from experiments.api.testbed import Testbed  # noqa: E402
from topologies.model import build  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--sizes", default="2,4,8", help="ev_set_size values, comma-separated")
parser.add_argument("--out", type=Path, default=Path("results/examples"))
args = parser.parse_args()
sizes = [int(s) for s in args.sizes.split(",")]
args.out.mkdir(parents=True, exist_ok=True)
LINK = "p0l0-p0s0"  # on plane 0's first path, the one an EV set of any size keeps

rows = []
with Testbed(build(planes=4, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10), seed=1) as bed:
    for size in sizes:
        flow = bed.flow("mrc", "h0", "h1", config=dataclasses.replace(bed.transport, ev_set_size=size))
        t0 = time.monotonic()
        flow.start(seconds=4.0)
        time.sleep(1.5)
        bed.faults.cut_link(LINK)
        time.sleep(1.5)
        bed.faults.restore_link(LINK)
        time.sleep(t0 + 4.3 - time.monotonic())
        result = flow.result()
        flow.close()
        mbps = series(result.bins, int(t0 / BIN_S), round(4.0 / BIN_S))
        before, during = mean(mbps[50:150]), mean(mbps[160:300])  # 0.5-1.5 s, 1.6-3.0 s
        rows.append((size, before, during, result.data_ok))
        faithful = bed.cpu_headroom(since=t0)["faithful"]  # figures without CPU to spare measure the VM
        print(f"ev_set_size={size}: before {before:.1f} Mbit/s, during the cut {during:.1f} Mbit/s "
              f"({during / before:.0%}), data ok: {result.data_ok}, "
              f"{'faithful' if faithful else 'NOT faithful'}")
        time.sleep(0.3)  # the closed QPs' last packets drain

fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
ax.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label="before the cut")
ax.plot([r[0] for r in rows], [r[2] for r in rows], "s--", label=f"while {LINK} is cut")
ax.set_xscale("log", base=2)
ax.set_xticks(sizes, [str(s) for s in sizes])
ax.set_xlabel("ev_set_size (EVs per QP, spread over 4 planes)")
ax.set_ylabel("goodput (Mbit/s)")
ax.set_ylim(bottom=0)
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(args.out / "parameter_sweep.png")
print(f"plot: {args.out / 'parameter_sweep.png'}")
