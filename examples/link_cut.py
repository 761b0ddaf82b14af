"""A T0-T1 link cut during an MRC transfer, and its plot (needs root: `sudo make setup` first).

h0 streams to h1 over 4 planes x 2 spines; at 2 s the plane-0 link from h0's leaf to spine 0
is cut, at 4 s restored. Prints the goodput before, during and after, what happened to the EV
through that link, and writes a PNG of goodput and EV states.

    sudo .venv/bin/python examples/link_cut.py [--out DIR]
"""

import argparse
import time
from pathlib import Path

from experiments.analysis import fidelity
from experiments.analysis.metrics import BIN_S, mean, series
from experiments.api.testbed import Testbed
from topologies.model import build

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=Path, default=Path("results/examples"))
out = parser.parse_args().out
out.mkdir(parents=True, exist_ok=True)
LINK = "p0l0-p0s0"

with Testbed(build(planes=4, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10), seed=1) as bed:
    cut_ev = next(p.route.ev for p in bed.paths("h0", "h1") if LINK in p.route.links)
    flow = bed.flow("mrc", "h0", "h1")
    t0 = time.monotonic()
    flow.start(seconds=6.0)
    time.sleep(2.0)
    cut = bed.faults.cut_link(LINK)
    time.sleep(2.0)
    restored = bed.faults.restore_link(LINK)
    time.sleep(t0 + 6.5 - time.monotonic())
    changes, _ = flow.ev_history()
    result = flow.result()
    picture = bed.plot(out / "link_cut.png", [flow])
    cpu = bed.cpu_headroom(since=t0)  # figures of a run without CPU to spare measure the VM

mbps = series(result.bins, int(t0 / BIN_S), round(6.0 / BIN_S))
at = lambda t: round((t - t0) / BIN_S)  # noqa: E731 - a bin index on the flow's clock
print(f"goodput before the cut: {mean(mbps[at(t0 + 0.5):at(cut)]):.1f} Mbit/s")
print(f"goodput while cut: {mean(mbps[at(cut):at(restored)]):.1f} Mbit/s")
print(f"goodput after the restore: {mean(mbps[at(restored) + 50:]):.1f} Mbit/s")
for t, ev, old, new in changes:
    if ev == cut_ev:
        since = f"{(t - cut) * 1e3:.0f} ms after the cut" if t < restored else \
            f"{(t - restored) * 1e3:.0f} ms after the restore"
        print(f"EV {ev:#x} ({LINK}): {old} -> {new}, {since}")
print(f"data ok: {result.data_ok}, {result.bytes_delivered} bytes")
print(f"fidelity: {fidelity.describe_headroom(cpu)}")
print(f"plot: {picture}")
