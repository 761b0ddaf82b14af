"""Typed events and the trace line each becomes."""

from __future__ import annotations

import json

from endpoints.protocol.events import (
    Cc,
    Complete,
    CwndDec,
    EvActive,
    EvBad,
    EvLoad,
    EvSkip,
    EvState,
    FloorHold,
    GoBack,
    Retx,
    ReverseEvState,
    Rtt,
    SackCadence,
    Timeout,
    as_record,
)


def test_every_event_names_its_kind_and_round_trips_through_json():
    events = [Complete(0.1, 3), Rtt(0.2, 0x1C000, 0.004), Retx(0.3, 17, 0x1C001, "sack"),
              EvState(0.4, 0x1C000, "GOOD", "ASSUMED_BAD"),
              ReverseEvState(0.5, 0x2C000, "GOOD", "ASSUMED_BAD"), Timeout(0.6, 5, 0.05),
              GoBack(0.7, 5), Cc(0.8, 17.5, 12, 0.004, 0.002, 0.0202, 0.1, 0.005, 0.07, 6),
              CwndDec(0.9, "ecn", 18.0, 12.0, 0.333), EvSkip(1.0, 0x1C000, "delay", 0.05),
              EvSkip(1.0, 0x1C000, "ecn"), EvBad(1.1, 0x1C001, "dark", 40, 0.071),
              FloorHold(1.2, 0x1C001, "sack"), EvLoad(1.3, 0.05, {str(0x1C000): 7}),
              SackCadence(1.4, 0.05, 4, 15, 3, 0, 1, 0.006, 0, 2), EvActive(1.5, 0x1C001, True)]
    kinds = [as_record(1, e)["event"] for e in events]
    assert kinds == ["complete", "rtt", "retx", "ev_state", "reverse_ev_state", "timeout", "go_back",
                     "cc", "cwnd_dec", "ev_skip", "ev_skip", "ev_bad", "floor_hold", "ev_load",
                     "sack_cadence", "ev_active"]
    for e in events:
        record = json.loads(json.dumps(as_record(42, e)))
        assert record["qpn"] == 42 and record["t"] == e.t
        assert type(e)(**{k: v for k, v in record.items() if k != "qpn"}) == e
