"""Captures for the labs that read the wire (lab 8), with no packet library: a pcap file's frames
as IP packets (the link-layer header taken off), a pcap file written from IP packets (the
checker's made-up captures), and the frames a Wireshark display filter picks, as tshark with the
shipped MRC dissector (`experiments/tools/dissector.py`) says.

tcpdump writes pcap (`mrclab run --capture`); Wireshark's pcapng is not read here (one line
saying so): `editcap -F pcap IN OUT` converts.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from pathlib import Path

from experiments.tools import dissector

# Link-layer types (tcpdump.org/linktypes.html): what precedes the IP packet, and where the
# EtherType-like protocol field sits in it.
ETHERTYPE_IPV6 = 0x86DD
LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL = 1, 101, 113
LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 229, 276
_LINK = {  # linktype: (header length, offset of the 16-bit protocol field or None)
    LINKTYPE_ETHERNET: (14, 12), LINKTYPE_LINUX_SLL: (16, 14), LINKTYPE_LINUX_SLL2: (20, 0),
    LINKTYPE_RAW: (0, None), LINKTYPE_IPV6: (0, None)}
_MAGIC = {b"\xa1\xb2\xc3\xd4": ">", b"\xd4\xc3\xb2\xa1": "<",  # microsecond timestamps
          b"\xa1\xb2\x3c\x4d": ">", b"\x4d\x3c\xb2\xa1": "<"}  # nanosecond timestamps
_PCAPNG = b"\x0a\x0d\x0d\x0a"
TSHARK_TIMEOUT_S = 120


class CaptureError(Exception):
    """Not a capture this module reads, or tshark refused a filter: the message says which."""


def frames(path: Path) -> list[tuple[int, bytes]]:
    """(frame number from 1, as Wireshark counts, the IP packet) for every frame of a pcap
    file; the packet is b"" where the frame carries no IP (another protocol on the link)."""
    data = Path(path).read_bytes()
    if data[:4] == _PCAPNG:
        raise CaptureError(f"{path} is pcapng: convert it with `editcap -F pcap {path} OUT`")
    order = _MAGIC.get(data[:4])
    if order is None or len(data) < 24:
        raise CaptureError(f"{path} is not a pcap file")
    linktype = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF
    if linktype not in _LINK:
        raise CaptureError(f"{path}: link-layer type {linktype} is not one this reader knows "
                           f"({', '.join(map(str, sorted(_LINK)))})")
    skip, proto_at = _LINK[linktype]
    out, pos, number = [], 24, 0
    while pos + 16 <= len(data):
        caplen = struct.unpack_from(order + "I", data, pos + 8)[0]
        frame = data[pos + 16:pos + 16 + caplen]
        pos += 16 + caplen
        number += 1
        ip = b"" if proto_at is not None and frame[proto_at:proto_at + 2] != \
            ETHERTYPE_IPV6.to_bytes(2, "big") else frame[skip:]
        out.append((number, ip))
    return out


def write(path: Path, packets: list[bytes]) -> Path:
    """A pcap file of IP packets (link-layer type RAW), one frame each, 1 ms apart."""
    parts = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 0xFFFF, LINKTYPE_RAW)]
    for i, pkt in enumerate(packets):
        parts.append(struct.pack("<IIII", i // 1000, (i % 1000) * 1000, len(pkt), len(pkt)) + pkt)
    Path(path).write_bytes(b"".join(parts))
    return Path(path)


_SELECTED: dict[tuple[str, str], set[int]] = {}  # (file's SHA-256, filter): tshark's answer


def select(path: Path, display_filter: str) -> set[int]:
    """The frame numbers of `path` that `display_filter` picks, read by tshark with the MRC
    dissector (the same capture and filter are read once per process). CaptureError with
    tshark's own words when the filter is not valid."""
    key = (hashlib.sha256(Path(path).read_bytes()).hexdigest(), display_filter)
    if key in _SELECTED:
        return _SELECTED[key]
    tshark = shutil.which("tshark")
    if tshark is None:
        raise CaptureError("tshark is not installed: run `make setup` (or apt-get install tshark)")
    res = subprocess.run([tshark, "-n", "-r", str(path), "-X", f"lua_script:{dissector.LUA}",
                          "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S)
    said = [line.strip() for line in res.stderr.splitlines()
            if line.strip() and dissector.ROOT_WARNING not in line]
    if res.returncode != 0 or said:
        raise CaptureError(f"tshark refused the filter {display_filter!r}: {' '.join(said)[:300]}")
    _SELECTED[key] = {int(n) for n in res.stdout.split()}
    return _SELECTED[key]
