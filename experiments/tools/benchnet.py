"""The bench's network: two namespaces joined by one veth pair per plane, no switches, no shaping.

The hosts are configured as in an emulation (topologies/hostnet.py: each NIC's own address, the
host encapsulation program on the route to the plane's NICs), so the agents send MRC exactly as
they would through a fabric: IPv6-in-IPv6 to each path's uSID carrier. With no switch to shift
them, carriers arrive whole: each namespace routes its own leaf's uSID prefix (/48) of a plane
out of that plane's veth (every path it sends on starts there) and decapsulates every other
address of the uSID block (a `local fcbb:bb00::/32 ... End.DT6` route), standing in for the
switches and its own SID. TX checksum offload is off on the veths, as in an emulation, so
checksums cost what they cost there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from experiments.outdir import REPO
from topologies import hostnet, netns
from topologies.dataplane import usid
from topologies.dataplane.encap import HostEncap, path_entries
from topologies.model import (
    GATEWAY_LLADDR,
    LINK_MTU,
    Fabric,
    plane_usid_prefix,
    usid_block,
    usid_prefix,
)

SENDER, RECEIVER = "h0", "h1"  # one host per leaf: every path crosses a spine (4 uSIDs)


class BenchNet:
    """Two namespaces, one veth pair per plane, host encapsulation as described above."""

    def __init__(self, fabric: Fabric, tag: str, offload_off: bool = True) -> None:
        self.fabric = fabric
        self.offload_off = offload_off
        self.usid = usid.mode()  # End.DT6: the kernel's, or eBPF where it has no seg6local
        self.ns = {SENDER: f"{tag}s", RECEIVER: f"{tag}r"}
        self.created: list[str] = []
        self.encap: HostEncap | None = None

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
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            self.created.append(name)
        entries = list(path_entries(self.fabric))
        self.encap = HostEncap(len(entries))
        self.encap.fill(entries)
        snd, rcv = self.fabric.host(SENDER), self.fabric.host(RECEIVER)
        links = [f"link add name {a.ifname} mtu {LINK_MTU} type veth peer name {b.ifname} "
                 f"mtu {LINK_MTU} netns {self.ns[RECEIVER]}" for a, b in zip(snd.nics, rcv.nics, strict=True)]
        self._ip(SENDER, links)
        for host, peer in ((snd, rcv), (rcv, snd)):
            lines = hostnet.host_script(host, self.encap.route_encap(), self.usid).splitlines()
            # Neither the uSID routes nor one End.DT6 per SID: the host's own leaf /48s go out
            # (below), the rest of the block decapsulates (the eBPF decapsulation takes the
            # whole block as it is).
            lines = [line for line in lines if "End.DT6" not in line and
                     not any(str(plane_usid_prefix(n.plane)) in line for n in host.nics)]
            if self.usid == usid.KERNEL:
                # In table main, so that the more specific /48s below win (table local would be
                # looked up first, and any match there wins).
                lines.append(f"route replace local {usid_block()} encap seg6local action End.DT6 "
                             f"table local dev lo table main")
            else:
                self._tc(host.name, hostnet.decap_script([nic.ifname for nic in host.nics]))
            for nic, peer_nic in zip(host.nics, peer.nics, strict=True):
                lines = [line.replace(f"lladdr {hostnet.GATEWAY_MAC} dev {nic.ifname} ",
                                      f"lladdr {peer_nic.mac} dev {nic.ifname} ") for line in lines]
                leaf = self.fabric.leaf(nic.plane, host.leaf_index)
                lines.append(f"route replace {usid_prefix(leaf.usid)} via {GATEWAY_LLADDR} "
                             f"dev {nic.ifname}")
            self._ip(host.name, lines)
            if self.offload_off:
                with netns.inside_named(self.ns[host.name]):
                    hostnet.disable_tx_checksum([nic.ifname for nic in host.nics])

    def _tc(self, host: str, script: str) -> None:
        self._batch(host, ["tc", "-batch", "-"], script)

    def _ip(self, host: str, lines: list[str]) -> None:
        self._batch(host, ["ip", "-6", "-batch", "-"], "\n".join(lines) + "\n")

    def _batch(self, host: str, argv: list[str], script: str) -> None:
        # Forked inside the namespace (not `ip -n`, which remounts /sys and hides the pinned
        # encapsulation program).
        with netns.inside_named(self.ns[host]):
            result = subprocess.run(argv, input=script, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"bench network ({host}): {result.stderr.strip()[:400]}")

    def popen(self, host: str, argv: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as fh:
            return subprocess.Popen(netns.command_named(self.ns[host], argv), cwd=str(REPO),
                                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def close(self) -> None:
        while self.created:
            name = self.created.pop()
            # Deleting a namespace deletes the veth ends inside it.
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        if self.encap is not None:
            self.encap.close()
            self.encap = None
