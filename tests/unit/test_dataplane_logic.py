"""The data plane's Python side without root: constants derived from wire.py, thresholds, the
HTB batch, and the reference model the kernel program is held to (tests/integration)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from endpoints import netio, wire
from endpoints.config import TransportConfig
from topologies import dataplane as dp

SRC, DST = netio.packed("fd00:99::1"), netio.packed("fd00:99::2")
ETH = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x86\xdd"


def frame(payload: bytes, tclass: int = wire.DATA_TCLASS, dport: int = netio.MRC_PORT) -> bytes:
    return ETH + netio.build_packet(SRC, DST, 0x2C000, payload, tclass=tclass, dport=dport)


def data(n: int = 1024, flags: int = 0) -> bytes:
    return wire.encode_data(wire.OP_DATA_MIDDLE, flags, 5, 9, 1, 0, 1 << 20, b"\xab" * n)


SPEC = dp.PortSpec("x", None, 10e6, 5000, 15000, 50000)


def test_cflags_match_the_wire_format():
    flags = dict(f[2:].split("=") for f in dp.cflags())
    assert int(flags["MRC_DATA_HDR"]) == wire.DATA_HDR == 40  # the draft's 32 was wrong
    assert int(flags["MRC_COMMON_LEN"]) == wire.COMMON.size
    assert int(flags["MRC_MAGIC"]) == wire.MAGIC and int(flags["MRC_PORT"]) == 4791
    assert int(flags["MRC_F_TRIMMED"]) == wire.F_TRIMMED
    assert int(flags["MRC_DATA_OPCODE_MAX"]) == wire.DATA_OPCODE_MAX
    assert max(wire.DATA_OPCODES) <= wire.DATA_OPCODE_MAX < min(wire.OP_SACK, wire.OP_NACK)
    # The offsets locate the fields in a real encoded header.
    buf = wire.encode_data(0x03, wire.F_ACK_REQ, 1, 2, 3, 0, 10, b"")
    assert buf[int(flags["MRC_OPCODE_OFF"])] == 0x03
    assert buf[int(flags["MRC_FLAGS_OFF"])] == wire.F_ACK_REQ
    assert buf[int(flags["MRC_MAGIC_OFF"])] == wire.MAGIC
    assert buf[int(flags["MRC_VERSION_OFF"])] == wire.VERSION
    assert int(flags["CLASS_CONTROL"]) == 0x10002 and int(flags["CLASS_DATA"]) == 0x10003


def test_c_source_has_no_hand_copied_mrc_constants():
    src = dp.SOURCE.read_text()
    assert not re.search(r"#define\s+MRC_", src), "MRC constants must come from -D flags"
    assert "4791" not in src and "0x4d" not in src.lower()


def test_default_thresholds_are_ordered_and_in_frames():
    th = dp.default_thresholds(50)
    frame_len = dp.frame_bytes()
    assert frame_len == 14 + 40 + 8 + wire.DATA_HDR + TransportConfig().mtu_payload
    assert th == (dp.MARK_PACKETS * frame_len, dp.TRIM_PACKETS * frame_len, 50 * frame_len)
    for q in range(3, 40):
        small = dp.default_thresholds(q)
        assert 0 < small.mark_bytes < small.trim_bytes < small.drop_bytes == q * frame_len
    with pytest.raises(ValueError):
        dp.default_thresholds(2)


def test_rate_fixed_point():
    assert dp.rate_fp(8e9) == 1 << dp.RATE_SHIFT  # 1 byte per ns
    assert abs(dp.rate_fp(10e6) / (1 << dp.RATE_SHIFT) * 1e9 - 1.25e6) < 1.25e6 * 1e-4
    assert dp.rate_fp(10e3) > 1000  # 0.01 Mbit/s still exact to 0.1%
    with pytest.raises(ValueError):
        dp.rate_fp(0)


def test_port_spec_validation_and_switch_ports():
    ports = dp.switch_ports([("p1l0-eth1", True), ("p1l0-eth3", False)], 10.0, 50)
    assert [p.last_hop for p in ports] == [True, False]
    assert all(p.rate_bps == 10e6 and p.trim for p in ports)
    assert ports[0].config_values()[4] == dp.FLAG_LAST_HOP | dp.FLAG_TRIM
    assert ports[1].config_values()[4] == dp.FLAG_TRIM
    with pytest.raises(ValueError):
        dp.PortSpec("x", None, 1e6, 9000, 100, 50000).validate()
    with pytest.raises(ValueError):
        dp.PortSpec("x", None, 0, 1, 2, 3).validate()


def test_htb_batch_priority_classes():
    batch = dp.htb_priority_batch(["s1-eth1", "s1-eth2"], 10.0, 50, 3028)
    lines = batch.splitlines()
    assert len(lines) == 12
    assert "qdisc replace dev s1-eth1 root handle 1: htb default 3" in lines
    ctl = next(line for line in lines if "classid 1:2" in line and "s1-eth1" in line)
    dat = next(line for line in lines if "classid 1:3" in line and "s1-eth1" in line)
    assert "parent 1:1" in ctl and "prio 0" in ctl and "rate 10.0mbit" in ctl
    assert "parent 1:1" in dat and "prio 1" in dat and "ceil 10.0mbit" in dat
    assert "qdisc add dev s1-eth1 parent 1:3 handle 13: pfifo limit 50" in lines
    assert dp.CLASS_CONTROL == 0x10002 and dp.CLASS_DATA == 0x10003


def test_classify():
    assert dp.classify(frame(data())) == ("data", True, True)
    assert dp.classify(frame(data(0))) == ("data", False, True)  # nothing to cut
    assert dp.classify(frame(data(), tclass=wire.TRIM_DSCP << 2)) == ("data", True, False)
    # Only the MRC data class is trimmable: the RoCE baseline's DSCP 0 sees drop-tail.
    assert dp.classify(frame(data(), tclass=netio.ECN_ECT0)) == ("data", False, True)
    assert dp.classify(frame(data(), tclass=netio.ECN_CE))[2] is False
    assert dp.classify(frame(data(), tclass=0b01))[2] is True  # ECT(1)
    assert dp.classify(frame(data(flags=wire.F_TRIMMED)))[0] == "control"
    assert dp.classify(frame(wire.encode_sack(1, 2, 2, 0, 0, 0)))[0] == "control"
    assert dp.classify(frame(wire.encode_nack(1, 2, wire.NACK_TRIMMED)))[0] == "control"
    assert dp.classify(frame(data(), dport=4792))[0] == "other"
    bad_magic = bytearray(frame(data()))
    bad_magic[dp._MRC + 2] ^= 0xFF
    assert dp.classify(bytes(bad_magic))[0] == "other"
    assert dp.classify(frame(data())[:dp._MRC + 15])[0] == "other"  # too short
    assert dp.classify(frame(data())[:-1])[0] == "other"  # UDP length overruns the frame


def test_reference_thresholds():
    f = frame(data())
    res, vq = dp.reference(f, 0, SPEC)
    assert res == (dp.TC_ACT_OK, f, dp.CLASS_DATA) and vq == len(f)
    res, _ = dp.reference(f, 5000, SPEC)
    assert res.frame[15] & 0x30 == 0x30 and res.priority == dp.CLASS_DATA
    res, _ = dp.reference(f, 5000, replace(SPEC, last_hop=True))
    assert res.frame == f
    res, vq = dp.reference(f, 15000, SPEC)
    assert res.priority == dp.CLASS_CONTROL and len(res.frame) == dp.TRIM_LEN
    assert vq == 15000 + dp.TRIM_LEN
    pkt = wire.decode(res.frame[dp._MRC:])
    assert isinstance(pkt, wire.Data) and pkt.flags & wire.F_TRIMMED and pkt.payload == b""
    udp = res.frame[dp._L4:]
    assert netio.udp6_checksum(SRC, DST, udp[:6] + b"\0\0" + udp[8:]) == int.from_bytes(udp[6:8], "big")
    no_trim = replace(SPEC, trim=False)
    res, vq = dp.reference(f, 15000, no_trim)  # queued (and marked) instead of trimmed
    assert len(res.frame) == len(f) and res.priority == dp.CLASS_DATA and vq == 15000 + len(f)
    assert dp.reference(f, 50000, no_trim)[0].verdict == dp.TC_ACT_SHOT
    ctl = frame(wire.encode_sack(1, 2, 2, 0, 0, 0))
    assert dp.reference(ctl, 10**6, SPEC)[0] == (dp.TC_ACT_OK, ctl, dp.CLASS_CONTROL)
    other = frame(data(), dport=53)
    assert dp.reference(other, 10**6, SPEC, priority=7)[0] == (dp.TC_ACT_OK, other, 7)


def test_available_says_why_without_root(monkeypatch):
    dp.available.cache_clear()
    monkeypatch.setattr(dp.os, "geteuid", lambda: 1000)
    try:
        assert "root" in (dp.available() or "")
    finally:
        dp.available.cache_clear()


def test_stale_detects_changed_constants(tmp_path, monkeypatch):
    obj, flags = tmp_path / "x.o", tmp_path / "x.flags"
    monkeypatch.setattr(dp, "OBJECT", obj)
    monkeypatch.setattr(dp, "FLAGS_FILE", flags)
    monkeypatch.setattr(dp, "REPO", tmp_path)
    assert "does not exist" in dp.stale()
    obj.write_bytes(b"")
    flags.write_text("\n".join(dp.cflags()))
    assert dp.stale() is None
    flags.write_text("-DMRC_DATA_HDR=32")
    assert "constants" in dp.stale()
