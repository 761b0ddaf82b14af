"""The eBPF switch data plane in the kernel (root; no OVS, no emulation).

Two parts: the program run on single frames through BPF_PROG_TEST_RUN with the virtual queue
set (and frozen) through its map, compared with the Python reference model; and the program
attached to a veth in namespaces this test creates, shaped by the priority HTB, with real
bursts delivered to a real UDP socket (the receiving kernel verifies every checksum)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoints.host import netio
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from topologies import hostnet, netns, shaping
from topologies.dataplane import attach, bpf, ports, usid
from topologies.dataplane import reference as ref

SRC, DST = netio.packed("fd00:99::1"), netio.packed("fd00:99::2")
# IPv6-in-IPv6 (the MRC paper's layout): the outer header goes to a uSID carrier that ns B
# decapsulates (End.DT6), the inner one to ns B's own address.
CARRIER_TEXT = "fcbb:bb00:1c01::"
OUTER_SRC, CARRIER = netio.packed("fcbb:bb00:1c00::"), netio.packed(CARRIER_TEXT)
MAC_A, MAC_B = "02:6d:72:63:00:01", "02:6d:72:63:00:02"
ETH = bytes.fromhex(MAC_B.replace(":", "")) + bytes.fromhex(MAC_A.replace(":", "")) + b"\x86\xdd"
MTU = 1024  # the tests' data packets carry 1 KB payloads: thresholds in those frames
CFG = TransportConfig(mtu_payload=MTU)
FRAME = wire.frame_bytes(MTU)
SPEC = ports.PortSpec("lo", None, 10e6, *ports.default_thresholds(50, CFG))


@pytest.fixture(scope="module")
def bpf_ready() -> None:
    reason = None if os.geteuid() == 0 else "needs root"
    reason = reason or attach.available()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"eBPF data plane unavailable in CI: {reason}")
    pytest.skip(reason)


def frame(payload: bytes, tclass: int = wire.DATA_TCLASS, dport: int = wire.MRC_PORT,
          encap: bool = False) -> bytes:
    packet = netio.build_packet(SRC, DST, 0x2C000, payload, tclass=tclass, dport=dport)
    return ETH + (netio.encapsulate(OUTER_SRC, CARRIER, packet) if encap else packet)


def data(n: int = 1024, flags: int = 0, psn: int = 9) -> bytes:
    return wire.encode_data(wire.OP_DATA_MIDDLE, flags, 5, psn, 1, 0, 1 << 20, b"\xab" * n)


def udp_ok(f: bytes) -> bool:
    """The UDP checksum over the pseudo-header of the IPv6 header before UDP (the inner one of
    an encapsulated frame), computed here, not by the model."""
    ip = 14 + 40 * (f[20] == 41)
    udp = f[ip + 40:]
    return wire.udp6_checksum(f[ip + 8:ip + 24], f[ip + 24:ip + 40], udp[:6] + b"\0\0" + udp[8:]) == \
        int.from_bytes(udp[6:8], "big")


# ----- single frames through BPF_PROG_TEST_RUN ---------------------------------------------------
@pytest.fixture
def prog(bpf_ready):
    p = bpf.Program()
    p.configure(1, SPEC)  # ifindex 1: the test run's loopback, no device needed
    yield p
    p.close()


def test_an_object_the_kernel_refuses_leaves_no_pin_directory(bpf_ready, tmp_path):
    bad = tmp_path / "not-bpf.o"
    bad.write_bytes(b"\x7fELF, but no program in it")
    pins = lambda: set(bpf.PIN_ROOT.iterdir()) if bpf.PIN_ROOT.is_dir() else set()  # noqa: E731
    before = pins()
    with pytest.raises(RuntimeError, match="bpftool prog load of not-bpf.o failed: .+"):
        bpf.Program(bad)
    assert pins() == before


def run_at(prog: bpf.Program, f: bytes, vq: int, spec: ports.PortSpec = SPEC,
           mark: int = 0) -> ref.RunResult:
    prog.configure(1, spec)
    prog.set_queue(1, vq, frozen=True)
    return prog.run(f, mark=mark)


def test_below_between_above_thresholds(prog):
    th = ports.default_thresholds(50, CFG)
    f = frame(data())
    below = run_at(prog, f, 0)
    assert below == (ref.TC_ACT_OK, f, shaping.CLASS_DATA, 0)
    marked = run_at(prog, f, th.mark_bytes)  # q = mark + this frame > mark
    assert marked.frame[15] & 0x30 == 0x30 and marked.frame[16:] == f[16:]
    assert marked.priority == shaping.CLASS_DATA and udp_ok(marked.frame)  # ECN is outside the sum
    assert prog.counters(1)["marked"] == 1
    trimmed = run_at(prog, f, th.trim_bytes)
    # Sent through the port again, marked so that the second pass neither counts nor cuts it.
    assert (trimmed.verdict, trimmed.mark) == (ref.TC_ACT_REDIRECT, ports.REINJECT_MARK)
    assert trimmed.priority == shaping.CLASS_CONTROL
    assert len(trimmed.frame) == 14 + 40 + 8 + wire.TRIM_KEEP
    assert struct.unpack_from("!H", trimmed.frame, 18)[0] == 8 + wire.TRIM_KEEP  # IPv6 length
    assert struct.unpack_from("!H", trimmed.frame, 58)[0] == 8 + wire.TRIM_KEEP  # UDP length
    pkt = wire.decode(trimmed.frame[ref._MRC:])
    assert isinstance(pkt, wire.Data) and pkt.flags & wire.F_TRIMMED and pkt.psn == 9
    assert pkt.payload == b"" and udp_ok(trimmed.frame)
    # Headers kept, the ICRC field zeroed, PadCnt cleared: the Python model's cut, byte for byte.
    assert trimmed.frame[ref._MRC:] == wire.trimmed(f[ref._MRC:])
    c = prog.counters(1)
    assert (c["trimmed"], c["dropped"], c["packets"]) == (1, 0, 1)
    assert c["vq_bytes"] == th.trim_bytes + ref.TRIM_LEN == c["vq_max"]
    second = prog.run(trimmed.frame, mark=trimmed.mark)
    assert second == (ref.TC_ACT_OK, trimmed.frame, shaping.CLASS_CONTROL, 0)
    assert prog.counters(1) == c  # counted once, admitted to the vq once
    above_drop = run_at(prog, f, th.drop_bytes)  # trimming beats dropping
    assert len(above_drop.frame) == ref.TRIM_LEN


def test_encapsulated_marks_both_headers_and_trims_with_inner_checksum(prog):
    th = ports.default_thresholds(50, CFG)
    f = frame(data(), encap=True)
    assert run_at(prog, f, 0) == (ref.TC_ACT_OK, f, shaping.CLASS_DATA, 0)
    marked = run_at(prog, f, th.mark_bytes)
    assert marked.frame[15] & 0x30 == 0x30 and marked.frame[55] & 0x30 == 0x30  # outer, inner
    assert marked.frame == ref.mark_ce(f) and udp_ok(marked.frame)
    trimmed = run_at(prog, f, th.trim_bytes)
    assert (trimmed.verdict, trimmed.mark) == (ref.TC_ACT_REDIRECT, ports.REINJECT_MARK)
    assert len(trimmed.frame) == ref.ENCAP.trim_len == ref.TRIM_LEN + 40
    l4len = 8 + wire.TRIM_KEEP
    assert struct.unpack_from("!H", trimmed.frame, 18)[0] == 40 + l4len  # outer payload length
    assert struct.unpack_from("!H", trimmed.frame, 58)[0] == l4len  # inner payload length
    assert struct.unpack_from("!H", trimmed.frame, 98)[0] == l4len  # UDP length
    assert udp_ok(trimmed.frame) and trimmed.frame == ref.trim_frame(f)
    c = prog.counters(1)
    assert (c["trimmed"], c["packets"], c["vq_bytes"]) == (1, 1, th.trim_bytes + ref.ENCAP.trim_len)


def test_ecn_capability_and_last_hop(prog):
    vq = SPEC.mark_bytes
    for tclass, expect, counted in ((0b10, 0b11, 1), (0b01, 0b11, 1), (0b00, 0b00, 0),
                                    (0b11, 0b11, 0)):  # ECT(0), ECT(1), Not-ECT, CE already
        out = run_at(prog, frame(data(), tclass=0xA0 | tclass), vq).frame
        assert (out[15] >> 4) & 3 == expect and out[14] == 0x6A  # DSCP kept
        assert prog.counters(1)["marked"] == counted
    last = replace(SPEC, last_hop=True)
    out = run_at(prog, frame(data()), vq, last).frame
    assert out == frame(data()) and prog.counters(1)["marked"] == 0
    assert len(run_at(prog, frame(data()), SPEC.trim_bytes, last).frame) == ref.TRIM_LEN


def test_drop_only_what_cannot_be_trimmed(prog):
    no_trim = replace(SPEC, trim=False)
    f = frame(data())
    assert run_at(prog, f, SPEC.trim_bytes, no_trim).frame[16:] == f[16:]
    assert run_at(prog, f, SPEC.drop_bytes, no_trim).verdict == ref.TC_ACT_SHOT
    assert prog.counters(1)["dropped"] == 1
    empty = frame(data(0))  # a header-only data packet has nothing to cut
    kept = run_at(prog, empty, SPEC.trim_bytes)  # queued as data (and ECN-marked)
    assert kept.frame[16:] == empty[16:] and kept.priority == shaping.CLASS_DATA
    assert run_at(prog, empty, SPEC.drop_bytes).verdict == ref.TC_ACT_SHOT


def test_control_always_high_priority_never_dropped(prog):
    controls = [wire.encode_sack(1, 2, 2, 3, 4, 5), wire.encode_nack(1, 2, wire.NACK_TRIMMED),
                wire.encode_probe(wire.OP_EV_PROBE, 1, 2, 3, 4), data(0, flags=wire.F_TRIMMED)]
    for payload in controls:
        f = frame(payload)
        for vq in (0, SPEC.trim_bytes, 10 * SPEC.drop_bytes):
            assert run_at(prog, f, vq) == (ref.TC_ACT_OK, f, shaping.CLASS_CONTROL, 0)
            c = prog.counters(1)
            assert (c["control"], c["dropped"], c["marked"]) == (1, 0, 0)


def test_control_labels_do_not_buy_priority(prog):
    """Issue 11, item 10: a 3 KB "trimmed" data packet, a 3 KB probe, opcode 0xFF rode the
    strict-priority class untouched. Now the wire format's sizes are required: they are
    handled as data (queued, dropped at capacity, never trimmed) and counted."""
    bad = [data(3000, flags=wire.F_TRIMMED),
           wire.encode_probe(wire.OP_EV_PROBE, 1, 2, 3, 4) + b"p" * 3000,
           wire.COMMON.pack(0xFF, 0, wire.PKEY_DEFAULT, 5, 9, 0, wire.VERSION, 0) + b"u" * 3000]
    for payload in bad:
        f = frame(payload)
        res = run_at(prog, f, 0)
        assert res == (ref.TC_ACT_OK, f, shaping.CLASS_DATA, 0), payload[:4].hex()
        c = prog.counters(1)
        assert (c["control"], c["demoted"]) == (0, 1)
        assert run_at(prog, f, SPEC.drop_bytes).verdict == ref.TC_ACT_SHOT


def test_control_beyond_the_ports_budget_is_demoted(prog):
    sack = frame(wire.encode_sack(1, 2, 2, 3, 4, 5))
    prog.configure(1, SPEC)
    prog.set_queue(1, 0, frozen=True)
    prog.set_control_budget(1, 2 * len(sack) + 10, frozen=True)
    got = [prog.run(sack).priority for _ in range(3)]
    assert got == [shaping.CLASS_CONTROL, shaping.CLASS_CONTROL, shaping.CLASS_DATA]
    c = prog.counters(1)
    assert (c["control"], c["demoted"]) == (2, 1)
    want, _ = ref.reference(sack, 0, SPEC, control_budget=10)
    assert want.priority == shaping.CLASS_DATA


def test_unparsed_frames_pass_untouched_and_uncounted(prog):
    f = frame(data())
    ipv4 = f[:12] + b"\x08\x00" + b"\x45" + f[15:]
    tcp = f[:20] + b"\x06" + f[21:]
    wrong_version = bytearray(f)
    wrong_version[ref._MRC + wire.VERSION_OFF] = 1  # the old format's version
    bad_len = bytearray(f)
    struct.pack_into("!H", bad_len, 58, 100)  # UDP length disagrees with IPv6 payload length
    # (BPF_PROG_TEST_RUN itself refuses IPv4/IPv6 frames shorter than their L3 header.)
    not_ip = f[:12] + b"\x88\xb5"
    cases = [not_ip, not_ip + f[14:], f[:54], f[:60], f[:ref._MRC + wire.COMMON.size - 1], ipv4, tcp,
             frame(data(), dport=4792), frame(data(), dport=53), bytes(wrong_version),
             bytes(bad_len), f[:200]]
    for opcode in (0x04, 0x64, 0xC4):  # IBTA RC and UD SEND Only, a reserved range: not MRC
        foreign = bytearray(f)
        foreign[ref._MRC] = opcode
        cases.append(bytes(foreign))
    for case in cases:
        res = run_at(prog, case, SPEC.drop_bytes + 1)  # would be trimmed or dropped if MRC
        assert res == (ref.TC_ACT_OK, case, 0, 0), case[:64].hex()
        c = prog.counters(1)
        assert c["packets"] == 0 and c["other_packets"] == 1


def test_unconfigured_port_is_plain_forwarding(prog):
    prog.unconfigure(1)
    f = frame(data())
    assert prog.run(f) == (ref.TC_ACT_OK, f, 0, 0)


def test_virtual_queue_drains_at_the_port_rate(prog):
    f = frame(data(0, flags=0))
    prog.configure(1, SPEC)  # 10 Mbit/s: 1.25 bytes per microsecond
    start = 30000
    prog.state.update(1, 0, 0, start << ports.RATE_SHIFT, time.monotonic_ns() - 10_000_000, 0, 0)
    prog.run(f)
    drained = start + len(f) - prog.counters(1)["vq_bytes"]
    assert 12500 <= drained < 12500 + 2500  # 10 ms plus up to 2 ms of test overhead
    prog.state.update(1, 0, 0, start << ports.RATE_SHIFT, time.monotonic_ns() - 10**9, 0, 0)
    prog.run(f)
    assert prog.counters(1)["vq_bytes"] == len(f)  # empty after a long idle time


FRAMES = st.one_of(
    st.builds(lambda n, fl: data(n, fl), st.integers(0, 1400), st.sampled_from([0, 1, 4, 0x10])),
    st.builds(lambda q: wire.encode_sack(q, 1, 1, 0, 0, 0), st.integers(0, 99)),
    st.builds(lambda r: wire.encode_nack(1, 2, r), st.integers(1, 6)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=FRAMES, tclass=st.integers(0, 255), vq=st.integers(0, 70000),
       last_hop=st.booleans(), trim=st.booleans(), cut=st.integers(0, 1500),
       flip=st.one_of(st.none(), st.integers(0, 150)), dport=st.sampled_from([4791, 4791, 4790]),
       encap=st.booleans(), inner_tclass=st.one_of(st.none(), st.integers(0, 255)),
       mark=st.sampled_from([0, 0, 0, ports.REINJECT_MARK, 7]))
def test_kernel_matches_reference(prog, payload, tclass, vq, last_hop, trim, cut, flip, dport,
                                  encap, inner_tclass, mark):
    f = bytearray(frame(payload, tclass=tclass, dport=dport, encap=encap))
    if encap and inner_tclass is not None:  # the inner class need not be the outer one
        f[54:56] = bytes([0x60 | inner_tclass >> 4, (inner_tclass & 0x0F) << 4 | f[55] & 0x0F])
    if flip is not None and flip < len(f):
        f[flip] ^= 0x5A  # corrupt any header byte: whatever it becomes, C and Python agree
    f = bytes(f[:max(54, len(f) - cut)] if cut < 200 else f)  # 54: test runs need the L3 header
    spec = replace(SPEC, last_hop=last_hop, trim=trim)
    got = run_at(prog, f, vq, spec, mark=mark)
    want, vq_after = ref.reference(f, vq, spec, mark=mark)
    assert got.verdict == want.verdict
    if want.verdict != ref.TC_ACT_SHOT:
        assert got == want
    assert prog.counters(1)["vq_bytes"] == vq_after


# ----- a veth pair in namespaces of our own ------------------------------------------------------
TAG = f"mrcq{os.getpid() % 100000}"
IF_A, IF_B = f"{TAG}a", f"{TAG}b"
NS_A, NS_B = f"{TAG}-a", f"{TAG}-b"
LINK_MBPS = 1.0
QUEUE = 50


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert proc.returncode == 0, f"ip {' '.join(args)}: {proc.stderr.strip()}"


@pytest.fixture(scope="module")
def veth(bpf_ready):
    """ns A --IF_A==IF_B-- ns B, IF_A shaped to 1 Mbit/s by the priority HTB. Yields the pids
    of a sleeper in each namespace (PortSpec and netns.inside want a pid)."""
    sleepers: list[subprocess.Popen] = []
    try:
        _ip("netns", "add", NS_A)
        _ip("netns", "add", NS_B)
        _ip("link", "add", IF_A, "netns", NS_A, "address", MAC_A, "type", "veth", "peer", "name",
            IF_B, "netns", NS_B, "address", MAC_B)
        for ns, ifname, addr, peer, mac in ((NS_A, IF_A, "fd00:99::1", "fd00:99::2", MAC_B),
                                            (NS_B, IF_B, "fd00:99::2", "fd00:99::1", MAC_A)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", ifname, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/64", "dev", ifname, "nodad")
            _ip("-n", ns, "neigh", "replace", peer, "lladdr", mac, "dev", ifname, "nud", "permanent")
            # Software checksums, so that the corked-socket test sends full ones (no PARTIAL).
            subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "tx", "off"],
                           check=True, capture_output=True)
            sleepers.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "3600"]))
        # B decapsulates IPv6-in-IPv6 sent to CARRIER as a receiving host does: in its kernel,
        # or with the eBPF End.DT6 where the kernel has no seg6local.
        if usid.mode() == usid.KERNEL:
            _ip("-n", NS_B, "-6", "route", "replace", "local", f"{CARRIER_TEXT}/128",
                "encap", "seg6local", "action", "End.DT6", "table", "local", "dev", "lo")
        else:
            subprocess.run(["ip", "netns", "exec", NS_B, "tc", "-batch", "-"], check=True, text=True,
                           capture_output=True, input=hostnet.decap_script([IF_B]))
        subprocess.run(["ip", "netns", "exec", NS_A, "tc", "-batch", "-"], check=True, text=True,
                       capture_output=True,
                       input=shaping.switch_htb_batch([IF_A], LINK_MBPS, QUEUE, 2 * 1514, MTU))
        yield sleepers[0].pid, sleepers[1].pid
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
        for ns in (NS_A, NS_B):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _csum_errors(ns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp6"], capture_output=True,
                         text=True, check=True).stdout
    return int(next(line.split()[1] for line in out.splitlines()
                    if line.startswith("Udp6InCsumErrors")))


class Receiver:
    def __init__(self, pid: int, port: int = wire.MRC_PORT) -> None:
        with netns.inside(pid):
            self.sock = netio.open_receiver(port)

    def drain(self, quiet: float = 0.6, limit: float = 10.0) -> list[tuple[bytes, int]]:
        """(payload, traffic class) of everything received until `quiet` s pass without any."""
        got: list[tuple[bytes, int]] = []
        end = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            try:
                buf, anc, _, _ = self.sock.recvmsg(65535, netio.CMSG_SPACE)
            except BlockingIOError:
                time.sleep(0.002)
                continue
            got.append((buf, netio.parse_ancillary(anc)[2]))
            last = time.monotonic()
        return got

    def close(self) -> None:
        self.sock.close()


def _burst(pid: int, payloads: list[bytes], tclass: int = wire.DATA_TCLASS, dport: int = 4791) -> None:
    """Send as fast as possible (a drop at the egress hook is not reported to a raw socket)."""
    with netns.inside(pid):
        sender = netio.RawSender()
    try:
        for p in payloads:
            sender.send(netio.build_packet(SRC, DST, 0x2C000, p, tclass=tclass, dport=dport),
                        "fd00:99::2")
    finally:
        sender.close()


def _attach(pid: int, **kw: object) -> attach.DataPlane:
    spec = ports.switch_ports([(IF_A, False)], LINK_MBPS, QUEUE, CFG, netns_pid=pid)[0]
    return attach.attach_ports([replace(spec, **kw)])


def _class_sent(classid: str) -> tuple[int, int]:
    """(bytes, packets) HTB sent in a class of IF_A: what it charged, not what the wire saw.
    (`tc -j` prints nothing for HTB classes with this iproute2: the text form is read.)"""
    out = subprocess.run(["ip", "netns", "exec", NS_A, "tc", "-s", "class", "show", "dev", IF_A],
                         capture_output=True, text=True, check=True).stdout
    words = out.split(f"class htb {classid} ", 1)[1].split("Sent ", 1)[1].split()
    return int(words[0]), int(words[2])


def _class_packets(classid: str) -> int:
    return _class_sent(classid)[1]


def _send_frames(pid: int, frames: list[bytes]) -> None:
    """Ethernet frames out of IF_A through its qdisc (AF_PACKET), as a switch port sends them."""
    with netns.inside(pid):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    try:
        sock.bind((IF_A, 0))
        for f in frames:
            sock.send(f)
    finally:
        sock.close()


def test_burst_marks_then_trims_and_headers_overtake(veth):
    pid_a, pid_b = veth
    rx = Receiver(pid_b)
    errors_before = _csum_errors(NS_B)
    sent_before = _class_packets("1:2"), _class_packets("1:3")
    try:
        with _attach(pid_a) as plane:
            _burst(pid_a, [data(psn=i) for i in range(100)])
            got = rx.drain()
            c = plane.counters()[IF_A]
    finally:
        rx.close()
    sent = _class_packets("1:2") - sent_before[0], _class_packets("1:3") - sent_before[1]
    print(f"burst of 100 x {FRAME} B at {LINK_MBPS} Mbit/s: {c}; HTB 1:2/1:3 sent {sent}")
    assert sent[0] == c["trimmed"] and sent[1] >= 100 - c["trimmed"]  # the classid steering
    pkts = [(wire.decode(buf), tc) for buf, tc in got]
    trimmed = [p for p, _ in pkts if p.flags & wire.F_TRIMMED]
    ce = [p for p, tc in pkts if tc & 3 == netio.ECN_CE]
    assert len(pkts) == 100 and c["packets"] == 100 and c["dropped"] == 0  # no real loss
    assert c["trimmed"] == len(trimmed) >= 70
    assert c["marked"] == len(ce) >= 5
    assert all(p.payload == b"" for p in trimmed) and _csum_errors(NS_B) == errors_before
    assert {p.psn for p, _ in pkts} == set(range(100))
    # Strict priority: trimmed headers sent after the data queue built up arrive before the
    # last queued full packet does.
    order = [p.psn for p, _ in pkts]
    last_full = max(i for i, (p, _) in enumerate(pkts) if not p.flags & wire.F_TRIMMED)
    first_trim = min(i for i, (p, _) in enumerate(pkts) if p.flags & wire.F_TRIMMED)
    assert first_trim < last_full, order
    # Past the trim threshold only headers join the backlog.
    assert c["vq_max"] <= ports.default_thresholds(QUEUE, CFG).trim_bytes + c["trimmed"] * ref.TRIM_LEN


@pytest.mark.parametrize("encap", [False, True], ids=["plain", "ipv6-in-ipv6"])
def test_trimmed_header_is_charged_its_own_length(veth, encap):
    """HTB sizes a packet before the clsact egress program runs; a trimmed header is sent
    through the port once more so that HTB charges what it now weighs, not the full frame (the
    program before this fix: n x the full frame). Counted once; every header arrives with a
    valid checksum (decapsulated by End.DT6 in B when encapsulated)."""
    pid_a, pid_b = veth
    n = 40  # a burst the 1:2 FIFO holds even when charged full frames: no drop either way
    frames = [frame(data(psn=i), encap=encap) for i in range(n)]
    trim_len = ref.layout(frames[0]).trim_len
    rx = Receiver(pid_b)
    errors_before = _csum_errors(NS_B)
    sent_before = _class_sent("1:2")
    try:
        with _attach(pid_a) as plane:
            prog, ifindex = plane.program(IF_A)
            prog.set_queue(ifindex, ports.default_thresholds(QUEUE, CFG).trim_bytes, frozen=True)
            # what the queue sampler reads: the frozen backlog, to the byte
            assert plane.virtual_queues() == {IF_A: ports.default_thresholds(QUEUE, CFG).trim_bytes}
            _send_frames(pid_a, frames)
            got = rx.drain()
            c = plane.counters()[IF_A]
            assert plane.virtual_queues() == {IF_A: c["vq_bytes"]}
    finally:
        rx.close()
    sent = tuple(a - b for a, b in zip(_class_sent("1:2"), sent_before, strict=True))
    print(f"{n} trimmed headers of {trim_len} B (frames of {len(frames[0])} B): HTB 1:2 charged {sent}")
    assert (c["packets"], c["trimmed"], c["control"], c["dropped"]) == (n, n, 0, 0)
    assert sent == (n * trim_len, n)
    pkts = [wire.decode(buf) for buf, _ in got]
    assert sorted(p.psn for p in pkts) == list(range(n))
    assert all(p.flags & wire.F_TRIMMED and p.payload == b"" for p in pkts)
    assert _csum_errors(NS_B) == errors_before


def test_a_flood_of_forged_control_rides_the_data_class(veth):
    """One host labelling big datagrams as control (here 1 KB "probes") used to take the
    strict-priority class and starve everyone's data; they go to the data class now."""
    pid_a, pid_b = veth
    rx = Receiver(pid_b)
    sent_before = _class_packets("1:2")
    try:
        with _attach(pid_a) as plane:
            _burst(pid_a, [wire.encode_probe(wire.OP_EV_PROBE, 5, i, 0, 0) + b"p" * 1000
                           for i in range(60)])  # within the veth's 1500-byte MTU
            rx.drain()
            c = plane.counters()[IF_A]
    finally:
        rx.close()
    assert _class_packets("1:2") - sent_before == 0, "forged control took the priority class"
    assert c["demoted"] == 60 and c["control"] == 0 and c["dropped"] > 0  # dropped as data


def test_burst_without_trimming_drops_at_capacity(veth):
    pid_a, pid_b = veth
    rx = Receiver(pid_b)
    try:
        with _attach(pid_a, trim=False, last_hop=True) as plane:
            _burst(pid_a, [data(psn=i) for i in range(80)])
            got = rx.drain()
            c = plane.counters()[IF_A]
    finally:
        rx.close()
    print(f"drop-tail burst of 80: {c}")
    assert c["trimmed"] == 0 and c["marked"] == 0  # last hop: never marked
    assert c["dropped"] >= 25 and len(got) == 80 - c["dropped"]
    assert all(tc & 3 == netio.ECN_ECT0 for _, tc in got)


def test_other_traffic_untouched_but_queued(veth):
    pid_a, pid_b = veth
    rx, rx_other = Receiver(pid_b), Receiver(pid_b, 4792)
    try:
        with _attach(pid_a) as plane:
            _burst(pid_a, [data(psn=i) for i in range(40)], dport=4792)
            got = rx_other.drain()
            c = plane.counters()[IF_A]
    finally:
        rx.close()
        rx_other.close()
    assert len(got) == 40 and all(len(buf) == wire.data_len(1024) for buf, _ in got)
    assert all(tc & 3 == netio.ECN_ECT0 for _, tc in got)
    # The kernel's own neighbour discovery / MLD on the link may add a packet or two.
    assert c["packets"] == 0 and 40 <= c["other_packets"] <= 43 and c["vq_max"] > 20 * FRAME


def test_paged_frame_is_trimmed_with_a_valid_checksum(veth):
    """A corked UDP socket leaves the payload in page fragments: the program must pull the
    headers before reading them, and trim across the fragments."""
    pid_a, pid_b = veth
    rx = Receiver(pid_b)
    errors_before = _csum_errors(NS_B)
    try:
        with _attach(pid_a) as plane:
            prog, ifindex = plane.program(IF_A)
            with netns.inside(pid_a):
                tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            tx.setsockopt(socket.IPPROTO_IPV6, netio.IPV6_TCLASS, wire.DATA_TCLASS)
            tx.connect(("fd00:99::2", wire.MRC_PORT))
            th = ports.default_thresholds(QUEUE, CFG)
            for vq, psn in ((th.mark_bytes, 1), (th.trim_bytes, 2)):
                prog.set_queue(ifindex, vq, frozen=True)
                payload = data(psn=psn)
                tx.send(payload[:10], socket.MSG_MORE)  # header split across the cork
                tx.send(payload[10:])
                time.sleep(0.05)
            tx.close()
            got = rx.drain()
            c = plane.counters()[IF_A]
    finally:
        rx.close()
    pkts = {wire.decode(buf).psn: (wire.decode(buf), tc) for buf, tc in got}
    assert set(pkts) == {1, 2}, c
    assert pkts[1][1] & 3 == netio.ECN_CE and len(pkts[1][0].payload) == 1024
    assert pkts[2][0].flags & wire.F_TRIMMED and pkts[2][0].payload == b""
    assert (c["marked"], c["trimmed"]) == (1, 1) and _csum_errors(NS_B) == errors_before


def test_receiver_kernel_really_verifies_checksums(veth):
    """The negative control for the tests above: a bad checksum is refused, so the trimmed
    headers that arrived had good ones."""
    pid_a, pid_b = veth
    rx = Receiver(pid_b)
    before = _csum_errors(NS_B)
    try:
        pkt = bytearray(netio.build_packet(SRC, DST, 0x2C000, data(8)))
        pkt[46] ^= 0xFF
        with netns.inside(pid_a):
            sender = netio.RawSender()
        sender.send(bytes(pkt), "fd00:99::2")
        sender.close()
        assert rx.drain(quiet=0.3) == []
    finally:
        rx.close()
    assert _csum_errors(NS_B) == before + 1


@pytest.mark.parametrize("payload", [MTU, 4096], ids=["1k", "4k"])
def test_trims_what_the_kernel_encapsulated(veth, payload):
    """A kernel router's port gets the very skb its sending host encapsulated (a veth hands it
    on), flagged encapsulated by bpf_lwt_push_encap; bpf_skb_change_tail refuses such an skb.
    Before the fallback no kernel router ever trimmed: every MRC packet past the trimming
    threshold was dropped (an incast on `--switch linux`: 0 trimmed, 6777 dropped, 1805 EVs
    benched). Here ns A is the sending host and the switch port at once: an agent's path socket
    (UDP, marked with the EV) through the hosts' encapsulation program, out of IF_A with the
    queue held at the trimming threshold. 4 KB payloads: more than one adjust_room step."""
    from topologies.dataplane.encap import HostEncap
    from topologies.model import LINK_MTU

    pid_a, pid_b = veth
    n, ev = 20, 0x2C001
    src, dst = "fd00:98::1", "fd00:98::2"
    setup = [(NS_A, "link", "set", IF_A, "mtu", str(LINK_MTU)),
             (NS_B, "link", "set", IF_B, "mtu", str(LINK_MTU)),
             (NS_A, "addr", "add", f"{src}/128", "dev", "lo", "nodad"),
             (NS_B, "addr", "add", f"{dst}/128", "dev", "lo", "nodad"),
             (NS_A, "-6", "route", "replace", f"{CARRIER_TEXT}/48", "via", "fd00:99::2", "dev", IF_A)]
    rx = Receiver(pid_b)
    errors_before = _csum_errors(NS_B)
    try:
        with HostEncap(1) as encap:
            encap.fill([(netio.packed(src), netio.packed(dst), ev, CARRIER)])
            for ns, *args in setup:
                _ip("-n", ns, *args)
            # the network namespace only: `ip -n` (and the sleeper's mount namespace) remount
            # /sys, where the pin is not
            argv = ["ip", "-6", "route", "replace", f"{dst}/128", *encap.route_encap().split(),
                    "via", "fd00:99::2", "dev", IF_A]
            proc = subprocess.run(["nsenter", f"--net=/run/netns/{NS_A}", *argv],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            with _attach(pid_a) as plane:
                prog, ifindex = plane.program(IF_A)
                prog.set_queue(ifindex, ports.default_thresholds(QUEUE, CFG).trim_bytes, frozen=True)
                with netns.inside(pid_a):
                    sock = netio.open_path_socket(netio.packed(src), netio.packed(dst), ev,
                                                  tclass=wire.DATA_TCLASS, mark=ev)
                try:
                    for i in range(n):
                        sock.send(data(payload, psn=i))
                finally:
                    sock.close()
                got = rx.drain()
                c = plane.counters()[IF_A]
            assert encap.stats()["encapsulated"] == n  # the hosts' own path, not a crafted frame
            assert encap.max_entries() == 1  # made at the size asked, not the object's ceiling
    finally:
        rx.close()
        for ns, *undo in [(NS_A, "-6", "route", "del", f"{dst}/128"),
                          (NS_A, "-6", "route", "del", f"{CARRIER_TEXT}/48"),
                          (NS_A, "addr", "del", f"{src}/128", "dev", "lo"),
                          (NS_B, "addr", "del", f"{dst}/128", "dev", "lo"),
                          (NS_A, "link", "set", IF_A, "mtu", "1500"),
                          (NS_B, "link", "set", IF_B, "mtu", "1500")]:
            subprocess.run(["ip", "-n", ns, *undo], capture_output=True)
    print(f"{n} x {payload} B through the host encapsulation: {c}")
    assert (c["packets"], c["trimmed"], c["dropped"]) == (n, n, 0)
    pkts = [wire.decode(buf) for buf, _ in got]
    assert sorted(p.psn for p in pkts) == list(range(n))
    assert all(p.flags & wire.F_TRIMMED and p.payload == b"" for p in pkts)
    assert _csum_errors(NS_B) == errors_before


def test_detach_leaves_nothing(veth):
    pid_a, _ = veth
    plane = _attach(pid_a)
    pin_dir = plane.program(IF_A)[0].pin_dir
    assert pin_dir.exists()
    plane.detach()
    plane.detach()  # idempotent
    out = subprocess.run(["ip", "netns", "exec", NS_A, "tc", "qdisc", "show", "dev", IF_A],
                         capture_output=True, text=True, check=True).stdout
    assert "clsact" not in out and "htb" in out  # the shaping stays, ours is gone
    assert not pin_dir.exists()


def test_baseline_class_is_dropped_not_trimmed(prog):
    """RoCE's packets (DSCP 0) are not in the trimming class: above the drop threshold they are
    dropped, as RoCE without PFC sees it, while the MRC class is trimmed at the same backlog."""
    th = ports.default_thresholds(QUEUE, CFG)
    for tclass, verdict, trimmed in ((netio.ECN_ECT0, ref.TC_ACT_SHOT, False),
                                     (wire.DATA_TCLASS, ref.TC_ACT_REDIRECT, True)):
        res = run_at(prog, frame(data(), tclass=tclass), th.drop_bytes)
        assert res.verdict == verdict
        if trimmed:
            assert wire.decode(res.frame[14 + 48:]).flags & wire.F_TRIMMED
