"""Incast (kind "incast"): N senders into one receiver for a while, and a victim flow into
another host of the receiver's leaf all along. With the eBPF data plane, every transport runs
twice: with the switches trimming and as plain drop-tail. Figures: the victim's goodput during
the incast over its goodput alone, the crowd's goodput, timeouts, EVs benched, the victim's
losses and every queue's drops."""

from __future__ import annotations

import time
from typing import Any, Final

from experiments.analysis import fidelity, metrics
from experiments.analysis.transports import planes_used
from experiments.api import traffic
from experiments.api.flows import finish
from experiments.api.testbed import Testbed
from experiments.scenarios.base import (
    DEFAULT_LINK_MBPS,
    TAIL_S,
    WARMUP_S,
    Kind,
    Options,
    Record,
    Scenario,
    check_fault_window,
    fault_window,
    sleep_until,
)
from experiments.scenarios.schema import DATA_OK, IS_TRUE, Figures, Row, at_least, at_most, num
from topologies.face import whole
from topologies.model import Fabric, FabricError, FabricParams

SETTLE_S = 0.3  # after the incast starts: the victim's share is measured once queues have built


# The headline and checked figures' keys: their one spelling, which every reader imports.
VICTIM_GOODPUT_FRACTION: Final = "victim_goodput_fraction"
VICTIM_ALONE_MBPS: Final = "victim_alone_mbps"
INCAST_GOODPUT_MBPS: Final = "incast_goodput_mbps"
INCAST_FRACTION_OF_RECEIVER_LINK: Final = "incast_fraction_of_receiver_link"
TIMEOUTS: Final = "timeouts"
EVS_MARKED_BAD: Final = "evs_marked_bad"


class IncastFigures(Figures, total=False):
    """One transport's figures in the incast (per variant: `mrc`, `mrc-droptail`)."""
    victim: dict[str, str]  # src, dst
    receiver: str
    senders: list[str]
    victim_goodput_fraction: float | None  # during the incast over alone
    victim_alone_mbps: float
    victim_during_mbps: float
    incast_goodput_mbps: float  # the crowd's, together
    incast_fraction_of_receiver_link: float
    timeouts: int  # the crowd's senders'
    evs_marked_bad: int
    crowd_flows_starved: int  # crowd flows that delivered nothing (reported, not failed)
    switch_ports: dict[str, Any]
    victim_sender: dict[str, int]
    victim_receiver: dict[str, int]
    victim_sender_agent: dict[str, Any]
    trimming: Any  # the data plane's trimming setting; None without the eBPF data plane


VICTIM_SENDER_COUNTERS = ("lost", "retransmitted", "stranded_resent", "timeouts", "bad_evs",
                          "trimmed_nacks", "ecn_echoes")


class Incast(Kind):
    name = "incast"
    options = frozenset({"duration", "fault_at", "fault_end", "senders"})

    def check(self, opts: Options, fabric: Fabric) -> None:
        check_fault_window(opts, fabric)
        hosts = len(fabric.hosts)
        if not 1 <= opts.senders <= hosts - 3:
            raise FabricError(f"incast needs a receiver, a victim pair and the senders: at most "
                              f"{hosts - 3} senders on {hosts} hosts, got {opts.senders}")

    def option_fields(self, opts: Options) -> dict:
        return {"senders": opts.senders}

    def busy_senders(self, opts: Options, fabric: Fabric) -> int:
        # The crowd shares the receiver's NICs, so together it sends about what they take
        # (measured: 18.6 Mbit/s into 2 x 10 Mbit/s), not a host's worth each; the victim fills
        # its own. Counting every sender made the agents' bound warn about incasts that were
        # faithful (OVS, 10 Mbit/s: CPU idle p10 33%).
        return 2

    def variants(self, opts: Options, bed: Testbed) -> list[tuple[str, bool | None]]:
        """Every transport with the switches trimming and as plain drop-tail, when the eBPF
        data plane runs."""
        if whole(bed.em).dataplane is not None:
            return [(t, trim) for t in opts.transports for trim in (True, False)]
        return super().variants(opts, bed)

    def run(self, bed: Testbed, opts: Options, transport: str, label: str, record: Record) -> None:
        fabric, em = bed.fabric, whole(bed.em)
        fault_at, fault_end = fault_window(opts)
        senders, receiver, (vsrc, vdst) = traffic.incast_roles([h.name for h in fabric.hosts],
                                                               opts.senders)
        victim = bed.flow(transport, vsrc, vdst)
        crowd = [bed.flow(transport, s, receiver) for s in senders]
        if em.dataplane is not None:
            em.dataplane.reset()
        t0 = time.monotonic()
        victim.start(opts.duration)
        sleep_until(t0 + fault_at)
        for f in crowd:
            f.start(fault_end - fault_at)
        record.timeline.append({"t": time.monotonic() - t0, "action": "incast_start",
                                "transport": label, "target": receiver, "senders": len(senders)})
        sleep_until(t0 + opts.duration + TAIL_S)
        vres, *cres = finish([victim, *crowd])
        n = round(opts.duration / metrics.BIN_S)
        vm = metrics.series(vres.bins, int(t0 / metrics.BIN_S), n)
        fa, fe = round(fault_at / metrics.BIN_S), round(fault_end / metrics.BIN_S)
        alone = metrics.mean(vm[round(WARMUP_S / metrics.BIN_S):fa])
        during = metrics.mean(vm[fa + round(SETTLE_S / metrics.BIN_S):fe])
        crowd_mbps = sum(metrics.mean(metrics.series(r.bins, int(t0 / metrics.BIN_S), n)[fa:fe])
                         for r in cres)
        stats = [r.detail.get("sender_stats", {}) for r in cres]
        record.curves[label] = vm
        record.windows[label] = (t0, t0 + opts.duration)
        cap = len(planes_used(transport, fabric.params.planes)) * fabric.params.link_mbps
        record.transports[label] = {
            "victim": {"src": vsrc, "dst": vdst}, "receiver": receiver, "senders": senders,
            VICTIM_GOODPUT_FRACTION: round(during / alone, 3) if alone else None,
            VICTIM_ALONE_MBPS: round(alone, 2), "victim_during_mbps": round(during, 2),
            INCAST_GOODPUT_MBPS: round(crowd_mbps, 2),
            INCAST_FRACTION_OF_RECEIVER_LINK: round(crowd_mbps / cap, 3),
            TIMEOUTS: sum(s.get("timeouts", 0) for s in stats),  # the crowd senders' counter of that name
            EVS_MARKED_BAD: sum(s.get("bad_evs", 0) for s in stats),
            # The victim must deliver; a crowd flow may be starved by the incast itself (that
            # is what is measured): reported, not failed. No flow may deliver a wrong byte.
            DATA_OK: vres.data_ok and vres.delivered and all(r.data_ok for r in cres),
            "crowd_flows_starved": sum(not r.delivered for r in cres),
            "switch_ports": fidelity.dataplane_totals(em),
            "victim_sender": {k: v for k, v in vres.detail.get("sender_stats", {}).items()
                              if k in VICTIM_SENDER_COUNTERS},
            "victim_receiver": vres.detail.get("receiver_stats", {}),
            "victim_sender_agent": bed.agent_counters(vsrc),
            "trimming": em.dataplane_info.get("trim") if em.dataplane is not None else None,
        }
        record.keep_trace(label, victim)


# The default fabric: the paper's 7:1 incast plus a victim needs 10 hosts; as many spines as
# hosts per leaf keeps it non-blocking, so the victim shares no hop with the crowd's packets
# but the receiver's leaf port (on 2 spines, 2.5:1, the crowd's doomed full frames crossed the
# victim's spine downlinks before being trimmed at the last hop).
SCENARIOS = (
    Scenario("incast", Incast(), "N senders to one receiver, plus a victim flow sharing its leaf",
             FabricParams(planes=2, leaves=2, spines=5, hosts_per_leaf=5, link_mbps=DEFAULT_LINK_MBPS), 7.0,
             2.5, 6.5, figures_type=IncastFigures,
             figures=(VICTIM_GOODPUT_FRACTION, VICTIM_ALONE_MBPS, INCAST_GOODPUT_MBPS,
                      TIMEOUTS, EVS_MARKED_BAD, DATA_OK), brief=(VICTIM_GOODPUT_FRACTION,),
             row=Row("incast: victim fraction, trim / drop-tail",
                     lambda t, d: f"{num(t.get(VICTIM_GOODPUT_FRACTION))} / "
                                  f"{num(d.get(VICTIM_GOODPUT_FRACTION))}" if d
                     else num(t.get(VICTIM_GOODPUT_FRACTION))),
             quick={"transports": ("mrc",), "duration": 5.0, "fault_at": 1.5, "fault_end": 4.5,
                    "senders": 7},
             # With a short run's slack on a shared 2-core VM, and tight enough that an incast
             # with dozens of timeouts and benched EVs fails.
             checks={"mrc": {VICTIM_GOODPUT_FRACTION: at_least(0.92),
                             INCAST_FRACTION_OF_RECEIVER_LINK: at_least(0.88),
                             EVS_MARKED_BAD: at_most(2.0), TIMEOUTS: at_most(5.0),
                             DATA_OK: IS_TRUE},
                     "mrc-droptail": {DATA_OK: IS_TRUE}}),
)
