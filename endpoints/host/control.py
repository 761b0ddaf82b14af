"""The agent's local control channel: JSON lines over a Unix socket.

A request is one JSON object with a "cmd"; the reply is one JSON object with "ok" and either
the result fields or "error" (a sentence naming what was wrong). A malformed request gets an
error reply, never a dropped connection or a crashed agent. Unix sockets live in the
filesystem, which every Mininet host shares, so the runner reaches each agent without entering
its network namespace.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any, BinaryIO

MAX_LINE = 64 * 1024  # a request is an object of a few fields: far below this
MAX_OUT = 4 << 20  # unread reply bytes one connection may hold before it is dropped
MAX_CONNECTIONS = 16  # the runner keeps one; more would only exhaust descriptors


class ControlError(ValueError):
    """A request the agent refuses; the message goes back to the caller."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number in strict JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf (1e400 overflows to it)
        raise ValueError(f"{text} is out of range")
    return value


def parse_request(line: bytes) -> dict[str, Any]:
    """One request line as a JSON object, strictly: no NaN or Infinity, no number that
    overflows, and no nesting beyond one level (`"config": {"ev_set_size": 8}`, `"qpns": [5, 9]`);
    a deep one would exhaust the recursion limit, and no command takes more. ValueError else."""
    try:
        req = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("request is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"request is not strict JSON: {exc}") from None
    if not isinstance(req, dict):
        raise ValueError("request must be a JSON object with a \"cmd\"")
    for value in req.values():
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if any(isinstance(v, (dict, list)) for v in inner):
            raise ValueError("request is nested too deeply: a field is a plain value, or a list "
                             "or an object of plain values")
    return req


class _Conn:
    __slots__ = ("sock", "inbuf", "out", "last")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""
        self.out = bytearray()  # replies not yet taken by the kernel
        self.last = time.monotonic()  # when it connected or last asked something


class ControlServer:
    """Serves requests from the agent's select loop without ever blocking it: replies are
    written as the client reads them (a client that stops reading is dropped once
    `MAX_OUT` bytes wait for it), at most `MAX_CONNECTIONS` clients (a newcomer takes the place
    of the one longest silent), strict JSON."""

    def __init__(self, path: str, selector: selectors.BaseSelector,
                 handler: Callable[[dict[str, Any]], dict[str, object]]) -> None:
        self.path = path
        self.selector = selector
        self.handler = handler
        if os.path.lexists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is its owner's only (0600) from the start
        try:
            self.sock.bind(path)
        finally:
            os.umask(old)
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.conns: dict[socket.socket, _Conn] = {}
        selector.register(self.sock, selectors.EVENT_READ, self._accept)

    def _accept(self, key: selectors.SelectorKey) -> None:
        try:
            sock, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return  # out of descriptors: the client sees its connection refused or reset
        if len(self.conns) >= MAX_CONNECTIONS:
            # Make room by dropping the client that has gone longest without asking anything:
            # connections that never ask (a flood) cannot lock out one that does. Refusing the
            # newcomer instead let a loaded machine's flood fill every place before the runner's
            # fresh connection came, which was then closed unanswered.
            self._drop(min(self.conns.values(), key=lambda c: c.last))
        sock.setblocking(False)
        self.conns[sock] = _Conn(sock)
        self.selector.register(sock, selectors.EVENT_READ, self._ready)

    def _ready(self, key: selectors.SelectorKey) -> None:
        conn = self.conns.get(key.fileobj)  # type: ignore[call-overload]
        if conn is None:
            return
        if key.events & selectors.EVENT_WRITE or conn.out:
            self._flush(conn)
            if conn.sock not in self.conns:
                return
        self._read(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        buf = conn.inbuf + chunk
        *lines, rest = buf.split(b"\n")
        if len(rest) > MAX_LINE or any(len(line) > MAX_LINE for line in lines):
            self._queue(conn, {"ok": False, "error": f"request longer than {MAX_LINE} bytes"})
            self._flush(conn)
            self._drop(conn)
            return
        conn.inbuf = rest
        if lines:
            conn.last = time.monotonic()
        for line in lines:
            if line.strip():
                self._queue(conn, self._answer(line))
                if conn.sock not in self.conns:
                    return
        self._flush(conn)

    def _answer(self, line: bytes) -> dict[str, object]:
        try:
            req = parse_request(line)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        try:
            return {"ok": True, **self.handler(req)}
        except (ControlError, ValueError, KeyError, TypeError, ArithmeticError) as exc:
            return {"ok": False, "error": str(exc).strip("'\"")}

    def _queue(self, conn: _Conn, reply: dict[str, object]) -> None:
        conn.out += (json.dumps(reply) + "\n").encode()
        if len(conn.out) > MAX_OUT:
            self._drop(conn)  # it does not read what it asks for: it is not waited for

    def _flush(self, conn: _Conn) -> None:
        if conn.sock not in self.conns:
            return
        try:
            while conn.out:
                sent = conn.sock.send(conn.out)
                del conn.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(conn)
            return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if self.selector.get_key(conn.sock).events != want:
            self.selector.modify(conn.sock, want, self._ready)

    def _drop(self, conn: _Conn) -> None:
        if self.conns.pop(conn.sock, None) is None:
            return
        self.selector.unregister(conn.sock)
        conn.sock.close()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._drop(conn)
        self.selector.unregister(self.sock)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class AgentClient:
    """The runner's side of the channel."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.path = path
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.rfile: BinaryIO | None = None

    def connect(self, wait: float = 15.0) -> AgentClient:
        deadline = time.monotonic() + wait
        while True:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                sock.connect(self.path)
                self.sock, self.rfile = sock, sock.makefile("rb")
                return self
            except OSError as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"agent socket {self.path} did not answer within {wait} s") from exc
                time.sleep(0.05)

    def call(self, cmd: str, **fields: object) -> dict[str, Any]:
        if self.sock is None:
            self.connect()
        assert self.sock is not None and self.rfile is not None
        try:
            self.sock.sendall((json.dumps({"cmd": cmd, **fields}) + "\n").encode())
            line = self.rfile.readline()
        except (BrokenPipeError, ConnectionResetError) as exc:
            self.close()
            raise ConnectionError(f"agent at {self.path} closed the channel") from exc
        except BaseException:
            # Interrupted between request and reply (Ctrl-C in the CLI, a timeout): the reply
            # may still come, and would be read as the next call's. Start afresh instead.
            self.close()
            raise
        if not line:
            self.close()
            raise ConnectionError(f"agent at {self.path} closed the channel")
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(reply.get("error", "unknown error"))
        return reply

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.rfile = None
