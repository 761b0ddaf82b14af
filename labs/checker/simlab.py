"""The simulated network set-ups the protocol labs share: the product's sender and receiver
cores (or a lab's subclasses of them) over `experiments.simnet`, with the student's part put in
place for the length of one run. Deterministic: the same seed gives the same run."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from endpoints.host.goodput import BIN_S, bin_of
from endpoints.protocol import sender as sender_module
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvState
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.simnet import SimFabric, Simulation, TransferResult, run_transfer, sim_fabric
from labs.checker.student import replacing


@contextmanager
def evset_class(cls: type | None) -> Iterator[None]:
    """Senders made inside the block build their EV set from `cls` (None: the product's)."""
    if cls is None:
        yield
        return
    with replacing(sender_module, "EvSet", cls):
        yield


@dataclass
class Transfer:
    net: SimFabric
    messages: list[bytes]
    result: TransferResult
    sender: Any
    receiver: Any

    @property
    def exact(self) -> bool:
        return [data for _, data in self.result.completed] == self.messages

    def ev_changes(self, new: str) -> list[EvState]:
        return [e for e in self.result.sender_events if isinstance(e, EvState) and e.new == new]

    def mbps(self, start: float, end: float) -> float:
        """Goodput delivered in [start, end) of simulated time, Mbit/s."""
        got = sum(v for k, v in self.result.bins.items() if bin_of(start) <= k < bin_of(end))
        return got * 8 / max(end - start, BIN_S) / 1e6


def transfer(net: SimFabric, sizes: Sequence[int], seed: int = 1, until: float = 30.0,
             config: TransportConfig | None = None, evset: type | None = None,
             sender_cls: type = MrcSender, receiver_cls: type = MrcReceiver) -> Transfer:
    """One QP carries messages of `sizes` bytes over `net`, posted at t=0."""
    config = config or TransportConfig()
    messages = [random.Random(seed * 1000 + i).randbytes(n) for i, n in enumerate(sizes)]
    with evset_class(evset):
        snd = sender_cls(1, 2, net.evs, config, seed)
    rcv = receiver_cls(2, 1, net.evs, config, seed)
    result = run_transfer(Simulation(seed), snd, rcv, net.fwd, net.rev, messages, until)
    return Transfer(net, messages, result, snd, rcv)


def cut_uplink(planes: int = 2, spines: int = 2, cut: tuple[float, float] = (0.5, 1.0)) -> SimFabric:
    """Paths like the fabric's between two hosts, with plane 0's uplink to spine 0 down during
    `cut` (simulated seconds): the path of EV `ev_value(0, 0)` dies, then heals."""
    net = sim_fabric(planes=planes, spines=spines)
    net.links[("up", 0, 0)].down = [cut]
    return net
