"""The reference model of the eBPF program, without root: classification, trimming, thresholds.
The integration tests hold the kernel program to this same model."""

from __future__ import annotations

from dataclasses import replace

from endpoints.host import netio
from endpoints.protocol import wire
from topologies import shaping
from topologies.dataplane import ports
from topologies.dataplane import reference as ref

SRC, DST = netio.packed("fd00:99::1"), netio.packed("fd00:99::2")
ETH = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x86\xdd"


def frame(payload: bytes, tclass: int = wire.DATA_TCLASS, dport: int = wire.MRC_PORT) -> bytes:
    return ETH + netio.build_packet(SRC, DST, 0x2C000, payload, tclass=tclass, dport=dport)


def data(n: int = 1024, flags: int = 0) -> bytes:
    return wire.encode_data(wire.OP_DATA_MIDDLE, flags, 5, 9, 1, 0, 1 << 20, b"\xab" * n)


SPEC = ports.PortSpec("x", None, 10e6, 5000, 15000, 50000)


def test_classify():
    assert ref.classify(frame(data())) == ("data", True, True)
    assert ref.classify(frame(data(0))) == ("data", False, True)  # nothing to cut
    assert ref.classify(frame(data(), tclass=wire.TRIM_DSCP << 2)) == ("data", True, False)
    # Only the MRC data class is trimmable: the RoCE baseline's DSCP 0 sees drop-tail.
    assert ref.classify(frame(data(), tclass=netio.ECN_ECT0)) == ("data", False, True)
    assert ref.classify(frame(data(), tclass=netio.ECN_CE))[2] is False
    assert ref.classify(frame(data(), tclass=0b01))[2] is True  # ECT(1)
    assert ref.classify(frame(data(flags=wire.F_TRIMMED)))[0] == "control"
    assert ref.classify(frame(wire.encode_sack(1, 2, 2, 0, 0, 0)))[0] == "control"
    assert ref.classify(frame(wire.encode_nack(1, 2, wire.NACK_TRIMMED)))[0] == "control"
    assert ref.classify(frame(data(), dport=4792))[0] == "other"
    bad_magic = bytearray(frame(data()))
    bad_magic[ref._MRC + 2] ^= 0xFF
    assert ref.classify(bytes(bad_magic))[0] == "other"
    assert ref.classify(frame(data())[:ref._MRC + 15])[0] == "other"  # too short
    assert ref.classify(frame(data())[:-1])[0] == "other"  # UDP length overruns the frame


def test_reference_thresholds():
    f = frame(data())
    res, vq = ref.reference(f, 0, SPEC)
    assert res == (ref.TC_ACT_OK, f, shaping.CLASS_DATA) and vq == len(f)
    res, _ = ref.reference(f, 5000, SPEC)
    assert res.frame[15] & 0x30 == 0x30 and res.priority == shaping.CLASS_DATA
    res, _ = ref.reference(f, 5000, replace(SPEC, last_hop=True))
    assert res.frame == f
    res, vq = ref.reference(f, 15000, SPEC)
    assert res.priority == shaping.CLASS_CONTROL and len(res.frame) == ref.TRIM_LEN
    assert vq == 15000 + ref.TRIM_LEN
    pkt = wire.decode(res.frame[ref._MRC:])
    assert isinstance(pkt, wire.Data) and pkt.flags & wire.F_TRIMMED and pkt.payload == b""
    udp = res.frame[ref._L4:]
    assert wire.udp6_checksum(SRC, DST, udp[:6] + b"\0\0" + udp[8:]) == int.from_bytes(udp[6:8], "big")
    no_trim = replace(SPEC, trim=False)
    res, vq = ref.reference(f, 15000, no_trim)  # queued (and marked) instead of trimmed
    assert len(res.frame) == len(f) and res.priority == shaping.CLASS_DATA and vq == 15000 + len(f)
    assert ref.reference(f, 50000, no_trim)[0].verdict == ref.TC_ACT_SHOT
    ctl = frame(wire.encode_sack(1, 2, 2, 0, 0, 0))
    assert ref.reference(ctl, 10**6, SPEC)[0] == (ref.TC_ACT_OK, ctl, shaping.CLASS_CONTROL)
    other = frame(data(), dport=53)
    assert ref.reference(other, 10**6, SPEC, priority=7)[0] == (ref.TC_ACT_OK, other, 7)
