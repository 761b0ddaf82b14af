"""The program's build flags are generated from the wire format, never hand-copied; a stale
object is detected (no root, no compiler needed)."""

from __future__ import annotations

import re

from endpoints.protocol import wire
from topologies.dataplane import build


def test_cflags_match_the_wire_format():
    flags = dict(f[2:].split("=") for f in build.cflags())
    assert int(flags["MRC_DATA_HDR"]) == wire.DATA_HDR == 44  # BTH + MRCETH + data extension
    assert int(flags["MRC_TRIM_KEEP"]) == wire.TRIM_KEEP == 48  # ... + the ICRC field
    assert int(flags["MRC_ICRC_LEN"]) == 4 and int(flags["MRC_COMMON_LEN"]) == wire.COMMON.size
    assert "MRC_MAGIC" not in flags and int(flags["MRC_PORT"]) == 4791
    assert int(flags["MRC_F_TRIMMED"]) == wire.F_TRIMMED
    assert int(flags["MRC_OPCODE_VENDOR_MASK"]) == 0xE0
    assert int(flags["MRC_DATA_OPCODE_MAX"]) == wire.DATA_OPCODE_MAX
    assert max(wire.DATA_OPCODES) <= wire.DATA_OPCODE_MAX < min(wire.OP_SACK, wire.OP_NACK)
    # The offsets locate the fields in a real encoded packet (1023 bytes of payload: PadCnt 1).
    buf = wire.encode_data(wire.OP_DATA_ONLY, wire.F_RETRANSMIT, 1, 2, 3, 0, 1023, bytes(1023))
    assert buf[int(flags["MRC_OPCODE_OFF"])] == wire.OP_DATA_ONLY
    assert buf[int(flags["MRC_PADCNT_OFF"])] & int(flags["MRC_PADCNT_MASK"]) == 1 << 4
    assert buf[int(flags["MRC_FLAGS_OFF"])] == wire.F_RETRANSMIT
    assert buf[int(flags["MRC_VERSION_OFF"])] == wire.VERSION
    assert int(flags["CLASS_CONTROL"]) == 0x10002 and int(flags["CLASS_DATA"]) == 0x10003


def test_c_source_has_no_hand_copied_mrc_constants():
    src = build.SOURCE.read_text()
    assert not re.search(r"#define\s+MRC_", src), "MRC constants must come from -D flags"
    assert "4791" not in src and not re.search(r"0x[eE]0|0x[eE][fF]|\b44\b|\b48\b", src)


def test_stale_detects_changed_constants(tmp_path, monkeypatch):
    obj, flags = tmp_path / "x.o", tmp_path / "x.flags"
    encap = tmp_path / "mrc_encap.bpf.o"
    monkeypatch.setattr(build, "OBJECT", obj)
    monkeypatch.setattr(build, "FLAGS_FILE", flags)
    monkeypatch.setattr(build, "ENCAP_OBJECT", encap)
    monkeypatch.setattr(build, "REPO", tmp_path)
    assert "does not exist" in build.stale()
    obj.write_bytes(b"")
    flags.write_text("\n".join(build.cflags()))
    assert "mrc_encap.bpf.o does not exist" in build.stale()  # both programs are built
    encap.write_bytes(b"")
    encap.with_suffix(".flags").write_text("\n".join(build.cflags()))
    assert build.stale() is None
    flags.write_text("-DMRC_DATA_HDR=32")
    assert "constants" in build.stale()
