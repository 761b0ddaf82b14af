"""The agents' path tables, computed from the fabric model where the testbed starts them: each
agent gets its host's table as plain data (JSON, in its settings) and never imports the model
(endpoints/host/paths.py reads it).

    {"host": "h0", "planes": 2, "link_mbps": 10.0,
     "nics": [{"ifname": "h0-eth0", "plane": 0, "addr": "fd00:0:0:0::1"}, ...],  # by plane
     "ecmp_evs": [ev, ...],   # by plane: the EV of this host's one destination-routed path
     "peers": {"h1": {"addrs": [NIC address by plane],
                      "routes": [{"ev", "plane", "src", "dst", "label"}, ...],  # Fabric.routes
                      "forward": [ev, ...]}}}   # the peer's routes to this host

A route's `src` and `dst` are the inner header's NIC addresses (`Route.src_addr`, `dst_addr`);
its uSID carrier stays out: the host's encapsulation program holds it, keyed by the EV.
"""

from __future__ import annotations

from typing import Any

from endpoints.evnumber import EV_INDEX_MASK, ev_value
from topologies.model import Fabric


def ecmp_ev(fabric: Fabric, host: str, plane: int) -> int:
    """The EV of `host`'s destination-routed path (RoCE, go-back-N) on `plane`: its UDP source
    port spreads the hosts over the ECMP hash.

    >>> from topologies.model import build
    >>> hex(ecmp_ev(build(planes=2, leaves=2, spines=2, hosts_per_leaf=1), "h1", 1))
    '0x2c084'
    """
    return ev_value(plane, EV_INDEX_MASK & (fabric.host(host).index * 131 + plane))


def agent_paths(fabric: Fabric, host: str) -> dict[str, Any]:
    """Host `host`'s path table, as its agent's settings carry it (the module docstring)."""
    me = fabric.host(host)
    peers = {}
    for other in fabric.hosts:
        if other.name == me.name:
            continue
        peers[other.name] = {
            "addrs": [str(nic.addr) for nic in other.nics],
            "routes": [{"ev": r.ev, "plane": r.plane, "src": str(r.src_addr), "dst": str(r.dst_addr),
                        "label": r.label} for r in fabric.routes(me.name, other.name)],
            "forward": [r.ev for r in fabric.routes(other.name, me.name)],
        }
    return {"host": me.name, "planes": fabric.params.planes, "link_mbps": fabric.params.link_mbps,
            "nics": [{"ifname": nic.ifname, "plane": nic.plane, "addr": str(nic.addr)}
                     for nic in me.nics],
            "ecmp_evs": [ecmp_ev(fabric, me.name, plane) for plane in range(fabric.params.planes)],
            "peers": peers}
