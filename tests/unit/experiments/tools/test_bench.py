"""The bench's arithmetic and bookkeeping (no root needed), and the contracts of the hot-path
code it measures: the single-struct data encoder and the agent's message contents."""

from __future__ import annotations

import cProfile
import hashlib
import os
import pstats
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from endpoints.host import dataloop
from endpoints.protocol import wire
from experiments.tools import bench

REPO = Path(__file__).resolve().parents[4]

def _sample(t, user, system, sleeps=0, payload=0, **stats):
    return bench.Sample(t, user, system, stats, payload, sleeps)


def test_rates_are_data_packets_per_cpu_second_and_the_headline_is_the_busier_side():
    sender = (_sample(10.0, 1.0, 0.5, sent=100, retransmitted=0, sacks=0),
              _sample(12.0, 2.5, 1.0, sleeps=10, sent=190_000, retransmitted=10_000, sacks=2_000))
    receiver = (_sample(10.0, 0.2, 0.1, payload=0, packets=0, sacks=0),
                _sample(12.0, 1.2, 0.1, payload=200_000 * 1024, packets=199_000, sacks=2_000))
    r = bench.compute_result(sender, receiver)
    snd, rcv = r["sender"], r["receiver"]
    assert snd["cpu_s"] == pytest.approx(2.0) and rcv["cpu_s"] == pytest.approx(1.0)
    assert snd["data_packets"] == 199_900  # first transmissions + retransmissions
    assert snd["other_packets"] == 2_000  # SACKs do not count as data
    assert snd["data_pps_per_cpu_s"] == pytest.approx(99_950)
    assert rcv["data_pps_per_cpu_s"] == pytest.approx(199_000)
    assert snd["cpu_utilisation"] == pytest.approx(1.0)
    assert snd["data_packets_per_wakeup"] == pytest.approx(19_990)
    assert rcv["goodput_mbps"] == pytest.approx(200_000 * 1024 * 8 / 2 / 1e6, abs=0.1)
    assert r["agent_pps_per_core"] == snd["data_pps_per_cpu_s"] and r["bound_by"] == "sender"
    assert r["pair_data_pps_per_cpu_s"] == pytest.approx(199_000 / 3.0, abs=0.1)


@pytest.mark.parametrize("below", [0, 1])
def test_the_goal_is_met_at_the_goal_and_not_one_packet_below(below):
    pkts = bench.GOAL_PPS_PER_CORE - below  # one CPU-second on the busier side
    sender = (_sample(0.0, 0.0, 0.0, sent=0), _sample(1.0, 0.75, 0.25, sent=pkts))
    receiver = (_sample(0.0, 0.0, 0.0, packets=0), _sample(1.0, 0.25, 0.25, packets=pkts))
    r = bench.compute_result(sender, receiver)
    assert r["agent_pps_per_core"] == pkts and r["bound_by"] == "sender"
    assert r["meets_goal"] is (below == 0)


def test_no_cpu_time_gives_zero_not_a_division_error():
    s = _sample(1.0, 0.0, 0.0, sent=0)
    r = bench.compute_result((s, s), (s, s))
    assert r["agent_pps_per_core"] == 0.0 and r["meets_goal"] is False
    assert r["sender"]["data_packets_per_wakeup"] is None


def test_median_run_takes_the_middle_headline():
    runs = [{"agent_pps_per_core": v} for v in (90.0, 50.0, 70.0)]
    assert bench.median_run(runs)["agent_pps_per_core"] == 70.0
    assert bench.median_run(runs[:2])["agent_pps_per_core"] == 50.0  # lower middle
    with pytest.raises(ValueError):
        bench.median_run([])


def test_data_ok_needs_every_received_message_to_match():
    assert bench.data_ok({"0": "a", "1": "b"}, {"0": "a"})
    assert not bench.data_ok({"0": "a"}, {"0": "x"})
    assert not bench.data_ok({"0": "a"}, {})  # nothing delivered is not a success


def test_top_functions_leaves_epoll_waits_out_of_the_shares():
    import select

    def busy():
        return sum(i * i for i in range(20_000))

    ep = select.epoll()
    prof = cProfile.Profile()
    prof.enable()
    busy()
    ep.poll(0.02)
    prof.disable()
    ep.close()
    top = bench.top_functions(pstats.Stats(prof), n=5, per_packet=10)
    assert top["idle_in_epoll_s"] >= 0.01
    names = [e["function"] for e in top["top_by_own_time"]]
    assert not any("epoll" in n for n in names)
    assert sum(e["share_pct"] for e in top["top_by_own_time"]) <= 100.5
    assert all("own_us_per_data_packet" in e for e in top["top_by_own_time"])


def test_process_counters_read_from_proc():
    user, system = bench.cpu_times(os.getpid())
    assert user > 0 and system >= 0
    assert bench.voluntary_switches(os.getpid()) >= 0
    assert bench.cpu_model()


# ----- the hot path's contracts -------------------------------------------------------------
@pytest.mark.parametrize("payload", [bytes(range(256)) * 4, memoryview(b"xyz" * 300)[5:700], b"",
                                     bytearray(b"abc")])
def test_single_struct_encode_data_is_byte_identical_to_the_layered_layout(payload):
    got = wire.encode_data(wire.OP_DATA_MIDDLE, wire.F_ACK_REQ, 0x123456, 0xABCDEF, 7, 4096,
                           1 << 20, payload, tsval=0x1234_5678, immediate=99)
    pad = -len(payload) % 4
    ref = wire.BTH.pack(wire.OP_DATA_MIDDLE, pad << 4, 0xFFFF, 0x123456, 0x80 << 24 | 0xABCDEF) + \
        wire.MRCETH.pack(0, wire.VERSION, 0) + \
        wire.DATA_EXT.pack(7, len(payload), 0, 4096, 1 << 20, 0x1234_5678, 99) + \
        bytes(payload) + bytes(pad) + bytes(wire.ICRC_LEN)
    assert type(got) is bytes and got == ref
    assert wire.decode(got).payload == bytes(payload)


def test_message_contents_are_reproducible_distinct_and_never_repeat_within_a_message():
    def qp(seed):
        return SimpleNamespace(msg_seed=seed)

    a, b = qp(5), qp(5)
    first = bytes(dataloop._message_data(a, 0, 1 << 20))
    assert first == bytes(dataloop._message_data(b, 0, 1 << 20))  # same data_seed, same bytes
    assert first != bytes(dataloop._message_data(a, 1, 1 << 20))  # every message differs
    # Another QP's messages start elsewhere in the pattern: its packets differ at every offset.
    assert all(first[:4096] != bytes(dataloop._message_data(qp(seed), msn, 4096))
               for seed in (6, 7, 1 << 20) for msn in range(4))
    # A packet's worth of bytes at one offset never reappears at another offset.
    chunks = {first[i:i + 1024] for i in range(0, len(first), 1024)}
    assert len(chunks) == len(first) // 1024
    small = dataloop._message_data(a, 3, 1000)
    assert len(small) == 1000
    big = bytes(dataloop._message_data(a, 2, 3 * dataloop.PATTERN_BYTES + 17))
    assert len(big) == 3 * dataloop.PATTERN_BYTES + 17
    assert big[:dataloop.PATTERN_BYTES] == big[dataloop.PATTERN_BYTES:2 * dataloop.PATTERN_BYTES]


def test_a_senders_digests_made_when_asked_are_those_of_the_bytes_it_posted():
    handed: dict[int, bytes] = {}

    class Sender:  # what DataLoop.post hands a sending core
        def send_message(self, data, now):
            handed[len(handed)] = bytes(data)
            return len(handed) - 1

    qp = dataloop.Qp(1, "h1", 1, "mrc", core=None, paths=None, sender=Sender(), msg_seed=9)  # type: ignore[arg-type]
    loop = object.__new__(dataloop.DataLoop)  # post touches only the QP
    sizes = [1 << 20, 4096, 1000, dataloop.PATTERN_BYTES + 17]
    for size in sizes[:2]:
        loop.post(qp, size, 0.0)
    assert qp.digests == {}  # nothing hashed on the hot path
    assert dataloop.message_digests(qp) == {m: hashlib.sha256(d).hexdigest() for m, d in handed.items()}
    first = dict(qp.digests)
    for size in sizes[2:]:
        loop.post(qp, size, 0.0)
    got = dataloop.message_digests(qp)
    assert got == {m: hashlib.sha256(d).hexdigest() for m, d in handed.items()} and len(got) == 4
    assert {m: got[m] for m in first} == first and not qp.undigested
    assert [len(handed[m]) for m in range(4)] == sizes and qp.posted == 4
    assert len(set(got.values())) == 4  # each message its own bytes
    # A budget hashes a chunk at a time, the oldest first, at least one message per call.
    for size in (4096, 4096, 8192):
        loop.post(qp, size, 0.0)
    assert list(dataloop.message_digests(qp, budget=4096)) == [0, 1, 2, 3, 4] and len(qp.undigested) == 2
    assert list(dataloop.message_digests(qp, budget=1)) == [0, 1, 2, 3, 4, 5] and len(qp.undigested) == 1
    assert dataloop.message_digests(qp, budget=1)[6] == hashlib.sha256(handed[6]).hexdigest()
    assert not qp.undigested


# A fresh interpreter started the way a shell without job control starts a background command
# (a CI job, `cmd &` in a script): with SIGINT ignored.
INTERRUPTED = """
import os, signal, sys, time
from topologies import runctx
print("inherited", "ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "other")
runctx.interrupts_raise()
for sig in (signal.SIGINT, signal.SIGTERM):
    try:
        os.kill(os.getpid(), sig)  # Ctrl-C, then a kill, during the measurement
        time.sleep(5)
        print(signal.Signals(sig).name, "was lost")
    except KeyboardInterrupt:
        print(signal.Signals(sig).name, "raised KeyboardInterrupt")
"""


def test_ctrl_c_and_sigterm_interrupt_a_tool_even_when_sigint_was_inherited_ignored():
    out = subprocess.run([sys.executable, "-c", INTERRUPTED], cwd=REPO, capture_output=True,
                         text=True, timeout=60,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["inherited ignored", "SIGINT raised KeyboardInterrupt",
                                       "SIGTERM raised KeyboardInterrupt"]


@pytest.mark.parametrize("tool", ["bench", "fuzz", "soak", "startup_bench", "dataplane_bench"])
def test_every_tool_takes_its_interrupts_before_anything_else(tool, monkeypatch):
    import importlib

    from topologies import runctx

    module = importlib.import_module(f"experiments.tools.{tool}")
    calls: list[str] = []
    monkeypatch.setattr(runctx, "interrupts_raise", lambda: calls.append(tool))
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert calls == [tool]
