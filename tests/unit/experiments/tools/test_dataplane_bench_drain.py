"""The data-plane bench waits for what an overloaded trial left queued before the next window:
without it, the backlog counted as delivered (a 30k-frame/s window read 1.07 of its offered
load, and the sweep took that window as its best)."""

from types import SimpleNamespace

from experiments.tools import dataplane_bench as bench


def _load(counts: list[int], monkeypatch) -> bench.Load:
    seen = iter(counts)
    last = counts[-1]
    monkeypatch.setattr(bench, "_snmp6", lambda pid: {"Udp6InDatagrams": next(seen, last)})
    monkeypatch.setattr(bench.time, "sleep", lambda s: None)
    load = bench.Load.__new__(bench.Load)
    load.em, load.dst = SimpleNamespace(pid=lambda host: 1), "h1"
    return load


def test_drain_waits_until_nothing_more_arrives(monkeypatch):
    calls = []
    counts = [100, 250, 400, 400]
    load = _load(counts, monkeypatch)
    real = bench._snmp6
    monkeypatch.setattr(bench, "_snmp6", lambda pid: calls.append(pid) or real(pid))
    load.drain()
    assert len(calls) == len(counts)  # stopped at the first reading equal to the one before


def test_drain_gives_up_after_its_limit(monkeypatch):
    load = _load(list(range(10**6)), monkeypatch)  # always more arriving
    clock = iter(float(t) for t in range(10**6))
    monkeypatch.setattr(bench.time, "monotonic", lambda: next(clock))
    waited = load.drain()
    assert bench.DRAIN_MAX_S <= waited <= bench.DRAIN_MAX_S + 2
