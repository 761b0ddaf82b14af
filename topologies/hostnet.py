"""Host networking from the model: addresses, per-plane routes, static gateway neighbours, the
MRC encapsulation and decapsulation, sysctls and TX checksum offload.

Every host NIC holds one address, its own (`Nic.addr`, fd00:0:0:<plane>::<n>/128), and has two
routes, both via fe80::1, which is a PERMANENT neighbour (switches never answer neighbour
discovery, and nothing floods): its plane's uSID space (/36), where encapsulated MRC packets
go, and its plane's NIC addresses (/64) through the host encapsulation program
(topologies/dataplane/encap.py), which wraps marked (MRC) packets in an outer header to their
path's carrier and lets everything else (RoCE baseline, TCP, MPTCP) through unchanged. The
host's SID on each plane (`Nic.sid`, /48) decapsulates whatever arrives for it (End.DT6) and
delivers the inner packet locally; on a kernel without seg6local, the eBPF decapsulation of
topologies/dataplane/usid.py at each NIC's ingress does it instead. One `ip -batch` (and one
`tc -batch` for its NICs' HTB) per host namespace sets it all, several hosts at once.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
import subprocess
from collections.abc import Callable

from topologies import netns
from topologies.dataplane import usid as usid_behaviours
from topologies.model import (
    BASELINE_PREFIX,
    GATEWAY_LLADDR,
    GATEWAY_MAC,
    Fabric,
    Host,
    plane_usid_prefix,
    usid_prefix,
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
    # A NIC set down and up again (Mininet's `link` command) keeps its address; IPv6's default
    # is to flush it.
    "net/ipv6/conf/all/keep_addr_on_down": "1",
}


def _write_sysctl(key: str, value: str) -> None:
    try:
        with open(f"/proc/sys/{key}", "w") as fh:
            fh.write(value)
    except OSError:
        pass  # not every kernel has every knob; none of these is essential


def set_sysctls(pid: int) -> None:
    """The host namespace's IPv6 settings: set before its NICs exist, the `default` ones apply
    to them from the start."""
    with netns.inside(pid):
        for key, value in _SYSCTLS.items():
            _write_sysctl(key, value)


def baseline_prefix(plane: int) -> str:
    """Every NIC address of `plane`."""
    return f"{BASELINE_PREFIX:x}:0:0:{plane:x}::/64"


def host_script(host: Host, encap: str, usid: str = usid_behaviours.KERNEL) -> str:
    """The `ip -6 -batch` lines configuring `host`; `encap`: what a route line takes to send
    through the host encapsulation program (`HostEncap.route_encap()`); `usid`: where its
    End.DT6 runs (the kernel's route here, or eBPF: `decap_script`)."""
    lines = ["link set dev lo up"]
    for nic in host.nics:
        dev = nic.ifname
        lines += [
            f"link set dev {dev} address {nic.mac} up",
            f"addr add {nic.addr}/128 dev {dev} nodad",
            f"neigh replace {GATEWAY_LLADDR} lladdr {GATEWAY_MAC} dev {dev} nud permanent",
            f"route replace {plane_usid_prefix(nic.plane)} via {GATEWAY_LLADDR} dev {dev}",
            f"route replace {baseline_prefix(nic.plane)} {encap} via {GATEWAY_LLADDR} dev {dev}",
        ]
        if usid != usid_behaviours.KERNEL:
            continue
        lines += [
            # The SID is not an address of the NIC: a local /128 would win over the /48 and
            # the kernel has no handler for IPv6-in-IPv6 addressed to itself. `table local`:
            # the main table has no route to the host's own addresses.
            f"route replace local {usid_prefix(nic.usid)} encap seg6local action End.DT6 "
            f"table local count dev lo",
        ]
    return "\n".join(lines) + "\n"


def decap_script(ifnames: list[str]) -> str:
    """The `tc -batch` lines giving these NICs the eBPF End.DT6 (a kernel without seg6local)."""
    return usid_behaviours.ingress_script(ifnames, usid_behaviours.DECAP_SECTION)


def configure_hosts(fabric: Fabric, pids: dict[str, int], encap: str, offload_off: bool = True,
                    htb: Callable[[list[str]], str] | None = None,
                    usid: str = usid_behaviours.KERNEL) -> None:
    """Configure every host's NICs inside its namespace (process `pids[host]`): IPv6 settings,
    the `ip -batch` of `host_script`, the `tc -batch` script `htb(NIC names)` if given (and the
    eBPF decapsulation where `usid` says), all hosts' batches side by side."""
    jobs: list[tuple[int | None, list[str], str]] = []
    for host in fabric.hosts:
        pid = pids[host.name]
        set_sysctls(pid)
        jobs.append((pid, ["ip", "-6", "-batch", "-"], host_script(host, encap, usid)))
        nics = [nic.ifname for nic in host.nics]
        tc = (htb(nics) if htb is not None else "") + \
            (decap_script(nics) if usid != usid_behaviours.KERNEL else "")
        if tc:
            jobs.append((pid, ["tc", "-batch", "-"], tc))
    netns.run_batches(jobs)
    if offload_off:
        for host in fabric.hosts:
            with netns.inside(pids[host.name]):
                # The userspace datapath does not complete partial checksums, and a receiver
                # behind the kernel's SRv6 must see full ones: the kernel writes them.
                disable_tx_checksum([nic.ifname for nic in host.nics])


ETHTOOL_STXCSUM = 0x17  # linux/ethtool.h: set TX checksumming on or off (every kind)
SIOCETHTOOL = 0x8946
_IFREQ = struct.Struct("16sP16x")  # struct ifreq: name, then ifr_data (a pointer), padded


def disable_tx_checksum(ifnames: list[str]) -> None:
    """TX checksum offload off on these interfaces of the calling thread's namespace: the
    kernel then writes full checksums instead of leaving a partial one for the NIC. One
    ETHTOOL_STXCSUM ioctl per interface (what `ethtool -K IF tx off` does; pyroute2's Ethtool
    reads every feature first, ~15 ms an interface)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        for ifname in ifnames:
            value = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_STXCSUM, 0))
            ifreq = _IFREQ.pack(ifname.encode(), ctypes.addressof(value))
            fcntl.ioctl(sock, SIOCETHTOOL, ifreq)


def configure_mptcp(fabric: Fabric, host: Host, pid: int) -> None:
    """MPTCP with one subflow per plane: the host announces (ADD_ADDR) its baseline address on
    every plane but 0; a peer that connected to its plane-0 address opens one more subflow to
    each, and routing sends each over its own plane. `ip mptcp` (iproute2) rather than pyroute2,
    whose MPTCP netlink support is partial."""
    extra = len(host.nics) - 1
    commands = [["ip", "mptcp", "endpoint", "flush"],
                ["ip", "mptcp", "limits", "set", "subflow", str(extra), "add_addr_accepted", str(extra)]]
    for nic in host.nics[1:]:
        commands.append(["ip", "mptcp", "endpoint", "add", str(nic.addr), "dev", nic.ifname,
                         "signal"])
    for argv in commands:
        result = subprocess.run(netns.command(pid, argv), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{host.name}: {' '.join(argv)} failed: {result.stderr.strip()}")
