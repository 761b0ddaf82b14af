import pytest

from endpoints.protocol import wire


def test_data_round_trip_every_data_opcode():
    for first, last, imm in [(True, True, False), (True, False, False), (False, False, False),
                             (False, True, False), (False, True, True), (True, True, True)]:
        op = wire.data_opcode(first, last, imm)
        buf = wire.encode_data(op, wire.F_RETRANSMIT, 0xABCDEF, 0xFFFFFE, 7, 2048, 4096, b"x" * 100,
                               tsval=123456, immediate=0xDEADBEEF)
        assert len(buf) == wire.DATA_HDR + 100
        d = wire.decode(buf)
        assert isinstance(d, wire.Data)
        assert (d.opcode, d.flags, d.qpn, d.psn, d.msn, d.offset, d.msg_len) == \
               (op, wire.F_RETRANSMIT, 0xABCDEF, 0xFFFFFE, 7, 2048, 4096)
        assert (d.tsval, d.immediate, bytes(d.payload)) == (123456, 0xDEADBEEF, b"x" * 100)
        assert wire.qpn_of(buf) == 0xABCDEF


def test_control_round_trips():
    s = wire.decode(wire.encode_sack(5, 100, 90, 0xF0F0, 0x1234ABCD, 999, 3, 7, wire.F_ECN_ECHO))
    assert s == wire.Sack(wire.F_ECN_ECHO, 5, 100, 90, 0xF0F0, 0x1234ABCD, 999, 3, 7)
    n = wire.decode(wire.encode_nack(5, 77, wire.NACK_TRIMMED, 0xC001, 55, 70))
    assert n == wire.Nack(0, 5, 77, wire.NACK_TRIMMED, 0xC001, 55, 70)
    for op in (wire.OP_EV_PROBE, wire.OP_EV_PROBE_REPLY):
        p = wire.decode(wire.encode_probe(op, 9, 42, 1000, 0x2C003))
        assert p == wire.Probe(op, wire.F_PROBE, 9, 42, 1000, 0x2C003)


def test_psn_wraps_in_24_bits():
    d = wire.decode(wire.encode_data(wire.OP_DATA_ONLY, 0, 1, (1 << 24) + 5, 0, 0, 1, b"a"))
    assert d.psn == 5
    assert wire.psn_unwrap(5, (1 << 24) - 3) == (1 << 24) + 5
    assert wire.psn_unwrap((1 << 24) - 3, (1 << 24) + 5) == (1 << 24) - 3
    assert wire.psn_unwrap(10, 12) == 10


def test_trimmed_header_decodes_with_empty_payload():
    buf = wire.encode_data(wire.OP_DATA_MIDDLE, 0, 1, 5, 0, 1024, 4096, b"y" * 1024)
    trimmed = bytearray(buf[:wire.DATA_HDR])
    trimmed[1] |= wire.F_TRIMMED
    d = wire.decode(bytes(trimmed))
    assert d.flags & wire.F_TRIMMED and d.payload == b"" and d.psn == 5


@pytest.mark.parametrize("buf", [
    b"",
    b"\x00" * 10,
    bytes([0x00, 0, 0x00, 1]) + b"\x00" * 40,  # wrong magic
    bytes([0x77, 0, wire.MAGIC, 1]) + b"\x00" * 40,  # unknown opcode
    bytes([0x03, 0, wire.MAGIC, 2]) + b"\x00" * 40,  # wrong version
    bytes([0x03, 0, wire.MAGIC, 1]) + b"\xff" * 4 + b"\x00" * 36,  # reserved QPN bits
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 100, b"z" * 100)[:-1],  # truncated payload
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 0, 100, b"z" * 100) + b"!",  # trailing bytes
    wire.encode_data(wire.OP_DATA_ONLY, 0, 1, 1, 0, 50, 100, b"z" * 100),  # overruns its message
    wire.encode_sack(1, 1, 1, 1, 1, 1)[:-2],
    wire.encode_nack(1, 1, wire.NACK_TRIMMED)[:-1],
    wire.encode_nack(1, 1, 1)[:20] + b"\x63" + wire.encode_nack(1, 1, 1)[21:],  # unknown reason
    wire.encode_probe(wire.OP_EV_PROBE, 1, 1, 1, 1)[:-4],
])
def test_malformed_raise_only_malformed_packet(buf):
    with pytest.raises(wire.MalformedPacket):
        wire.decode(buf)


def test_random_garbage_never_raises_anything_else():
    import random
    rng = random.Random(5)
    valid = wire.encode_data(wire.OP_DATA_FIRST, 0, 3, 9, 1, 0, 4096, b"q" * 64)
    for _ in range(3000):
        buf = bytearray(valid if rng.random() < 0.5 else rng.randbytes(rng.randrange(0, 120)))
        for _ in range(rng.randrange(1, 4)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            wire.decode(bytes(buf))
        except wire.MalformedPacket:
            pass
