"""The rtnetlink qdisc reader (no root needed: a dump of this namespace's qdiscs)."""

from __future__ import annotations

import socket
import struct

from endpoints.host import qstats


def test_reads_this_namespaces_root_qdiscs():
    reader = qstats.QdiscReader()
    try:
        roots = reader.read(roots_only=True)
        lo = socket.if_nametoindex("lo")
        assert any(q.ifindex == lo for q in roots)
        assert all(q.parent == qstats.TC_H_ROOT and q.kind for q in roots)
        assert len(reader.read()) >= len(roots)
    finally:
        reader.close()


def test_parses_kind_and_queue_statistics():
    def rta(kind: int, body: bytes) -> bytes:
        raw = struct.pack("=HH", 4 + len(body), kind) + body
        return raw + bytes(-len(raw) & 3)

    queue = rta(qstats.TCA_STATS_QUEUE, struct.pack("=IIIII", 3, 12_618, 7, 0, 0))
    msg = struct.pack("=BxxxiIII", socket.AF_UNSPEC, 5, 0x10000, qstats.TC_H_ROOT, 1) + \
        rta(qstats.TCA_KIND, b"htb\0") + rta(qstats.TCA_STATS2, queue)
    q = qstats._parse(msg, 0, len(msg))
    assert q == qstats.Qdisc(5, 0x10000, qstats.TC_H_ROOT, "htb", 3, 12_618, 7)
