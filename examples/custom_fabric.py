"""A fabric of your own shape (needs root): 2 planes x 3 leaves x 3 spines, 2 hosts per leaf,
20 Mbit/s links. Prints what the model derives (switches, links, the paths of a host pair and
their capacity), fails a spine to show which paths it takes down, and measures MRC and TCP
against that capacity.

    sudo .venv/bin/python examples/custom_fabric.py
"""

import time

from experiments.analysis import fidelity
from experiments.analysis.metrics import BIN_S, mean, series
from experiments.api.testbed import Testbed
from topologies.model import build

fabric = build(planes=2, leaves=3, spines=3, hosts_per_leaf=2, link_mbps=20)
print(f"{len(fabric.hosts)} hosts, {len(fabric.switches)} switches, {len(fabric.links)} links")
SRC, DST = "h0", "h4"  # leaf 0 to leaf 2
routes = fabric.routes(SRC, DST)
print(f"{SRC}->{DST}: {len(routes)} paths, e.g. EV {routes[0].ev:#x} = {routes[0].address}")
capacity = {"mrc": fabric.path_capacity_mbps(SRC, DST),
            "tcp": fabric.path_capacity_mbps(SRC, DST, planes=(0,))}

with Testbed(fabric, seed=2) as bed:
    bed.faults.fail_switch("p1s2")
    down = [p for p in bed.paths(SRC, DST) if not p.up]
    print(f"p1s2 failed: {len(down)} path(s) down: " + ", ".join(f"{p.route.ev:#x} ({p.why})" for p in down))
    bed.faults.restore_switch("p1s2")
    print(f"p1s2 recovered: {sum(p.up for p in bed.paths(SRC, DST))} of {len(routes)} paths up")
    for transport in ("mrc", "tcp"):
        flow = bed.flow(transport, SRC, DST)
        t0 = time.monotonic()
        flow.start(seconds=3.0)
        time.sleep(3.6)
        flow.stop()
        result = flow.result()
        flow.close()
        got = mean(series(result.bins, int(t0 / BIN_S), round(3.0 / BIN_S))[50:])  # after 0.5 s
        print(f"{transport}: {got:.1f} of {capacity[transport]:g} Mbit/s, data ok: {result.data_ok}")
        cpu = bed.cpu_headroom(since=t0)  # figures of a run without CPU to spare measure the VM
        print(f"{transport} fidelity: {fidelity.describe_headroom(cpu)}")
