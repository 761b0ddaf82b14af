"""Plots with matplotlib (Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
# Exported under its own name (importers' pyplot then draws with the backend set above).
from matplotlib import pyplot as pyplot  # noqa: E402

from experiments.analysis.metrics import BIN_S, series, smoothed  # noqa: E402
from experiments.analysis.transports import planes_used  # noqa: E402
from topologies.model import FabricParams  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.axes import Axes

TRANSPORT_COLOURS = {"mrc": "#1f77b4", "roce": "#d62728", "spray": "#9467bd", "tcp": "#2ca02c",
                     "mptcp": "#ff7f0e"}
STATE_COLOURS = {"GOOD": "#2ca02c", "SKIP": "#ffbf00", "ASSUMED_BAD": "#d62728", "DENIED": "#444444"}
HEADROOM = 1.15  # a goodput axis reaches this much above what the fabric carries, no further
FAULT_ACTIONS = ("cut", "fail_switch", "loss", "incast_start", "force_shared_path")  # black; the rest green
def carry_ceiling(summary: dict[str, Any], label: str) -> float:
    """What the fabric carries for the curve drawn of `label`, in Mbit/s: the run's own
    `capacity_mbps` where the scenario records one, else what the hosts' NICs carry (an incast's
    victim: one host's NICs on the planes its transport uses)."""
    cap = summary["transports"].get(label, {}).get("capacity_mbps")
    if isinstance(cap, dict):
        cap = max((v for v in cap.values() if isinstance(v, (int, float))), default=None)
    if isinstance(cap, (int, float)) and cap > 0:
        return float(cap)
    p = summary["fabric"]
    planes = len(planes_used(label.split("-")[0], p["planes"])) if label else p["planes"]
    hosts = 1 if summary.get("scenario") == "incast" else p["leaves"] * p["hosts_per_leaf"]
    return float(hosts * planes * p["link_mbps"])


def scale_to(ax: Axes, ceiling: float, t: list[float], values: list[float]) -> int:
    """Bound `ax`'s y axis by what the fabric carries (`ceiling`, drawn dotted), not by the
    highest bin: bins above it are marked at the top edge (red ^) and counted in the legend.
    Returns how many bins were above."""
    top = HEADROOM * ceiling
    above = [(x, v) for x, v in zip(t, values, strict=False) if v > top]
    ax.axhline(ceiling, color="grey", linestyle=":", linewidth=0.8,
               label=f"what the fabric carries ({ceiling:g} Mbit/s)")
    if above:
        ax.scatter([x for x, _ in above], [top * 0.985] * len(above), marker="^", s=12, color="red",
                   zorder=5, clip_on=False,
                   label=f"{len(above)} bins above the axis (max {max(v for _, v in above):.0f})")
    ax.set_ylim(0, top)
    return len(above)


def fabric_label(summary: dict[str, Any]) -> str:
    """A run's fabric in words, for figure titles (`FabricParams.describe`)."""
    return FabricParams.from_dict(summary["fabric"]).describe()


def plot_recovery(path: Path, curves: dict[str, list[float]], bin_s: float, summary: dict[str, Any],
                  legend_of: Callable[[dict[str, Any]], str]) -> None:
    """The demo's picture: every transport's goodput through the cut, each labelled with
    `legend_of(its figures)` (the fault scenario's recovery and stall)."""
    fig, ax = pyplot.subplots(figsize=(10, 4.8), dpi=110)
    every_bin: list[tuple[float, float]] = []
    for name, mbps in curves.items():
        t = [i * bin_s for i in range(len(mbps))]
        ax.plot(t, mbps, color=TRANSPORT_COLOURS.get(name), alpha=0.25, linewidth=0.8,
                label=f"{name}: 10 ms bins")
        label = f"{name}: {legend_of(summary['transports'][name])} (50 ms average)"
        ax.plot(t, smoothed(mbps), color=TRANSPORT_COLOURS.get(name), linewidth=1.8, label=label)
        every_bin += list(zip(t, mbps, strict=True))
    failure = summary["failure"]
    detect_s = summary["routing"]["detect_ms"] / 1000
    ax.axvline(failure["at_s"], color="black", linestyle="--", linewidth=1, label="link cut")
    ax.axvline(failure["restored_at_s"], color="green", linestyle="--", linewidth=1,
               label="link restored")
    ax.axvspan(failure["at_s"], failure["at_s"] + detect_s, color="orange", alpha=0.15,
               label=f"baseline routing detection delay ({detect_s * 1000:.0f} ms)")
    ceiling = max(carry_ceiling(summary, name) for name in curves) if curves else 1.0
    scale_to(ax, ceiling, [x for x, _ in every_bin], [v for _, v in every_bin])
    top = ax.get_ylim()[1]
    ax.text(failure["at_s"], top * 0.97, f" cut {failure['link']}", va="top", fontsize=8)
    ax.text(failure["restored_at_s"], top * 0.97, " restored", va="top", fontsize=8, color="green")
    fidelity_stamp(ax, summary)
    ax.set_title(f"Goodput through a T0-T1 link cut: {fabric_label(summary)} (50 ms average, 10 ms "
                 "bins faint)", fontsize=9)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("goodput at receiver (Mbit/s)")
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(0.0, 0.48), fontsize=7, ncol=2, framealpha=0.7)
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)


def fidelity_stamp(ax: Axes, summary: dict[str, Any]) -> None:
    """Across `ax`, in red, that the run was not faithful and why (its first problems); nothing
    on a faithful run. Every figure of a run carries it, on its first panel."""
    fid = summary["fidelity"]
    if not fid.get("faithful", True):
        ax.text(0.5, 0.5, "EMULATION NOT FAITHFUL:\n" + "\n".join(fid["problems"][:4]),
                transform=ax.transAxes, ha="center", va="center", color="red", fontsize=9, alpha=0.6)


def plot_scenario(folder: Path, summary: dict[str, Any], curves: dict[str, list[float]],
                  windows: dict[str, tuple[float, float]], timelines: dict[str, list[list[Any]]],
                  headline_of: Callable[[dict[str, Any]], str]) -> None:
    """goodput.png (one panel per transport, faults marked, titled with `headline_of(its
    figures)`: the scenario's `Scenario.headline`) and path_state.png (MRC's per-EV state over
    time); a scenario kind draws its own plots besides (`Kind.plot`)."""
    names = list(curves)
    if names:
        fig, axes = pyplot.subplots(len(names), 1, figsize=(10, 1.9 * len(names) + 0.8), dpi=100,
                                 sharex=True, squeeze=False)
        for ax, name in zip(axes[:, 0], names, strict=True):
            mbps = curves[name]
            t = [i * BIN_S for i in range(len(mbps))]
            colour = TRANSPORT_COLOURS.get(name)
            ax.plot(t, mbps, color=colour, alpha=0.25, linewidth=0.7, label="10 ms bins")
            ax.plot(t, smoothed(mbps), color=colour, linewidth=1.6, label="50 ms average")
            _mark_faults(ax, [e for e in summary["faults"] if e.get("transport") == name])
            scale_to(ax, carry_ceiling(summary, name), t, mbps)
            ax.set_title(f"{name}: {headline_of(summary['transports'][name])}", fontsize=8, loc="left")
            ax.set_ylabel("Mbit/s", fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=6, ncol=3, framealpha=0.6)
        fidelity_stamp(axes[0, 0], summary)
        fig.suptitle(f"{summary['scenario']}: {summary['title']} ({fabric_label(summary)})", fontsize=9)
        axes[-1, 0].set_xlabel("time since the transport's start (s)")
        fig.tight_layout()
        fig.savefig(folder / "goodput.png")
        pyplot.close(fig)
    if timelines:
        _plot_path_state(folder / "path_state.png", summary, timelines, windows)


def _mark_faults(ax: Axes, events: list[dict[str, Any]]) -> None:
    """Each fault as a dashed line: black where something breaks, green where it is repaired,
    each kind once in the legend."""
    seen: set[str] = set()
    for event in events:
        bad = event["action"] in FAULT_ACTIONS
        what = "fault" if bad else "repair"
        ax.axvline(event["t"], color="black" if bad else "green", linestyle="--", linewidth=0.8,
                   label=None if what in seen else f"{what} (dashed {'black' if bad else 'green'})")
        seen.add(what)


def _draw_ev_states(ax: Axes, changes: list[list[Any]], evs: list[tuple[int, str]], t0: float,
                    t1: float) -> None:
    """One row per EV (ev, its label), coloured by state from `t0` to `t1` (monotonic), from its
    [t, ev, old, new] changes; an EV starts GOOD."""
    row = {ev: i for i, (ev, _) in enumerate(evs)}
    state = dict.fromkeys(row, "GOOD")
    since = dict.fromkeys(row, t0)
    for t, ev, _old, new in sorted(changes):
        if ev in row:
            ax.hlines(row[ev], since[ev] - t0, t - t0, color=STATE_COLOURS.get(state[ev], "grey"),
                      linewidth=5)
            state[ev], since[ev] = new, t
    for ev in row:
        ax.hlines(row[ev], since[ev] - t0, t1 - t0, color=STATE_COLOURS.get(state[ev], "grey"),
                  linewidth=5)
    ax.set_yticks(range(len(evs)), [label for _, label in evs], fontsize=6)
    ax.set_ylim(-0.7, len(evs) - 0.3)


def _plot_path_state(path: Path, summary: dict[str, Any], timelines: dict[str, list[list[Any]]],
                     windows: dict[str, tuple[float, float]]) -> None:
    fig, axes = pyplot.subplots(len(timelines), 1, figsize=(10, 2.4 * len(timelines) + 0.6), dpi=100,
                             squeeze=False)
    for ax, (name, changes) in zip(axes[:, 0], timelines.items(), strict=True):
        t0, t1 = windows[name]
        _draw_ev_states(ax, changes, [(ev, f"{ev:#x}") for ev in sorted({c[1] for c in changes})],
                        t0, t1)
        for event in summary["faults"]:
            if event.get("transport") == name:
                ax.axvline(event["t"], color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{name}: per-EV state of the first QP (only EVs that changed state; "
                     "green GOOD, amber SKIP, red ASSUMED_BAD)", fontsize=8, loc="left")
        ax.set_xlim(0, t1 - t0)
    fidelity_stamp(axes[0, 0], summary)
    axes[-1, 0].set_xlabel("time since the transport's start (s)")
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)


Series = list[tuple[list[float | None], str, str]]  # (values, line style, what they are)


def plot_cdf(path: Path, summary: dict[str, Any], xlabel: str,
             series_of: Callable[[dict[str, Any]], Series]) -> None:
    """One CDF per transport and series: `series_of(figures of a transport)`."""
    fig, ax = pyplot.subplots(figsize=(7, 4), dpi=100)
    for name, t in summary["transports"].items():
        colour = TRANSPORT_COLOURS.get(name)
        for values, style, what in series_of(t):
            vals = sorted(v for v in values if v is not None)
            if vals:
                ax.step(vals, [(i + 1) / len(vals) for i in range(len(vals))], style, color=colour,
                        where="post", label=f"{name} ({what})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fidelity_stamp(ax, summary)
    ax.set_title(f"{summary['scenario']}: {summary['title']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)


class FlowPanel(NamedTuple):
    """What `plot_session` draws of one flow."""
    label: str
    transport: str
    bins: dict[int, int]  # goodput bins so far (endpoints.host.goodput.bin_of -> bytes)
    ev_changes: list[list[Any]]  # [t, ev, old, new] (agent flows)
    evs: list[tuple[int, str]]  # (ev, label) of its EV set; empty for TCP / MPTCP


MAX_EV_ROWS = 24  # a larger set shows only the EVs that changed state


def plot_session(path: Path, flows: list[FlowPanel], t0: float, span_s: float, faults: list[dict[str, Any]],
                 fabric: dict[str, Any]) -> None:
    """A live session's picture (the CLI's `plot`, `Testbed.plot`): every flow's goodput over
    the `span_s` seconds since `t0` (monotonic) with the faults as dashed lines (`faults`: times
    relative to `t0`), then one EV-state panel per flow that has an EV set."""
    with_evs = [f for f in flows if f.evs]
    heights = [3.0] + [0.35 * min(len(f.evs), MAX_EV_ROWS) + 0.9 for f in with_evs]
    fig, axes = pyplot.subplots(len(heights), 1, figsize=(10, sum(heights) + 0.6), dpi=100,
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})
    n = max(1, round(span_s / BIN_S))
    start_bin = int(t0 / BIN_S)
    t = [i * BIN_S for i in range(n)]
    ax = axes[0, 0]
    drawn: list[float] = []
    for i, f in enumerate(flows):
        colour = TRANSPORT_COLOURS.get(f.transport) if len(flows) <= 1 else f"C{i % 10}"
        values = smoothed(series(f.bins, start_bin, n))
        ax.plot(t, values, color=colour, linewidth=1.4, label=f.label)
        drawn += values
    _mark_faults(ax, faults)
    # One flow carries at most one host's NICs: every plane's link.
    scale_to(ax, FabricParams.from_dict(fabric).planes * fabric["link_mbps"], t * len(flows), drawn)
    top = ax.get_ylim()[1]
    marked = [e for e in faults if e["action"] != "restore" or len(faults) < 12][:12]
    for event in marked:
        ax.text(event["t"], top * 0.98, f" {event['action']} {event['target']}", va="top",
                fontsize=6, rotation=90)
    ax.set_ylabel("goodput (Mbit/s)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=7)
    ax.set_title(f"{FabricParams.from_dict(fabric).describe()}; 50 ms average; dashed: faults "
                 "(green: repairs)", fontsize=8, loc="left")
    for ax, f in zip(axes[1:, 0], with_evs, strict=True):
        changed = {c[1] for c in f.ev_changes}
        rows = f.evs if len(f.evs) <= MAX_EV_ROWS else [e for e in f.evs if e[0] in changed]
        _draw_ev_states(ax, f.ev_changes, rows, t0, t0 + span_s)
        for event in faults:
            ax.axvline(event["t"], color="black", linestyle="--", linewidth=0.6)
        shown = "" if len(rows) == len(f.evs) else f" ({len(rows)} of {len(f.evs)}: those that changed)"
        ax.set_title(f"flow {f.label}: EV states{shown}; green GOOD, amber SKIP, red ASSUMED_BAD",
                     fontsize=8, loc="left")
    axes[-1, 0].set_xlim(0, span_s)
    axes[-1, 0].set_xlabel("seconds since the fabric came up")
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)
