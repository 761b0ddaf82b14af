"""Switch data plane: ECN marking, packet trimming and a priority class at every egress port.

This kernel has no RED, fq or netem, so an eBPF program (mrc_qos.bpf.c) at each switch port's
tc clsact egress hook does what an MRC switch does: a virtual queue per port, draining at the
port's rate, decides CE marks, trims and drops; the program steers control packets and trimmed
headers into HTB class 1:2, which `topologies.shaping.switch_htb_batch` makes strictly higher
priority than the data class 1:3.

Loading: `bpftool prog load` once per network namespace (pinned under /sys/fs/bpf/mrclab/),
then `tc filter ... bpf da object-pinned` on every port: the verifier runs once, not per port,
and tc needs no ELF support. Maps are read and written with bpf(2) through ctypes.

By concern: `build` (clang, flags from the wire format), `bpf` (bpf(2), maps, Program),
`reference` (the pure model of the program), `ports` (what each port is told), `attach`.
`encap` is the hosts' side: the lwt program (mrc_encap.bpf.c) that wraps MRC packets
IPv6-in-IPv6 to their path's uSID carrier, built by the same step.
Use from the emulation::

    ports = switch_ports([(ifname, faces_host), ...], link_mbps, queue_packets, mtu_payload)
    dp = attach_ports(ports)    # after the HTB qdiscs exist (shaping.switch_htb_batch)
    dp.counters()               # {ifname: {"packets": .., "marked": .., ...}}
    dp.detach()

`python -m topologies.dataplane build` compiles the object (scripts/setup.sh runs it);
`python -m topologies.dataplane check` says whether this machine can load it.
"""

from topologies.dataplane.attach import DataPlane, attach_ports, available
from topologies.dataplane.ports import PortSpec, switch_ports

__all__ = ["DataPlane", "PortSpec", "attach_ports", "available", "switch_ports"]
