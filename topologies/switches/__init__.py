"""Switch backends: which implementation forwards the fabric's packets (`--switch`).

    ovs    Open vSwitch bridges programmed by the os-ken controller (OpenFlow 1.3)
    linux  Linux kernel routers in namespaces, the kernel's own SRv6 (RFC 9800 uN)
    auto   the fastest backend this machine runs (the order of `FASTEST_FIRST`)

Everything switch-specific an emulation does goes through `SwitchBackend` (base.py);
`make(resolve(requested), ...)` is how an emulation gets one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from topologies import preflight
from topologies.model import Fabric
from topologies.switches.base import SwitchBackend, set_mtu
from topologies.switches.linux import LinuxBackend
from topologies.switches.ovs import OvsBackend

BACKENDS: dict[str, type[SwitchBackend]] = {"ovs": OvsBackend, "linux": LinuxBackend}
CHOICES = ("auto", *BACKENDS)
# Measured through the real emulation with HTB + eBPF on every port (`make bench`): the kernel's
# forwarding has no per-port cost and runs on every core; OVS userspace forwards in one thread.
FASTEST_FIRST = ("linux", "ovs")
# What `auto` takes first: the fastest. Kernel routers also leave the agents the core an
# ovs-vswitchd takes whatever the rate, so their runs are faithful where OVS's may not be; issue
# 10's goals hold on both and the validate set passes on both (docs/experiments.md).
AUTO_ORDER = FASTEST_FIRST


def resolve(requested: str = "auto") -> str:
    """The backend a run uses: `requested` if this machine runs it, or for `auto` the first of
    `AUTO_ORDER` it runs. PreflightError (one line naming the fix) otherwise; for `auto` the
    reason given is OVS's (what `make setup` installs; the kernel routers need a kernel)."""
    return choose(requested)[0]


def choose(requested: str = "auto") -> tuple[str, str]:
    """(the backend a run uses, why: for `auto`, which backends this machine does not run and
    why not). PreflightError as `resolve`."""
    if requested != "auto" and requested not in BACKENDS:
        raise preflight.PreflightError(f"unknown switch backend {requested!r}: use one of "
                                       f"{', '.join(CHOICES)}")
    if requested != "auto":
        why = BACKENDS[requested].unavailable()
        if why is not None:
            raise preflight.PreflightError(why)
        return requested, "asked for"
    why_not = {name: BACKENDS[name].unavailable() for name in AUTO_ORDER}
    for name in AUTO_ORDER:
        if why_not[name] is None:
            return name, "; ".join([f"auto: {name}"] + [f"not {other} ({why})" for other, why
                                                         in why_not.items() if why is not None])
    raise preflight.PreflightError(OvsBackend.unavailable() or "no switch backend can run here")


def check(requested: str = "auto") -> str:
    """Everything an emulation needs (root, Mininet, a switch backend): the backend's name."""
    preflight.check_all()
    return resolve(requested)


def check_choice(requested: str = "auto") -> tuple[str, str]:
    """`check`, with why that backend (`choose`)."""
    preflight.check_all()
    return choose(requested)


def make(name: str, fabric: Fabric, workdir: Path, **options: Any) -> SwitchBackend:
    """A backend for one run (`options`: the backend's own, e.g. OVS's datapath)."""
    return BACKENDS[name](fabric, workdir, **options)


def leftovers() -> dict[str, list[str]]:
    """What killed runs of any backend left, by kind."""
    out: dict[str, list[str]] = {}
    for cls in BACKENDS.values():
        for kind, items in cls.leftovers().items():
            out.setdefault(kind, []).extend(items)
    return out


def cleanup_leftovers() -> dict[str, int]:
    """Remove what killed runs of any backend left; counts by kind."""
    out: dict[str, int] = {}
    for cls in BACKENDS.values():
        for kind, n in cls.cleanup_leftovers().items():
            out[kind] = out.get(kind, 0) + n
    return out


__all__ = ["AUTO_ORDER", "BACKENDS", "CHOICES", "SwitchBackend", "check", "check_choice", "choose",
           "cleanup_leftovers", "leftovers", "make", "resolve", "set_mtu"]
