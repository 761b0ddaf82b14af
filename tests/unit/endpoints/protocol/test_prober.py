"""The one probe loop: a round per interval, one probe per target in flight, timeouts."""

from __future__ import annotations

from endpoints.protocol import wire
from endpoints.protocol.prober import Prober


def test_one_probe_per_target_per_round_and_replies_matched():
    prober = Prober(peer_qpn=9, interval=0.005, timeout=0.05)
    sent = prober.due(0.0, lambda: [0x1C000, 0x2C000])
    assert [ev for ev, _ in sent] == [0x1C000, 0x2C000]
    probe = wire.decode(sent[0][1])
    assert isinstance(probe, wire.Probe) and probe.opcode == wire.OP_EV_PROBE and probe.qpn == 9
    assert probe.probed_ev == 0x1C000 and probe.tsval == wire.ts_us(0.0)
    assert prober.due(0.001, lambda: [0x1C000]) == []  # not a new round yet
    assert prober.due(0.006, lambda: [0x1C000, 0x2C000]) == []  # both still in flight
    # A reply must echo the probe's EV and timestamp too.
    assert prober.answered(probe.probe_id, 0x2C000, probe.tsval) is None
    assert prober.answered(probe.probe_id, 0x1C000, probe.tsval + 1) is None
    assert prober.answered(probe.probe_id, 0x1C000, probe.tsval) == 0x1C000
    assert prober.answered(probe.probe_id, 0x1C000, probe.tsval) is None  # answers nothing now
    assert [ev for ev, _ in prober.due(0.011, lambda: [0x1C000, 0x2C000])] == [0x1C000]


def test_unanswered_probes_expire_once():
    prober = Prober(peer_qpn=1, interval=0.1, timeout=0.05)
    prober.due(0.0, lambda: [7, 8])
    assert prober.expired(0.05) == []  # at the timeout, not yet past it
    assert sorted(prober.expired(0.051)) == [7, 8]
    assert prober.expired(0.2) == [] and not prober.pending


def test_targets_are_asked_only_when_a_round_is_due():
    asked = []
    prober = Prober(peer_qpn=1, interval=0.1, timeout=0.05)
    for t in (0.0, 0.01, 0.02, 0.1):
        prober.due(t, lambda t=t: asked.append(t) or [])
    assert asked == [0.0, 0.1]


def test_probe_ids_cannot_be_guessed_by_counting():
    prober = Prober(peer_qpn=1, interval=0.05, timeout=5.0)
    ids = []
    for i in range(50):
        for _, probe in prober.due(i * 0.1, lambda i=i: [i]):
            ids.append(wire.decode(probe).probe_id)
    assert len(set(ids)) == 50
    # A forger counting 0, 1, 2, ... (what ids used to be) answers none of them.
    assert all(prober.answered(n, ev, wire.ts_us(ev * 0.1)) is None for ev in range(50)
               for n in range(1, 200))
    assert len(prober.pending) == 50
