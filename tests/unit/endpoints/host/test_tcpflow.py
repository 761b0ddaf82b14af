"""The TCP peers over the loopback (no root): a sized transfer ends by itself, checked byte for
byte, and the server's result file can be read while it runs."""

import json
import socket
import threading
import time

from endpoints.host import tcpflow


def _free_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def _serve(port: int, out) -> threading.Thread:
    server = threading.Thread(target=tcpflow.serve, args=("::1", port, str(out), False, 30.0))
    server.start()
    return server


def test_sized_transfer_ends_on_its_own_with_every_byte_checked(tmp_path):
    port, out = _free_port(), tmp_path / "server.json"
    nbytes = 3_000_001  # not a multiple of the chunk or the pattern period
    server = _serve(port, out)
    t0 = time.monotonic()
    assert tcpflow.client("::1", port, 30.0, False, str(tmp_path / "client.json"), nbytes) == 0
    server.join(timeout=10)
    final = json.loads(out.read_text())
    assert not server.is_alive() and time.monotonic() - t0 < 10  # ended by the close, not --seconds
    assert final["done"] and final["bytes"] == nbytes and final["data_ok"]
    assert sum(final["bins"].values()) == nbytes
    assert json.loads((tmp_path / "client.json").read_text())["bytes_sent"] == nbytes


def _connect(port: int) -> socket.socket:
    """A connection to the server thread once it listens (as tcpflow.client retries: on a
    loaded machine the thread may not have bound its socket yet)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("::1", port), timeout=5)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_what_the_server_received_so_far_is_readable_while_it_runs(tmp_path):
    port, out = _free_port(), tmp_path / "server.json"
    server = _serve(port, out)
    stream = tcpflow.pattern(0, 300_000)
    with _connect(port) as sock:
        sock.sendall(stream[:100_000])
        time.sleep(3 * tcpflow.PROGRESS_S)
        live = json.loads(out.read_text())
        assert not live["done"] and live["bytes"] == 100_000 and live["data_ok"]
        sock.sendall(stream[100_000:150_000] + b"x" + stream[150_001:])  # one wrong byte
    server.join(timeout=10)
    final = json.loads(out.read_text())
    assert final["done"] and final["bytes"] == 300_000 and not final["data_ok"]
