"""The bench's network: two namespaces joined by one veth pair per plane, no OVS, no shaping.

The sender's packets carry the model's SRv6 destinations (fcbb:bb00:<T0>:<T1>:<T0>:<host>::);
each namespace routes its own leaf's uSID prefix (/48) of a plane out of that plane's veth and
takes every other address of the uSID block as local (a `local fcbb:bb00::/32` route), which
stands in for the switches' shifting. TX checksum offload is off on the veths, as hostnet sets
it for OVS's userspace datapath, so checksums cost what they cost in an emulation.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from topologies import hostnet, netns
from topologies.model import GATEWAY_LLADDR, LINK_MTU, Fabric, usid_block, usid_prefix

REPO = Path(__file__).resolve().parents[2]
SENDER, RECEIVER = "h0", "h1"  # one host per leaf: every path crosses a spine (4 uSIDs)
RTN_LOCAL = 2


class BenchNet:
    """Two namespaces, one veth pair per plane, SRv6 block routing as described above."""

    def __init__(self, fabric: Fabric, tag: str, offload_off: bool = True) -> None:
        self.fabric = fabric
        self.offload_off = offload_off
        self.ns = {SENDER: f"{tag}s", RECEIVER: f"{tag}r"}
        self.created: list[str] = []

    def __enter__(self) -> BenchNet:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        # iproute2 creates the namespaces: pyroute2's netns helpers fork children, which raced
        # with the /run/netns bind mount here and inherit this process's signal handlers.
        from pyroute2 import IPRoute

        for name in self.ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            self.created.append(name)
        snd, rcv = self.fabric.host(SENDER), self.fabric.host(RECEIVER)
        peer_fd = os.open(f"{netns.NETNS_DIR}/{self.ns[RECEIVER]}", os.O_RDONLY)
        try:
            with netns.inside_named(self.ns[SENDER]), IPRoute() as ipr:
                for a, b in zip(snd.nics, rcv.nics, strict=True):
                    ipr.link("add", ifname=a.ifname, kind="veth",
                             peer={"ifname": b.ifname, "net_ns_fd": peer_fd})
        finally:
            os.close(peer_fd)
        for host, peer in ((snd, rcv), (rcv, snd)):
            with netns.inside_named(self.ns[host.name]), IPRoute() as ipr:
                (lo,) = ipr.link_lookup(ifname="lo")
                ipr.link("set", index=lo, state="up")
                # Every uSID address not routed out below is this host's: it stands in for the
                # last switch's shift, which would leave fcbb:bb00:<host uSID>:: anyway.
                ipr.route("add", dst=str(usid_block()), type=RTN_LOCAL, oif=lo,
                          family=socket.AF_INET6)
                for nic, peer_nic in zip(host.nics, peer.nics, strict=True):
                    (idx,) = ipr.link_lookup(ifname=nic.ifname)
                    ipr.link("set", index=idx, address=nic.mac, mtu=LINK_MTU, state="up")
                    ipr.addr("add", index=idx, address=str(nic.srv6_addr), prefixlen=128,
                             flags=hostnet.IFA_F_NODAD)
                    ipr.neigh("add", dst=GATEWAY_LLADDR, lladdr=peer_nic.mac, ifindex=idx,
                              state=hostnet.NUD_PERMANENT, family=socket.AF_INET6)
                    # This host's own leaf uSID leads every path it sends on (plane by plane).
                    leaf = self.fabric.leaf(nic.plane, host.leaf_index)
                    ipr.route("add", dst=str(usid_prefix(leaf.usid)), gateway=GATEWAY_LLADDR,
                              oif=idx, family=socket.AF_INET6)
            if self.offload_off:
                with netns.inside_named(self.ns[host.name]):
                    hostnet.disable_tx_checksum([nic.ifname for nic in host.nics])

    def popen(self, host: str, argv: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as fh:
            return subprocess.Popen(netns.command_named(self.ns[host], argv), cwd=str(REPO),
                                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def close(self) -> None:
        while self.created:
            name = self.created.pop()
            # Deleting a namespace deletes the veth ends inside it.
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
