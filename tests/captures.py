"""Holding tshark's reading of a capture (`experiments.tools.dissector.read`, the shipped Lua
dissector) to what was sent: the checks the dissector's unit test (a generated capture) and the
capture integration test (an emulated transfer and the agents' packet log) share.

What counts as a failure, frame by frame:
* Wireshark marked the frame malformed (`_ws.malformed`: a dissector's exception, or an expert
  of group Malformed, ours included);
* any expert info of severity chat, warning or error, from any dissector (Wireshark's own or
  ours: a bad UDP checksum, a bad ICRC, a Lua error, an unknown MRC opcode, a reserved bit...);
* any expert note other than the dissector's own for this packet (retransmission, trim, NACK
  with its reason), or one of those missing;
* UDP's checksum not verified good;
* Wireshark's InfiniBand dissector not showing the expected BTH opcode, destination QP and PSN;
* any MRC field absent, repeated or different from what was sent, the subtree of another
  packet type present, or the uSID carrier decoded differently from the fabric model's path.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from endpoints.protocol import wire
from experiments.tools.dissector import Frame
from topologies.model import USID_BLOCK, Fabric

KIND = {**{op: "data" for op in wire.DATA_OPCODES}, wire.OP_SACK: "sack", wire.OP_NACK: "nack",
        wire.OP_EV_PROBE: "probe", wire.OP_EV_PROBE_REPLY: "probe"}
SUBTREE = {"data": "mrc.data", "sack": "mrc.sack", "nack": "mrc.nack", "probe": "mrc.probe"}
# wire.fields name -> the dissector's field, for every packet and per type.
COMMON = {"opcode": "mrc.opcode", "qpn": "mrc.qpn", "psn": "mrc.psn", "ackreq": "mrc.ackreq",
          "padcnt": "mrc.padcnt", "flags": "mrc.flags", "ev": "mrc.ev", "ce": "mrc.ce",
          "icrc": "mrc.icrc", "icrc_status": "mrc.icrc.status"}
BY_KIND = {
    "data": {"msn": "mrc.msn", "payload_len": "mrc.payload_len", "offset": "mrc.offset",
             "msg_len": "mrc.msg_len", "tsval": "mrc.tsval", "immediate": "mrc.immediate"},
    "sack": {"psn": "mrc.sack.cack", "base": "mrc.sack.base", "bitmap": "mrc.sack.bitmap",
             "echo_ev": "mrc.echo_ev", "echo_ts": "mrc.echo_ts", "ecn_count": "mrc.sack.ecn_count",
             "credit": "mrc.sack.credit", "ports_down": "mrc.ports_down"},
    "nack": {"reason": "mrc.nack.reason", "cack": "mrc.nack.cack", "echo_ev": "mrc.echo_ev",
             "echo_ts": "mrc.echo_ts", "ports_down": "mrc.ports_down"},
    "probe": {"probe_id": "mrc.probe.id", "tsval": "mrc.tsval", "probed_ev": "mrc.probe.ev",
              "ports_down": "mrc.ports_down"},
}
FLAG_BITS = {"mrc.flags.retransmit": wire.F_RETRANSMIT, "mrc.flags.trimmed": wire.F_TRIMMED,
             "mrc.flags.trimmed_lasthop": wire.F_TRIMMED_LASTHOP,
             "mrc.flags.ecn_echo": wire.F_ECN_ECHO}
LAYER_TEXT = {"plain": "destination", "outer": "outer destination", "inner": "inner destination"}


def number(text: str) -> int:
    return int(text, 0)


def expected_notes(fields: dict) -> list[str]:
    """The dissector's own expert notes for a packet with these header fields."""
    notes = []
    kind = KIND[fields["opcode"]]
    if kind == "data" and fields["flags"] & wire.F_RETRANSMIT:
        notes.append("Retransmission")
    if kind == "data" and fields["flags"] & wire.F_TRIMMED:
        notes.append("Payload trimmed by a switch" +
                     (" at the last hop" if fields["flags"] & wire.F_TRIMMED_LASTHOP else ""))
    if kind == "nack":
        notes.append(f"NACK {wire.NACK_REASON_NAMES[fields['reason']]}")
    if kind != "data" and fields.get("ports_down"):
        down = fields["ports_down"]
        notes.append("Sender's NIC ports down: planes " +
                     ",".join(str(p) for p in range(16) if down >> p & 1))
    return notes


def usid_names(fabric: Fabric) -> dict[int, str]:
    """uSID -> the switch or host it names, from the fabric model."""
    names = {sw.usid: sw.name for sw in fabric.switches}
    names.update({nic.usid: host.name for host in fabric.hosts for nic in host.nics})
    return names


def carrier(fabric: Fabric, address: bytes, layer: str = "plain") -> dict | None:
    """What the dissector should show for a destination address: None outside the block."""
    value = int.from_bytes(address, "big")
    if value >> 96 != USID_BLOCK:
        return None
    sids = []
    for pos in range(6):
        sid = (value >> (80 - 16 * pos)) & 0xFFFF
        if sid == 0:
            break
        sids.append(sid)
    names = usid_names(fabric)
    switches = {sw.usid: sw for sw in fabric.switches}
    nics = {nic.usid: nic for host in fabric.hosts for nic in host.nics}
    first = switches.get(sids[0]) or nics[sids[0]]
    return {"layer": layer, "usids": sids, "names": [names[s] for s in sids],
            "plane": first.plane, "path": " ".join(names[s] for s in sids)}


def check_frame(frame: Frame, exp: dict) -> list[str]:
    """Everything wrong with one frame against its expectation: `mrc` (wire.fields names plus
    ev, ce and optionally icrc, icrc_status; None for a packet that is not MRC's), `bth`
    (opcode, qpn, psn as Wireshark's InfiniBand dissector must show them), `carriers` (each
    destination address's expected decode, outer first) and optionally `payload` (bytes)."""
    n, bad = frame.number, []
    if frame.malformed:
        bad.append(f"frame {n}: marked malformed")
    want = exp["mrc"]
    notes = []
    for severity, message in frame.experts:
        if severity == "note":
            notes.append(message)
        else:
            bad.append(f"frame {n}: expert {severity}: {message}")
    want_notes = expected_notes(want) if want is not None else []
    if sorted(notes) != sorted(want_notes):
        bad.append(f"frame {n}: notes {notes}, expected {want_notes}")
    if frame.values("udp.checksum.status") != ["1"]:
        bad.append(f"frame {n}: UDP checksum status {frame.values('udp.checksum.status')} (1 = good)")
    for key, name in (("opcode", "infiniband.bth.opcode"), ("qpn", "infiniband.bth.destqp"),
                      ("psn", "infiniband.bth.psn")):
        got = [number(v) for v in frame.values(name)]
        if got != [exp["bth"][key]]:
            bad.append(f"frame {n}: Wireshark's {name} = {got}, expected {exp['bth'][key]}")
    if want is None:
        stray = sorted(k for k in frame.fields if k.startswith("mrc.") and
                       not k.startswith(("mrc.srv6", "mrc.usid", "mrc.plane")))
        if stray:
            bad.append(f"frame {n}: not MRC's, yet decoded {stray[:4]}")
        return bad + _check_carriers(frame, exp["carriers"])
    kind = KIND[want["opcode"]]
    want = {"icrc": 0, "icrc_status": 0, "ports_down": 0, **want}
    for key, name in {**COMMON, **BY_KIND[kind]}.items():
        got = frame.values(name)
        if len(got) != 1 or number(got[0]) != want[key]:
            bad.append(f"frame {n}: {name} = {got}, expected {want[key]:#x} ({want[key]})")
    for name, bit in FLAG_BITS.items():
        if frame.values(name) != [str(int(bool(want["flags"] & bit)))]:
            bad.append(f"frame {n}: {name} = {frame.values(name)}, flags {want['flags']:#x}")
    if frame.values("mrc.version") != [str(wire.VERSION)]:
        bad.append(f"frame {n}: mrc.version = {frame.values('mrc.version')}")
    if [number(v) for v in frame.values("udp.length")][-1:] != [wire.UDP_HDR + want["len"]]:
        bad.append(f"frame {n}: UDP length {frame.values('udp.length')}, sent {want['len']} bytes")
    for other, subtree in SUBTREE.items():
        if bool(frame.values(subtree)) != (other == kind):
            bad.append(f"frame {n}: subtree {subtree} {'present' if other != kind else 'absent'}")
    if kind == "sack":
        base, bitmap = want["base"], want["bitmap"]
        received = [(base + i) & wire.PSN_MASK for i in range(64) if bitmap >> i & 1]
        missing = [(base + i) & wire.PSN_MASK for i in range(bitmap.bit_length() - 1)
                   if not bitmap >> i & 1]
        for name, psns in (("mrc.sack.received", received), ("mrc.sack.missing", missing)):
            text = ",".join(str(p) for p in psns)
            if frame.values(name) not in ([text], [] if not text else [text]):
                bad.append(f"frame {n}: {name} = {frame.values(name)}, expected {text!r}")
    if "payload" in exp:
        got_payload = bytes.fromhex(frame.values("mrc.payload")[0]) if frame.values("mrc.payload") else b""
        if hashlib.sha256(got_payload).digest() != hashlib.sha256(exp["payload"]).digest():
            bad.append(f"frame {n}: payload of {len(got_payload)} bytes differs from the "
                       f"{len(exp['payload'])} sent")
    return bad + _check_carriers(frame, exp["carriers"])


def _check_carriers(frame: Frame, carriers: list[dict]) -> list[str]:
    n, bad = frame.number, []
    checks = (
        ("mrc.srv6.layer", [LAYER_TEXT[c["layer"]] for c in carriers], str),
        ("mrc.usid", [s for c in carriers for s in c["usids"]], number),
        ("mrc.usid.name", [s for c in carriers for s in c["names"]], str),
        ("mrc.plane", [c["plane"] for c in carriers], number),
        ("mrc.srv6.path", [c["path"] for c in carriers], str),
    )
    for name, values, conv in checks:
        got = [conv(v) for v in frame.values(name)]
        if got != values:
            bad.append(f"frame {n}: {name} = {got}, expected {values}")
    return bad


def write_pcap(path: Path, frames: list[bytes], linktype: int = 1) -> None:
    """A classic pcap (microsecond stamps), frames 1 ms apart; linktype 1 = Ethernet."""
    with path.open("wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, frame in enumerate(frames):
            fh.write(struct.pack("<IIII", 1_700_000_000, i * 1000, len(frame), len(frame)) + frame)


# ----- a capture against an agent's packet log ---------------------------------------------------
def log_expectation(record: dict, fabric: Fabric, me: str, peer: str) -> dict:
    """What the capture on host `me` should show for one "packet" record of its agent's trace
    (`endpoints/host/dataloop.py`): the logged header, the EV, CE as it arrived (sent: never), and
    the outer header's uSID carrier the fabric model gives that EV: the whole path as it leaves
    `me`, the receiving host's SID (every uSID shifted out) as it arrives. The inner header's
    destination, a NIC address, is no carrier."""
    if record["dir"] == "tx":
        route = {r.ev: r for r in fabric.routes(me, peer)}[record["ev"]]
        address = route.address.packed
    else:
        route = {r.ev: r for r in fabric.routes(peer, me)}[record["ev"]]
        address = fabric.host(me).nics[route.plane].sid.packed
    fields = {**record["hdr"], "ev": record["ev"], "ce": record.get("ce") or 0}
    return {"mrc": fields, "bth": {k: fields[k] for k in ("opcode", "qpn", "psn")},
            "carriers": [carrier(fabric, address, "outer")], "dir": record["dir"]}


def compare_with_log(frames: list[Frame], records: list[dict], fabric: Fabric, me: str,
                     peer: str) -> tuple[int, list[str]]:
    """Pair every MRC frame of a capture on `me` with one logged packet (same direction, and
    what Wireshark's own dissectors show: BTH opcode, destination QP, PSN, UDP source port),
    each frame checked in full against its record. (frames matched, problems): a frame no
    record explains, a record no frame shows, and every check_frame problem."""
    mine = {str(nic.addr) for nic in fabric.host(me).nics}  # the outer source: the sending NIC
    pending: dict[tuple, list[dict]] = {}
    for record in records:
        exp = log_expectation(record, fabric, me, peer)
        key = (exp["dir"], exp["bth"]["opcode"], exp["bth"]["qpn"], exp["bth"]["psn"],
               record["ev"] & 0xFFFF)
        pending.setdefault(key, []).append(exp)
    matched, bad = 0, []
    for frame in frames:
        direction = "tx" if frame.values("ipv6.src")[:1] and frame.values("ipv6.src")[0] in mine else "rx"
        try:
            key = (direction, *(number(frame.values(f)[0]) for f in (
                "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
                "udp.srcport")))
        except IndexError:
            bad.append(f"frame {frame.number}: no BTH or UDP header decoded ({frame.fields})")
            continue
        candidates = pending.get(key, [])
        if not candidates:
            bad.append(f"frame {frame.number}: {direction} {key[1:]} is in no logged packet")
            continue
        results = [check_frame(frame, exp) for exp in candidates]
        best = min(range(len(candidates)), key=lambda i: len(results[i]))
        bad.extend(results[best])
        candidates.pop(best)
        matched += 1
    for key, left in pending.items():
        for exp in left:
            bad.append(f"logged {key[0]} packet {exp['mrc']} is not in the capture")
    return matched, bad
