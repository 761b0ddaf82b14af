"""The agent's control channel, over a real Unix socket in a thread (no root)."""

import selectors
import threading
import time

import pytest

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
