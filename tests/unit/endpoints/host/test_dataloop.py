"""endpoints/host/dataloop.py's trace lines: every record the agents write reads back as the
record itself, with orjson and with the standard library alike (the loop itself runs in the
integration suite, tests/integration/test_transfer.py)."""

from __future__ import annotations

import json
import sys
import typing

import pytest

from endpoints.host import dataloop
from endpoints.protocol import events
from endpoints.protocol.events import as_record

# A value of each annotated type, chosen where encoders differ: a float's shortest form, an
# exponent, an integer past 32 bits, a string that must be escaped
SAMPLES: dict[object, object] = {float: 1.2345678901234567e-05, int: 2**40 + 3,
                                 str: 'GOOD "quoted" \\ \u00e9', bool: True,
                                 float | None: None, dict[str, int]: {"114688": 3, "7": 0},
                                 list[int]: [0, 2]}


def _every_event() -> list[events.Event]:
    out = []
    for cls in vars(events).values():
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
            hints = typing.get_type_hints(cls)
            out.append(cls(*(SAMPLES[hints[f]] for f in cls._fields if f != "event")))
    return out


def _encoders(monkeypatch: pytest.MonkeyPatch) -> dict[str, typing.Callable[[object], bytes]]:
    with_orjson = dataloop._json_line_encoder()
    monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson now raises ImportError
    return {"orjson": with_orjson, "standard": dataloop._json_line_encoder()}


def test_every_event_and_host_record_reads_back_as_itself(monkeypatch):
    records = [as_record(0xABCDEF, e) for e in _every_event()]
    assert len(records) >= 16  # every event type the cores have
    records.append({"qpn": None, "event": "host", "t": 19703.856961363,
                    "nics": {0: [7, 28000, 0], 1: [0, 0, 2]}, "backlog": 0, "loop_lag": 0.0,
                    "loop": {"wakes": 1, "rx_wakes": 0, "rx_dgrams": 0, "tx_dgrams": 0}})
    records.append({"qpn": 5, "event": "packet", "hdr": {"bitmap": 2**64 - 1}})  # u64 still
    for name, encode in _encoders(monkeypatch).items():
        for record in records:
            line = encode(record)
            assert line.endswith(b"\n") and line.count(b"\n") == 1, (name, line)
            # JSON keys are strings: the NIC planes' int keys come back as "0", "1"
            want = json.loads(json.dumps(record))
            assert json.loads(line) == want, (name, line)
            assert list(json.loads(line)) == list(want)  # fields in the record's order


def test_what_orjson_refuses_is_written_by_the_standard_library(monkeypatch):
    import orjson  # a dependency (setup.py): never skipped
    assert orjson.dumps(1)
    record = {"qpn": 1, "event": "packet", "big": 2**70}  # past orjson's 64-bit integers
    line = dataloop._json_line_encoder()(record)
    assert json.loads(line) == record and line == b'{"qpn":1,"event":"packet","big":%d}\n' % 2**70
