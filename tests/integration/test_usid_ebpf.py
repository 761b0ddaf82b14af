"""The eBPF uSID behaviours (topologies/dataplane/usid.py, mrc_usid.bpf.c) with real packets
through real namespaces: sender S -- router R -- host D. R's own uSID is 0x100 (a `local`
/48, as the kernel-router backend installs it without seg6local) and it routes 0x200 and 0x300
towards D; D decapsulates. Run whatever the kernel has: the programs are the project's own."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest

from endpoints.host import netio
from topologies import hostnet, netns
from topologies.dataplane import usid
from topologies.model import LINK_MTU

TAG = f"mrcu{os.getpid() % 10000}"
NS_S, NS_R, NS_D = f"{TAG}-s", f"{TAG}-r", f"{TAG}-d"
MAC = {"s0": "02:75:00:00:00:01", "r0": "02:75:00:00:00:02", "r1": "02:75:00:00:00:03",
       "d0": "02:75:00:00:00:04"}
SRC, DST = "fd00:75::1", "fd00:75::2"
PORT = 9917
MTU = str(LINK_MTU)  # the emulation's jumbo links: an MRC frame is about 4.2 KB


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert proc.returncode == 0, f"ip {' '.join(args)}: {proc.stderr.strip()}"


def _tc(ns: str, script: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"], input=script,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr.strip()


@pytest.fixture(scope="module")
def fabric() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.fail("needs root") if os.environ.get("CI") == "true" else pytest.skip("needs root")
    why = usid.unavailable(usid.EBPF)
    if why is not None:
        pytest.fail(why) if os.environ.get("CI") == "true" else pytest.skip(why)
    try:
        for ns in (NS_S, NS_R, NS_D):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", NS_S, "link", "add", "s0", "address", MAC["s0"], "mtu", MTU, "type", "veth", "peer",
            "name", "r0", "address", MAC["r0"], "mtu", MTU, "netns", NS_R)
        _ip("-n", NS_R, "link", "add", "r1", "address", MAC["r1"], "mtu", MTU, "type", "veth", "peer",
            "name", "d0", "address", MAC["d0"], "mtu", MTU, "netns", NS_D)
        for ns, dev in ((NS_S, "s0"), (NS_R, "r0"), (NS_R, "r1"), (NS_D, "d0")):
            _ip("-n", ns, "link", "set", dev, "up")
        _ip("netns", "exec", NS_R, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        _ip("-n", NS_D, "addr", "add", f"{DST}/128", "dev", "d0", "nodad")
        _ip("-n", NS_R, "neigh", "replace", "fe80::1", "lladdr", MAC["d0"], "dev", "r1", "nud", "permanent")
        _ip("-n", NS_R, "-6", "route", "add", "local", "fcbb:bb00:100::/48", "dev", "lo")
        for carrier in ("fcbb:bb00:200::/48", "fcbb:bb00:300::/48"):
            _ip("-n", NS_R, "-6", "route", "add", carrier, "via", "fe80::1", "dev", "r1")
        _tc(NS_R, usid.ingress_script(["r0"], usid.END_SECTION))
        _tc(NS_D, hostnet.decap_script(["d0"]))
        yield
    finally:
        for ns in (NS_S, NS_R, NS_D):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _deliver(carrier: str, payload: bytes) -> bytes | None:
    """Send one IPv6-in-IPv6 frame from S to `carrier` (inner: UDP to D's address); what D's
    socket received, or None."""
    with netns.inside_named(NS_D):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with rx:
        rx.bind((DST, PORT))
        rx.settimeout(0.5)
        inner = netio.build_packet(netio.packed(SRC), netio.packed(DST), 5000, payload, dport=PORT)
        frame = (bytes.fromhex(MAC["r0"].replace(":", "")) + bytes.fromhex(MAC["s0"].replace(":", ""))
                 + b"\x86\xdd" + netio.encapsulate(netio.packed("fcbb:bb00:1::"),
                                                   netio.packed(carrier), inner))
        with netns.inside_named(NS_S):
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        with tx:
            tx.bind(("s0", 0))
            tx.send(frame)
        try:
            return rx.recv(65536)
        except TimeoutError:
            return None


def test_end_shifts_only_the_routers_own_usid_and_the_host_decapsulates(fabric):
    # Ours (0x100) shifted to 0x200, routed to D, decapsulated, delivered.
    assert _deliver("fcbb:bb00:100:200::", b"ours") == b"ours"
    # A full frame from a packet socket: the kernel keeps only its Ethernet header linear, so the
    # programs must pull the IPv6 header in before they can read it.
    big = bytes(range(256)) * 16
    assert _deliver("fcbb:bb00:100:200::", big) == big
    # Not ours (0x300 is routed, not local): forwarded unshifted (shifted, 0x200... would go
    # the same way, so the route to 0x200 is taken away for this one).
    _ip("-n", NS_R, "-6", "route", "replace", "blackhole", "fcbb:bb00:200::/48")
    try:
        assert _deliver("fcbb:bb00:300:200::", b"transit") == b"transit"
        assert _deliver("fcbb:bb00:100:200::", b"shifted") is None  # shifted into the blackhole
    finally:
        _ip("-n", NS_R, "-6", "route", "replace", "fcbb:bb00:200::/48", "via", "fe80::1", "dev", "r1")
    # The last uSID: nothing after it to shift up, so End leaves it (the kernel drops it).
    assert _deliver("fcbb:bb00:100::", b"empty") is None


def test_without_the_programs_nothing_is_delivered(fabric):
    """Each program is what delivers: without R's End the carrier is a local address there;
    without D's decapsulation the outer header reaches a kernel with no handler for it."""
    filt = ["filter", "del", "dev"]
    subprocess.run(["ip", "netns", "exec", NS_R, "tc", *filt, "r0", "ingress", "pref",
                    str(usid.FILTER_PREF)], check=True)
    try:
        assert _deliver("fcbb:bb00:100:200::", b"no end") is None
        assert _deliver("fcbb:bb00:200::", b"direct") == b"direct"  # D's decapsulation alone
    finally:
        _tc(NS_R, usid.ingress_script(["r0"], usid.END_SECTION))
    subprocess.run(["ip", "netns", "exec", NS_D, "tc", *filt, "d0", "ingress", "pref",
                    str(usid.FILTER_PREF)], check=True)
    try:
        assert _deliver("fcbb:bb00:100:200::", b"no decap") is None
    finally:
        _tc(NS_D, hostnet.decap_script(["d0"]))
    assert _deliver("fcbb:bb00:100:200::", b"back") == b"back"
