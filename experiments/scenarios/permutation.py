"""Permutation (kind "permutation"): every host sends to another, in a seeded derangement, all
at once. Figures: the flows' goodput over what the fabric can carry for this permutation on
the planes the transport uses (max-min fair over host NICs and leaf up and down links), the
worst flow's share, Jain fairness, and a CDF of per-flow goodput."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

from endpoints.host.paths import SOURCE_ROUTED
from endpoints.protocol import wire
from experiments.analysis import metrics
from experiments.analysis.transports import planes_used
from experiments.api import traffic
from experiments.api.flows import finish
from experiments.api.testbed import AGENT_TRANSPORTS, Testbed
from experiments.scenarios.base import DEFAULT_LINK_MBPS, TAIL_S, Kind, Options, Record, Scenario, sleep_until
from experiments.scenarios.schema import DATA_OK, IS_TRUE, Figures, Row, at_least, at_most, num
from topologies.model import Fabric, FabricError, FabricParams, fair_share_mbps

STEADY_FROM_S = 1.0  # every flow has started and found its rate by then


# The headline and checked figures' keys: their one spelling, which every reader imports.
THROUGHPUT_FRACTION: Final = "throughput_fraction"
THROUGHPUT_MBPS: Final = "throughput_mbps"
THROUGHPUT_OF_CEILING: Final = "throughput_of_ceiling"
FLOW_FRACTION_MIN: Final = "flow_fraction_min"
JAIN_FAIRNESS: Final = "jain_fairness"


class PermutationFigures(Figures, total=False):
    """One transport's figures in the permutation."""
    throughput_fraction: float  # the flows' goodput over what the fabric carries for them
    payload_ceiling: float  # agents' transports: the most of the link rate that can be payload
    throughput_of_ceiling: float
    throughput_mbps: float
    capacity_mbps: float
    host_capacity_mbps: float
    planes_used: int
    flow_fraction_min: float  # the worst flow's goodput over its fair share
    flow_fraction_mean: float
    flow_goodput_mbps: list[float]
    jain_fairness: float
    flows_delivered: int
    permutation: dict[str, str]  # source -> destination


class Permutation(Kind):
    name = "permutation"
    options = frozenset({"duration"})
    queues_stand = True  # spine links carry exactly what the hosts send (Kind.queues_stand)

    def check(self, opts: Options, fabric: Fabric) -> None:
        if len(fabric.hosts) < 2:
            raise FabricError("permutation needs 2+ hosts")

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        return len(fabric.hosts)

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric = bed.fabric
        names = [h.name for h in fabric.hosts]
        perm = traffic.derangement(names, opts.seed)
        flows = [bed.flow(transport, src, perm[src]) for src in names]
        t0 = time.monotonic()
        for f in flows:
            f.start(opts.duration)
        sleep_until(t0 + opts.duration + TAIL_S)
        results = finish(flows)
        n = round(opts.duration / metrics.BIN_S)
        warm = round(STEADY_FROM_S / metrics.BIN_S)
        per_flow, total_curve = [], [0.0] * n
        for r in results:
            mbps = metrics.series(r.bins, int(t0 / metrics.BIN_S), n)
            total_curve = [a + b for a, b in zip(total_curve, mbps, strict=True)]
            per_flow.append(metrics.mean(mbps[warm:]))
        planes = len(planes_used(transport, fabric.params.planes))
        host_cap = planes * fabric.params.link_mbps
        # What the fabric can carry for this permutation on the planes the transport uses:
        # max-min fair over host NICs and leaf up/down links (oversubscription counted).
        fair = fair_share_mbps(fabric, list(perm.items()), planes)
        carry = sum(fair.values())
        fractions = [g / fair[(src, perm[src])] for g, src in zip(per_flow, names, strict=True)]
        record.curves[label] = total_curve
        record.windows[label] = (t0, t0 + opts.duration)
        record.transports[label] = {
            THROUGHPUT_FRACTION: round(sum(per_flow) / carry, 3),
            **ceiling(bed, transport, sum(per_flow) / carry),
            THROUGHPUT_MBPS: round(sum(per_flow), 2),
            "capacity_mbps": round(carry, 2),
            "host_capacity_mbps": host_cap * len(names),
            "planes_used": planes,
            FLOW_FRACTION_MIN: round(min(fractions), 3),
            "flow_fraction_mean": round(sum(fractions) / len(fractions), 3),
            "flow_goodput_mbps": [round(g, 2) for g in per_flow],
            JAIN_FAIRNESS: round(metrics.jain(per_flow), 3),
            # Every byte right, and the transport alive (some flow's bytes arrived): a flow that
            # completed no message in the run (a starved single-path flow at a low link rate; at
            # 1 Mbit/s no RoCE flow of a run completed one) is counted in flows_delivered and
            # flow_fraction_min, as the incast counts its starved crowd, not a corruption.
            DATA_OK: all(r.data_ok for r in results) and any(r.bytes_delivered for r in results),
            "flows_delivered": sum(r.delivered for r in results),
            "permutation": perm,
        }
        record.keep_trace(label, flows[0])

    def plot(self, folder: Path, summary: dict) -> None:
        from experiments.analysis import plots  # matplotlib: only when there is something to draw

        plots.plot_cdf(folder / "cdf.png", summary, "per-flow goodput (Mbit/s)",
                       lambda t: [(t.get("flow_goodput_mbps", []), "-", "per-flow goodput")])


def ceiling(bed: Testbed, transport: str, fraction: float) -> dict[str, float]:
    """For the agents' transports, the most of the link rate that can be payload with this
    run's frame (headers, MRC's encapsulation, the SACKs of the flow each host receives:
    `wire.payload_ceiling`) and the throughput measured against it; {} for the kernel's."""
    if transport not in AGENT_TRANSPORTS:
        return {}
    cfg = bed.transport
    top = wire.payload_ceiling(cfg.mtu_payload, cfg.sack_every, transport in SOURCE_ROUTED)
    return {"payload_ceiling": round(top, 4), THROUGHPUT_OF_CEILING: round(fraction / top, 3)}


# The default fabric: 8 hosts on 4 leaves with 2 spines per plane, so that a single-path
# transport's ECMP hashing collides (several cross-leaf flows per leaf, two uplinks each) while
# spraying can use every path. At the default rate (`DEFAULT_LINK_MBPS`) it is the busiest
# default scenario, the one that sized that rate; on OVS `--link-mbps auto` picks 5 Mbit/s.
SCENARIOS = (
    Scenario("permutation", Permutation(), "every host sends to another (seeded permutation)",
             FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=DEFAULT_LINK_MBPS), 8.0,
             figures_type=PermutationFigures,
             figures=(THROUGHPUT_FRACTION, THROUGHPUT_MBPS, FLOW_FRACTION_MIN, JAIN_FAIRNESS,
                      DATA_OK), brief=(THROUGHPUT_FRACTION,),
             row=Row("permutation: throughput fraction", lambda t, _: num(t.get(THROUGHPUT_FRACTION))),
             quick={"transports": ("mrc", "roce"), "duration": 5.0},
             # MRC against its frame's ceiling (0.9565 of the link rate at 4 KB, encapsulated):
             # 0.95 of capacity at a 0.97 ceiling, with a short run's slack; a single ECMP path
             # per flow collides, so roce stays well below.
             checks={"mrc": {THROUGHPUT_OF_CEILING: at_least(0.96),
                             FLOW_FRACTION_MIN: at_least(0.85), DATA_OK: IS_TRUE},
                     "roce": {THROUGHPUT_FRACTION: at_most(0.7), DATA_OK: IS_TRUE}}),
)
