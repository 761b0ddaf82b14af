"""Typed events and the trace line each becomes."""

from __future__ import annotations

import json

from endpoints.protocol.events import Complete, EvState, GoBack, Retx, ReverseEvState, Rtt, Timeout, as_record


def test_every_event_names_its_kind_and_round_trips_through_json():
    events = [Complete(0.1, 3), Rtt(0.2, 0x1C000, 0.004), Retx(0.3, 17, 0x1C001, "sack"),
              EvState(0.4, 0x1C000, "GOOD", "ASSUMED_BAD"),
              ReverseEvState(0.5, 0x2C000, "GOOD", "ASSUMED_BAD"), Timeout(0.6, 5, 0.05),
              GoBack(0.7, 5)]
    kinds = [as_record(1, e)["event"] for e in events]
    assert kinds == ["complete", "rtt", "retx", "ev_state", "reverse_ev_state", "timeout", "go_back"]
    for e in events:
        record = json.loads(json.dumps(as_record(42, e)))
        assert record["qpn"] == 42 and record["t"] == e.t
        assert type(e)(**{k: v for k, v in record.items() if k != "qpn"}) == e
