"""The fabric's numbering plan: every name, number and address the model derives, computed
here and nowhere else (`topologies.model` builds the fabric from them and hands them on).
Pure Python, no I/O.

* A plane is an independent leaf (T0) / spine (T1) fabric; every host has one NIC per plane.
* uSID (16 bits): ``[plane+1 : 4][role : 2][index : 10]`` with role 1 = leaf, 2 = spine,
  3 = host. The plane is visible in every uSID (as in production MRC fabrics) and no uSID is
  0x0000, which RFC 9800 reserves as the end-of-carrier marker.
* uSID carrier (SRv6 destination): the 32-bit locator block ``fcbb:bb00::/32`` followed by up
  to six uSIDs. A switch whose uSID comes first shifts the rest left by 16 bits and looks the
  result up in a static /48 table. After the last shift the carrier is ``fcbb:bb00:<host
  uSID>::``, the receiving host's SID on that plane (`Nic.sid`).
* A NIC's address (`Nic.addr`): ``fd00:0:0:<plane>::<host+1>``, the only address a NIC holds.
  Linux TCP/MPTCP and the RoCE-like baseline send to it, routed by the controller's ECMP plane.
  MRC packets are IPv6-in-IPv6, as in the MRC paper: the inner header goes from the sending
  NIC's address to the receiving NIC's (`Route.src_addr`, `Route.dst_addr`), the outer one to
  the path's uSID carrier (`Route.address`); the receiving host decapsulates at its SID.
* OpenFlow ports: leaf ports 1..H go to its hosts, H+1..H+S to the spines; spine port l+1 goes
  to leaf l. Host NIC ``h<n>-eth<p>`` is the host's port on plane p.
* Links are named ``<lower>-<upper>`` (`link_name`): ``h0-p0l0``, ``p0l0-p0s1``.
* EVs (32 bits, `ev_value`): route i of a host pair's route list is EV
  ``(plane+1) << 16 | 0xC000 + i``; the sender's kernel carries the low half in the UDP
  source port (in the ephemeral range, so ECMP hashes see realistic ports) and the high half in
  the flow label.
"""

from __future__ import annotations

import ipaddress

from endpoints.evnumber import EV_INDEX_MASK as EV_INDEX_MASK  # the EV layout's home
from endpoints.evnumber import EV_PORT_BASE as EV_PORT_BASE
from endpoints.evnumber import ev_plane as ev_plane
from endpoints.evnumber import ev_value as ev_value

USID_BLOCK = 0xFCBB_BB00  # 32-bit locator block, fcbb:bb00::/32
BASELINE_PREFIX = 0xFD00  # fd00::/16, destination-routed addresses for the ECMP baseline
ROLE_LEAF, ROLE_SPINE, ROLE_HOST = 1, 2, 3
MAX_PLANES = 15  # 4-bit plane field, value 0 unused
MAX_INDEX = 1024  # 10-bit index field per role and plane
MAX_USIDS_IN_ADDRESS = 6  # 128 - 32 bits of block = 96 bits = 6 x 16-bit uSIDs
IFNAME_MAX = 15  # Linux IFNAMSIZ - 1


def switch_name(role: int, plane: int, index: int) -> str:
    return f"p{plane}{'l' if role == ROLE_LEAF else 's'}{index}"


def host_name(index: int) -> str:
    return f"h{index}"


def ifname(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def mac(*words: int) -> str:
    """Three 16-bit words as a MAC address."""
    return ":".join(f"{(w >> shift) & 0xFF:02x}" for w in words for shift in (8, 0))


def link_name(lower: str, upper: str) -> str:
    """The name of the link between `lower` (a host or leaf) and `upper` (its leaf or spine).

    >>> link_name("p0l0", "p0s1")
    'p0l0-p0s1'
    """
    return f"{lower}-{upper}"


def usid(role: int, plane: int, index: int) -> int:
    return ((plane + 1) << 12) | (role << 10) | index


def usid_block() -> ipaddress.IPv6Network:
    """The locator block every SRv6 address of the fabric lives in.

    >>> usid_block()
    IPv6Network('fcbb:bb00::/32')
    """
    return ipaddress.IPv6Network((USID_BLOCK << 96, 32))


def usid_prefix(sid: int) -> ipaddress.IPv6Network:
    """The /48 that a switch matches for uSID `sid` (block + one uSID)."""
    return ipaddress.IPv6Network(((USID_BLOCK << 96) | (sid << 80), 48))


def plane_usid_prefix(plane: int) -> ipaddress.IPv6Network:
    """Every uSID of `plane` shares its top nibble: block + 4 bits = /36."""
    return ipaddress.IPv6Network(((USID_BLOCK << 96) | ((plane + 1) << 92), 36))
