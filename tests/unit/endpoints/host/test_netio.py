"""One unroutable path must not stall an agent (issue 11, item 7): only backpressure (the
kernel's queue is full) is retried, per path and bounded; a permanent error drops the datagram
as a loss on that path, counted by errno. Sockets are stand-ins: no root."""

from __future__ import annotations

import errno

from endpoints.host import netio


class FakeSock:
    """A path socket: raises `err` (an errno) for the first `times` sends, then accepts."""

    def __init__(self, err: int | None = None, times: int = 10**9) -> None:
        self.err, self.times, self.sent = err, times, []

    def send(self, payload: bytes) -> int:
        if self.err is not None and self.times > 0:
            self.times -= 1
            raise OSError(self.err, "fake")
        self.sent.append(payload)
        return len(payload)

    def close(self) -> None:
        pass


def _path(sock: FakeSock, ev: int) -> netio.TxPath:
    return netio.TxPath(b"\0" * 16, b"\0" * 16, "::", ev, 0, sock)  # type: ignore[arg-type]


def test_a_permanent_error_is_a_loss_counted_by_errno_not_a_retry():
    tx = netio.Transmitter()
    for code, name in ((errno.ENETUNREACH, "ENETUNREACH"), (errno.EMSGSIZE, "EMSGSIZE"),
                       (errno.EHOSTUNREACH, "EHOSTUNREACH")):
        path = _path(FakeSock(code), 1)
        assert tx.send(path, b"x") is True, f"{name} retried forever at the head of the backlog"
        assert tx.errors[name] == 1
    assert tx.dropped == 3


def test_backpressure_is_retried():
    tx = netio.Transmitter()
    for code in (errno.EAGAIN, errno.ENOBUFS):
        assert tx.send(_path(FakeSock(code), 1), b"x") is False
    assert tx.dropped == 0 and tx.errors == {"EAGAIN": 1, "ENOBUFS": 1}


def test_one_dead_path_does_not_block_the_others():
    tx = netio.Transmitter()
    backlog = netio.Backlog(tx, per_path=8)
    dead, busy, good = FakeSock(errno.ENETUNREACH), FakeSock(errno.EAGAIN, times=50), FakeSock()
    paths = [_path(dead, 1), _path(busy, 2), _path(good, 3)]
    for i in range(300):
        backlog.send(paths[i % 3], bytes([i % 256]))
    assert len(good.sent) == 100, "a dead or full path held up a healthy one"
    assert len(backlog) <= 8, "the backlog grows without bound"
    assert tx.errors["ENETUNREACH"] == 100
    for _ in range(60):  # the busy path drains once its queue frees
        backlog.flush()
    assert len(backlog) == 0 and len(busy.sent) == 8  # the oldest 8 it kept, in order
    assert busy.sent == [bytes([i % 256]) for i in range(1, 300, 3)][:8]
    assert backlog.overflow == 100 - 8  # beyond its bound: lost on that path, counted
