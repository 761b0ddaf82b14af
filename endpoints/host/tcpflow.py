"""Real Linux TCP and MPTCP peers, measured the same way as the MRC agents.

`python -m endpoints.host.tcpflow server --bind ADDR --port P --out FILE [--mptcp] [--seconds S]`
`python -m endpoints.host.tcpflow client --connect ADDR --port P --seconds S [--bytes N] [--mptcp] --out FILE`

The server counts received bytes into goodput bins (endpoints/host/goodput.py) on
CLOCK_MONOTONIC, as the agents do, and checks the byte stream against the client's
deterministic pattern, so `data_ok` means the same for TCP as for MRC. It rewrites its --out
file every `PROGRESS_S` while it runs ("done": false), so what it received so far can be read
live, and a last time when the connection ends ("done": true). The client sends for --seconds,
or --bytes and then closes. MPTCP uses the kernel's own implementation (IPPROTO_MPTCP); the
subflows come from the path manager endpoints `topologies/hostnet.py` configures, one per plane.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time

from endpoints.host.goodput import BIN_S, GoodputBins

IPPROTO_MPTCP = 262
CHUNK = 64 * 1024
PROGRESS_S = 0.25  # how often the server rewrites what it has received so far
# The server result's verdict (experiments/api/flows.py reads it): every byte was the byte sent;
# the same word as the summaries' figure (experiments/scenarios/schema.py), which this floor
# cannot import.
DATA_OK = "data_ok"


def pattern(offset: int, length: int) -> bytes:
    """Bytes offset..offset+length of an endless deterministic stream (SHA-256 counter blocks)."""
    out = bytearray()
    block = offset // 32
    skip = offset % 32
    while len(out) < length + skip:
        out += hashlib.sha256(block.to_bytes(8, "big")).digest()
        block += 1
    return bytes(out[skip:skip + length])


PATTERN_PERIOD = 32 * 4096  # the client cycles through this many pattern bytes
_PERIOD_BYTES = b""


def period_bytes() -> bytes:
    global _PERIOD_BYTES
    if not _PERIOD_BYTES:
        _PERIOD_BYTES = pattern(0, PATTERN_PERIOD)
    return _PERIOD_BYTES


def _socket(mptcp: bool) -> socket.socket:
    proto = IPPROTO_MPTCP if mptcp else 0
    return socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto)


def _write_result(out: str, result: dict[str, object]) -> None:
    """Replace `out` whole (a reader never sees half a file)."""
    tmp = f"{out}.tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, out)


def serve(bind: str, port: int, out: str, mptcp: bool, seconds: float) -> int:
    listener = _socket(mptcp)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((bind, port))
    listener.listen(1)
    listener.settimeout(seconds)
    bins = GoodputBins()
    received = 0
    data_ok = True
    period = period_bytes()
    try:
        conn, _ = listener.accept()
    except TimeoutError:
        _write_result(out, {"error": "no connection", "bytes": 0, "done": True})
        return 1
    deadline = time.monotonic() + seconds
    conn.settimeout(PROGRESS_S)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    next_report = time.monotonic() + PROGRESS_S

    def result(done: bool) -> dict[str, object]:
        return {"bytes": received, DATA_OK: data_ok and received > 0, "bin_s": BIN_S,
                "bins": bins.as_json(), "mptcp": mptcp, "done": done}

    while (now := time.monotonic()) < deadline:
        if now >= next_report:
            _write_result(out, result(False))
            next_report = now + PROGRESS_S
        try:
            n = conn.recv_into(view)
        except TimeoutError:
            continue
        except ConnectionError:
            break
        if n == 0:
            break
        bins.add(time.monotonic(), n)
        # Verify against the pattern, wrapping around the period.
        pos = received % PATTERN_PERIOD
        chunk = view[:n]
        while chunk:
            take = min(len(chunk), PATTERN_PERIOD - pos)
            if chunk[:take] != period[pos:pos + take]:
                data_ok = False
            chunk = chunk[take:]
            pos = 0
        received += n
    conn.close()
    listener.close()
    _write_result(out, result(True))
    return 0


def client(connect: str, port: int, seconds: float, mptcp: bool, out: str,
           nbytes: int | None = None) -> int:
    sock = _socket(mptcp)
    sock.settimeout(5)
    for _ in range(50):
        try:
            sock.connect((connect, port))
            break
        except (ConnectionRefusedError, TimeoutError, OSError):
            time.sleep(0.1)
            sock.close()
            sock = _socket(mptcp)
            sock.settimeout(5)
    else:
        json.dump({"error": f"could not connect to [{connect}]:{port}"}, open(out, "w"))
        return 1
    sock.settimeout(1.0)
    period = period_bytes()
    sent = 0
    deadline = time.monotonic() + seconds
    limit = nbytes if nbytes is not None else float("inf")
    while time.monotonic() < deadline and sent < limit:
        pos = sent % PATTERN_PERIOD
        size = int(min(CHUNK, PATTERN_PERIOD - pos, limit - sent))
        try:
            n = sock.send(period[pos:pos + size])
        except TimeoutError:
            continue  # a stalled path: keep trying until the deadline, as an application would
        except OSError:
            break
        sent += n
    sock.close()
    with open(out, "w") as fh:
        json.dump({"bytes_sent": sent}, fh)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", required=True)
    c = sub.add_parser("client")
    c.add_argument("--connect", required=True)
    c.add_argument("--bytes", type=int, default=None, help="send this many bytes, then close")
    for p in (s, c):
        p.add_argument("--port", type=int, default=5201)
        p.add_argument("--seconds", type=float, required=True)
        p.add_argument("--mptcp", action="store_true")
        p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.role == "server":
        return serve(args.bind, args.port, args.out, args.mptcp, args.seconds)
    return client(args.connect, args.port, args.seconds, args.mptcp, args.out, args.bytes)


if __name__ == "__main__":
    sys.exit(main())
