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
from typing import BinaryIO

MAX_LINE = 1 << 20


class ControlError(ValueError):
    """A request the agent refuses; the message goes back to the caller."""


class ControlServer:
    def __init__(self, path: str, selector: selectors.BaseSelector,
                 handler: Callable[[dict], dict]) -> None:
        self.path = path
        self.selector = selector
        self.handler = handler
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.buffers: dict[socket.socket, bytes] = {}
        selector.register(self.sock, selectors.EVENT_READ, self._accept)

    def _accept(self, key: selectors.SelectorKey) -> None:
        conn, _ = self.sock.accept()
        conn.setblocking(False)
        self.buffers[conn] = b""
        self.selector.register(conn, selectors.EVENT_READ, self._read)

    def _read(self, key: selectors.SelectorKey) -> None:
        conn: socket.socket = key.fileobj  # type: ignore[assignment]
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        buf = self.buffers[conn] + chunk
        if len(buf) > MAX_LINE:
            self._reply(conn, {"ok": False, "error": f"request longer than {MAX_LINE} bytes"})
            self._drop(conn)
            return
        *lines, rest = buf.split(b"\n")
        self.buffers[conn] = rest
        for line in lines:
            if line.strip():
                self._reply(conn, self._answer(line))

    def _answer(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
        except ValueError as exc:
            return {"ok": False, "error": f"request is not JSON: {exc}"}
        if not isinstance(req, dict):
            return {"ok": False, "error": "request must be a JSON object with a \"cmd\""}
        try:
            return {"ok": True, **self.handler(req)}
        except (ControlError, ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": str(exc).strip("'\"")}

    def _reply(self, conn: socket.socket, reply: dict) -> None:
        data = (json.dumps(reply) + "\n").encode()
        conn.setblocking(True)  # replies are small; a blocked reader only blocks its own reply
        try:
            conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.setblocking(False)

    def _drop(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        self.buffers.pop(conn, None)
        conn.close()

    def close(self) -> None:
        for conn in list(self.buffers):
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

    def call(self, cmd: str, **fields: object) -> dict:
        if self.sock is None:
            self.connect()
        assert self.sock is not None and self.rfile is not None
        try:
            self.sock.sendall((json.dumps({"cmd": cmd, **fields}) + "\n").encode())
            line = self.rfile.readline()
        except BaseException:
            # Interrupted between request and reply (Ctrl-C in the CLI, a timeout): the reply
            # may still come, and would be read as the next call's. Start afresh instead.
            self.close()
            raise
        if not line:
            self.close()
            raise ConnectionError(f"agent at {self.path} closed the channel")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(reply.get("error", "unknown error"))
        return reply

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.rfile = None
