"""The named points where a run may put other code in the product's place: a teaching lab's
student code (labs/), a variant under study. A whitelist, each point with the contract its
replacement meets; nothing else of the product can be replaced. Off unless a run names one.

    evset             the sender's EV set: a subclass of EvSet (endpoints/protocol/evset.py)
    nscc              the sender's congestion control: a subclass of Nscc (congestion.py)
    trim_nack_reason  the receiver's decision on a data packet's flags: flags -> the NACK
                      reason for a trimmed packet (NACK_TRIMMED, NACK_TRIMMED_LASTHOP) or None
    trim_reaction     the sender's decision on a trimmed NACK: reason -> an object with the
                      booleans resend, skip_ev, slow_down, bench_ev
    port_steering     the sender's reaction to NIC-port status (which planes to park, when to
                      resume them, what to resend): a subclass of PortSteering (portstatus.py)

`cores(objects)` gives the sender and receiver classes carrying the replacements out: the
host agent (endpoints/host/overrides.py loads them from files) and the simulated Clos
(experiments/sim/simclos.py) use the same classes. A decision equal to MRC's runs the product's
own code, so a correct replacement behaves exactly as the product.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.congestion import Nscc
from endpoints.protocol.events import EvBad
from endpoints.protocol.evset import EvSet
from endpoints.protocol.portstatus import PortSteering
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender


class ReplacementError(ValueError):
    """A replacement the whitelist refuses: the message says which and why, in one line."""


@dataclass(frozen=True)
class Point:
    name: str
    base: type | None  # a class replacement must subclass it; None: a function
    what: str  # the contract, for error messages and docs


POINTS: dict[str, Point] = {p.name: p for p in (
    Point("evset", EvSet, "the sender's EV set, a subclass of EvSet"),
    Point("nscc", Nscc, "the sender's congestion control, a subclass of Nscc"),
    Point("trim_nack_reason", None, "the receiver's NACK reason for a data packet's flags: "
          "flags -> NACK_TRIMMED, NACK_TRIMMED_LASTHOP or None"),
    Point("trim_reaction", None, "the sender's reaction to a trimmed NACK: reason -> an object "
          "with resend, skip_ev, slow_down, bench_ev"),
    Point("port_steering", PortSteering, "the sender's reaction to NIC-port status, a subclass "
          "of PortSteering"),
)}

# MRC's reaction to a trimmed packet, as the product's sender carries it out (a drift test
# checks the sender against this table).
REACTION_FIELDS = ("resend", "skip_ev", "slow_down", "bench_ev")
MRC_TRIM_REACTION: dict[int, dict[str, bool]] = {
    wire.NACK_TRIMMED: {"resend": True, "skip_ev": True, "slow_down": True, "bench_ev": False},
    wire.NACK_TRIMMED_LASTHOP: {"resend": True, "skip_ev": False, "slow_down": True,
                                "bench_ev": False},
}


def point(name: str) -> Point:
    if name not in POINTS:
        raise ReplacementError(f"no override point {name!r}: the points are {', '.join(POINTS)}")
    return POINTS[name]


def check_object(name: str, obj: object, where: str) -> None:
    """ReplacementError unless `obj` meets point `name`'s contract (`where` names it)."""
    p = point(name)
    if p.base is not None:
        if not (isinstance(obj, type) and issubclass(obj, p.base)):
            raise ReplacementError(f"{where} is not a subclass of {p.base.__name__}: {name} "
                                   f"must be {p.what}")
    elif not callable(obj) or isinstance(obj, type):
        raise ReplacementError(f"{where} is not a function: {name} must be {p.what}")


def reaction(decision: Any) -> dict[str, bool]:
    """A trim_reaction's answer as {field: bool}."""
    return {k: bool(getattr(decision, k)) for k in REACTION_FIELDS}


def cores(objects: Mapping[str, Any]) -> tuple[type[MrcSender], type[MrcReceiver]]:
    """The MRC sender and receiver classes using `objects` ({point: replacement}, checked);
    the product's own classes when there is nothing to replace."""
    for name, obj in objects.items():
        check_object(name, obj, name)
    sender: type[MrcSender] = MrcSender
    receiver: type[MrcReceiver] = MrcReceiver
    if "evset" in objects or "nscc" in objects or "trim_reaction" in objects:
        sender = _sender(objects.get("evset", EvSet), objects.get("nscc", Nscc),
                         objects.get("trim_reaction"))
    if "trim_nack_reason" in objects:
        receiver = _receiver(objects["trim_nack_reason"])
    if "port_steering" in objects:
        # First in the order of bases: its methods stand before MrcSender's own PortSteering.
        sender = type("SteeredSender", (objects["port_steering"], sender), {})
    return sender, receiver


def _sender(evset: type[EvSet], nscc: type[Nscc],
            decide: Callable[[int], Any] | None) -> type[MrcSender]:
    class ReplacedSender(MrcSender):
        evset_cls = evset
        cc_cls = nscc

        def _on_nack(self, n: wire.Nack, now: float) -> None:
            if decide is None or n.reason not in MRC_TRIM_REACTION:
                return super()._on_nack(n, now)
            r = reaction(decide(n.reason))
            if r == MRC_TRIM_REACTION[n.reason]:
                return super()._on_nack(n, now)
            # Another decision, carried out with the product's own parts.
            seq = wire.psn_unwrap(n.psn, self.una)
            p = self.outstanding.get(seq)
            if p is None or p.ev != n.echo_ev or p.ts != n.echo_ts:
                self.stats["unacceptable"] += 1
                return None
            self.stats["nacks"] += 1
            self.stats["trimmed_nacks"] += 1
            if r["bench_ev"] and self.evs.mark_bad(p.ev, now):
                self.stats["bad_evs"] += 1  # counted and traced as the sender's own benching
                self.events.append(EvBad(now, p.ev, "trim", p.seq, round(now - p.sent, 6)))
            if r["resend"]:
                self.outstanding.pop(seq)
                self._queue_retx(p, now, "trimmed")
            if r["skip_ev"]:
                self._skip(p.ev, now, "trim")
            if r["slow_down"]:
                self.cc.on_trim(now)
            self._drain_changes(now)
            return None

    return ReplacedSender


def _receiver(decide: Callable[[int], Any]) -> type[MrcReceiver]:
    class ReplacedReceiver(MrcReceiver):
        def _on_data(self, d: wire.Data, ev: int, now: float, ce: bool) -> None:
            if not d.flags & wire.F_TRIMMED:
                return super()._on_data(d, ev, now, ce)
            reason = decide(d.flags)
            mrc = wire.NACK_TRIMMED_LASTHOP if d.flags & wire.F_TRIMMED_LASTHOP else wire.NACK_TRIMMED
            if reason == mrc:
                return super()._on_data(d, ev, now, ce)
            self.stats["packets"] += 1
            self.stats["trimmed"] += 1
            if reason is not None:
                self._nack(wire.psn_unwrap(d.psn, self.place.rcv_nxt), reason, ev, d.tsval)
            return None  # None: the trimmed packet is silently dropped

    return ReplacedReceiver
