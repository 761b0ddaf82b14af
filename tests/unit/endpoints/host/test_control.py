"""The agent's control channel, over a real Unix socket in a thread (no root): a call given up
on stays in step, and nothing a client sends or fails to read can crash or freeze the server."""

from __future__ import annotations

import json
import selectors
import socket
import stat
import threading
import time

import pytest

from endpoints.host import control
from endpoints.host.control import AgentClient, ControlError, ControlServer


@pytest.fixture
def server(tmp_path):
    selector = selectors.DefaultSelector()
    running = threading.Event()
    running.set()

    def handle(req: dict) -> dict:
        if req["cmd"] == "slow":
            time.sleep(0.3)  # the reply comes after the caller gave up
            return {"answer": "slow"}
        if req["cmd"] == "echo":
            return {"answer": req["value"]}
        raise ControlError(f"unknown command {req['cmd']!r}")

    srv = ControlServer(str(tmp_path / "agent.sock"), selector, handle)

    def loop() -> None:
        while running.is_set():
            for key, _ in selector.select(0.02):
                key.data(key)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield srv
    running.clear()
    thread.join()
    srv.close()


def test_a_call_given_up_on_never_hands_its_late_reply_to_the_next_call(server):
    client = AgentClient(server.path, timeout=0.1).connect()
    with pytest.raises(TimeoutError):
        client.call("slow")
    time.sleep(0.4)  # the late reply has arrived by now, on the abandoned connection
    assert client.call("echo", value=1)["answer"] == 1
    assert client.call("echo", value=2)["answer"] == 2
    with pytest.raises(ControlError, match="unknown command"):
        client.call("frobnicate")
    assert client.call("echo", value=3)["answer"] == 3  # a refusal leaves the channel in step
    client.close()


class Loop:
    """A ControlServer served by a thread, like the agent's select loop (nothing else)."""

    def __init__(self, path: str) -> None:
        self.selector = selectors.DefaultSelector()
        self.calls: list[dict] = []
        self.server = ControlServer(path, self.selector, self.handle)
        self.running = True
        self.crashed: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def handle(self, req: dict) -> dict:
        self.calls.append(req)
        if req.get("cmd") == "big":
            return {"blob": "x" * 200_000}
        return {"echo": req}

    def run(self) -> None:
        try:
            while self.running:
                for key, _ in self.selector.select(0.02):
                    key.data(key)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.crashed = exc

    def close(self) -> None:
        self.running = False
        self.thread.join(2)
        self.server.close()


@pytest.fixture
def loop(tmp_path):
    lp = Loop(str(tmp_path / "agent.sock"))
    yield lp
    lp.close()


def _raw(path: str, data: bytes, read: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(path)
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while not out.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def _alive(loop: Loop, path: str) -> None:
    assert loop.crashed is None, repr(loop.crashed)
    assert AgentClient(path, timeout=3).connect(wait=1).call("ping")["echo"] == {"cmd": "ping"}


def test_the_socket_is_its_owners_only(loop, tmp_path):
    assert stat.S_IMODE((tmp_path / "agent.sock").stat().st_mode) == 0o600


@pytest.mark.parametrize("line, words", [
    (b'{"cmd": "open", "plane": NaN}', "not strict JSON"),
    (b'{"cmd": "open", "plane": Infinity}', "not strict JSON"),
    (b'{"cmd": "open", "data_seed": -Infinity}', "not strict JSON"),
    (b'{"cmd": "open", "data_seed": 1e400}', "not strict JSON"),
    (b'[' * 30_000 + b']' * 30_000, "nested too deeply"),
    (b'{"cmd": "open", "x": ' + b'{"a": ' * 50 + b'1' + b'}' * 50 + b'}', "nested too deeply"),
    (b'{"cmd": "open", "config": {"ev_set_size": {"a": 1}}}', "nested too deeply"),
    (b'{"cmd": "open", "config": [1, [2]]}', "nested too deeply"),
    (b'{"cmd": "open", "qpns": [{"a": 1}]}', "nested too deeply"),
    (b'"just a string"', "must be a JSON object"),
])
def test_hostile_json_gets_an_error_reply_and_the_server_lives(loop, tmp_path, line, words):
    path = str(tmp_path / "agent.sock")
    reply = json.loads(_raw(path, line + b"\n"))
    assert reply["ok"] is False and words in reply["error"], reply
    assert all(c.get("cmd") != "open" for c in loop.calls), "a bad request reached the handler"
    _alive(loop, path)


def test_one_level_of_transport_parameters_is_a_request(loop, tmp_path):
    path = str(tmp_path / "agent.sock")
    reply = json.loads(_raw(path, b'{"cmd": "open", "config": {"ev_set_size": 8}}\n'))
    assert reply["ok"] is True and loop.calls[-1]["config"] == {"ev_set_size": 8}, reply
    reply = json.loads(_raw(path, b'{"cmd": "write_many", "qpns": [5, 9], "sizes": [10, 20]}\n'))
    assert reply["ok"] is True and loop.calls[-1]["qpns"] == [5, 9], reply  # a list of plain values


def test_an_overlong_line_is_refused_and_its_connection_dropped(loop, tmp_path):
    path = str(tmp_path / "agent.sock")
    reply = json.loads(_raw(path, b'{"cmd": "' + b"a" * (control.MAX_LINE + 10) + b'"}\n'))
    assert reply["ok"] is False and "longer than" in reply["error"]
    _alive(loop, path)


def test_a_client_that_never_reads_is_dropped_not_waited_for(loop, tmp_path):
    path = str(tmp_path / "agent.sock")
    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.connect(path)
    hog.settimeout(5)
    request = b'{"cmd": "big"}\n'
    try:
        for _ in range(400):  # 80 MB of replies asked for, none read
            hog.sendall(request)
    except OSError:
        pass  # dropped by the server: what we want
    t0 = time.monotonic()
    _alive(loop, path)  # everyone else is still served, promptly
    assert time.monotonic() - t0 < 2
    assert sum(len(c.out) for c in loop.server.conns.values()) <= 2 * control.MAX_OUT
    hog.close()


def test_connections_are_capped(loop, tmp_path):
    path = str(tmp_path / "agent.sock")
    socks = []
    try:
        for _ in range(control.MAX_CONNECTIONS * 4):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socks.append(s)
        time.sleep(0.3)
        assert len(loop.server.conns) <= control.MAX_CONNECTIONS
    finally:
        for s in socks:
            s.close()
    time.sleep(0.3)
    _alive(loop, path)


def test_a_client_that_asks_is_served_beside_a_full_set_of_silent_ones(loop, tmp_path):
    """A flood that fills every place before the runner connects (as a loaded machine ordered
    it in a CI rehearsal) gives way: the newcomer takes the silent one's place, and a client that
    keeps asking keeps its own."""
    path = str(tmp_path / "agent.sock")
    talker = AgentClient(path, timeout=3).connect(wait=1)
    assert talker.call("ping")["echo"] == {"cmd": "ping"}
    silent = []
    try:
        for _ in range(control.MAX_CONNECTIONS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            silent.append(s)
            assert talker.call("ping")["echo"] == {"cmd": "ping"}  # the talker stays in
        deadline = time.monotonic() + 5
        while len(loop.server.conns) < control.MAX_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(loop.server.conns) == control.MAX_CONNECTIONS  # full, of silent ones
        _alive(loop, path)  # a fresh client is answered
        assert talker.call("ping")["echo"] == {"cmd": "ping"}
        assert len(loop.server.conns) <= control.MAX_CONNECTIONS
    finally:
        for s in silent:
            s.close()
        talker.close()


def test_client_raises_a_clear_error_when_the_agent_is_gone(tmp_path):
    lp = Loop(str(tmp_path / "agent.sock"))
    client = AgentClient(str(tmp_path / "agent.sock"), timeout=2).connect(wait=1)
    lp.close()
    with pytest.raises(ConnectionError, match="closed the channel"):
        for _ in range(3):
            client.call("ping")
    with pytest.raises(ControlError):
        raise ControlError("x")
