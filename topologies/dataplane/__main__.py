"""`python -m topologies.dataplane build [--force] | check | cflags | attach`.

attach: the switch egress program on the ports a JSON list of PortSpec fields on standard input
names (each with the pid of a process in its namespace), left attached when this process exits
(unpinned: the tc filters hold it until the ports go). What a split fabric's head runs on each
server (topologies/cluster.py)."""

from __future__ import annotations

import json
import sys

from topologies.dataplane.attach import available
from topologies.dataplane.build import build, cflags


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "build":
        ok, message = build(force="--force" in argv)
        if ok:
            print(f"setup: data plane: {message}")
        else:
            print(f"setup: warning: eBPF programs not built ({message}): no emulation can start "
                  f"(MRC's host encapsulation needs them; the switches would fall back to plain "
                  f"HTB queues)")
        return 0  # setup goes on: everything that needs no emulation still works
    if cmd == "cflags":
        print(" ".join(cflags()))
        return 0
    if cmd == "attach":
        from topologies.dataplane.attach import attach_ports
        from topologies.dataplane.ports import PortSpec

        specs = [PortSpec(**item) for item in json.load(sys.stdin)]
        attach_ports(specs).detach(remove_filters=False)
        print(f"attached to {len(specs)} ports")
        return 0
    if cmd == "check":
        reason = available()
        print("eBPF data plane: " + ("available" if reason is None else f"unavailable: {reason}"))
        return 0 if reason is None else 1
    print("usage: python -m topologies.dataplane {build [--force] | check | cflags | attach}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
