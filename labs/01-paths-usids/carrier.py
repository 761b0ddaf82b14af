"""Lab 1, paths and micro-SIDs: the numbers a packet carries to follow one path of the fabric.

Fill in each TODO between its `# TODO N` and `# END TODO N` lines, then run
`make check-lab N=1`. Only the standard library and `topologies.model`'s constants are needed.
"""

from __future__ import annotations

import ipaddress

from topologies.model import ROLE_HOST, ROLE_LEAF, ROLE_SPINE, USID_BLOCK, Fabric

__all__ = ["BY_HAND", "ROLE_HOST", "ROLE_LEAF", "ROLE_SPINE", "USID_BLOCK", "carrier", "segment_list", "usid"]


def usid(role: int, plane: int, index: int) -> int:
    """The 16-bit micro-SID of a switch or host NIC: [plane+1 : 4 bits][role : 2 bits][index : 10 bits].

    role is ROLE_LEAF (1), ROLE_SPINE (2) or ROLE_HOST (3); index is the leaf's, spine's or
    host's number (host h5 has index 5 on every plane)."""
    # TODO 1: shift each field into place and combine them (plane+1: never a 0x0000 uSID)
    raise NotImplementedError("TODO 1")
    # END TODO 1


def segment_list(fabric: Fabric, src: str, dst: str, plane: int, spine: int) -> tuple[int, ...]:
    """The uSIDs a packet from host `src` to host `dst` follows on `plane` through `spine`: the
    source's leaf, the spine, the destination's leaf, the destination host's NIC on that plane.
    Two hosts under the same leaf: just that leaf and the destination (no spine is crossed)."""
    s, d = fabric.host(src), fabric.host(dst)
    # TODO 2: use usid() with s.leaf_index, spine, d.leaf_index and d.index
    raise NotImplementedError("TODO 2")
    # END TODO 2


def carrier(usids: tuple[int, ...]) -> ipaddress.IPv6Address:
    """The IPv6 destination address carrying `usids`: the 32-bit locator block (USID_BLOCK,
    fcbb:bb00) in the top bits, then the uSIDs one after another, 16 bits each, the rest 0."""
    # TODO 3: the block takes bits 127..96, the first uSID bits 95..80, the next 79..64, ...
    raise NotImplementedError("TODO 3")
    # END TODO 3


# TODO 4: by hand, before any code runs: the carrier address from h0 to h3 on plane 1 through
# spine 1, in the lab's fabric (2 planes, 2 leaves, 2 spines, 2 hosts per leaf), as text
BY_HAND = ""
# END TODO 4
