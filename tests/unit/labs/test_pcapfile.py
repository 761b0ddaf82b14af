"""Lab 8's capture reader (labs/checker/pcapfile.py): pcap frames as IP packets whatever the
link layer tcpdump wrote, made-up captures tshark reads as written, and one line for what it
cannot read."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from endpoints.protocol import wire
from labs.checker import pcapfile
from tests.conftest import require_or_skip
from tests.unit.labs.test_labs import LAB8_CAPTURE

IP = bytes([0x60]) + bytes(39)  # an IPv6 header and nothing after it


def _pcap(path: Path, linktype: int, frames: list[bytes], order: str = "<") -> Path:
    body = b"".join(struct.pack(order + "IIII", 0, 0, len(f), len(f)) + f for f in frames)
    magic = struct.pack(order + "I", 0xA1B2C3D4)
    path.write_bytes(magic + struct.pack(order + "HHiIII", 2, 4, 0, 0, 0xFFFF, linktype) + body)
    return path


@pytest.mark.parametrize(("linktype", "head"), [
    (pcapfile.LINKTYPE_ETHERNET, bytes(12) + b"\x86\xdd"),
    (pcapfile.LINKTYPE_LINUX_SLL, bytes(14) + b"\x86\xdd"),
    (pcapfile.LINKTYPE_LINUX_SLL2, b"\x86\xdd" + bytes(18)),
    (pcapfile.LINKTYPE_RAW, b""), (pcapfile.LINKTYPE_IPV6, b"")])
def test_every_link_layer_gives_the_ip_packet(tmp_path: Path, linktype: int, head: bytes) -> None:
    for order in "<>":
        path = _pcap(tmp_path / "c.pcap", linktype, [head + IP, head + IP + b"x"], order)
        assert pcapfile.frames(path) == [(1, IP), (2, IP + b"x")]


def test_a_frame_that_is_not_ipv6_is_empty(tmp_path: Path) -> None:
    arp = bytes(12) + b"\x08\x06" + bytes(28)
    assert pcapfile.frames(_pcap(tmp_path / "c.pcap", pcapfile.LINKTYPE_ETHERNET, [arp])) == [(1, b"")]


def test_what_it_cannot_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "ng.pcap").write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))
    with pytest.raises(pcapfile.CaptureError, match="pcapng: convert it with `editcap -F pcap"):
        pcapfile.frames(tmp_path / "ng.pcap")
    (tmp_path / "text.pcap").write_text("not a capture at all")
    with pytest.raises(pcapfile.CaptureError, match="is not a pcap file"):
        pcapfile.frames(tmp_path / "text.pcap")
    with pytest.raises(pcapfile.CaptureError, match="link-layer type 147"):
        pcapfile.frames(_pcap(tmp_path / "user.pcap", 147, [IP]))


def test_the_reference_capture_is_a_small_sll2_capture_of_mrc() -> None:
    path = next(LAB8_CAPTURE.glob("*.pcap"))
    assert path.stat().st_size < 300_000
    frames = pcapfile.frames(path)
    assert len(frames) > 500 and all(ip[:1] and ip[0] >> 4 == 6 for _, ip in frames)


def test_tshark_reads_a_written_capture_as_written(tmp_path: Path) -> None:
    require_or_skip(None if shutil.which("tshark") else "tshark is not installed (make setup)")
    nack = wire.encode_nack(1, 5, wire.NACK_NO_BITMAP)
    sack = wire.encode_sack(1, 5, 5, 0b110, 0, 0)
    packets = [struct.pack("!IHBB", 6 << 28, 8 + len(d), 17, 64) + bytes(32) +
               struct.pack("!HHHH", 0xC000, wire.MRC_PORT, 8 + len(d), 0) + d for d in (nack, sack)]
    path = pcapfile.write(tmp_path / "w.pcap", packets)
    assert pcapfile.frames(path) == [(1, packets[0]), (2, packets[1])]
    assert pcapfile.select(path, "mrc.nack.reason == 3") == {1}
    assert pcapfile.select(path, 'mrc.sack.missing != ""') == {2}
    with pytest.raises(pcapfile.CaptureError, match="tshark refused the filter"):
        pcapfile.select(path, "mrc.nack.reason ==")
