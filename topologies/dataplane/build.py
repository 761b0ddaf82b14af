"""Compiling the eBPF programs (clang): the switch egress program, with the MRC layout passed as
-D flags generated from endpoints/protocol/wire.py (the C source copies no protocol constant by
hand), the hosts' MRC encapsulation (mrc_encap.bpf.c) and the uSID behaviours for kernels without
seg6local (mrc_usid.bpf.c, its block from topologies/numbering.py), built by the same step."""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sysconfig
from pathlib import Path

from endpoints.protocol import wire
from topologies.dataplane.ports import FLAG_LAST_HOP, FLAG_TRIM, RATE_SHIFT, REINJECT_MARK
from topologies.numbering import USID_BLOCK
from topologies.shaping import CLASS_CONTROL, CLASS_DATA

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent / "mrc_qos.bpf.c"
OBJECT = REPO / "build" / "mrc_qos.bpf.o"
FLAGS_FILE = OBJECT.with_suffix(".flags")  # the -D flags the object was built with
ENCAP_SOURCE = SOURCE.with_name("mrc_encap.bpf.c")
ENCAP_OBJECT = OBJECT.with_name("mrc_encap.bpf.o")
USID_SOURCE = SOURCE.with_name("mrc_usid.bpf.c")
USID_OBJECT = OBJECT.with_name("mrc_usid.bpf.o")


def _programs() -> tuple[tuple[Path, Path, Path], ...]:
    """(source, object, flags file) of every program this step builds."""
    return ((SOURCE, OBJECT, FLAGS_FILE),
            (ENCAP_SOURCE, ENCAP_OBJECT, ENCAP_OBJECT.with_suffix(".flags")),
            (USID_SOURCE, USID_OBJECT, USID_OBJECT.with_suffix(".flags")))


def _member_offset(fmt: struct.Struct, index: int) -> int:
    return struct.calcsize(fmt.format[:1 + index])  # "!" + the first `index` single-char fields


def cflags() -> list[str]:
    """-D flags for the C program: the MRC layout from endpoints/protocol/wire.py, never
    hand-copied."""
    if wire.COMMON.format != "!BBHIIBBH":
        raise RuntimeError("wire.COMMON is no longer BTH (opcode, byte 1, P_Key, QP, PSN) + "
                           "MRCETH (flags, version, reserved)")
    values = {
        "MRC_PORT": wire.MRC_PORT,
        "MRC_COMMON_LEN": wire.COMMON.size,
        "MRC_DATA_HDR": wire.DATA_HDR,
        "MRC_TRIM_KEEP": wire.TRIM_KEEP,
        "MRC_ICRC_LEN": wire.ICRC_LEN,
        "MRC_OPCODE_OFF": _member_offset(wire.COMMON, 0),
        "MRC_PADCNT_OFF": _member_offset(wire.COMMON, 1),
        "MRC_PADCNT_MASK": wire.PADCNT_MASK,
        "MRC_FLAGS_OFF": _member_offset(wire.COMMON, 5),
        "MRC_VERSION_OFF": _member_offset(wire.COMMON, 6),
        "MRC_OPCODE_VENDOR_MASK": wire.OPCODE_VENDOR_MASK,
        "MRC_VERSION": wire.VERSION,
        "MRC_F_TRIMMED": wire.F_TRIMMED,
        "MRC_F_TRIMMED_LASTHOP": wire.F_TRIMMED_LASTHOP,
        "MRC_TRIM_DSCP": wire.TRIM_DSCP,
        "MRC_DATA_OPCODE_MAX": wire.DATA_OPCODE_MAX,
        "MRC_SACK_LEN": wire.SACK_LEN,
        "MRC_NACK_LEN": wire.NACK_LEN,
        "MRC_PROBE_LEN": wire.PROBE_LEN,
        "MRC_OP_SACK": wire.OP_SACK,
        "MRC_OP_NACK": wire.OP_NACK,
        "MRC_OP_PROBE": wire.OP_EV_PROBE,
        "MRC_OP_PROBE_REPLY": wire.OP_EV_PROBE_REPLY,
        "CLASS_CONTROL": CLASS_CONTROL,
        "CLASS_DATA": CLASS_DATA,
        "RATE_SHIFT": RATE_SHIFT,
        "FLAG_LAST_HOP": FLAG_LAST_HOP,
        "FLAG_TRIM": FLAG_TRIM,
        "REINJECT_MARK": REINJECT_MARK,
        "USID_BLOCK": f"0x{USID_BLOCK:08x}",
    }
    if (values["MRC_OPCODE_OFF"], values["MRC_PADCNT_OFF"], values["MRC_FLAGS_OFF"],
            values["MRC_VERSION_OFF"]) != (wire.OPCODE_OFF, wire.PADCNT_OFF, wire.FLAGS_OFF,
                                           wire.VERSION_OFF):
        raise RuntimeError("wire.py's named offsets disagree with its COMMON struct")
    return [f"-D{name}={value}" for name, value in values.items()]


def stale() -> str | None:
    """Why an object must be (re)built, or None when every one is current."""
    for source, obj, flags_file in _programs():
        if not obj.exists():
            return f"{obj.relative_to(REPO)} does not exist"
        if source.stat().st_mtime > obj.stat().st_mtime:
            return f"{source.name} is newer than its object"
        try:
            if flags_file.read_text().split() != cflags():
                return "the MRC constants (endpoints/protocol/wire.py) changed"
        except OSError:
            return "its build flags are unknown"
    return None


def build(force: bool = False) -> tuple[bool, str]:
    """Compile the objects if stale. (ok, message); never raises for a missing compiler."""
    why = "forced" if force else stale()
    if why is None:
        return True, f"{OBJECT.relative_to(REPO)}, {ENCAP_OBJECT.name}, {USID_OBJECT.name} up to date"
    clang = shutil.which("clang")
    if clang is None:
        return False, "clang not found"
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    includes = [f"-I/usr/include/{multiarch}"] if Path(f"/usr/include/{multiarch}").is_dir() else []
    OBJECT.parent.mkdir(parents=True, exist_ok=True)
    for source, obj, flags_file in _programs():
        tmp = obj.with_suffix(".tmp")
        # -g: the maps need BTF (bpf_spin_lock in a map value).
        cmd = [clang, "-O2", "-g", "-target", "bpf", "-Wall", *includes, *cflags(), "-c",
               str(source), "-o", str(tmp)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            return False, f"clang failed on {source.name} ({why}): {result.stderr.strip()[-600:]}"
        os.replace(tmp, obj)
        flags_file.write_text("\n".join(cflags()) + "\n")
    return True, f"built {OBJECT.relative_to(REPO)}, {ENCAP_OBJECT.name}, {USID_OBJECT.name} ({why})"
