"""Ring all-reduce under loss at every NIC (kind "allreduce", the MRC paper's Fig. 16): every
host in a ring, an all-reduce of S bytes per host is 2(n-1) steps in which each host writes
S/n to its right neighbour (reduce-scatter, then all-gather); a step ends when every neighbour
has its chunk. Swept by message size (`sizes_kb`: --step-kb is the largest, then a quarter and
a sixteenth of it) and by random loss at every host NIC on every plane (`loss_rates`: 0, then
--loss / 10 and --loss; the paper's 0, 0.1% and 1% by default), injected by nftables rules on
each host link's leaf port, both ways (FaultInjector.set_nic_loss).

MRC runs one QP per neighbour pair, spraying over every plane. RoCE runs N QPs per pair for
each N of --qps (the paper's 1 to 16): QP i on plane i mod planes with its own ECMP hash
(AgentFlow's `entropy`), each carrying 1/N of the chunk, as a NIC spreads a collective's QPs.

Kind "alltoall" (the paper's Fig. 17) is the same sweep over an all-to-all: every host writes
S/n to every other host at once, and it ends when every host has every part.

Figures: the algorithm bandwidth (S over the collective's time, Mbit/s) per QP count, loss
rate and size (`algbw_mbps`), each set of QPs warmed up by one untimed collective first. Each
size is timed over as many collectives back to back as move the largest size's bytes
(`iterations`: 16, 4 and 1 by default), their mean time: every size then sees as many packets,
so as many random losses on average, as the largest's one collective, where a single small
collective under 1% loss drew one tail loss or none (nccl-tests times many iterations too).
A size not done within LIMIT_S counts as unusable (its entry None, the rest of that sweep
skipped, `unfinished`). Small sizes with many QPs measure the control calls too: every write
and completion is a call to an agent (RoCE with 16 QPs: 192 writes per all-to-all).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from experiments.analysis import metrics
from experiments.api import traffic
from experiments.api.flows import AgentFlow, completed_all, finish, write_all
from experiments.api.testbed import Testbed
from experiments.scenarios.base import DEFAULT_LINK_MBPS, Kind, Options, Record, Scenario
from experiments.scenarios.schema import DATA_OK, Figures, Row
from topologies.model import Fabric, FabricError, FabricParams

# The paper's loss rates (0, 0.1%, 1%) and its largest QP count; the default sweep's sizes.
LOSS_RATES = (0.0, 0.001, 0.01)
ROCE_QPS = (1, 4, 16)
LARGEST_KB = 2048  # per host; the sweep: this, a quarter and a sixteenth
LIMIT_S = 20.0  # a size's collectives not done by then are "unusable": the rest of its sweep is skipped
POLL_S = 0.005  # how often the QP a step waits for is asked for its completions
# The agents' CPU per data packet against the permutation's, for `auto`: at 20 Mbit/s the
# all-reduce's 4 hosts took the agents' process to 88-92% of a core (p90, RoCE with 16 QPs a
# pair), as much as the default permutation's 8 hosts at that rate (0.95-0.99), on half the
# data: many QPs, every write and completion a control call, go-back-N resending. The
# all-to-all has three peers a host, so three times the QPs (RoCE: 192): 96-100% at 20 Mbit/s
# and 93% in one run of two at 10, about three times the permutation's cost per packet.
AGENT_COST = 2.0
ALLTOALL_AGENT_COST = 3.0


# The headline and checked figures' keys: their one spelling, which every reader imports.
ALGBW_MBPS: Final = "algbw_mbps"
UNFINISHED: Final = "unfinished"


class AllReduceFigures(Figures, total=False):
    """One transport's figures in allreduce and alltoall: keys are QP counts, loss rates and
    sizes (KB) as strings (JSON object keys)."""
    hosts: list[str]  # allreduce: in ring order
    sizes_kb: list[int]
    loss_rates: list[float]
    algbw_mbps: dict[str, dict[str, dict[str, float | None]]]  # qps -> loss -> size KB -> Mbit/s
    iterations: dict[str, int]  # size KB -> collectives timed together (`iterations`)
    unfinished: int  # sizes not done within LIMIT_S (and those skipped after one)
    dropped: int  # packets the NIC loss rules dropped


def sizes_kb(largest: int) -> tuple[int, ...]:
    """The sweep's message sizes per host, smallest first: a sixteenth, a quarter, all of
    `largest` (never below 1 KB; duplicates dropped).

    >>> sizes_kb(2048)
    (128, 512, 2048)
    >>> sizes_kb(8)
    (1, 2, 8)
    """
    return tuple(sorted({max(1, largest // 16), max(1, largest // 4), largest}))


def iterations(size_kb: int, largest_kb: int) -> int:
    """Collectives of `size_kb` timed together: as many as move `largest_kb`'s bytes, at least one.

    >>> [iterations(kb, 2048) for kb in sizes_kb(2048)]
    [16, 4, 1]
    >>> iterations(3, 8)
    2
    """
    return max(1, largest_kb // size_kb)


def loss_rates(opts: Options) -> tuple[float, ...]:
    """0, then --loss / 10 and --loss; the paper's rates unless --loss was given."""
    if "loss" not in opts.given:
        return LOSS_RATES
    return (0.0, opts.loss / 10, opts.loss)


def largest_kb(opts: Options) -> int:
    return opts.step_kb if "step_kb" in opts.given else LARGEST_KB


def qp_counts(opts: Options, transport: str) -> tuple[int, ...]:
    """RoCE's QP counts per neighbour pair (--qps, the paper's 1 to 16 by default); one for
    the multipath transports, which spread over every plane by themselves."""
    if transport != "roce":
        return (1,)
    return opts.qps if "qps" in opts.given else ROCE_QPS


def chunks(nbytes: int, parts: int) -> list[int]:
    """`nbytes` split over `parts` QPs, as evenly as whole bytes allow.

    >>> chunks(10, 4)
    [3, 3, 2, 2]
    """
    base, extra = divmod(nbytes, parts)
    return [base + (i < extra) for i in range(parts)]


def algbw_mbps(size_bytes: int, seconds: float | None) -> float | None:
    """The all-reduce's algorithm bandwidth: its size over its time (None: it did not finish)."""
    return None if seconds is None or seconds <= 0 else round(size_bytes * 8 / seconds / 1e6, 3)


class AllReduce(Kind):
    name = "allreduce"
    timed = False
    options = frozenset({"loss", "qps", "step_kb"})

    def check(self, opts: Options, fabric: Fabric) -> None:
        if set(opts.transports) - {"mrc", "roce", "spray"}:
            raise FabricError(f"{self.name} runs on the agents' transports only (mrc, roce, spray): "
                              "drop tcp/mptcp from --transports")
        if len(fabric.hosts) < 2:
            raise FabricError(f"{self.name} needs 2+ hosts")
        if "qps" in opts.given and "roce" not in opts.transports:
            raise FabricError("--qps is RoCE's QP count: add roce to --transports or drop it")
        if "loss" in opts.given and not 0 < opts.loss <= 0.2:
            raise FabricError(f"{self.name}'s --loss (the highest rate; 0 and a tenth of it run too) "
                              f"must be in (0, 0.2], got {opts.loss:g}")

    def pairs(self, names: list[str]) -> list[tuple[str, str]]:
        """The host pairs that carry data: each host to its right neighbour in the ring."""
        return traffic.ring(names)

    def collective(self, groups: Sequence[Sequence[AgentFlow]], hosts: int, size: int,
                   limit: float) -> float | None:
        """One all-reduce of `size` bytes per host over `groups` (a pair's QPs each): 2(n-1)
        steps of S/n."""
        return _steps(groups, 2 * (hosts - 1), max(1, size // hosts), limit)

    def repeated(self, groups: Sequence[Sequence[AgentFlow]], hosts: int, size: int, count: int,
                 limit: float) -> float | None:
        """`count` collectives of `size` back to back: their mean seconds, None when they were
        not all done within `limit` seconds in all."""
        start = time.monotonic()
        for _ in range(count):
            left = limit - (time.monotonic() - start)
            if left <= 0 or self.collective(groups, hosts, size, left) is None:
                return None
        return (time.monotonic() - start) / count

    def option_fields(self, opts: Options) -> dict:
        return {"loss_rates": list(loss_rates(opts)), "sizes_kb": list(sizes_kb(largest_kb(opts))),
                "qps": list(qp_counts(opts, "roce"))}

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        return len(fabric.hosts)

    def agent_cost(self, opts: Options) -> float:
        return AGENT_COST

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, faults = bed.fabric, bed.faults
        names = [h.name for h in fabric.hosts]
        sizes = sizes_kb(largest_kb(opts))
        counts = {kb: iterations(kb, sizes[-1]) for kb in sizes}  # collectives timed per size
        first = len(faults.timeline)
        t_start = time.monotonic()
        table: dict[str, dict[str, dict[str, float | None]]] = {}
        unfinished, data_ok, results = 0, True, []
        for qps in qp_counts(opts, transport):
            for rate in loss_rates(opts):
                if rate:
                    faults.set_nic_loss(rate)
                groups = [[bed.agent_flow(transport, src, dst, plane=i % fabric.params.planes,
                                          entropy=i // fabric.params.planes) for i in range(qps)]
                          for src, dst in self.pairs(names)]
                row: dict[str, float | None] = {}
                # One untimed collective of the smallest size first, as nccl-tests' warm-up:
                # fresh QPs' first packets (window growth, the hosts' neighbour entries) are
                # not the transport's steady bandwidth. One not done in time: none is measured.
                gave_up = self.collective(groups, len(names), sizes[0] * 1024, LIMIT_S) is None
                for kb in sizes:
                    seconds = None if gave_up else self.repeated(groups, len(names), kb * 1024,
                                                                 counts[kb], LIMIT_S)
                    gave_up = seconds is None
                    unfinished += gave_up
                    row[str(kb)] = algbw_mbps(kb * 1024, seconds)
                table.setdefault(str(qps), {})[f"{rate:g}"] = row
                done = finish([f for group in groups for f in group])
                results += done
                # A sweep given up left messages in flight: only what completed is checked.
                data_ok &= all(r.data_ok for r in done) and (gave_up or all(r.delivered for r in done))
                if rate:
                    faults.clear_nic_loss()
        t_end = time.monotonic()
        record.curves[label] = metrics.total_goodput((r.bins for r in results), t_start, t_end)
        record.windows[label] = (t_start, t_end)
        events = faults.timeline[first:]
        record.timeline += [{**e, "t": e["t"] - t_start, "transport": label} for e in events]
        record.transports[label] = {
            "hosts": names, "sizes_kb": list(sizes), "loss_rates": list(loss_rates(opts)),
            ALGBW_MBPS: table, "iterations": {str(kb): n for kb, n in counts.items()},
            UNFINISHED: unfinished,
            "dropped": sum(int(e.get("dropped", 0)) for e in events if e["action"] == "nic_loss_cleared"),
            DATA_OK: data_ok}

    def plot(self, folder: Path, summary: dict) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rates: list[float] = next((t["loss_rates"] for t in summary["transports"].values()
                                   if "loss_rates" in t), [])
        if not rates:
            return
        fig, axes = plt.subplots(1, len(rates), figsize=(4 * len(rates), 3.8), squeeze=False)
        draw_algbw(list(axes[0]), summary["transports"])
        fig.tight_layout()
        fig.savefig(folder / "algbw.png", dpi=90)
        plt.close(fig)


def series(transports: dict[str, dict]) -> list[tuple[str, str, list[int], list[float | None]]]:
    """(series name, loss rate, sizes KB, algbw Mbit/s) per transport, QP count and loss rate:
    the figure's lines (RoCE's named with their QP count, as the paper's)."""
    out = []
    for name, t in transports.items():
        for qps, by_rate in t.get(ALGBW_MBPS, {}).items():
            label = f"{name} x{qps} QPs" if name == "roce" else name
            for rate, by_size in by_rate.items():
                sizes = sorted(int(k) for k in by_size)
                out.append((label, rate, sizes, [by_size[str(k)] for k in sizes]))
    return out


def draw_algbw(axes: list, transports: dict[str, dict]) -> None:
    """One panel per loss rate (axes in the order of the runs' rates): algorithm bandwidth
    against message size, a line per transport and QP count (Fig. 16's shape); an all-reduce
    that did not finish is drawn at 0 (unusable)."""
    rates = list(dict.fromkeys(rate for _, rate, _, _ in series(transports)))
    for ax, rate in zip(axes, rates, strict=False):
        for label, r, sizes, values in series(transports):
            if r == rate:
                ax.plot(sizes, [v or 0.0 for v in values], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size per host (KB)")
        ax.set_ylabel("algorithm bandwidth (Mbit/s)")
        ax.set_title(f"loss {float(rate):.1%} at every NIC", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)


def headline_cell(figures: dict) -> str:
    """The docs table's cell: algorithm bandwidth at the largest size with no loss and with the
    most loss, for the most QPs run ("-": not measured or not finished).

    >>> headline_cell({"algbw_mbps": {"1": {"0": {"512": 6.4}, "0.01": {"512": None}},
    ...                               "16": {"0": {"512": 9.4}, "0.01": {"512": 8.0}}}})
    '9.4 / 8'
    """
    table = figures.get(ALGBW_MBPS)
    if not isinstance(table, dict) or not table:
        return "-"
    by_rate = table[max(table, key=int)]
    rates = sorted(by_rate, key=float)

    def at(rate: str) -> str:
        sizes = by_rate[rate]
        value = sizes[max(sizes, key=int)] if sizes else None
        return "-" if value is None else f"{value:g}"

    return f"{at(rates[0])} / {at(rates[-1])}"


class AllToAll(AllReduce):
    name = "alltoall"

    def pairs(self, names: list[str]) -> list[tuple[str, str]]:
        """Every ordered pair of hosts."""
        return [(a, b) for a in names for b in names if a != b]

    def agent_cost(self, opts: Options) -> float:
        return ALLTOALL_AGENT_COST

    def collective(self, groups: Sequence[Sequence[AgentFlow]], hosts: int, size: int,
                   limit: float) -> float | None:
        """One all-to-all of `size` bytes per host: S/n to each of the n-1 others, at once."""
        return _steps(groups, 1, max(1, size // hosts), limit)


def _steps(groups: Sequence[Sequence[AgentFlow]], steps: int, nbytes: int, limit: float) -> float | None:
    """`steps` collective steps: in each every host pair's QPs carry `nbytes` between them
    (split over the QPs) and the step ends when every pair has it. Seconds, None when they
    took longer than `limit`."""
    start = time.monotonic()
    for _ in range(steps):
        flows, sizes = [], []
        for qps in groups:
            for f, part in zip(qps, chunks(nbytes, len(qps)), strict=True):
                if part:
                    flows.append(f)
                    sizes.append(part)
        # Every QP posted at once and asked at once, a request per agent (write_all,
        # completed_all): a request per QP made RoCE's 192 QPs of an all-to-all start and
        # finish a step tens of ms apart, its own bookkeeping in the time measured.
        wants = [msn + 1 for msn in write_all(flows, sizes)]  # done: messages 0..msn complete
        while flows:
            done = completed_all(flows)
            left = [i for i, (got, want) in enumerate(zip(done, wants, strict=True)) if got < want]
            flows, wants = [flows[i] for i in left], [wants[i] for i in left]
            if not flows:
                break
            if time.monotonic() - start > limit:
                return None
            time.sleep(POLL_S)
    return time.monotonic() - start


SCENARIOS = (
    Scenario("allreduce", AllReduce(), "ring all-reduce swept by message size under loss at every "
             "NIC, RoCE with N QPs against MRC (the MRC paper's Fig. 16)",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=DEFAULT_LINK_MBPS), 0.0,
             transports=("mrc", "roce"), figures_type=AllReduceFigures,
             figures=(UNFINISHED, DATA_OK), brief=(UNFINISHED,),
             row=Row("allreduce: algorithm bandwidth at the largest size, no loss / the most loss "
                     "(Mbit/s; RoCE with its most QPs)", lambda t, _: headline_cell(t))),
    Scenario("alltoall", AllToAll(), "all-to-all swept by message size under loss at every NIC, "
             "RoCE with N QPs against MRC (the MRC paper's Fig. 17)",
             FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=DEFAULT_LINK_MBPS), 0.0,
             transports=("mrc", "roce"), figures_type=AllReduceFigures,
             figures=(UNFINISHED, DATA_OK), brief=(UNFINISHED,),
             row=Row("alltoall: algorithm bandwidth at the largest size, no loss / the most loss "
                     "(Mbit/s; RoCE with its most QPs)", lambda t, _: headline_cell(t))),
)
