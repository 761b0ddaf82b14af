"""The agent's NIC-port watch (endpoints/host/ports.py): link events parsed, a down mask made,
and the cores told only when it changes."""

import selectors
import struct

from endpoints.host import ports
from topologies.model import FabricParams, build

HOST = build(FabricParams(planes=4, leaves=2, spines=2, hosts_per_leaf=1)).host("h0")
NICS = {nic.ifname: nic.plane for nic in HOST.nics}  # as the agent's path table gives them


def _newlink(ifname: str, flags: int, kind: int = ports.RTM_NEWLINK) -> bytes:
    name = ifname.encode() + b"\0"
    attr = struct.pack("=HH", 4 + len(name), ports.IFLA_IFNAME) + name
    attr += bytes(-len(attr) & 3)
    body = ports.IFINFOMSG.pack(0, 0, 1, 7, flags, 0xFFFFFFFF) + attr
    return ports.NLMSG_HDR.pack(ports.NLMSG_HDR.size + len(body), kind, 0, 0, 0) + body


def test_a_port_is_usable_only_up_and_with_carrier():
    up = ports.IFF_UP | ports.IFF_LOWER_UP
    data = _newlink("h0-eth0", up) + _newlink("h0-eth1", ports.IFF_UP) + \
        _newlink("h0-eth2", up, ports.RTM_DELLINK)
    assert ports.parse_link_events(data) == [("h0-eth0", True), ("h0-eth1", False), ("h0-eth2", False)]
    assert ports.parse_link_events(data[:-3]) == [("h0-eth0", True), ("h0-eth1", False)]  # cut short


def test_the_cores_hear_the_mask_only_when_it_changes():
    told = []

    class Core:
        def set_local_ports(self, mask, now):
            told.append(mask)

    with selectors.DefaultSelector() as sel:
        changes = []
        watch = ports.PortWatch(NICS, sel, lambda: [Core()], on_change=lambda: changes.append(watch.mask))
        try:
            watch._readable()  # the dump: no NIC of h0 in this namespace, every port counts as up
            assert watch.mask == 0 and told == []
            for usable, want in ((False, 0b100), (False, 0b100), (True, 0), (True, 0)):
                watch.update([("h0-eth2", usable), ("lo", False)])  # lo: not a NIC of h0
                assert watch.mask == want
            assert told == [0b100, 0] and changes == told  # the agent then polls every QP
        finally:
            watch.close()
