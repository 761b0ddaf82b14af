"""endpoints/protocol/recovery.py's time rule stops at the first packet too young for either
window (`_detect_losses`): the same losses, presumptions and events as reading every packet in
flight, over seeded simulations that declare losses by every rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from endpoints.protocol.sender import MrcSender
from experiments.scenarios.base import DEFAULT_FABRIC
from experiments.sim.simclos import ClosModel, flap_together, incast


def _runs(monkeypatch: pytest.MonkeyPatch, scan_all: bool) -> list[dict]:
    if scan_all:  # the reference: the early stop off, as after a clock that went back
        init = MrcSender.__init__

        def unordered(self: MrcSender, *args: object, **kwargs: object) -> None:
            init(self, *args, **kwargs)  # type: ignore[arg-type]
            self._emit_ordered = False
        monkeypatch.setattr(MrcSender, "__init__", unordered)
    out = [incast(ClosModel(trimming=False), senders=5, duration=3.0, start=1.0, end=2.5),
           flap_together(ClosModel(params=replace(DEFAULT_FABRIC, link_mbps=20.0)), seed=1)]
    monkeypatch.undo()
    return out


def test_the_early_stop_changes_nothing_the_sender_decides(monkeypatch):
    fast, full = _runs(monkeypatch, False), _runs(monkeypatch, True)
    for a, b in zip(fast, full, strict=True):
        assert [f.events for f in a["run"].flows] == [f.events for f in b["run"].flows]
        assert [f.snd.stats for f in a["run"].flows] == [f.snd.stats for f in b["run"].flows]
    dropped, flaps = fast
    # Losses by path order, by the dark rule and by the RTO, and paths presumed dark: each rule
    # the loop serves was exercised
    assert {"sack", "dark"} <= set(dropped["benched"]) and flaps["benched"].get("rto")
    assert sum(f.snd.stats["presumed"] for r in fast for f in r["run"].flows) > 0


def test_a_clock_that_goes_back_turns_the_early_stop_off():
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.evset import EvInfo

    snd = MrcSender(1, 2, [EvInfo(ev, 0) for ev in range(4)], TransportConfig(), seed=1)
    snd.send_message(b"x" * 20000, 0.0)
    snd.poll(1.0)
    assert snd._emit_ordered
    snd.outstanding.clear()  # as if every packet were acknowledged
    snd.cc.cwnd = 100.0
    snd.send_message(b"y" * 4000, 1.0)
    snd.poll(0.5)
    assert not snd._emit_ordered
