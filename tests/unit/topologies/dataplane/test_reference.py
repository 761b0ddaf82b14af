"""The reference model of the eBPF program, without root: classification, trimming, thresholds.
The integration tests hold the kernel program to this same model."""

from __future__ import annotations

import struct
from dataclasses import replace

from endpoints.host import netio
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from topologies import shaping
from topologies.dataplane import ports
from topologies.dataplane import reference as ref

SRC, DST = netio.packed("fd00:99::1"), netio.packed("fd00:99::2")
ETH = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x86\xdd"


OUTER_SRC, CARRIER = netio.packed("fcbb:bb00:1c00::"), netio.packed("fcbb:bb00:1400:1800:1401:1c02::")


def frame(payload: bytes, tclass: int = wire.DATA_TCLASS, dport: int = wire.MRC_PORT,
          encap: bool = False) -> bytes:
    packet = netio.build_packet(SRC, DST, 0x2C000, payload, tclass=tclass, dport=dport)
    return ETH + (netio.encapsulate(OUTER_SRC, CARRIER, packet) if encap else packet)


def udp_ok(f: bytes) -> bool:
    """The UDP checksum of a (plain or encapsulated) frame, computed independently of the model
    over the pseudo-header of the IPv6 header right before UDP."""
    ip = 14 + 40 * (f[20] == 41)
    udp = f[ip + 40:]
    return wire.udp6_checksum(f[ip + 8:ip + 24], f[ip + 24:ip + 40], udp[:6] + b"\0\0" + udp[8:]) == \
        int.from_bytes(udp[6:8], "big")


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
    assert ref.classify(frame(data(0, flags=wire.F_TRIMMED)))[0] == "control"  # a real header
    assert ref.classify(frame(wire.encode_sack(1, 2, 2, 0, 0, 0)))[0] == "control"
    assert ref.classify(frame(wire.encode_nack(1, 2, wire.NACK_TRIMMED)))[0] == "control"
    assert ref.classify(frame(data(), dport=4792))[0] == "other"
    for offset, value in ((0, 0x04), (0, 0xC1), (wire.VERSION_OFF, 1)):
        # An IBTA RC opcode (SEND Only), a reserved one, the old format's version: not MRC.
        foreign = bytearray(frame(data()))
        foreign[ref._MRC + offset] = value
        assert ref.classify(bytes(foreign))[0] == "other"
    assert ref.classify(frame(data())[:ref._MRC + 15])[0] == "other"  # too short
    assert ref.classify(frame(data())[:-1])[0] == "other"  # UDP length overruns the frame


def test_reference_thresholds():
    f = frame(data())
    res, vq = ref.reference(f, 0, SPEC)
    assert res == (ref.TC_ACT_OK, f, shaping.CLASS_DATA, 0) and vq == len(f)
    res, _ = ref.reference(f, 5000, SPEC)
    assert res.frame[15] & 0x30 == 0x30 and res.priority == shaping.CLASS_DATA
    res, _ = ref.reference(f, 5000, replace(SPEC, last_hop=True))
    assert res.frame == f
    res, vq = ref.reference(f, 15000, SPEC)
    assert res.priority == shaping.CLASS_CONTROL and len(res.frame) == ref.TRIM_LEN
    assert (res.verdict, res.mark) == (ref.TC_ACT_REDIRECT, ports.REINJECT_MARK)
    assert vq == 15000 + ref.TRIM_LEN
    pkt = wire.decode(res.frame[ref._MRC:])
    assert isinstance(pkt, wire.Data) and pkt.flags & wire.F_TRIMMED and pkt.payload == b""
    assert res.frame[ref._MRC:] == wire.trimmed(f[ref._MRC:]) and res.frame[-4:] == bytes(4)
    assert udp_ok(res.frame)
    no_trim = replace(SPEC, trim=False)
    res, vq = ref.reference(f, 15000, no_trim)  # queued (and marked) instead of trimmed
    assert len(res.frame) == len(f) and res.priority == shaping.CLASS_DATA and vq == 15000 + len(f)
    assert ref.reference(f, 50000, no_trim)[0].verdict == ref.TC_ACT_SHOT
    ctl = frame(wire.encode_sack(1, 2, 2, 0, 0, 0))
    assert ref.reference(ctl, 10**6, SPEC)[0] == (ref.TC_ACT_OK, ctl, shaping.CLASS_CONTROL, 0)
    other = frame(data(), dport=53)
    assert ref.reference(other, 10**6, SPEC, priority=7)[0] == (ref.TC_ACT_OK, other, 7, 0)


def test_trimmed_header_is_charged_its_own_length_and_counted_once():
    """The trimmed header goes through the port a second time (REINJECT_MARK), so the shaper
    sizes it as what it is; that pass changes neither the frame nor the backlog."""
    for encap in (False, True):
        f = frame(data(4096), encap=encap)
        first, vq = ref.reference(f, 15000, SPEC)
        assert ref.charged_bytes(first) == ref.layout(f).trim_len == len(first.frame) < len(f)
        second, vq2 = ref.reference(first.frame, vq, SPEC, priority=first.priority, mark=first.mark)
        assert second == (ref.TC_ACT_OK, first.frame, shaping.CLASS_CONTROL, 0) and vq2 == vq
    dropped, _ = ref.reference(frame(data()), 50000, replace(SPEC, trim=False))
    assert ref.charged_bytes(dropped) == 0
    # Another mark is not ours: the frame is handled as any other (and keeps its mark).
    res, _ = ref.reference(frame(data()), 0, SPEC, mark=7)
    assert (res.verdict, res.mark, res.priority) == (ref.TC_ACT_OK, 7, shaping.CLASS_DATA)


def test_encapsulated_layout():
    f = frame(data(), encap=True)
    assert ref.layout(f) is ref.ENCAP and ref.layout(frame(data())) is ref.PLAIN
    assert ref.ENCAP.trim_len == ref.TRIM_LEN + 40
    assert ref.classify(f) == ("data", True, True)
    assert ref.classify(frame(data(0), encap=True)) == ("data", False, True)
    assert ref.classify(frame(wire.encode_sack(1, 2, 2, 0, 0, 0), encap=True))[0] == "control"
    # Class and ECN come from the outer header (the sender copies the inner one outward).
    outer_roce = bytearray(f)
    outer_roce[14:16] = bytes([0x60, 0x20])  # outer DSCP 0, ECT(0); inner still DATA_TCLASS
    assert ref.classify(bytes(outer_roce)) == ("data", False, True)
    # The outer payload length must cover exactly the rest of the frame.
    for bad in (f[:-1], f + b"\0", f[:18] + b"\0\0" + f[20:]):
        assert ref.classify(bad)[0] == "other"
    not_udp = bytearray(f)
    not_udp[54 + 6] = 6  # inner next header TCP
    assert ref.classify(bytes(not_udp))[0] == "other"


def test_encapsulated_mark_and_trim():
    f = frame(data(), encap=True)
    marked, _ = ref.reference(f, 5000, SPEC)
    assert marked.frame[15] & 0x30 == 0x30 and marked.frame[55] & 0x30 == 0x30  # outer and inner
    assert marked.frame[:15] == f[:15] and marked.frame[56:] == f[56:] and udp_ok(marked.frame)
    # An inner packet that is not ECN-capable never gets CE, even when the outer one does.
    not_ect = bytearray(f)
    not_ect[55] &= ~0x30 & 0xFF
    assert ref.reference(bytes(not_ect), 5000, SPEC)[0].frame[55] & 0x30 == 0
    for last_hop in (False, True):
        res, vq = ref.reference(f, 15000, replace(SPEC, last_hop=last_hop))
        out = res.frame
        assert (res.verdict, len(out), vq) == (ref.TC_ACT_REDIRECT, ref.ENCAP.trim_len,
                                               15000 + ref.ENCAP.trim_len)
        l4len = 8 + wire.TRIM_KEEP
        assert struct.unpack_from("!H", out, 18)[0] == 40 + l4len  # outer payload length
        assert struct.unpack_from("!H", out, 58)[0] == l4len  # inner payload length
        assert struct.unpack_from("!H", out, 98)[0] == l4len  # UDP length
        assert out[14:18] == f[14:18] and out[22:58] == f[22:58]  # addresses untouched
        pkt = wire.decode(out[ref.ENCAP.mrc:])
        assert isinstance(pkt, wire.Data) and pkt.payload == b"" and pkt.flags & wire.F_TRIMMED
        assert bool(pkt.flags & wire.F_TRIMMED_LASTHOP) is last_hop
        assert udp_ok(out) and ref.classify(out)[0] == "control"  # a trimmed header is control


def test_control_labels_must_have_the_wire_formats_sizes():
    """A sender's label alone does not buy strict priority (issue 11, item 10): a 3 KB
    "trimmed" data packet, a padded probe or SACK, an unknown opcode are handled as data,
    encapsulated or not."""
    probe = wire.encode_probe(wire.OP_EV_PROBE, 1, 2, 3, 4)
    for payload in (data(3000, flags=wire.F_TRIMMED), data(1, flags=wire.F_TRIMMED),
                    probe + b"p" * 3000, probe[:-1], wire.encode_sack(1, 2, 2, 0, 0, 0) + b"s",
                    wire.COMMON.pack(0xFF, 0, wire.PKEY_DEFAULT, 1, 2, 0, wire.VERSION, 0) + b"u" * 64):
        f = frame(payload)
        assert ref.classify(f) == ("demoted", False, True)
        res, vq = ref.reference(f, 0, SPEC)
        assert res == (ref.TC_ACT_OK, f, shaping.CLASS_DATA, 0) and vq == len(f)
        assert ref.reference(f, SPEC.drop_bytes, SPEC)[0].verdict == ref.TC_ACT_SHOT
        assert ref.classify(frame(payload, encap=True)) == ("demoted", False, True)
    for payload in (probe, wire.encode_probe(wire.OP_EV_PROBE_REPLY, 1, 2, 3, 4),
                    wire.encode_nack(1, 2, wire.NACK_TRIMMED), wire.encode_sack(1, 2, 2, 0, 0, 0)):
        assert ref.classify(frame(payload))[0] == "control"


def test_control_beyond_the_budget_is_demoted():
    ctl = frame(wire.encode_sack(1, 2, 2, 0, 0, 0))
    assert ref.reference(ctl, 0, SPEC, control_budget=len(ctl))[0].priority == shaping.CLASS_CONTROL
    assert ref.reference(ctl, 0, SPEC, control_budget=len(ctl) - 1)[0].priority == shaping.CLASS_DATA


def test_the_control_budget_is_a_stated_share_of_the_link():
    spec = ports.switch_ports([("x", False)], 10.0, 50, TransportConfig())[0]
    rate, *_, ctl_rate, burst, _ = spec.config_values()
    assert ctl_rate == ports.rate_fp(10e6 * ports.CONTROL_SHARE) and burst == ports.CONTROL_BURST_BYTES
    assert 0 < ports.CONTROL_SHARE < 1
