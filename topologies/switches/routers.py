"""Mininet glue for the Linux kernel-router backend: routers as Mininet switches in their own
namespaces.

Routers are `Switch` subclasses (so Mininet's CLI lists them among the switches: `net`, `dump`,
`link p0l0 p0s0 down`, commands typed into them), each in its own network namespace, whose
shells start together: Mininet waits for each node's prompt before starting the next, ~20 ms
a node. Their `start`/`stop` do nothing but terminate: the control plane (`controller.run
--backend linux`) programs them.
"""

from __future__ import annotations

import os
import pty
import select
import zlib
from typing import Any

from mininet.node import Switch

# The baseline's ECMP hash key (per namespace; kernels from 6.11, and despite its name it keys
# the IPv6 multipath hash too). Unset, every namespace hashes with one random key drawn at boot:
# the baseline's paths were the same for every --seed and different on every machine (the RoCE
# victim beside an incast kept 1.00 of its goodput on one VM and 0.32-0.74 on another, for seeds
# 1 to 5 alike). Set from the run's seed and the router's name, a run's ECMP draw is its seed's
# on any machine, and each router draws apart, as real switches seeded per device do.
MULTIPATH_SEED_KEY = "net/ipv4/fib_multipath_hash_seed"


def multipath_seed(run_seed: int, router: str) -> int:
    """The 32-bit ECMP hash seed of `router` in a run seeded `run_seed` (0 means "random" to
    the kernel, so never 0).

    >>> multipath_seed(1, "p0l0") == multipath_seed(1, "p0l0") != multipath_seed(2, "p0l0")
    True
    """
    return zlib.crc32(f"{run_seed}/{router}".encode()) or 1


IFINDEX_BASE = 1000  # above what a namespace's own devices take (lo is 1)
# Written in every router namespace before its ports exist, so that every port inherits them.
ROUTER_SYSCTLS = {
    # No link-local address on ports (addr_gen_mode 1): no DAD, neighbour discovery or MLD from
    # routers at all; every neighbour is static.
    "net/ipv6/conf/default/addr_gen_mode": "1",
    "net/ipv6/conf/all/accept_dad": "0",
    "net/ipv6/conf/default/accept_dad": "0",
    "net/ipv6/conf/all/accept_ra": "0",
    "net/ipv6/conf/default/accept_ra": "0",
    # Forwarding, End's next hop included (a failed switch is forwarding 0: set_forwarding).
    "net/ipv6/conf/all/forwarding": "1",
    "net/ipv6/conf/default/forwarding": "1",
    # ECMP over the 5-tuple read from the packet, like an OVS select group's hash or a real
    # switch's. Not policy 1: it takes a packet's skb->hash when one is set, and a packet from a
    # host of this machine arrives carrying its socket's hash across the veths, which TCP draws
    # anew on every timeout, so TCP changed paths around a cut no switch had withdrawn (370 ms
    # after it, at 20 Mbit/s). The custom policy (3) hashes only the fields named: source and
    # destination address, next header, source and destination port (no flow label).
    "net/ipv6/fib_multipath_hash_policy": "3",
    "net/ipv6/fib_multipath_hash_fields": "0x0037",
    # A next hop whose carrier is gone stays in use until the routing plane withdraws it, as on
    # OVS (written explicitly: the cut's meaning depends on it).
    "net/ipv6/conf/all/ignore_routes_with_linkdown": "0",
    "net/ipv6/conf/default/ignore_routes_with_linkdown": "0",
}


class KernelRouter(Switch):
    """A Linux router in its own namespace. Its shell starts without waiting for the prompt;
    `finish_shell()` waits (call it once every router's shell is starting)."""

    shell_env: tuple[str, ...] = ()  # NAME=value words its shell starts with (`env`)

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 - Mininet's name
        if getattr(self, "shell", None):
            return
        opts = ("-cd" if mnopts is None else mnopts) + ("n" if self.inNamespace else "")
        cmd = ["mnexec", opts, "env", *self.shell_env, "PS1=" + chr(127), "bash", "--norc",
               "--noediting", "-is", "mininet:" + self.name]
        self.master, self.slave = pty.openpty()
        self.shell = self._popen(cmd, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                                 close_fds=False)
        self.stdin = os.fdopen(self.master, "r")
        self.stdout = self.stdin
        self.pid = self.shell.pid
        self.pollOut = select.poll()
        self.pollOut.register(self.stdout)
        self.outToNode[self.stdout.fileno()] = self
        self.inToNode[self.stdin.fileno()] = self
        self.execed = False
        self.lastCmd = None
        self.lastPid = None
        self.readbuf = ""
        self.waiting = True

    def finish_shell(self) -> None:
        """What Mininet's startShell does after starting the shell: wait for the prompt."""
        while True:
            data = self.read(1024)
            if data and data[-1] == chr(127):
                break
            self.pollOut.poll()
        self.waiting = False
        self.cmd("unset HISTFILE; stty -echo; set +m")

    def start(self, controllers: list[Any]) -> None:
        pass  # routes come from the control plane

    def stop(self, deleteIntfs: bool = False) -> None:  # noqa: N803 - Mininet's name
        self.terminate()  # the namespace and every port in it go with the last process
