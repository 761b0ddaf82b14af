"""Plots with matplotlib (Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.metrics import smoothed  # noqa: E402

COLOURS = {"mrc": "#1f77b4", "baseline": "#d62728"}


def plot_recovery(path: Path, curves: dict[str, list[float]], bin_s: float, summary: dict) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    for name, mbps in curves.items():
        t = [i * bin_s for i in range(len(mbps))]
        ax.plot(t, mbps, color=COLOURS.get(name), alpha=0.25, linewidth=0.8)
        rec = summary["transports"][name]["recovery_ms"]
        label = f"{name}: recovery {'never' if rec is None else f'{rec:.0f} ms'}, " \
                f"stall {summary['transports'][name]['stall_ms']:.0f} ms"
        ax.plot(t, smoothed(mbps), color=COLOURS.get(name), linewidth=1.8, label=label)
    failure = summary["failure"]
    detect_s = summary["routing"]["detect_ms"] / 1000
    ax.axvline(failure["at_s"], color="black", linestyle="--", linewidth=1)
    ax.axvline(failure["restored_at_s"], color="green", linestyle="--", linewidth=1)
    ax.axvspan(failure["at_s"], failure["at_s"] + detect_s, color="orange", alpha=0.15,
               label=f"baseline routing detection delay ({detect_s * 1000:.0f} ms)")
    top = ax.get_ylim()[1]
    ax.text(failure["at_s"], top * 0.97, f" cut {failure['link']}", va="top", fontsize=8)
    ax.text(failure["restored_at_s"], top * 0.97, " restored", va="top", fontsize=8, color="green")
    fid = summary["fidelity"]
    if not fid.get("faithful", True):
        ax.text(0.5, 0.5, "EMULATION NOT FAITHFUL:\n" + "\n".join(fid["problems"]),
                transform=ax.transAxes, ha="center", va="center", color="red", fontsize=11,
                alpha=0.6)
    p = summary["fabric"]
    ax.set_title(f"Goodput through a T0-T1 link cut: {p['planes']} planes x {p['leaves']} leaves x "
                 f"{p['spines']} spines, {p['link_mbps']:g} Mbit/s links (50 ms average, 10 ms bins faint)",
                 fontsize=9)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("goodput at receiver (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
