"""The scale arithmetic the MRC paper starts from (`mrclab plan`): what a multi-plane two-tier
fabric takes in tiers, switches and optics, against a single-plane fabric of the same NIC
bandwidth, and what one T0-T1 link or one NIC port costs a host. Pure: numbers in, numbers out.

The multi-plane fabric is the testbed's own (`topologies.model`): every NIC is split into
`nic_ports` ports of `port_gbps`, one (or `nic_ports / planes`) per plane; each plane is a
two-tier Clos of `radix`-port switches, a T0 with `radix / 2` ports down and `radix / 2` up,
one link to every T1, a T1 with `radix` ports down. So a plane is a `FabricParams` with
`leaves = radix`, `spines = radix / 2`, `hosts_per_leaf = radix / 2` at full size, and its
switches and links are counted the way the model lays them out (`fabric_counts`; the unit tests
hold it to `Fabric`). Two tiers reach `radix * radix / 2` NIC ports per plane: with 512-port
100G switches and 8 planes, 131,072 GPUs (the paper's figure), 6,144 switches.

The single-plane alternative of the same NIC bandwidth runs the same switch chip at the NIC's
speed: 512 x 100G ganged as k = radix / nic_ports = 64 ports of 800G, one port per NIC, a T0
with 32 down and 32 up. This is the assumption that reproduces every figure of the paper; the
other reading (the same chips as 512 x 100G in one plane, the NIC's 8 ports in it) gives the
same 3/5 and 2/3 but a T0 with 256 uplinks, so 0.4% per link instead of the paper's 3%.
A folded Clos of k-port switches with `t` tiers reaches 2 (k/2)^t NICs and needs, for N NICs,
N / (k/2) switches in every tier but the top and N / k at the top, with N links between every
two tiers (non-blocking; each count rounded up; below full size the multi-plane T1s are as
many as the T0s' uplinks fill). Hence, at any size where the single plane has
one tier more than the two-tier multi-plane fabric:

* switches: multi-plane 8 x 3N / 512 = 3N/64 against (2t - 1) N / 64: 3/5 at three tiers;
* optics: links times their bandwidth (an 800G transceiver is 8 x 100G lanes; a multi-plane NIC
  or switch breaks one out into 8 ports): multi-plane 2 tiers of links against t: 2/3 at three.

A caveat: 64-port switches reach 65,536 NICs in three tiers, so
131,072 GPUs on one 800G plane strictly need four (3/7 of the switches, 1/2 of the optics). The
paper's "three tiers" and its 2/3 and 3/5 are the per-tier counts above at three tiers; `plan`
shows that comparison and, where it differs, the fewest tiers that really reach.

What a failure costs a host, as the paper counts it, is the share of capacity the failed part
carried: one T0-T1 link is 1 / (the T0's uplinks) of what the T0's hosts have across the fabric
in its plane (1/256 = 0.4% multi-plane, 1/32 = 3% single-plane); only that plane is touched, so
a host whose transport moves its load off it loses 1 / (256 x 8) = 0.05% of its whole NIC. One
NIC port is 1 / nic_ports (12.5%; the single plane's only port: all of it).

>>> p = plan(planes=8, radix=512)
>>> p.gpus, p.multi.tiers, p.multi.switches, p.single[0].tiers, p.single[0].switches
(131072, 2, 6144, 3, 10240)
>>> p.single[0].optics_ratio, p.single[0].switch_ratio
(Fraction(2, 3), Fraction(3, 5))
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from topologies.model import FabricError, FabricParams


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _whole(name: str, value: object, lo: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise FabricError(f"{name} must be a whole number >= {lo}, got {value!r}")
    return value


def fabric_counts(params: FabricParams, ports_per_host: int = 1,
                  uplinks: int | None = None) -> dict[str, int]:
    """Switches and links of a fabric laid out as `Fabric(params)` lays it out, counted without
    building it (a 131,072-host fabric is far beyond what the model builds). Beyond the model:
    `ports_per_host` NIC ports per host and plane, all to its leaf (the model has 1), and
    `uplinks` per leaf spread evenly over the spines (the model has one to every spine)."""
    p = params
    up = p.spines if uplinks is None else uplinks
    return {"switches": p.planes * (p.leaves + p.spines),
            "leaves": p.planes * p.leaves, "spines": p.planes * p.spines,
            "hosts": p.leaves * p.hosts_per_leaf,
            "host_links": p.planes * p.leaves * p.hosts_per_leaf * ports_per_host,
            "fabric_links": p.planes * p.leaves * up,
            "leaf_ports": p.hosts_per_leaf * ports_per_host + up,
            "spine_ports": _ceil_div(p.leaves * up, p.spines)}


def clos_reach(k: int, tiers: int) -> int:
    """NICs a non-blocking folded Clos of k-port switches reaches in `tiers` tiers."""
    reach: int = 2 * pow(k // 2, tiers)  # int ** int is Any to mypy (a negative power is a float)
    return reach


@dataclass(frozen=True)
class Build:
    """One fabric's bill of materials, whole (every plane)."""

    name: str
    planes: int
    tiers: int
    port_gbps: int  # the speed of its switch ports and links
    lanes: int  # optical lanes per port, each of a NIC port's speed (an 800G module: 8 x 100G)
    switch_ports: int  # ports per switch at that speed
    switches_per_tier: tuple[int, ...]  # T0 first
    links_per_tier: tuple[int, ...]  # host-T0 first, then T0-T1, ...
    reach: int  # GPUs these tiers can reach
    nic_ports: int  # ports per NIC
    t0_up: int  # a T0's uplinks
    optics_ratio: Fraction | None = None  # the multi-plane fabric's optics over this one's
    switch_ratio: Fraction | None = None

    @property
    def switches(self) -> int:
        return sum(self.switches_per_tier)

    @property
    def links(self) -> int:
        return sum(self.links_per_tier)

    @property
    def transceivers(self) -> int:
        return 2 * self.links

    @property
    def optics_lanes(self) -> int:
        """Transceivers in lanes of a NIC port's speed: optics by bandwidth."""
        return self.transceivers * self.lanes

    @property
    def t0_t1_link_share(self) -> Fraction:
        """What one T0-T1 link carries of what a T0's hosts have across the fabric."""
        return Fraction(1, self.t0_up)

    @property
    def t0_t1_link_nic_share(self) -> Fraction:
        """The same over a host's whole NIC, when its load leaves the plane that lost it."""
        return Fraction(1, self.t0_up * self.planes)

    @property
    def nic_port_share(self) -> Fraction:
        return Fraction(1, self.nic_ports)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "planes": self.planes, "tiers": self.tiers,
            "port_gbps": self.port_gbps, "switch_ports": self.switch_ports,
            "t0_down": self.switch_ports - self.t0_up if self.tiers > 1 else self.switch_ports,
            "t0_up": self.t0_up, "reach_gpus": self.reach,
            "switches": self.switches, "switches_per_tier": list(self.switches_per_tier),
            "links": self.links, "links_per_tier": list(self.links_per_tier),
            "transceivers": self.transceivers, "optics_lanes": self.optics_lanes,
            "t0_t1_link_share": float(self.t0_t1_link_share),
            "t0_t1_link_nic_share": float(self.t0_t1_link_nic_share),
            "nic_port_share": float(self.nic_port_share),
        }
        if self.optics_ratio is not None and self.switch_ratio is not None:
            out["multi_plane_optics_ratio"] = float(self.optics_ratio)
            out["multi_plane_switch_ratio"] = float(self.switch_ratio)
        return out


def clos(name: str, gpus: int, k: int, tiers: int, port_gbps: int, lanes: int) -> Build:
    """A single-plane folded Clos of k-port switches, one port per NIC, with `tiers` tiers."""
    per_tier = tuple([_ceil_div(gpus, k // 2)] * (tiers - 1) + [_ceil_div(gpus, k)])
    return Build(name=name, planes=1, tiers=tiers, port_gbps=port_gbps, lanes=lanes, switch_ports=k,
                  switches_per_tier=per_tier, links_per_tier=(gpus,) * tiers,
                  reach=clos_reach(k, tiers), nic_ports=1, t0_up=k // 2 if tiers > 1 else 1)


def multi_plane_params(planes: int, radix: int, gpus: int, nic_ports: int) -> FabricParams:
    """The multi-plane two-tier fabric for `gpus` as the model's `FabricParams`. Every T0 has
    `radix / 2` uplinks; the T1s are as many as those fill (`radix / 2` at full size: one link
    from every T0 to every T1, the model's layout; below it, fewer T1s with parallel links)."""
    per_plane = nic_ports // planes
    hosts_per_leaf = radix // 2 // per_plane
    leaves = _ceil_div(gpus, hosts_per_leaf)
    return FabricParams(planes=planes, leaves=leaves, spines=_ceil_div(leaves * (radix // 2), radix),
                        hosts_per_leaf=hosts_per_leaf, link_mbps=100_000.0)


@dataclass(frozen=True)
class Plan:
    planes: int
    radix: int
    nic_ports: int
    port_gbps: int
    gpus: int
    multi: Build
    # The fewest tiers that reach; before it, where that is more than one tier above the
    # multi-plane fabric, the paper's comparison: one tier more, counted per tier.
    single: tuple[Build, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"planes": self.planes, "radix": self.radix, "nic_ports": self.nic_ports,
                "port_gbps": self.port_gbps, "nic_gbps": self.nic_ports * self.port_gbps,
                "gpus": self.gpus, "multi_plane": self.multi.as_dict(),
                "single_plane": [f.as_dict() for f in self.single]}


def check(planes: object, radix: object, nic_ports: object = None, gpus: object = None,
          port_gbps: object = 100) -> tuple[int, int, int, int, int]:
    """(planes, radix, nic_ports, gpus, port_gbps) checked, defaults filled in (NIC ports: one
    per plane; GPUs: as many as two tiers reach); FabricError with one precise line otherwise."""
    planes = _whole("--planes", planes, 1)
    radix = _whole("--radix", radix, 2)
    if radix % 2:
        raise FabricError(f"--radix must be even (a T0 has as many ports down as up), got {radix}")
    port_gbps = _whole("--port-gbps", port_gbps, 1)
    nic_ports = planes if nic_ports is None else _whole("--nic-ports", nic_ports, 1)
    if nic_ports % planes:
        raise FabricError(f"--nic-ports {nic_ports} cannot be split evenly over {planes} planes")
    per_plane = nic_ports // planes
    if (radix // 2) % per_plane:
        raise FabricError(f"a T0's {radix // 2} ports down cannot take whole NICs of "
                          f"{per_plane} ports each: use --nic-ports {planes} or a radix that fits")
    k = radix // nic_ports if radix % nic_ports == 0 else 0
    if k < 4 or k % 2:
        raise FabricError(f"--radix {radix} run at the NIC's {nic_ports * port_gbps}G gives "
                          f"{radix / nic_ports:g} ports, not an even number >= 4: no single-plane "
                          f"fabric to compare with (use a radix that is a multiple of "
                          f"{2 * nic_ports}, at least {4 * nic_ports})")
    most = radix * (radix // 2 // per_plane)
    if gpus is None:
        gpus = most
    gpus = _whole("--gpus", gpus, 1)
    if gpus > most:
        raise FabricError(f"--gpus {gpus} is beyond what two tiers of {radix}-port switches reach "
                          f"({most} GPUs with {nic_ports} NIC ports over {planes} planes)")
    return planes, radix, nic_ports, gpus, port_gbps


def plan(planes: object = 8, radix: object = 512, nic_ports: object = None, gpus: object = None,
         port_gbps: object = 100) -> Plan:
    planes_, radix_, nic_ports_, gpus_, gbps = check(planes, radix, nic_ports, gpus, port_gbps)
    params = multi_plane_params(planes_, radix_, gpus_, nic_ports_)
    counts = fabric_counts(params, nic_ports_ // planes_, uplinks=radix_ // 2)
    multi = Build(name="multi-plane", planes=planes_, tiers=2, port_gbps=gbps, lanes=1,
                   switch_ports=radix_,
                   switches_per_tier=(counts["leaves"], counts["spines"]),
                   links_per_tier=(gpus_ * nic_ports_, counts["fabric_links"]),
                   reach=radix_ * params.hosts_per_leaf, nic_ports=nic_ports_, t0_up=radix_ // 2)
    k = radix_ // nic_ports_
    fewest = next(t for t in range(1, 64) if clos_reach(k, t) >= gpus_)
    single = []
    for tiers in sorted({min(fewest, multi.tiers + 1), fewest}):
        f = clos("single-plane", gpus_, k, tiers, gbps * nic_ports_, nic_ports_)
        single.append(replace(f, optics_ratio=Fraction(multi.optics_lanes, f.optics_lanes),
                              switch_ratio=Fraction(multi.switches, f.switches)))
    return Plan(planes=planes_, radix=radix_, nic_ports=nic_ports_, port_gbps=gbps, gpus=gpus_,
                multi=multi, single=tuple(single))


def _pct(share: Fraction) -> str:
    return f"{float(share) * 100:.2g}%" if share < Fraction(1, 10) else f"{float(share) * 100:g}%"


def render(p: Plan) -> str:
    """The plan as the terminal shows it."""
    cols = [p.multi, *p.single]

    def title(f: Build) -> str:
        if f.planes > 1:
            return f"multi-plane ({f.planes} planes)"
        return f"single plane, {f.tiers} tiers" + ("" if f.reach >= p.gpus else " (*)")

    def ratio(r: Fraction | None) -> str:
        return "-" if r is None else f"{r} ({float(r):.3f})"

    def t0(f: Build) -> str:
        return f"{f.switch_ports - f.t0_up} down, {f.t0_up} up"

    rows = [
        ("", [title(f) for f in cols]),
        ("switch ports", [f"{f.switch_ports} x {f.port_gbps}G" for f in cols]),
        ("tiers", [str(f.tiers) for f in cols]),
        ("GPUs they reach", [f"{f.reach:,}" for f in cols]),
        ("T0 ports", [t0(f) for f in cols]),
        ("switches", [f"{f.switches:,}" for f in cols]),
        ("links", [f"{f.links:,} x {f.port_gbps}G" for f in cols]),
        ("transceivers", [f"{f.transceivers:,} x {f.port_gbps}G" for f in cols]),
        (f"optics ({p.port_gbps}G lanes)", [f"{f.optics_lanes:,}" for f in cols]),
        ("multi-plane's optics", [ratio(f.optics_ratio) for f in cols]),
        ("multi-plane's switches", [ratio(f.switch_ratio) for f in cols]),
        ("one T0-T1 link lost", [_pct(f.t0_t1_link_share) for f in cols]),
        ("one NIC port lost", [_pct(f.nic_port_share) for f in cols]),
    ]
    width = [max(len(r[0]) for r in rows)] + [max(len(r[1][i]) for r in rows) for i in range(len(cols))]
    lines = [f"{p.gpus:,} GPUs, one NIC each of {p.nic_ports} x {p.port_gbps}G "
             f"({p.nic_ports * p.port_gbps}G), {p.radix}-port {p.port_gbps}G switches", ""]
    for label, cells in rows:
        padded = [c.ljust(w) for c, w in zip(cells, width[1:], strict=True)]
        lines.append("  ".join([label.ljust(width[0]), *padded]).rstrip())
    notes = [f"A T0-T1 link is the share of its T0's uplinks the T0's hosts lose in that plane; "
              f"over a whole NIC, with the load moved to the other planes: "
              f"{_pct(p.multi.t0_t1_link_nic_share)} multi-plane.",
              f"The single plane runs the same {p.radix}-port chip as "
              f"{p.radix // p.nic_ports} x {p.nic_ports * p.port_gbps}G ports, one per NIC."]
    if any(f.reach < p.gpus for f in p.single):
        short = next(f for f in p.single if f.reach < p.gpus)
        notes.append(f"(*) {short.tiers} tiers of {short.switch_ports}-port switches reach "
                     f"{short.reach:,} GPUs: the paper's comparison counts each tier per GPU "
                     f"(N/{short.switch_ports // 2} switches, N/{short.switch_ports} at the top); "
                     f"{p.gpus:,} GPUs need {p.single[-1].tiers}.")
    lines.append("")
    lines += [textwrap.fill(note, 100, subsequent_indent="    " if note.startswith("(*)") else "")
              for note in notes]
    return "\n".join(lines)
