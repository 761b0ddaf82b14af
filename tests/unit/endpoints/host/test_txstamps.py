"""Transmit stamps matched to the datagrams they are for (endpoints/host/txstamps.py), over a
fake socket whose error queue holds what the kernel would put there."""

from __future__ import annotations

import socket
import time

import pytest

from endpoints.host import txstamps
from endpoints.host.txstamps import TxStamps
from endpoints.protocol.echoes import Echoes


def _stamp(number: int, t: float, info: int = txstamps.SCM_TSTAMP_SND) -> list[tuple[int, int, bytes]]:
    sec = int(t)
    ts = txstamps._TIMESPEC.pack(sec, round((t - sec) * 1e9)) + bytes(32)
    err = txstamps._ERR.pack(42, txstamps.SO_EE_ORIGIN_TIMESTAMPING, 0, 0, 0, info, number)
    return [(socket.SOL_SOCKET, txstamps.SO_TIMESTAMPING, ts),
            (socket.IPPROTO_IPV6, txstamps.IPV6_RECVERR, err + bytes(28))]


class FakeSocket:
    def __init__(self, queue: list[list[tuple[int, int, bytes]]]) -> None:
        self.queue = list(queue)

    def recvmsg(self, size: int, ancsize: int, flags: int) -> tuple[bytes, list, int, None]:
        assert flags == socket.MSG_ERRQUEUE
        if not self.queue:
            raise BlockingIOError
        return b"", self.queue.pop(0), 0, None


def test_stamps_go_to_their_datagrams_and_a_datagram_without_one_is_passed_over():
    now = time.time()
    sock = FakeSocket([_stamp(0, now), _stamp(1, now + 0.001, info=1),  # 1: a SCHED stamp
                       _stamp(2, now + 0.002)])  # datagram 1 never reached the device
    stamps: TxStamps[str] = TxStamps()
    for token in ("a", "b", None, "d"):
        stamps.sent(sock, token)  # type: ignore[arg-type]
    before = time.monotonic()
    got = stamps.drain()
    assert [token for token, _ in got] == ["a"]  # "b" had no SND stamp; 2 is the token-less one
    assert got[0][1] == pytest.approx(before - (time.time() - now), abs=0.01)  # on the monotonic clock
    assert stamps.stamped == 1 and stamps.unstamped == 1
    assert stamps  # "d" still waits
    sock.queue.append(_stamp(3, now + 0.003))
    (token, t), = stamps.drain()
    assert token == "d" and t - got[0][1] == pytest.approx(0.003, abs=1e-6)
    assert not stamps


def test_an_error_message_that_is_not_a_stamp_is_skipped():
    icmp = [(socket.IPPROTO_IPV6, txstamps.IPV6_RECVERR, txstamps._ERR.pack(111, 3, 1, 4, 0, 0, 0))]
    assert txstamps.parse(icmp) is None
    sock = FakeSocket([icmp, _stamp(0, time.time())])
    stamps: TxStamps[int] = TxStamps()
    stamps.sent(sock, 7)  # type: ignore[arg-type]
    assert [token for token, _ in stamps.drain()] == [7]


def test_a_socket_that_never_answers_is_bounded_and_forgotten():
    sock = FakeSocket([])
    stamps: TxStamps[int] = TxStamps()
    for i in range(txstamps.MAX_PENDING + 5):
        stamps.sent(sock, i)  # type: ignore[arg-type]
    assert stamps.unstamped == 5 and stamps.drain() == []
    stamps.forget(sock)  # type: ignore[arg-type]
    assert not stamps and stamps.unstamped == txstamps.MAX_PENDING + 5


def test_a_departure_is_kept_only_for_a_transmission_still_acknowledgeable():
    ring = Echoes(keep=2.0)
    ring.sent(0x1C000, 1000, now=0.0)
    ring.departed(0x1C000, 1000, 0.004)
    ring.departed(0x1C000, 1000, 0.009)  # a second one with the same key: the first counts
    ring.departed(0x2C000, 1000, 0.004)  # never sent
    assert ring.departure(0x1C000, 1000) == 0.004 and ring.departure(0x2C000, 1000) is None
    ring.expire(now=2.5)
    assert ring.departure(0x1C000, 1000) is None
