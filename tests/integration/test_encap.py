"""MRC packets leave the hosts IPv6-in-IPv6 and arrive with valid transport checksums on every
switch backend: the receiver captures what reaches its NICs during a real transfer (TX checksum
offload off on every host NIC, as always in an emulation), and every MRC packet's inner UDP
checksum is recomputed here; the receiving kernel's own count of bad checksums stays 0. Baseline
traffic (unmarked) still arrives plain."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from endpoints.protocol import wire
from experiments.api.testbed import start_agents
from tests.integration.helpers import assert_nothing_left
from topologies import netns
from topologies.emulation import Emulation
from topologies.model import build, usid_prefix

pytestmark = pytest.mark.usefixtures("emulation_ready")

# Every frame as it came off the wire (a tap, as tcpdump's): a socket for ETH_P_IPV6 alone is
# served after tc ingress, where the eBPF End.DT6 (a kernel without seg6local) has already
# taken the outer header off.
ETH_P_ALL, ETH_P_IPV6 = 0x0003, b"\x86\xdd"
PACKET_OUTGOING = 4
IPPROTO_IPV6, IPPROTO_UDP = 41, 17


def _snmp6(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/net/snmp6") as fh:
        return {k: int(v) for k, v in (line.split() for line in fh if line.strip())}


def _checksum_ok(src: bytes, dst: bytes, udp: bytes) -> bool:
    stored = int.from_bytes(udp[6:8], "big")
    return stored == wire.udp6_checksum(src, dst, udp[:6] + b"\x00\x00" + udp[8:])


def test_mrc_arrives_encapsulated_with_valid_checksums(tmp_path, switch_backend):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
    receiver = fabric.host("h1")
    with Emulation(fabric, tmp_path, switch=switch_backend) as em:
        pid = em.pid("h1")
        caps = []
        with netns.inside(pid):
            for nic in receiver.nics:
                cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
                cap.bind((nic.ifname, 0))
                cap.setblocking(False)
                caps.append(cap)
        before = _snmp6(pid)
        agents = start_agents(em, ["h0", "h1"], tmp_path, seed=5)
        agents["h1"].call("open", qpn=3, peer="h0", peer_qpn=3, transport="mrc", role="recv")
        agents["h0"].call("open", qpn=3, peer="h1", peer_qpn=3, transport="mrc", role="send")
        agents["h0"].call("stream", qpn=3, msg_bytes=128 * 1024, seconds=1.5)
        time.sleep(2.0)
        got = agents["h1"].call("stats", qpn=3)
        encap_stats = em.encap.stats() if em.encap is not None else {}
        for client in agents.values():
            client.close()
        frames = []
        for cap in caps:
            while True:
                try:
                    frame, addr = cap.recvfrom(65536)
                except BlockingIOError:
                    break
                if addr[2] != PACKET_OUTGOING and frame[12:14] == ETH_P_IPV6:
                    frames.append(frame[14:])
            cap.close()
        # After the last frame was read: the agents' probes go on, and one captured after an
        # earlier snapshot would not be in its count yet.
        after = _snmp6(pid)
    assert_nothing_left()

    sids = {usid_prefix(nic.usid).network_address.packed for nic in receiver.nics}
    addrs = {nic.addr.packed for nic in receiver.nics}
    mrc = bad = 0
    for packet in frames:
        if packet[6] != IPPROTO_IPV6:
            assert not (packet[6] == IPPROTO_UDP and packet[42:44] == struct.pack("!H", wire.MRC_PORT)), \
                "an MRC datagram arrived without its outer header"
            continue
        outer_dst, inner = packet[24:40], packet[40:]
        assert outer_dst in sids, "the carrier did not end at the receiver's SID"
        assert inner[6] == IPPROTO_UDP and inner[24:40] in addrs
        udp = inner[40:40 + struct.unpack_from("!H", inner, 4)[0]]
        if struct.unpack_from("!H", udp, 2)[0] != wire.MRC_PORT:
            continue
        mrc += 1
        bad += not _checksum_ok(inner[8:24], inner[24:40], udp)
    assert got["bytes_delivered"] > 0 and mrc >= got["stats"]["packets"] > 100
    assert bad == 0, f"{bad} of {mrc} MRC packets arrived with a bad UDP checksum"
    assert after["Udp6InCsumErrors"] == before["Udp6InCsumErrors"]
    delta = {k: after[k] - before.get(k, 0) for k in after if k.startswith("Udp6")}
    assert delta["Udp6InDatagrams"] >= mrc, (mrc, {k: v for k, v in delta.items() if v})
    assert encap_stats["encapsulated"] > 0 and encap_stats["no_path"] == encap_stats["error"] == 0
