"""Host networking from the model, with pyroute2: addresses, per-plane routes, static gateway
neighbours, sysctls and TX checksum offload.

Every host NIC gets its SRv6 address (fcbb:bb00:<host uSID>::/128) and its baseline address
(fd00:0:0:<plane>::<n>/128), a route for its plane's uSID space (/36) and for its plane's
baseline prefix (/64), both via fe80::1, which is a PERMANENT neighbour: switches never answer
neighbour discovery, and nothing floods.
"""

from __future__ import annotations

import socket
import subprocess

from pyroute2 import IPRoute
from pyroute2.ethtool import Ethtool

from topologies import netns
from topologies.model import (
    BASELINE_PREFIX,
    GATEWAY_LLADDR,
    GATEWAY_MAC,
    Fabric,
    Host,
    plane_usid_prefix,
)

IFA_F_NODAD = 0x02
NUD_PERMANENT = 0x80

_SYSCTLS = {
    # No duplicate address detection (addresses are unique by construction, DAD only delays)
    # and no router solicitations or autoconfiguration noise into the fabric.
    "net/ipv6/conf/all/accept_dad": "0",
    "net/ipv6/conf/default/accept_dad": "0",
    "net/ipv6/conf/all/router_solicitations": "0",
    "net/ipv6/conf/default/router_solicitations": "0",
    "net/ipv6/conf/all/accept_ra": "0",
    "net/ipv6/conf/default/accept_ra": "0",
}


def _write_sysctl(key: str, value: str) -> None:
    try:
        with open(f"/proc/sys/{key}", "w") as fh:
            fh.write(value)
    except OSError:
        pass  # not every kernel has every knob; none of these is essential


def baseline_prefix(plane: int) -> str:
    return f"{BASELINE_PREFIX:x}:0:0:{plane:x}::/64"


def configure_host(fabric: Fabric, host: Host, pid: int, offload_off: bool = True) -> None:
    """Configure one host's NICs inside its namespace (process `pid`)."""
    with netns.inside(pid):
        for key, value in _SYSCTLS.items():
            _write_sysctl(key, value)
        with IPRoute() as ipr:
            for nic in host.nics:
                (idx,) = ipr.link_lookup(ifname=nic.ifname)
                ipr.link("set", index=idx, address=nic.mac, state="up")
                for addr in (nic.srv6_addr, nic.baseline_addr):
                    ipr.addr("add", index=idx, address=str(addr), prefixlen=128,
                             flags=IFA_F_NODAD)
                ipr.neigh("add", dst=GATEWAY_LLADDR, lladdr=GATEWAY_MAC, ifindex=idx,
                          state=NUD_PERMANENT, family=socket.AF_INET6)
                for prefix in (str(plane_usid_prefix(nic.plane)), baseline_prefix(nic.plane)):
                    ipr.route("add", dst=prefix, gateway=GATEWAY_LLADDR, oif=idx,
                              family=socket.AF_INET6)
        if offload_off:
            # The userspace datapath does not complete partial checksums: without this, TCP
            # and kernel UDP through OVS-netdev arrive with bad checksums and are dropped.
            disable_tx_checksum([nic.ifname for nic in host.nics])


def disable_tx_checksum(ifnames: list[str]) -> None:
    """TX checksum offload off on these interfaces of the calling thread's namespace: the
    kernel then writes full checksums instead of leaving a partial one for the NIC."""
    with Ethtool() as eth:
        for ifname in ifnames:
            features = eth.get_features(ifname)
            for name in ("tx-checksum-ip-generic", "tx-checksum-ipv6", "tx-checksum-ipv4",
                         "tx-checksumming"):
                if name in features.features:
                    features.features[name].enable = False
            eth.set_features(ifname, features)


def configure_mptcp(fabric: Fabric, host: Host, pid: int) -> None:
    """MPTCP with one subflow per plane: the host announces (ADD_ADDR) its baseline address on
    every plane but 0; a peer that connected to its plane-0 address opens one more subflow to
    each, and routing sends each over its own plane. `ip mptcp` (iproute2) rather than pyroute2,
    whose MPTCP netlink support is partial."""
    extra = len(host.nics) - 1
    commands = [["ip", "mptcp", "endpoint", "flush"],
                ["ip", "mptcp", "limits", "set", "subflow", str(extra), "add_addr_accepted", str(extra)]]
    for nic in host.nics[1:]:
        commands.append(["ip", "mptcp", "endpoint", "add", str(nic.baseline_addr), "dev", nic.ifname,
                         "signal"])
    for argv in commands:
        result = subprocess.run(netns.command(pid, argv), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{host.name}: {' '.join(argv)} failed: {result.stderr.strip()}")
