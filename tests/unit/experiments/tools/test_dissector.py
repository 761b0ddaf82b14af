"""The shipped Wireshark dissector (experiments/tools/wireshark/mrc.lua): its constants are the wire
format's, and tshark with it decodes every kind of MRC packet exactly as it was sent.

A capture of every packet type is written here from the product's own encoders and framing:
data first/middle/last/only (with pad and immediate), a retransmission on another plane, a
CE-marked packet, data trimmed at a spine and at the last hop (cut by the switch program's
reference model), SACKs, a NACK of every reason, EV probe and reply, packets carrying a real
ICRC, a same-leaf path and a foreign RoCEv2 packet the dissector must leave alone; each MRC
frame plain (destination = the uSID carrier, shifted as far as the switches on the way shifted
it) and IPv6-in-IPv6 (outer = carrier, inner = the receiving NIC). Expectations come from the
inputs, not from decoding the frames. Needs tshark but not root: skipped on a laptop without
it, a failure in CI.
"""

from __future__ import annotations

import shutil
import struct

import pytest

from endpoints.host import netio
from endpoints.protocol import wire
from experiments.tools import dissector
from tests.captures import carrier, check_frame, write_pcap
from tests.conftest import require_or_skip
from topologies.dataplane import reference
from topologies.model import Fabric, build

ETH = bytes.fromhex("020000000002" "020000000001" "86dd")
L3 = len(ETH)
S_QP, R_QP = 0x000100, 0x000101  # the sender's and the receiver's QP
TS0 = 200_000_000  # the sender's clock, microseconds


@pytest.fixture(scope="module")
def tshark() -> None:
    require_or_skip(None if shutil.which("tshark") else "tshark is not installed (make setup)")


def test_lua_constants_are_generated_from_the_wire_format():
    """Run `python -m experiments.tools.dissector` after changing wire.py or the model."""
    assert not dissector.stale()
    text = dissector.lua_constants()
    assert f"VERSION = {wire.VERSION}," in text and f"DATA_HDR = {wire.DATA_HDR}," in text
    assert '[0xF1] = "SACK"' in text and "reason_cack = 16" in text


def test_stale_block_is_detected_and_rewritten(tmp_path):
    lua = tmp_path / "mrc.lua"
    lua.write_text(dissector.LUA.read_text().replace("VERSION = 2,", "VERSION = 1,"))
    assert dissector.stale(lua)
    assert dissector.write_constants(lua) and not dissector.stale(lua)
    assert lua.read_text() == dissector.LUA.read_text()
    lua.write_text("-- no markers\n")
    with pytest.raises(dissector.DissectorError, match="markers"):
        dissector.stale(lua)


def test_every_registered_field_is_read():
    fields = dissector.mrc_fields()
    assert len(fields) == len(set(fields)) > 50
    for name in ("mrc.opcode", "mrc.sack.bitmap", "mrc.nack.reason", "mrc.usid.name", "mrc.icrc.status"):
        assert name in fields


# ----- the capture ------------------------------------------------------------------------------
def shift(frame: bytes, hops: int) -> bytes:
    """The (outer) destination after `hops` uN shifts, hop limit decremented at each, the UDP
    checksum of a plain packet fixed as OVS fixes it (an encapsulated one needs no fix)."""
    out = bytearray(frame)
    for _ in range(hops):
        addr = int.from_bytes(out[L3 + 24:L3 + 40], "big")
        out[L3 + 24:L3 + 40] = ((addr >> 96 << 96) | ((addr << 16) & ((1 << 96) - 1))).to_bytes(16, "big")
        out[L3 + 7] -= 1
    if out[L3 + 6] == 17:
        udp = bytearray(out[L3 + 40:])
        udp[6:8] = b"\0\0"
        struct.pack_into("!H", udp, 6, wire.udp6_checksum(bytes(out[L3 + 8:L3 + 24]),
                                                          bytes(out[L3 + 24:L3 + 40]), bytes(udp)))
        out[L3 + 40:] = udp
    return bytes(out)


def with_icrc(packet: bytes) -> bytes:
    """An IPv6 + UDP packet from build_packet with its ICRC field filled and UDP's checksum
    recomputed (agents send zero; the dissector verifies a non-zero one)."""
    ip, udp = packet[:40], bytearray(packet[40:])
    udp[-4:] = wire.icrc_bytes(ip, udp)
    udp[6:8] = b"\0\0"
    struct.pack_into("!H", udp, 6, wire.udp6_checksum(ip[8:24], ip[24:40], bytes(udp)))
    return ip + bytes(udp)


def inventory(fabric: Fabric) -> list[dict]:
    """Every MRC packet of the capture: the route it takes, its bytes, the header fields it was
    built from (wire.fields names), where it is seen (uSID shifts), and what happens to it."""
    fwd = fabric.routes("h0", "h3")[0]  # plane 0, spine 0: p0l0 p0s0 p0l1 h3
    fwd_p1 = fabric.routes("h0", "h3")[3]  # plane 1, spine 1: a retransmission elsewhere
    rev = fabric.routes("h3", "h0")[1]  # acknowledgements over p0s1
    same_leaf = fabric.routes("h0", "h1")[2]  # p2l0 h1
    items: list[dict] = []

    def data(route, op, flags, psn, msn, off, mlen, n, hops=0, edit=None, imm=0, icrc=False):
        tsval = TS0 + 8 * psn
        payload = bytes((i * 7 + psn) & 0xFF for i in range(n))
        items.append(dict(route=route, hops=hops, edit=edit, icrc=icrc, payload=payload,
                          mrc=wire.encode_data(op, flags, R_QP, psn, msn, off, mlen, payload, tsval, imm),
                          fields=dict(opcode=op, qpn=R_QP, psn=psn, ackreq=int(bool(flags & wire.F_ACK_REQ)),
                                      flags=flags & wire.ETH_FLAGS_MASK, padcnt=-n & 3,
                                      len=wire.data_len(n), msn=msn, payload_len=n, offset=off,
                                      msg_len=mlen, tsval=tsval, immediate=imm)))

    data(fwd, wire.OP_DATA_FIRST, 0, 0x10, 3, 0, 3001, 1024)
    data(fwd, wire.OP_DATA_MIDDLE, 0, 0x11, 3, 1024, 3001, 1024, hops=1)  # after p0l0
    data(fwd, wire.OP_DATA_LAST, wire.F_ACK_REQ, 0x12, 3, 2048, 3001, 953, hops=3)  # pad 3, at h3
    data(fwd, wire.OP_DATA_ONLY, wire.F_ACK_REQ, 0x13, 4, 0, 6, 6, hops=2)  # pad 2
    data(fwd, wire.OP_DATA_ONLY_IMM, wire.F_ACK_REQ, 0x14, 5, 0, 1, 1, imm=0xCAFEF00D)  # pad 3
    data(fwd, wire.OP_DATA_LAST_IMM, 0, 0x1F, 9, 8, 8, 0, imm=7)  # an empty payload
    data(fwd_p1, wire.OP_DATA_MIDDLE, wire.F_RETRANSMIT | wire.F_ACK_REQ, 0x11, 3, 1024, 3001, 1024)
    data(fwd, wire.OP_DATA_MIDDLE, 0, 0x15, 6, 1024, 8192, 1024, hops=3, edit="ce")
    data(fwd, wire.OP_DATA_MIDDLE, 0, 0x16, 6, 2048, 8192, 1024, hops=2, edit="trim")  # at p0s0
    data(fwd, wire.OP_DATA_MIDDLE, wire.F_ACK_REQ | wire.F_RETRANSMIT, 0x17, 6, 3072, 8192, 1022,
         hops=3, edit="trim_lasthop")  # at p0l1's port to h3; PadCnt 2 before the cut
    data(fwd, wire.OP_DATA_MIDDLE, 0, 0x18, 6, 4096, 8192, 1024, icrc=True)
    data(same_leaf, wire.OP_DATA_ONLY, wire.F_ACK_REQ, 0x01, 1, 0, 64, 64)

    def control(route, buf, hops=0, icrc=False, **fields):
        items.append(dict(route=route, mrc=buf, hops=hops, edit=None, icrc=icrc,
                          fields=dict(ackreq=0, padcnt=0, len=len(buf), **fields)))

    control(rev, wire.encode_sack(S_QP, 0x11, 0x11, 0b1100, fwd.ev, TS0 + 8 * 0x15, 1, 0,
                                  wire.F_ECN_ECHO), hops=1,
            opcode=wire.OP_SACK, qpn=S_QP, psn=0x11, flags=wire.F_ECN_ECHO, base=0x11,
            bitmap=0b1100, echo_ev=fwd.ev, echo_ts=TS0 + 8 * 0x15, ecn_count=1, credit=0)
    control(rev, wire.encode_sack(S_QP, 0x19, 0x19, 0, fwd_p1.ev, TS0 + 8 * 0x18), icrc=True,
            opcode=wire.OP_SACK, qpn=S_QP, psn=0x19, flags=0, base=0x19, bitmap=0,
            echo_ev=fwd_p1.ev, echo_ts=TS0 + 8 * 0x18, ecn_count=0, credit=0)
    control(rev, wire.encode_sack(S_QP, 0xFFFFFE, 0xFFFFFE, 1 << 63 | 0b101, fwd.ev, 9), hops=3,
            opcode=wire.OP_SACK, qpn=S_QP, psn=0xFFFFFE, flags=0, base=0xFFFFFE,
            bitmap=1 << 63 | 0b101, echo_ev=fwd.ev, echo_ts=9, ecn_count=0, credit=0)  # PSN wrap
    # The receiver's NIC ports on planes 1 and 3 down (its port status, in the MRCETH)
    control(rev, wire.encode_sack(S_QP, 0x1A, 0x1A, 0, fwd.ev, 11, ports_down=0b1010),
            opcode=wire.OP_SACK, qpn=S_QP, psn=0x1A, flags=0, base=0x1A, bitmap=0,
            echo_ev=fwd.ev, echo_ts=11, ecn_count=0, credit=0, ports_down=0b1010)
    for reason in sorted(wire.NACK_REASONS):
        psn = 0x16 + reason
        control(rev, wire.encode_nack(S_QP, psn, reason, fwd.ev, TS0 + 8 * psn, 0x11), hops=reason % 4,
                opcode=wire.OP_NACK, qpn=S_QP, psn=psn, flags=0, reason=reason, cack=0x11,
                echo_ev=fwd.ev, echo_ts=TS0 + 8 * psn)
    control(fwd, wire.encode_probe(wire.OP_EV_PROBE, R_QP, 7, TS0 + 5000, fwd.ev),
            opcode=wire.OP_EV_PROBE, qpn=R_QP, psn=0, flags=0, probe_id=7, tsval=TS0 + 5000,
            probed_ev=fwd.ev)
    control(rev, wire.encode_probe(wire.OP_EV_PROBE_REPLY, S_QP, 7, TS0 + 5000, fwd.ev), hops=3,
            opcode=wire.OP_EV_PROBE_REPLY, qpn=S_QP, psn=0, flags=0, probe_id=7, tsval=TS0 + 5000,
            probed_ev=fwd.ev)
    control(fwd, wire.encode_probe(wire.OP_EV_PROBE, R_QP, 8, TS0 + 6000, fwd.ev, 0b1),
            opcode=wire.OP_EV_PROBE, qpn=R_QP, psn=0, flags=0, probe_id=8, tsval=TS0 + 6000,
            probed_ev=fwd.ev, ports_down=0b1)
    return items


def frames_and_expectations(fabric: Fabric) -> list[tuple[bytes, dict]]:
    out = []
    for form in ("plain", "encap"):
        for item in inventory(fabric):
            route = item["route"]
            # encap: what the agents send (NIC to NIC inside, the carrier outside); plain: the
            # unencapsulated form the switch program and the dissector also read.
            src = route.src_addr.packed
            packet = netio.build_packet(src, route.address.packed if form == "plain"
                                        else route.dst_addr.packed, route.ev, item["mrc"],
                                        tclass=wire.DATA_TCLASS)
            if item["icrc"]:
                packet = with_icrc(packet)
            if form == "encap":
                packet = netio.encapsulate(src, route.address.packed, packet)
            frame = shift(ETH + packet, item["hops"])
            fields = dict(item["fields"], ev=route.ev, ce=0)
            payload = item.get("payload")
            if item["edit"] == "ce":
                frame, fields["ce"] = reference.mark_ce(frame), 1
            elif item["edit"] in ("trim", "trim_lasthop"):
                last_hop = item["edit"] == "trim_lasthop"
                frame = reference.trim_frame(frame, last_hop)
                fields.update(flags=fields["flags"] | wire.F_TRIMMED |
                              (wire.F_TRIMMED_LASTHOP if last_hop else 0),
                              padcnt=0, len=wire.TRIM_KEEP)
                payload = b""
            icrc = struct.unpack_from("<I", frame, len(frame) - 4)[0]
            assert bool(icrc) == (item["icrc"] and item["edit"] is None)
            fields.update(icrc=icrc, icrc_status=1 if icrc else 0)
            outer_dst = frame[L3 + 24:L3 + 40]
            carriers = [carrier(fabric, outer_dst, "plain" if form == "plain" else "outer")]
            inner = carrier(fabric, frame[L3 + 64:L3 + 80], "inner") if form == "encap" else None
            if inner is not None:
                carriers.append(inner)
            exp = dict(mrc=fields, bth={k: fields[k] for k in ("opcode", "qpn", "psn")},
                       carriers=carriers)
            if payload is not None:
                exp["payload"] = payload
            out.append((frame, exp))
    # An IBTA RC SEND Only between baseline addresses: a RoCEv2 packet that is not MRC's.
    h0, h3 = fabric.host("h0").nics[0], fabric.host("h3").nics[0]
    foreign = struct.pack("!BBHII", 0x04, 0, 0xFFFF, 0x11, 0x80000005) + bytes(20)
    packet = with_icrc(netio.build_packet(h0.addr.packed, h3.addr.packed, 0x1C123,
                                          foreign))
    out.append((ETH + packet, dict(mrc=None, bth=dict(opcode=0x04, qpn=0x11, psn=5), carriers=[])))
    return out


@pytest.fixture(scope="module")
def decoded(tshark, tmp_path_factory):
    fabric = build()  # the default fabric: 4 planes, 2 leaves, 2 spines, 2 hosts per leaf
    cases = frames_and_expectations(fabric)
    pcap = tmp_path_factory.mktemp("dissector") / "mrc.pcap"
    write_pcap(pcap, [frame for frame, _ in cases])
    return pcap, cases, dissector.read(pcap, payload=True)


def test_every_packet_type_decodes_as_sent(decoded):
    _, cases, frames = decoded
    assert len(frames) == len(cases) == 2 * 25 + 1
    problems = [p for frame, (_, exp) in zip(frames, cases, strict=True) for p in check_frame(frame, exp)]
    assert problems == []
    # Wireshark's own view of the vendor opcodes: the BTH, and no expert of its own.
    assert all(f.values("infiniband.bth.p_key") == ["65535"] for f in frames)
    notes = [m for f in frames for _, m in f.experts]
    assert notes.count("Retransmission") == 2 * 2 and notes.count("NACK TRIMMED_LASTHOP") == 2
    assert notes.count("Payload trimmed by a switch at the last hop") == 2
    assert notes.count("Sender's NIC ports down: planes 1,3") == 2
    assert notes.count("Sender's NIC ports down: planes 0") == 2


@pytest.mark.parametrize("damage, expected", [
    (lambda f: f[:-1] + bytes([f[-1] ^ 1]), "Bad ICRC"),  # a real ICRC, one bit off
    (lambda f: f[:L3 + 48 + 13] + b"\x01" + f[L3 + 48 + 14:], None),  # version 1: not MRC's
    (lambda f: f[:L3 + 48 + 12] + b"\x40" + f[L3 + 48 + 13:], "Reserved bits set"),
    (lambda f: f[:L3 + 48] + b"\xe9" + f[L3 + 48 + 1:], "Unknown MRC opcode"),
    (lambda f: f[:L3 + 48 + 1] + b"\x10" + f[L3 + 48 + 2:], "disagrees"),  # PadCnt 1, no pad
])
def test_damage_is_reported(decoded, tmp_path, damage, expected):
    """The check fails on each kind of damage (every UDP checksum stays valid)."""
    _, cases, _ = decoded
    index = next(i for i, (_, e) in enumerate(cases) if e["mrc"] and e["mrc"]["icrc"] and
                 e["mrc"]["opcode"] in wire.DATA_OPCODES)
    frame, exp = cases[index]
    broken = bytearray(damage(frame))
    udp = bytearray(broken[L3 + 40:])
    udp[6:8] = b"\0\0"
    struct.pack_into("!H", udp, 6, wire.udp6_checksum(bytes(broken[L3 + 8:L3 + 24]),
                                                      bytes(broken[L3 + 24:L3 + 40]), bytes(udp)))
    pcap = tmp_path / "broken.pcap"
    write_pcap(pcap, [bytes(broken[:L3 + 40]) + bytes(udp)])
    [got] = dissector.read(pcap)
    problems = check_frame(got, exp)
    assert problems, "the damage went unnoticed"
    if expected is None:  # no longer MRC: Wireshark's BTH only, no MRC tree
        assert got.values("mrc.opcode") == [] and got.values("infiniband.bth.opcode")
    else:
        assert any(expected in m for _, m in got.experts), got.experts


def test_short_captures_decode_what_is_there_without_complaint(decoded, tmp_path):
    """Snap lengths from inside the headers to past them: never an expert warning or error."""
    _, cases, _ = decoded
    frames = [frame for frame, exp in cases if exp["mrc"] is not None]
    for snap in (80, 110, 150):
        pcap = tmp_path / f"snap{snap}.pcap"
        with pcap.open("wb") as fh:
            fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snap, 1))
            for i, f in enumerate(frames):
                fh.write(struct.pack("<IIII", 1_700_000_000, i, min(len(f), snap), len(f)) + f[:snap])
        for got in dissector.read(pcap):
            assert not got.malformed and all(sev == "note" for sev, _ in got.experts), \
                (snap, got.number, got.experts)
        # 110 bytes keep every MRC header of a plain packet
        if snap == 110:
            plain = dissector.read(pcap, display_filter="not ipv6.nxt == 41 and mrc.data")
            assert plain and all(g.values("mrc.tsval") for g in plain)


def test_tshark_failures_are_reported(tshark, tmp_path):
    broken = tmp_path / "broken.lua"
    broken.write_text(dissector.LUA.read_text().replace("register_postdissector(mrc)", "nil()"))
    pcap = tmp_path / "one.pcap"
    write_pcap(pcap, [ETH + netio.build_packet(bytes(16), bytes(16), 1, b"")])
    with pytest.raises(dissector.DissectorError):
        dissector.read(pcap, lua=broken)
    with pytest.raises(dissector.DissectorError, match="no such capture"):
        dissector.read(tmp_path / "missing.pcap")
