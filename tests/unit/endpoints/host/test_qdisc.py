"""The rtnetlink qdisc reader: parsing a dump built byte by byte, and a live dump of this
namespace checked against iproute2's `tc -j qdisc show`."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess

import pytest

from endpoints.host import qdisc
from endpoints.host.qdisc import Qdisc, QdiscReader, parse


def _attr(kind: int, body: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(body), kind) + body
    return raw + b"\0" * (-len(raw) % 4)


def _msg(kind: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 2, seq, 0) + body


def _qdisc_msg(seq: int, ifindex: int, handle: int, parent: int, kind: str,
               queue: tuple[int, int, int]) -> bytes:
    stats = _attr(qdisc.TCA_STATS_QUEUE, struct.pack("=IIIII", *queue, 0, 0))
    body = struct.pack("=BxxxiIII", socket.AF_UNSPEC, ifindex, handle, parent, 1)
    body += _attr(qdisc.TCA_KIND, kind.encode() + b"\0") + _attr(qdisc.TCA_STATS2, stats)
    return _msg(qdisc.RTM_NEWQDISC, seq, body)


def test_parse_a_dump_built_by_hand() -> None:
    root = _qdisc_msg(7, 3, 0x10000, qdisc.TC_H_ROOT, "htb", (5, 20990, 2))
    leaf = _qdisc_msg(7, 3, 0x20000, 0x10003, "pfifo", (5, 20990, 2))
    other = _qdisc_msg(6, 4, 0x10000, qdisc.TC_H_ROOT, "htb", (1, 1, 1))  # an older dump's
    done = _msg(qdisc.NLMSG_DONE, 7, b"\0" * 4)
    got, finished = parse(root + leaf + other + done, 7)
    assert finished
    assert got == [Qdisc(3, 0x10000, qdisc.TC_H_ROOT, "htb", 5, 20990, 2),
                   Qdisc(3, 0x20000, 0x10003, "pfifo", 5, 20990, 2)]
    roots, _ = parse(root + leaf + done, 7, roots_only=True)
    assert [q.kind for q in roots] == ["htb"]
    partial, finished = parse(root + leaf, 7)  # the dump goes on in the next read
    assert len(partial) == 2 and not finished


def test_a_malformed_message_ends_the_read_instead_of_looping() -> None:
    got, finished = parse(struct.pack("=IHHII", 4, qdisc.RTM_NEWQDISC, 2, 7, 0), 7)
    assert got == [] and finished


def test_an_error_reply_raises() -> None:
    with pytest.raises(OSError):
        parse(_msg(qdisc.NLMSG_ERROR, 7, struct.pack("=i", -1) + b"\0" * 16), 7)


@pytest.mark.skipif(shutil.which("tc") is None, reason="needs iproute2's tc")
def test_a_live_dump_lists_what_tc_lists() -> None:
    """Every qdisc of this namespace, kind and root-ness as iproute2 reports them (retried:
    another process may add or remove interfaces between the two reads)."""
    def ours() -> set[tuple[str, str, bool]]:
        with QdiscReader() as reader:
            return {(socket.if_indextoname(q.ifindex), q.kind, q.parent == qdisc.TC_H_ROOT)
                    for q in reader.read() if q.kind != "ingress" and q.kind != "clsact"}

    def theirs() -> set[tuple[str, str, bool]]:
        out = subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True, check=True)
        return {(q["dev"], q["kind"], bool(q.get("root"))) for q in json.loads(out.stdout)
                if q["kind"] not in ("ingress", "clsact")}

    for _ in range(5):
        a, b = ours(), theirs()
        if a == b:
            break
    assert a == b and a
    with QdiscReader() as reader:
        roots = reader.read(roots_only=True)
    assert roots and all(q.parent == qdisc.TC_H_ROOT for q in roots)
