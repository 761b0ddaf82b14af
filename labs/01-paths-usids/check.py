"""Lab 1's checker: the student's uSIDs, segment lists and carrier addresses against the fabric
model for every path of the lab's fabric, the by-hand answer, then one datagram per path sent to
the student's carrier on the real fabric, seen by the right spine and the right NIC."""

from __future__ import annotations

import ipaddress
import random

from labs.checker import Check, CheckFailed, Context, Lab
from labs.checker import fabric as real
from topologies.model import MAX_USIDS_IN_ADDRESS, ROLE_HOST, ROLE_LEAF, ROLE_SPINE, build, usid, usid_address

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10)
ENVIRONMENT = ("cli", "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2")
SRC, DST, PLANE, SPINE = "h0", "h3", 1, 1  # the path computed by hand and sent on for real
DATAGRAMS = 40  # per path: far above anything else the idle fabric carries
ROLES = {ROLE_LEAF: "ROLE_LEAF", ROLE_SPINE: "ROLE_SPINE", ROLE_HOST: "ROLE_HOST"}
MORE = 200  # random uSIDs and carriers beyond the lab's fabric: every plane, index and length


def _more_usids() -> list[tuple[int, int, int]]:
    """(role, plane, index) over the whole field ranges: the largest ones first, then random."""
    rng = random.Random(1)
    edges = [(role, 14, 1023) for role in ROLES] + [(ROLE_HOST, 0, 512), (ROLE_SPINE, 7, 256)]
    return edges + [(rng.choice(list(ROLES)), rng.randrange(15), rng.randrange(1024))
                    for _ in range(MORE - len(edges))]


def _more_carriers() -> list[tuple[int, ...]]:
    """Segment lists of every length up to six uSIDs (the longest first), then random."""
    rng = random.Random(2)
    lists = [tuple(usid(ROLE_SPINE, n, 1000 + n) for n in range(k))
             for k in range(MAX_USIDS_IN_ADDRESS, 0, -1)]
    while len(lists) < MORE:
        lists.append(tuple(usid(rng.choice(list(ROLES)), rng.randrange(15), rng.randrange(1024))
                           for _ in range(rng.randint(1, MAX_USIDS_IN_ADDRESS))))
    return lists


def _explain_usid(got: int, role: int, plane: int, index: int, want: int) -> str:
    if got == ((plane << 12) | (role << 10) | index):
        return "the plane field holds the plane, not plane+1 (plane 0 would give a 0x0000 uSID)"
    if got == ((role << 12) | ((plane + 1) << 10) | index):
        return "plane and role are swapped: the plane is the top 4 bits"
    return f"want {want:#06x} = plane+1 {plane + 1} << 12 | role {role} << 10 | index {index}"


def usid_numbers(ctx: Context) -> str:
    carrier = ctx.module("carrier")
    n = 0
    for sw in FABRIC.switches:
        got = carrier.usid(sw.role, sw.plane, sw.index)
        if got != sw.usid:
            raise CheckFailed(f"usid({'ROLE_LEAF' if sw.role == ROLE_LEAF else 'ROLE_SPINE'}, "
                              f"{sw.plane}, {sw.index}) for {sw.name} is {got!r}: "
                              + _explain_usid(got, sw.role, sw.plane, sw.index, sw.usid))
        n += 1
    for host in FABRIC.hosts:
        for nic in host.nics:
            got = carrier.usid(ROLE_HOST, nic.plane, host.index)
            if got != nic.usid:
                raise CheckFailed(f"usid(ROLE_HOST, {nic.plane}, {host.index}) for {host.name}'s "
                                  f"plane-{nic.plane} NIC is {got!r}: "
                                  + _explain_usid(got, ROLE_HOST, nic.plane, host.index, nic.usid))
            n += 1
    for role, plane, index in _more_usids():  # beyond the lab's small fabric
        got, want = carrier.usid(role, plane, index), usid(role, plane, index)
        if got != want:
            raise CheckFailed(f"usid({ROLES[role]}, {plane}, {index}) is {got!r}: "
                              + _explain_usid(got, role, plane, index, want)
                              + " (the lab's fabric is small: this is a bigger one's)")
    return (f"all {n} uSIDs of the fabric (8 switches, 4 hosts x 2 planes) are right, and "
            f"{MORE} more of every plane and index")


def segment_lists(ctx: Context) -> str:
    carrier = ctx.module("carrier")
    n = 0
    for src, dst in FABRIC.host_pairs():
        for route in FABRIC.routes(src, dst):
            got = tuple(carrier.segment_list(FABRIC, src, dst, route.plane, route.spine or 0))
            if got != route.usids:
                want = ", ".join(f"{s:#06x}" for s in route.usids)
                shown = ", ".join(f"{s:#06x}" if isinstance(s, int) else repr(s) for s in got)
                why = ("same leaf: just the leaf and the destination" if route.spine is None else
                       "source leaf, spine, destination leaf, destination host")
                raise CheckFailed(f"{src}->{dst} on plane {route.plane}"
                                  + ("" if route.spine is None else f" via spine {route.spine}")
                                  + f": got ({shown}), want ({want}): {why}")
            n += 1
    return f"all {n} paths between the 4 hosts have the right uSIDs"


def carrier_addresses(ctx: Context) -> str:
    carrier = ctx.module("carrier")
    n = 0
    for src, dst in FABRIC.host_pairs():
        for route in FABRIC.routes(src, dst):
            got = carrier.carrier(route.usids)
            if ipaddress.IPv6Address(got) != route.address:
                raise CheckFailed(f"carrier({', '.join(f'{s:#06x}' for s in route.usids)}) is {got}, "
                                  f"want {route.address}: the block fills the first 32 bits, each "
                                  f"uSID the next 16, the rest stays 0")
            n += 1
    for usids in _more_carriers():  # longer segment lists than the lab's fabric has
        try:
            got = ipaddress.IPv6Address(carrier.carrier(usids))
        except ValueError as exc:
            raise CheckFailed(f"carrier({', '.join(f'{s:#06x}' for s in usids)}), "
                              f"{len(usids)} uSIDs: {exc}") from None
        if got != usid_address(usids):
            raise CheckFailed(f"carrier({', '.join(f'{s:#06x}' for s in usids)}) is {got}, want "
                              f"{usid_address(usids)}: {len(usids)} uSIDs, up to "
                              f"{MAX_USIDS_IN_ADDRESS} fit after the block")
    return f"all {n} carrier addresses are right, and {MORE} more of 1 to {MAX_USIDS_IN_ADDRESS} uSIDs"


def by_hand(ctx: Context) -> str:
    answer = ctx.module("carrier").BY_HAND
    want = next(r for r in FABRIC.routes(SRC, DST) if r.plane == PLANE and r.spine == SPINE)
    if not answer:
        raise CheckFailed("BY_HAND is empty")
    try:
        got = ipaddress.IPv6Address(answer)
    except ValueError:
        raise CheckFailed(f"BY_HAND {answer!r} is not an IPv6 address") from None
    if got == want.address:
        return f"{got} is {SRC}->{DST} on plane {PLANE} through spine {SPINE}"
    other = next((r for src, dst in FABRIC.host_pairs() for r in FABRIC.routes(src, dst)
                  if r.address == got), None)
    if other is not None:
        raise CheckFailed(f"{got} is the path {other.src}->{other.dst} {other.label}, not "
                          f"{SRC}->{DST} p{PLANE}/s{SPINE}")
    raise CheckFailed(f"{got} is no path of this fabric (want {SRC}->{DST} p{PLANE}/s{SPINE})")


def datagrams_on_path(ctx: Context) -> str:
    """For every path from h0 to h3: datagrams sent to the student's carrier address cross that
    path's spine (its port counters) and no other, and arrive on h3's NIC of that plane."""
    carrier = ctx.module("carrier")
    bed = real.testbed(ctx, FABRIC, seed=1)
    for route in FABRIC.routes(SRC, DST):
        address = str(carrier.carrier(tuple(carrier.segment_list(FABRIC, SRC, DST, route.plane,
                                                                route.spine or 0))))
        nic = FABRIC.host(DST).nics[route.plane].ifname
        before, rx0 = real.port_packets(bed), real.nic_rx_packets(bed, DST, nic)
        real.send_udp(bed, SRC, address, DATAGRAMS)
        real.settle()
        after, rx1 = real.port_packets(bed), real.nic_rx_packets(bed, DST, nic)
        spines = {sw.name: sum(after[k][0] - before[k][0] for k in after if k[0] == sw.name)
                  for sw in FABRIC.switches if sw.role == ROLE_SPINE}
        want = FABRIC.spine(route.plane, route.spine or 0).name
        busy = sorted(name for name, n in spines.items() if n >= DATAGRAMS // 2)
        if busy != [want]:
            seen = ", ".join(f"{k} +{v}" for k, v in sorted(spines.items()))
            raise CheckFailed(f"{DATAGRAMS} datagrams to {address} ({route.label}) crossed "
                              f"{busy or 'no spine'} (spine ports received: {seen}); want {want}")
        if rx1 - rx0 < DATAGRAMS:
            raise CheckFailed(f"{want} carried the datagrams to {address} but {DST}'s {nic} received "
                              f"{rx1 - rx0} of {DATAGRAMS}")
    return (f"{DATAGRAMS} datagrams on each of the {len(FABRIC.routes(SRC, DST))} paths {SRC}->{DST} "
            f"crossed the right spine and arrived on the right plane's NIC")


LAB = Lab(__file__, "Paths and micro-SIDs", files=("carrier.py",), checks=[
    Check("usid-numbers", usid_numbers,
          "TODO 1: a uSID is [plane+1 : 4 bits][role : 2 bits][index : 10 bits], e.g. p1s1 is 0x2801"),
    Check("segment-lists", segment_lists,
          "TODO 2: across leaves: (source leaf, spine, destination leaf, destination host NIC); "
          "under one leaf: (leaf, destination host NIC); all on the same plane",
          needs=("usid-numbers",)),
    Check("carrier-addresses", carrier_addresses,
          "TODO 3: USID_BLOCK << 96 puts fcbb:bb00 on top; uSID i goes at bit 80 - 16*i"),
    Check("by-hand", by_hand,
          "TODO 4: h0 sits under leaf 0, h3 under leaf 1; write plane 1's four uSIDs after fcbb:bb00 "
          "(check with `paths h0 h3` in the lab's CLI)"),
    Check("datagrams-on-path", datagrams_on_path,
          "TODOs 2-3: a wrong address goes through the wrong spine or nowhere: `paths h0 h3` in the CLI "
          "lists each path's address", needs=("segment-lists", "carrier-addresses"), emulated=True),
])
