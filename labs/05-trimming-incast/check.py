"""Lab 5's checker: the student's reactions to a trimmed packet, one by one, then carried out by
the product's receiver and sender in a 7:1 incast on the product's simulated Clos
(experiments/simclos.py: switch ports that mark and trim at the data plane's thresholds, a
priority class, paced NICs), with the agents' transport settings for that fabric."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.events import EvState
from endpoints.protocol.evset import ASSUMED_BAD
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments import simclos
from labs.checker import Check, CheckFailed, Context, Lab
from labs.checker.student import replacing
from topologies.model import build

# The reactions MRC prescribes (what the product's sender does: the drift test checks it).
EXPECTED = {
    wire.NACK_TRIMMED: {"resend": True, "skip_ev": True, "slow_down": True, "bench_ev": False},
    wire.NACK_TRIMMED_LASTHOP: {"resend": True, "skip_ev": False, "slow_down": True, "bench_ev": False},
}
NAMES = {wire.NACK_TRIMMED: "NACK_TRIMMED", wire.NACK_TRIMMED_LASTHOP: "NACK_TRIMMED_LASTHOP"}
WHY = {
    "resend": "the payload was cut: only a retransmission brings the data",
    "skip_ev": {True: "a trim in the fabric says that path's queue is long: skip its EV for a rotation",
                False: "every path of the QP ends at the last hop: skipping one EV moves nothing"},
    "slow_down": "a queue passed the trimming threshold, far above the target: the window must shrink",
    "bench_ev": "a trim is congestion, not a broken path: benching would take good paths away "
                "exactly when the fabric is busiest",
}

# The incast: 7 senders into h11 (5 on the other leaf, 2 on h11's own), and a victim flow from
# that other leaf into h10, next to the receiver, all at once.
FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=6, link_mbps=10)
CROWD = ("h0", "h1", "h2", "h3", "h4", "h6", "h7")
RECEIVER, VICTIM = "h11", ("h5", "h10")
INCAST, END = (1.0, 2.5), 3.0  # s: the crowd streams during INCAST, the victim all along
VICTIM_KEPT = 0.5  # of its goodput alone, during the incast


def _reaction(reaction: Any) -> dict[str, bool]:
    return {k: bool(getattr(reaction, k)) for k in EXPECTED[wire.NACK_TRIMMED]}


def lab_classes(nack_reason: Callable[[int], int | None],
                on_trim_nack: Callable[[int], Any]) -> tuple[type, type]:
    """The product's receiver and sender carrying out the student's decisions: where a decision
    is MRC's, the product's own code runs; otherwise the student's decision, with the product's
    own parts (NACK, retransmission queue, EV set, window)."""

    class LabReceiver(MrcReceiver):
        def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
            if not d.flags & wire.F_TRIMMED:
                return super()._on_data(d, ev, now, ce)
            reason = nack_reason(d.flags)
            right = wire.NACK_TRIMMED_LASTHOP if d.flags & wire.F_TRIMMED_LASTHOP else wire.NACK_TRIMMED
            if reason == right:
                return super()._on_data(d, ev, now, ce)
            self.stats["packets"] += 1
            self.stats["trimmed"] += 1
            if reason is not None:
                self._nack(wire.psn_unwrap(d.psn, self.rcv_nxt), reason, ev, d.tsval)
            return None  # None: the trimmed packet is silently dropped

    class LabSender(MrcSender):
        def _on_nack(self, n: wire.Nack, now: float) -> None:
            if n.reason not in EXPECTED:
                return super()._on_nack(n, now)
            r = _reaction(on_trim_nack(n.reason))
            if r == EXPECTED[n.reason]:
                return super()._on_nack(n, now)
            self.stats["nacks"] += 1
            self.stats["trimmed_nacks"] += 1
            seq = wire.psn_unwrap(n.psn, self.una)
            p = self.outstanding.get(seq)
            if p is not None:
                if r["bench_ev"]:
                    self.evs.mark_bad(p.ev, now)
                if r["resend"]:
                    self.outstanding.pop(seq)
                    self._queue_retx(p, now, "trimmed")
                if r["skip_ev"]:
                    self.evs.skip(p.ev)
            if r["slow_down"]:
                self.cc.on_trim(now)
            self._drain_changes(now)
            return None

    return LabReceiver, LabSender


def receiver_nacks(ctx: Context) -> str:
    reason = ctx.module("trim_reactions").nack_reason
    data = wire.encode_data(wire.OP_DATA_MIDDLE, 0, 2, 7, 0, 4096, 1 << 20, b"x" * 4096, 1)
    cases = [(wire.decode(data).flags, None, "a whole packet"),
             (wire.decode(wire.trimmed(data)).flags, wire.NACK_TRIMMED, "a packet trimmed in the fabric"),
             (wire.decode(wire.trimmed(data, last_hop=True)).flags, wire.NACK_TRIMMED_LASTHOP,
              "a packet trimmed at the last hop")]
    for flags, want, what in cases:
        got = reason(flags)
        if got != want:
            name = NAMES.get(got, repr(got))
            raise CheckFailed(f"for {what} (flags {flags:#04x}) nack_reason is {name}, want "
                              f"{NAMES.get(want, 'None') if want is not None else 'None'}")
    return "whole packets are placed, trimmed ones NACKed with where they were cut"


def sender_reacts(ctx: Context) -> str:
    on_trim_nack = ctx.module("trim_reactions").on_trim_nack
    for reason, want in EXPECTED.items():
        got = _reaction(on_trim_nack(reason))
        for field, value in want.items():
            if got[field] != value:
                why = WHY[field]
                why = why[value] if isinstance(why, dict) else why
                raise CheckFailed(f"on {NAMES[reason]}, {field}={got[field]}: {why}")
    return "resend, slow down, skip the EV only for a trim in the fabric, never bench"


def incast(ctx: Context) -> str:
    module = ctx.module("trim_reactions")
    receiver_cls, sender_cls = lab_classes(module.nack_reason, module.on_trim_nack)
    model = simclos.ClosModel(params=FABRIC.params)
    pairs = [(*VICTIM, 0.0, END)] + [(src, RECEIVER, *INCAST) for src in CROWD]
    with replacing(simclos, "MrcSender", sender_cls), replacing(simclos, "MrcReceiver", receiver_cls):
        run = simclos.run(model, pairs, simclos.config_for(model), seed=1, until=END)
    benched = {f"{f.src}->{f.dst}": n for f in run.flows
               if (n := sum(1 for e in f.events if isinstance(e, EvState) and e.new == ASSUMED_BAD))}
    if benched:
        raise CheckFailed(f"{sum(benched.values())} EVs benched in "
                          + ", ".join(f"{k} ({v})" for k, v in benched.items())
                          + ": a trim must never look like a broken path")
    timeouts = sum(f.snd.stats["timeouts"] for f in run.flows)
    if timeouts:
        raise CheckFailed(f"{timeouts} retransmission timeouts: a trimmed packet must be resent "
                          f"at once, not left for the timer")
    trims = sum(link.trimmed for link in run.links.values())
    last = sum(link.trimmed for (kind, _), link in run.links.items() if kind == "port")
    if not trims or not last:
        raise CheckFailed("the incast trimmed nothing: the checker's set-up is wrong")
    victim = run.flows[0]
    alone = run.goodput_mbps(victim, 0.5, INCAST[0])
    during = run.goodput_mbps(victim, INCAST[0] + 0.3, INCAST[1])
    if during < VICTIM_KEPT * alone:
        raise CheckFailed(f"the victim {VICTIM[0]}->{VICTIM[1]} fell from {alone:.1f} to "
                          f"{during:.1f} Mbit/s during the incast")
    return (f"7:1 into {RECEIVER}: {trims} packets trimmed ({last} at the last hop), no EV "
            f"benched, no timeout; the victim kept {during:.1f} of its {alone:.1f} Mbit/s")


LAB = Lab(__file__, "Trimming and incast", files=("trim_reactions.py",), checks=[
    Check("receiver-nacks", receiver_nacks,
          "TODO 1: None without F_TRIMMED; NACK_TRIMMED_LASTHOP with F_TRIMMED_LASTHOP too, "
          "else NACK_TRIMMED"),
    Check("sender-reacts", sender_reacts,
          "TODOs 2-3: a trim is congestion on one path (fabric) or at the receiver (last hop), "
          "never a failure"),
    Check("incast-simulated", incast,
          "the product's receiver and sender act on your decisions: the two checks above say "
          "which one is wrong"),
])
