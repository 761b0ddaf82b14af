"""The MRC transport core over the simulated network: no root, no emulation, deterministic.

Two hosts joined by 4 planes x 2 spines (8 paths, 10 Mbit/s links); 8 MiB in 1 MiB messages
while plane 0's uplink to spine 0 is down from 0.5 s to 1.5 s. The same sender and receiver
objects the host agents run; simulated time instead of sockets and a clock.

    .venv/bin/python examples/simulated_transfer.py [--seed N]
"""

import argparse
import random

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvState
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seed", type=int, default=1)
seed = parser.parse_args().seed

fabric = sim_fabric(planes=4, spines=2)  # every link 10 Mbit/s, 0.3 ms, a 55 KB queue
fabric.links[("up", 0, 0)].down = [(0.5, 1.5)]  # [start, end) in simulated seconds
# What an agent derives from the fabric (RTT target, window ceiling, loss-timer floor, SACK
# timer); these simulated links mark no ECN.
config = TransportConfig().for_fabric(link_mbps=10.0, planes=4, ecn=False)
sender = MrcSender(1, 2, fabric.evs, config, seed)  # QP 1 sends to QP 2
receiver = MrcReceiver(2, 1, fabric.evs, config, seed)
messages = [random.Random(seed * 100 + i).randbytes(1 << 20) for i in range(8)]

result = run_transfer(Simulation(seed), sender, receiver, fabric.fwd, fabric.rev, messages, until=30)

exact = [data for _, data in result.completed] == messages
mbps = sum(map(len, messages)) * 8 / result.end / 1e6
print(f"delivered {len(result.completed)} of {len(messages)} messages, exact: {exact}")
print(f"time {result.end:.3f} s, goodput {mbps:.1f} Mbit/s over {len(fabric.evs)} paths")
print(f"retransmitted {sender.stats['retransmitted']} packets, {sender.stats['bad_evs']} EV(s) benched")
for e in result.sender_events:
    if isinstance(e, EvState) and "ASSUMED_BAD" in (e.old, e.new):
        print(f"  {e.t:.3f} s  EV {e.ev:#x}: {e.old} -> {e.new}")
print("EV        state  benched  rtt ms  MiB sent")
for row in sender.ev_report():
    mib = row.bytes_sent / 2**20
    print(f"{row.ev:#x}  {row.state:5}  {row.benched:7}  {row.srtt * 1e3:6.2f}  {mib:8.2f}")
