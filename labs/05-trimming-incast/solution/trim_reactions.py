"""Lab 5, trimming and incast: what the receiver and the sender do with a packet a switch cut.

A switch whose queue is too long does not drop an MRC data packet: it cuts the payload and
forwards the headers (the packet is *trimmed*, flag F_TRIMMED; F_TRIMMED_LASTHOP too when the
port faces the receiver). Your functions decide the reactions; the product's receiver and sender
carry them out. Fill in each TODO between its `# TODO N` and `# END TODO N` lines, then run
`make check-lab N=5`.
"""

from __future__ import annotations

from dataclasses import dataclass

from endpoints.protocol import wire


def nack_reason(flags: int) -> int | None:
    """The receiver got a data packet with MRC flags `flags`. None: a whole packet, placed as
    usual. Trimmed (F_TRIMMED): the reason of the NACK the receiver sends at once, naming the
    packet: wire.NACK_TRIMMED_LASTHOP if it was cut at the last hop (F_TRIMMED_LASTHOP), else
    wire.NACK_TRIMMED."""
    # TODO 1: test the flags with `&`
    if not flags & wire.F_TRIMMED:
        return None
    return wire.NACK_TRIMMED_LASTHOP if flags & wire.F_TRIMMED_LASTHOP else wire.NACK_TRIMMED
    # END TODO 1


@dataclass(frozen=True)
class Reaction:
    """What the sender does about one trimmed packet."""
    resend: bool  # retransmit it at once (on the next EV of the rotation)
    skip_ev: bool  # skip the EV it went on for a rotation: move load off that path
    slow_down: bool  # tell congestion control: a window decrease
    bench_ev: bool  # mark the EV ASSUMED_BAD: a broken path, probed until it answers


def on_trim_nack(reason: int) -> Reaction:
    """The sender got a NACK with `reason` NACK_TRIMMED or NACK_TRIMMED_LASTHOP."""
    # TODO 2: trimmed in the fabric: the data is gone, that path's queue is long, the QP sends
    # too much; is the path broken?
    if reason == wire.NACK_TRIMMED:
        return Reaction(resend=True, skip_ev=True, slow_down=True, bench_ev=False)
    # END TODO 2
    # TODO 3: trimmed at the last hop: the receiver's own link is oversubscribed (an incast);
    # every path of the QP ends there
    return Reaction(resend=True, skip_ev=False, slow_down=True, bench_ev=False)
    # END TODO 3
