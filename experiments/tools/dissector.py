"""The Wireshark dissector for MRC (`experiments/tools/wireshark/mrc.lua`): its constants, generated
from the wire format and the fabric model, and tshark run over a capture with it.

    python -m experiments.tools.dissector            rewrite the script's constants block
    python -m experiments.tools.dissector --check    exit 1 if the block is stale

The Lua script copies no MRC constant by hand: opcodes, flags, offsets, lengths, the version,
NACK reason names (from `endpoints/protocol/wire.py`) and the locator block and uSID roles (from
`topologies/model.py`) sit between two marker lines, written here. A unit test fails while the
block differs from what this module generates.

`read(pcap)` runs tshark (Debian's package, `make setup` installs it) with the script and returns
every frame as fields per protocol layer, Wireshark's expert infos and its malformed-packet
marks: the tests hold the dissector to what was sent, and so can anyone with a capture.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from endpoints.protocol import wire
from topologies import model

LUA = Path(__file__).resolve().parent / "wireshark" / "mrc.lua"
BEGIN = "-- BEGIN GENERATED CONSTANTS"
END = "-- END GENERATED CONSTANTS"
# Wireshark's expert severities (epan/proto.h: PI_CHAT, PI_NOTE, PI_WARN, PI_ERROR).
SEVERITY = {0x00200000: "chat", 0x00400000: "note", 0x00600000: "warning", 0x00800000: "error"}
ROOT_WARNING = "Running as user \"root\""  # tshark's stderr line when run as root: not a failure
TSHARK_TIMEOUT_S = 600


class DissectorError(RuntimeError):
    """tshark is missing, failed, or complained (Lua errors included)."""


def _offsets(ext: struct.Struct, names: tuple[str, ...], base: int) -> dict[str, int]:
    out, pos = {}, base
    for name, code in zip(names, ext.format[1:], strict=True):
        out[name] = pos
        pos += struct.calcsize("!" + code)
    return out


def _lua(value: object, hexa: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return f"0x{value:02X}" if hexa else str(value)


def _table(name: str, entries: dict, hex_keys: bool = False) -> str:
    """`local NAME = { ... }`, wrapped at 100 columns."""
    items = [f"[{_lua(k, hex_keys)}] = {_lua(v)}" if isinstance(k, int) else f"{k} = {_lua(v)}"
             for k, v in entries.items()]
    lines, line = [], f"local {name} = {{"
    for item in items:
        if len(line) + len(item) + 2 > 100:
            lines.append(line)
            line = "   "
        line += f" {item},"
    return "\n".join([*lines, line.rstrip(",") + " }"])


def _is_hex(name: str) -> bool:
    return name.startswith(("OP_", "F_")) or "MASK" in name or name.endswith("_BIT") or \
        name in ("PKEY", "DATA_OPCODE_MAX")


def lua_constants() -> str:
    """The constants block of mrc.lua, markers included."""
    c = wire.COMMON.size
    block = f"{model.USID_BLOCK >> 16:04x}:{model.USID_BLOCK & 0xFFFF:04x}"
    w = {
        "VERSION": wire.VERSION, "PKEY": wire.PKEY_DEFAULT, "TVER": wire.BTH_TVER,
        "VENDOR_MASK": wire.OPCODE_VENDOR_MASK, "DATA_OPCODE_MAX": wire.DATA_OPCODE_MAX,
        "OP_SACK": wire.OP_SACK, "OP_NACK": wire.OP_NACK, "OP_EV_PROBE": wire.OP_EV_PROBE,
        "OP_EV_PROBE_REPLY": wire.OP_EV_PROBE_REPLY,
        "BTH_LEN": wire.BTH_LEN, "COMMON_LEN": c, "QPN_OFF": wire.QPN_OFF, "PSN_OFF": wire.PSN_OFF,
        "ACKREQ_OFF": wire.ACKREQ_OFF, "ACKREQ_BIT": wire.ACKREQ_BIT, "PADCNT_OFF": wire.PADCNT_OFF,
        "PADCNT_MASK": wire.PADCNT_MASK, "PADCNT_SHIFT": wire.PADCNT_SHIFT,
        "FLAGS_OFF": wire.FLAGS_OFF, "VERSION_OFF": wire.VERSION_OFF,
        "PORTS_DOWN_OFF": wire.PORTS_DOWN_OFF,
        "F_RETRANSMIT": wire.F_RETRANSMIT, "F_TRIMMED": wire.F_TRIMMED,
        "F_TRIMMED_LASTHOP": wire.F_TRIMMED_LASTHOP, "F_ECN_ECHO": wire.F_ECN_ECHO,
        "FLAGS_MASK": wire.ETH_FLAGS_MASK, "DATA_HDR": wire.DATA_HDR, "ICRC_LEN": wire.ICRC_LEN,
        "SACK_LEN": wire.SACK_LEN, "NACK_LEN": wire.NACK_LEN, "PROBE_LEN": wire.PROBE_LEN,
        "MAX_PAYLOAD": wire.MAX_PAYLOAD, "PSN_MASK": wire.PSN_MASK,
        "USID_BLOCK": block, "ROLE_LEAF": model.ROLE_LEAF, "ROLE_SPINE": model.ROLE_SPINE,
        "ROLE_HOST": model.ROLE_HOST,
    }
    # The uSID layout [plane+1:4][role:2][index:10], read back from the model's own encoder.
    leaf = model.usid(model.ROLE_LEAF, 0, 0)
    plane_shift = (model.usid(model.ROLE_LEAF, 1, 0) - leaf).bit_length() - 1
    role_shift = (model.usid(model.ROLE_LEAF + 1, 0, 0) - leaf).bit_length() - 1
    w.update(USID_PLANE_SHIFT=plane_shift, USID_ROLE_SHIFT=role_shift,
             USID_ROLE_MASK=(1 << (plane_shift - role_shift)) - 1,
             USID_INDEX_MASK=(1 << role_shift) - 1)
    lines = [
        BEGIN,
        "-- Written by `python -m experiments.tools.dissector` from endpoints/protocol/wire.py and",
        "-- topologies/model.py: do not edit (a unit test fails while this block is stale).",
        "local W = {",
        *(f"    {k} = {_lua(v, _is_hex(k))}," for k, v in w.items()),
        "}",
        _table("OPCODES", wire.OPCODE_NAMES, hex_keys=True),
        _table("DATA_OPCODES", {op: True for op in sorted(wire.DATA_OPCODES)}, hex_keys=True),
        _table("NACK_REASONS", wire.NACK_REASON_NAMES),
        _table("DATA", _offsets(wire.DATA_EXT, wire.DATA_EXT_FIELDS, c)),
        _table("SACK", _offsets(wire.SACK_EXT, wire.SACK_EXT_FIELDS, c)),
        _table("NACK", _offsets(wire.NACK_EXT, wire.NACK_EXT_FIELDS, c)),
        _table("PROBE", _offsets(wire.PROBE_EXT, wire.PROBE_EXT_FIELDS, c)),
        END,
    ]
    return "\n".join(lines)


def _split(text: str) -> tuple[str, str, str]:
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        _, tail = rest.split(END + "\n", 1)
    except ValueError:
        raise DissectorError(f"{LUA} has lost its constants markers ({BEGIN!r} ... {END!r})") from None
    return head, BEGIN + "\n" + _ + END, tail


def stale(path: Path = LUA) -> bool:
    """True when the script's constants block is not what `lua_constants()` generates."""
    return _split(path.read_text())[1] != lua_constants()


def write_constants(path: Path = LUA) -> bool:
    """Rewrite the constants block; True if it changed."""
    head, old, tail = _split(path.read_text())
    new = lua_constants()
    if old == new:
        return False
    path.write_text(f"{head}{new}\n{tail}")
    return True


# ----- reading a capture through tshark ---------------------------------------------------------
# Wireshark's own fields read besides the dissector's: where the frame came from, UDP's checksum
# verdict, the BTH as Wireshark's InfiniBand dissector decoded it, expert infos, malformed marks.
WIRESHARK_FIELDS = (
    "frame.number", "frame.protocols", "ipv6.src", "ipv6.dst", "ipv6.flow", "ipv6.tclass",
    "udp.srcport", "udp.dstport", "udp.length", "udp.checksum.status",
    "infiniband.bth.opcode", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
    "infiniband.bth.psn", "infiniband.bth.padcnt",
    "_ws.expert.message", "_ws.expert.severity", "_ws.malformed",
)


def mrc_fields(lua: Path = LUA) -> list[str]:
    """Every field the script registers (`mrc.*`), in its order."""
    return re.findall(r'ProtoField\.\w+\("(mrc(?:\.[\w.]+)?)"', lua.read_text())


@dataclass
class Frame:
    """One frame as tshark decoded it with the MRC dissector: each field's values, in the order
    they occur (a repeated field, such as a uSID or the IPv6 header of an encapsulated packet,
    has several), its expert infos and whether Wireshark marked it malformed."""
    number: int
    fields: dict[str, list[str]]
    experts: list[tuple[str, str]] = dataclass_field(default_factory=list)  # (severity, message)
    malformed: bool = False  # _ws.malformed: an exception in a dissector, or a malformed expert

    def values(self, name: str) -> list[str]:
        return self.fields.get(name, [])

    def value(self, name: str) -> str | None:
        """The field's value when it occurs once; None when absent; a repeated field raises."""
        got = self.values(name)
        if len(got) > 1:
            raise ValueError(f"frame {self.number}: {name} occurs {len(got)} times: {got}")
        return got[0] if got else None


def read(pcap: Path, lua: Path = LUA, display_filter: str | None = None,
         payload: bool = False) -> list[Frame]:
    """Every frame of `pcap` (or those matching `display_filter`) as tshark decodes it with the
    dissector, UDP checksums verified: the dissector's fields (`mrc.payload` only if `payload`)
    and `WIRESHARK_FIELDS`. Raises
    DissectorError when tshark is missing, fails, or says anything on stderr but the root
    warning (a Lua error is reported there)."""
    tshark = shutil.which("tshark")
    if tshark is None:
        raise DissectorError("tshark is not installed: run `make setup` (or apt-get install tshark)")
    if not Path(pcap).is_file():
        raise DissectorError(f"{pcap}: no such capture")
    # Named fields only (-e): the whole tree of a 4 KB data packet is ~25 KB of JSON.
    names = [*WIRESHARK_FIELDS, *(f for f in mrc_fields(lua) if payload or f != "mrc.payload")]
    cmd = [tshark, "-n", "-r", str(pcap), "-X", f"lua_script:{lua}", "-o", "udp.check_checksum:TRUE",
           "-T", "json", *(arg for name in names for arg in ("-e", name))]
    if display_filter:
        cmd += ["-Y", display_filter]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S)
    complaints = [line for line in res.stderr.splitlines() if line.strip() and ROOT_WARNING not in line]
    if res.returncode != 0 or complaints:
        raise DissectorError(f"tshark exited {res.returncode}: {' | '.join(complaints)[:800]}")
    frames = []
    for pkt in json.loads(res.stdout or "[]"):
        fields = pkt["_source"]["layers"]
        experts = [(SEVERITY.get(int(sev), sev), msg) for sev, msg in
                   zip(fields.pop("_ws.expert.severity", []), fields.pop("_ws.expert.message", []),
                       strict=True)]
        malformed = bool(fields.pop("_ws.malformed", []))
        frames.append(Frame(int(fields["frame.number"][0]), fields, experts, malformed))
    return frames


def tshark_version() -> str | None:
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    out = subprocess.run([tshark, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.tools.dissector",
                                     description="rewrite (or --check) the constants block of "
                                                 f"{LUA.relative_to(LUA.parents[3])}")
    parser.add_argument("--check", action="store_true", help="exit 1 if the block is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            if stale():
                print(f"{LUA}: constants are stale: run `python -m experiments.tools.dissector`")
                return 1
            print(f"{LUA}: constants current")
            return 0
        print(f"{LUA}: {'rewrote the constants' if write_constants() else 'constants current'}")
    except (DissectorError, OSError) as exc:
        print(f"dissector: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
