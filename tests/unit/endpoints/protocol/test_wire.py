"""The wire format: a real BTH, MRC extensions, pad and ICRC; every malformed input raises
MalformedPacket and nothing else."""

import random
import struct
import zlib

import pytest

from endpoints.protocol import wire


def test_data_round_trip_every_data_opcode_and_pad():
    for first, last, imm in [(True, True, False), (True, False, False), (False, False, False),
                             (False, True, False), (False, True, True), (True, True, True)]:
        op = wire.data_opcode(first, last, imm)
        for n in (0, 1, 2, 3, 4, 100, 1021):
            flags = wire.F_RETRANSMIT | wire.F_ACK_REQ
            buf = wire.encode_data(op, flags, 0xABCDEF, 0xFFFFFE, 7, 2048, 4096, b"x" * n,
                                   tsval=123456, immediate=0xDEADBEEF)
            assert len(buf) == wire.data_len(n) and len(buf) % 4 == 0
            d = wire.decode(buf)
            assert isinstance(d, wire.Data)
            assert (d.opcode, d.flags, d.qpn, d.psn, d.msn, d.offset, d.msg_len) == \
                   (op, flags, 0xABCDEF, 0xFFFFFE, 7, 2048, 4096)
            assert (d.tsval, d.immediate, bytes(d.payload)) == (123456, 0xDEADBEEF, b"x" * n)
            assert wire.qpn_of(buf) == 0xABCDEF


def test_bth_fields_sit_in_their_ibta_positions():
    buf = wire.encode_data(wire.OP_DATA_LAST, wire.F_ACK_REQ | wire.F_RETRANSMIT, 0x000101,
                           0x123456, 3, 8, 13, b"abcde")
    assert buf[0] == 0xE2  # opcode: manufacturer-specific range, IBTA SEND Last's low bits
    assert buf[1] == 3 << 4  # SE 0, M 0, PadCnt 3 (5 payload bytes), TVer 0
    assert buf[2:4] == b"\xff\xff"  # P_Key
    assert buf[4] == 0 and buf[5:8] == b"\x00\x01\x01"  # FECN/BECN/resv6, DestQP
    assert buf[8] == 0x80 and buf[9:12] == b"\x12\x34\x56"  # AckReq, PSN
    assert buf[12] == wire.F_RETRANSMIT and buf[13] == wire.VERSION  # MRCETH
    assert buf[-4:] == b"\x00\x00\x00\x00" and buf[-7:-4] == b"\x00\x00\x00"  # ICRC, pad
    assert buf[wire.DATA_HDR:wire.DATA_HDR + 5] == b"abcde"


def test_opcode_ranges_split_data_and_control():
    for op in wire.DATA_OPCODES:
        assert op & 0xE0 == 0xE0 and op <= wire.DATA_OPCODE_MAX and not op & 0x10
        assert op & 0x1F in range(0x00, 0x06)  # IBTA SEND First .. Only with Immediate
    for op in (wire.OP_SACK, wire.OP_NACK, wire.OP_EV_PROBE, wire.OP_EV_PROBE_REPLY):
        assert op & 0xE0 == 0xE0 and op > wire.DATA_OPCODE_MAX and op & 0x10
    assert wire.OP_SACK & 0x1F == 0x11  # IBTA RC Acknowledge


def test_control_round_trips_and_lengths():
    s = wire.encode_sack(5, 100, 90, 0xF0F0, 0x1234ABCD, 999, 3, 7, wire.F_ECN_ECHO)
    assert len(s) == wire.SACK_LEN == 44
    assert wire.decode(s) == wire.Sack(wire.F_ECN_ECHO, 5, 100, 90, 0xF0F0, 0x1234ABCD, 999, 3, 7)
    assert struct.unpack_from("!I", s, 8)[0] == 100  # cumulative ACK is the BTH PSN
    n = wire.encode_nack(5, 77, wire.NACK_TRIMMED, 0xC001, 55, 70)
    assert len(n) == wire.NACK_LEN == 32
    assert wire.decode(n) == wire.Nack(0, 5, 77, wire.NACK_TRIMMED, 0xC001, 55, 70)
    assert n[16] == wire.NACK_TRIMMED and n[17:20] == b"\x00\x00\x46"  # reason | cack
    for op in (wire.OP_EV_PROBE, wire.OP_EV_PROBE_REPLY):
        p = wire.encode_probe(op, 9, 42, 1000, 0x2C003)
        assert len(p) == wire.PROBE_LEN == 32
        assert wire.decode(p) == wire.Probe(op, 0, 9, 42, 1000, 0x2C003)
    for buf in (s, n, p):
        assert buf[-4:] == bytes(4) and buf[1] == 0 and buf[2:4] == b"\xff\xff"


def test_saturating_and_masked_fields():
    s = wire.decode(wire.encode_sack(1, (1 << 24) + 3, (1 << 24) + 1, 1 << 64 | 5, 1 << 32 | 9,
                                     0, ecn_count=70000, credit=1 << 20))
    assert (s.cack, s.base, s.bitmap, s.echo_ev, s.ecn_count, s.credit) == \
        (3, 1, 5, 9, 0xFFFF, 0xFFFF)


def test_psn_wraps_in_24_bits():
    d = wire.decode(wire.encode_data(wire.OP_DATA_ONLY, 0, 1, (1 << 24) + 5, 0, 0, 1, b"a"))
    assert d.psn == 5
    assert wire.psn_unwrap(5, (1 << 24) - 3) == (1 << 24) + 5
    assert wire.psn_unwrap((1 << 24) - 3, (1 << 24) + 5) == (1 << 24) - 3
    assert wire.psn_unwrap(10, 12) == 10


@pytest.mark.parametrize("last_hop", [False, True])
def test_trimmed_header_decodes_with_empty_payload(last_hop):
    buf = wire.encode_data(wire.OP_DATA_MIDDLE, 0, 1, 5, 0, 1024, 4096, b"y" * 1023)  # pad 1
    assert buf[1] & wire.PADCNT_MASK
    t = wire.trimmed(buf, last_hop)
    assert len(t) == 48 and t[-4:] == bytes(4) and t[1] & wire.PADCNT_MASK == 0
    d = wire.decode(t)
    assert d.flags & wire.F_TRIMMED and d.payload == b"" and d.psn == 5 and d.offset == 1024
    assert bool(d.flags & wire.F_TRIMMED_LASTHOP) == last_hop


def test_is_mrc_rejects_foreign_rocev2():
    rc_send_only = struct.pack("!BBHII", 0x04, 0, 0xFFFF, 0x11, 0x80000001) + b"\x00" * 20
    assert not wire.is_mrc(rc_send_only)
    with pytest.raises(wire.MalformedPacket, match="not an MRC"):
        wire.decode(rc_send_only)
    assert wire.is_mrc(wire.encode_probe(wire.OP_EV_PROBE, 1, 1, 1, 1))


GOOD = wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 100, b"z" * 99)


@pytest.mark.parametrize("buf", [
    b"",
    b"\x00" * 10,
    bytes([0x04]) + GOOD[1:],  # an IBTA RC opcode, not MRC
    bytes([0xE9]) + GOOD[1:],  # unknown opcode in the MRC range
    bytes([0xFF]) + GOOD[1:],
    GOOD[:13] + b"\x01" + GOOD[14:],  # version 1 (the old format)
    GOOD[:1] + b"\x31" + GOOD[2:],  # TVer 1
    GOOD[:2] + b"\x7f\xff" + GOOD[4:],  # another partition
    GOOD[:1] + b"\x00" + GOOD[2:],  # PadCnt 0 for a 99-byte payload
    GOOD[:-1],  # truncated ICRC
    GOOD + b"\x00\x00\x00\x00",  # trailing bytes
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 50, 100, b"z" * 100),  # overruns its message
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 1 << 20, b"z" * 9004),  # too big
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 100, b"z" * 100)[:47],  # shorter than hdr
    wire.encode_sack(1, 1, 1, 1, 1, 1)[:-1],
    wire.encode_sack(1, 1, 1, 1, 1, 1) + b"\x00",
    wire.encode_sack(1, 1, 1, 1, 1, 1)[:16] + b"\x01" + wire.encode_sack(1, 1, 1, 1, 1, 1)[17:],
    wire.encode_nack(1, 1, wire.NACK_TRIMMED)[:-1],
    wire.encode_nack(1, 1, 1)[:16] + b"\x63" + wire.encode_nack(1, 1, 1)[17:],  # unknown reason
    wire.encode_nack(1, 1, 1)[:16] + b"\x00" + wire.encode_nack(1, 1, 1)[17:],  # reason 0
    wire.encode_probe(wire.OP_EV_PROBE, 1, 1, 1, 1)[:-4],
])
def test_malformed_raise_only_malformed_packet(buf):
    with pytest.raises(wire.MalformedPacket):
        wire.decode(buf)


def test_random_garbage_never_raises_anything_else():
    rng = random.Random(5)
    valid = [GOOD, wire.encode_sack(3, 9, 9, 7, 1, 1), wire.encode_nack(3, 9, 2, 1, 1, 9),
             wire.encode_probe(wire.OP_EV_PROBE_REPLY, 3, 1, 1, 1)]
    for _ in range(5000):
        buf = bytearray(rng.choice(valid) if rng.random() < 0.6
                        else rng.randbytes(rng.randrange(0, 140)))
        for _ in range(rng.randrange(1, 4)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            wire.decode(bytes(buf))
        except wire.MalformedPacket:
            pass
        try:
            wire.qpn_of(bytes(buf))
        except wire.MalformedPacket:
            pass


def test_icrc_seed_matches_the_kernels_soft_roce():
    # drivers/infiniband/sw/rxe seeds its CRC with 0xdebb20e3: the CRC-32 register after eight
    # bytes of ones (the masked LRH); icrc() starts with exactly those bytes.
    assert ~zlib.crc32(b"\xff" * 8) & 0xFFFFFFFF == 0xDEBB20E3


def test_icrc_ignores_variant_fields_only():
    mrc = wire.encode_data(wire.OP_DATA_ONLY, 0, 0x101, 1, 0, 0, 4, b"abcd")
    ip = bytearray(struct.pack("!IHBB", 6 << 28, 8 + len(mrc), 17, 64) + bytes(range(32)))
    udp = bytearray(struct.pack("!HHHH", 0xC000, 4791, 8 + len(mrc), 0x1234) + mrc)
    ref = wire.icrc(bytes(ip), udp)
    variant = bytearray(ip)
    variant[0:4] = struct.pack("!I", 6 << 28 | 0xAB << 20 | 0x12345)  # class + label
    variant[7] = 3  # hop limit
    udp_v = bytearray(udp)
    udp_v[6:8] = b"\x99\x99"  # UDP checksum
    udp_v[8 + 4] = 0xC0  # FECN, BECN
    assert wire.icrc(bytes(variant), udp_v) == ref
    for pos in (8, 24, 39):  # an address byte
        changed = bytearray(ip)
        changed[pos] ^= 1
        assert wire.icrc(bytes(changed), udp) != ref
    for pos in (0, 8 + 5, 8 + 9, 8 + 12, len(udp) - 5):  # sport, QP, PSN, flags, payload
        changed = bytearray(udp)
        changed[pos] ^= 1
        assert wire.icrc(bytes(ip), changed) != ref
    with pytest.raises(wire.MalformedPacket):
        wire.icrc(bytes(ip), udp[:20])


def test_the_old_format_is_not_mrc():
    # Version 1: opcode 0x03 (DATA_ONLY then), flags, magic 'M', version 1 where the P_Key is now.
    old = bytes([0x03, 0x10, 0x4D, 0x01]) + bytes(36) + b"data"
    assert not wire.is_mrc(old)
    with pytest.raises(wire.MalformedPacket):
        wire.qpn_of(old)


def test_fields_name_every_header_field_of_each_type():
    d = wire.encode_data(wire.OP_DATA_LAST, wire.F_ACK_REQ | wire.F_RETRANSMIT, 9, 77, 3, 1024,
                         2045, b"q" * 1021, tsval=5, immediate=6)
    assert wire.fields(d) == {"opcode": wire.OP_DATA_LAST, "qpn": 9, "psn": 77,
                              "flags": wire.F_RETRANSMIT, "ackreq": 1, "padcnt": 3,
                              "len": wire.data_len(1021), "msn": 3, "payload_len": 1021,
                              "offset": 1024, "msg_len": 2045, "tsval": 5, "immediate": 6}
    t = wire.fields(wire.trimmed(d, last_hop=True))
    assert (t["flags"], t["padcnt"], t["payload_len"], t["len"]) == \
        (wire.F_RETRANSMIT | wire.F_TRIMMED | wire.F_TRIMMED_LASTHOP, 0, 1021, wire.TRIM_KEEP)
    s = wire.fields(wire.encode_sack(9, 100, 98, 0b101, 0x1C001, 44, 2, 0, wire.F_ECN_ECHO))
    assert (s["opcode"], s["psn"], s["flags"], s["base"], s["bitmap"], s["echo_ev"],
            s["echo_ts"], s["ecn_count"], s["credit"], s["len"]) == \
        (wire.OP_SACK, 100, wire.F_ECN_ECHO, 98, 0b101, 0x1C001, 44, 2, 0, wire.SACK_LEN)
    p = wire.fields(wire.encode_probe(wire.OP_EV_PROBE_REPLY, 9, 4, 5, 0x2C000))
    assert (p["opcode"], p["probe_id"], p["tsval"], p["probed_ev"], p["len"]) == \
        (wire.OP_EV_PROBE_REPLY, 4, 5, 0x2C000, wire.PROBE_LEN)
    with pytest.raises(wire.MalformedPacket):
        wire.fields(d[:-1])


def test_frame_size_counts_headers_pad_and_icrc():
    assert wire.frame_bytes(4096) == 14 + 40 + 8 + 44 + 4096 + 4
    assert wire.frame_bytes(1021) == wire.frame_bytes(1024)  # 3 pad bytes
    assert len(wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 4096, bytes(4096))) == \
        wire.frame_bytes(4096) - wire.FRAME_OVERHEAD


def test_every_extension_member_has_one_name():
    for ext, names in ((wire.DATA_EXT, wire.DATA_EXT_FIELDS), (wire.SACK_EXT, wire.SACK_EXT_FIELDS),
                       (wire.NACK_EXT, wire.NACK_EXT_FIELDS), (wire.PROBE_EXT, wire.PROBE_EXT_FIELDS)):
        assert len(ext.unpack(bytes(ext.size))) == len(names) == len(set(names))
