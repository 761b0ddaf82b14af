"""How an EV (entropy value) is numbered: the plane in its high half, the UDP source port in its
low half, the port in the ephemeral range from `EV_PORT_BASE` up. The one home of that layout,
below both the fabric model (which names every path's EV) and the agents (which derive a RoCE
QP's ECMP hash share from its EV)."""

from __future__ import annotations

EV_PORT_BASE = 0xC000  # an EV's low half, the UDP source port, starts the ephemeral range
EV_INDEX_MASK = 0xFFFF - EV_PORT_BASE  # how far into that range an EV's port may go


def ev_value(plane: int, index: int) -> int:
    """The 32-bit EV naming route `index` of a host pair's route list on `plane`.

    >>> hex(ev_value(1, 5))
    '0x2c005'
    >>> ev_plane(ev_value(3, 0))
    3
    >>> hex(EV_INDEX_MASK)
    '0x3fff'
    """
    return ((plane + 1) << 16) | (EV_PORT_BASE + index)


def ev_plane(ev: int) -> int:
    """The plane an EV made by `ev_value` crosses."""
    return (ev >> 16) - 1
