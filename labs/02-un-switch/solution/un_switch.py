"""Lab 2, the uN switch: the SRv6 part of one switch's flow tables, as the controller installs
them (`controller/tables.py` has the same generator; this is your version of it).

Table 0 classifies, table 1 holds static /48 routes. Fill in each TODO between its `# TODO N`
and `# END TODO N` lines, then run `make check-lab N=2`.
"""

from __future__ import annotations

from controller.tables import TABLE_CLASSIFY, TABLE_USID, Action, FlowSpec
from topologies.model import GATEWAY_MAC, Fabric, Switch, usid_block, usid_prefix


def srv6_flows(fabric: Fabric, switch: Switch) -> list[FlowSpec]:
    """uN shift-and-forward for the switch's own uSID, then one static route per neighbour."""
    flows: list[FlowSpec] = []
    # TODO 1: the uN entry in table 0, priority 300: a packet whose first uSID is this switch's
    # own (it matches usid_prefix(switch.usid), a /48) gets Action("shift_usid"), then goto=TABLE_USID
    flows.append(FlowSpec(TABLE_CLASSIFY, 300, usid_prefix(switch.usid), (Action("shift_usid"),),
                          TABLE_USID))
    # END TODO 1
    # Any other SRv6 packet (the whole locator block) is routed unchanged, below the uN entry.
    flows.append(FlowSpec(TABLE_CLASSIFY, 200, usid_block(), (), TABLE_USID))
    for link in fabric.links_of(switch.name):
        if link.b == switch.name and link.kind == "host":  # a host under this leaf
            nic = fabric.host(link.a).nics[link.plane]
            # TODO 2: table 1, priority 100, the host NIC's uSID /48 (nic.usid), then deliver:
            # Action("dec_ttl"), Action("set_eth_src", GATEWAY_MAC),
            # Action("set_eth_dst", nic.mac), Action("output", link.b_port)
            flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(nic.usid), (
                Action("dec_ttl"), Action("set_eth_src", GATEWAY_MAC), Action("set_eth_dst", nic.mac),
                Action("output", link.b_port))))
            # END TODO 2
        elif link.b == switch.name:  # a leaf under this spine
            leaf = fabric.switch(link.a)
            # TODO 3: table 1, priority 100, the leaf's uSID /48: dec_ttl, output on link.b_port
            flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(leaf.usid),
                                  (Action("dec_ttl"), Action("output", link.b_port))))
            # END TODO 3
        else:  # a spine above this leaf
            spine = fabric.switch(link.b)
            # TODO 4: table 1, priority 100, the spine's uSID /48: dec_ttl, output on link.a_port
            flows.append(FlowSpec(TABLE_USID, 100, usid_prefix(spine.usid),
                                  (Action("dec_ttl"), Action("output", link.a_port))))
            # END TODO 4
    return flows
