"""Where the SRv6 micro-SID behaviours run: the kernel's own seg6local routes where this kernel
has them (End with the NEXT-C-SID flavour on every router, End.DT6 at every host NIC), else
the two programs of mrc_usid.bpf.c at tc ingress on the same ports, driven by the same routes
(a router's own /48 stays a `local` route, which the program asks the FIB about).

Why both: the kernel's SRv6 is the independent implementation the project holds its packets
to, so it is used wherever it exists; but kernels built without CONFIG_IPV6_SEG6_LWTUNNEL (a
VM of this project's own kind was, 2026-12-07) refuse every seg6local route, and without a
fallback neither switch backend could deliver a single MRC packet there (the hosts' End.DT6
is common to both). `MRCLAB_USID=ebpf` takes the eBPF behaviours on a kernel that has both, so
the two can be compared; a run records which it used (`usid_behaviours`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from topologies.dataplane.build import USID_OBJECT, stale
from topologies.model import KERNEL_END_BEHAVIOUR
from topologies.numbering import usid_prefix

KERNEL, EBPF = "kernel", "ebpf"
MODES = (KERNEL, EBPF)
ENV = "MRCLAB_USID"  # "ebpf" or "kernel": this choice instead of what the kernel supports
FILTER_PREF = 4790  # our tc filter's preference on clsact ingress (the egress one is 4791)
END_SECTION, DECAP_SECTION = "tc/usid_end", "tc/usid_decap"
# What the probe asks of a scratch namespace: a router's End behaviour (a host's End.DT6 is
# the same kernel option).
PROBE_ROUTE = (f"local {usid_prefix(0x1400)} encap seg6local action {KERNEL_END_BEHAVIOUR} "
               f"count dev lo")


# The probe itself, the same here and on a split fabric's servers (topologies/servers.py).
PROBE_ARGV = ("unshare", "--net", "sh", "-c", f"ip link set lo up && ip -6 route add {PROBE_ROUTE}")


@functools.lru_cache(maxsize=1)
def kernel_refusal() -> str | None:
    """None when this kernel and iproute2 take seg6local End with NEXT-C-SID, else what the
    kernel said. Asked of a scratch namespace that dies with the probe (needs root)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip not found"
    probe = subprocess.run(PROBE_ARGV, capture_output=True, text=True)
    return refusal(probe.returncode, probe.stderr)


def refusal(returncode: int, stderr: str) -> str | None:
    """What a probe's exit status and error output say: None (seg6local taken) or its last line."""
    return None if returncode == 0 else (stderr.strip().splitlines() or ["refused"])[-1]


def across(chosen: str, refused: dict[str, str]) -> tuple[str, str | None]:
    """The behaviours of a fabric spread over machines, one choice for all of them (its hosts
    here, routers there): `chosen` (this machine's, `mode`), or the eBPF uN everywhere when a
    server's kernel refuses seg6local (`refused`: server -> what it said); and why not, when
    `MRCLAB_USID=kernel` asks for what a server lacks (None: it can run).

    >>> across(KERNEL, {}), across(KERNEL, {"s2": "lwt encapsulation type not supported"})
    (('kernel', None), ('ebpf', None))
    """
    if chosen != KERNEL or not refused:
        return chosen, None
    if os.environ.get(ENV, "").strip() == KERNEL:
        server, why = min(refused.items())
        return KERNEL, f"{ENV}=kernel, but {server}'s kernel has no SRv6 seg6local End ({why})"
    return EBPF, None


def mode() -> str:
    """KERNEL where the kernel has seg6local, else EBPF; what `MRCLAB_USID` says if it is set
    (a value that is neither: `unavailable` says so)."""
    asked = os.environ.get(ENV, "").strip()
    if asked:
        return asked
    return KERNEL if kernel_refusal() is None else EBPF


def unavailable(chosen: str) -> str | None:
    """Why `chosen` cannot run here (one line, naming the fix), or None."""
    if chosen not in MODES:
        return f"{ENV}={chosen!r}: expected one of {', '.join(MODES)}"
    if chosen == KERNEL:
        why = kernel_refusal()
        return None if why is None else f"this kernel has no SRv6 seg6local End ({why})"
    if shutil.which("tc") is None:
        return "tc not found: run `make setup`"
    why = stale()
    if why is not None:
        return f"the uSID program is not built ({why}): run `make setup` (needs clang and libbpf-dev)"
    return None


def describe(chosen: str) -> str:
    """What a run records of the behaviours it used."""
    return (f"kernel seg6local ({KERNEL_END_BEHAVIOUR}; End.DT6)" if chosen == KERNEL
            else f"eBPF at tc ingress ({USID_OBJECT.name}: usid_end, usid_decap)")


def ingress_script(ifnames: list[str], section: str) -> str:
    """`ingress_lines` as the text a `tc -batch -` reads."""
    return "".join(f"{line}\n" for line in ingress_lines(ifnames, section))


def ingress_lines(ifnames: list[str], section: str) -> list[str]:
    """`tc -batch` lines attaching the program `section` at clsact ingress of each interface
    (`qdisc replace` keeps a clsact and its filters that are there already). Each filter loads
    its own copy: the program has no maps and no state, and goes with its interface."""
    lines = []
    for dev in ifnames:
        lines.append(f"qdisc replace dev {dev} clsact")
        lines.append(f"filter replace dev {dev} ingress pref {FILTER_PREF} handle 1 bpf da "
                     f"obj {USID_OBJECT} sec {section}")
    return lines
