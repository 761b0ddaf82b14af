"""cc.png: why a flow is slow. One panel per signal, every QP of one transport's run.

Read from a run's results folder: the agents' traces (`traces/<host>-trace.jsonl`, the
congestion events of endpoints/protocol/events.py), the queue samples
(`traces/host-queues.jsonl`, `traces/switch-queues.jsonl`, topologies/queuesampler.py) and the
summary's `traces` entry (each label's time window and QPs). Panels, top to bottom:

1. congestion window (solid) and packets in flight (dotted)
2. smoothed RTT (solid), median path RTT (dashed), base RTT (dotted); NSCC's target (black)
3. ECN-marked fraction of acknowledgements (the sender's EWMA)
4. every window decrease, by cause (ecn, delay, trim, loss, timeout)
5. EV skips by cause (ecn, trim, delay), EV benchings (x) and timeouts
6. the receivers' SACK cadence: packets per SACK (solid), longest gap between SACKs (dotted)
7. host NIC queues (HTB on each NIC) of the hosts these QPs run on
8. the busiest switch egress ports: HTB backlog (solid) and the eBPF virtual queue (dotted),
   with the marking and trimming thresholds

A panel whose signal is not in the traces says "no data" (a transport without a window, a
run without the eBPF data plane, traces from before these events existed).

cc.png is MRC's QPs' figure when MRC ran (else the first transport's); every other transport's
is cc-LABEL.png (cc-roce.png, cc-tcp.png...). `python -m experiments.analysis.ccplot RESULTS [--label
mrc] [--out FILE]` redraws one label's figure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_QPS = 8  # QPs drawn per figure (a legend past that is unreadable): the first by QP number
BUSIEST_PORTS = 6
MARGIN_S = 0.1  # before a label's window: what its first events follow
TAIL_S = 0.7  # after it: the last packets drain (experiments.scenarios.base.TAIL_S, and slack)
CAUSE_COLOURS = {"ecn": "tab:orange", "delay": "tab:purple", "trim": "tab:green",
                 "loss": "tab:red", "timeout": "black"}
CC_EVENTS = {"cc", "cwnd_dec", "ev_skip", "ev_bad", "floor_hold", "timeout", "sack_cadence",
             "rtt", "ev_state", "retx"}  # the last three: every core's, the fallbacks below

# One switch-queues sample, as its JSON line holds it: ifname -> [qlen, HTB backlog, virtual
# queue (None without the eBPF data plane)].
Ports = dict[str, list[Any]]


@dataclass
class CcData:
    """One label's signals, times in seconds since its start."""
    label: str
    duration: float
    qps: dict[int, tuple[str, str]]  # qpn -> (src, dst)
    events: dict[int, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # qpn -> kind -> records
    hosts: dict[str, list[tuple[float, dict[str, list[int]]]]] = field(default_factory=dict)
    switch: list[tuple[float, Ports]] = field(default_factory=list)

    def of(self, qpn: int, kind: str) -> list[dict[str, Any]]:
        return self.events.get(qpn, {}).get(kind, [])

    def skips(self, qpn: int) -> list[tuple[float, str]]:
        """(t, cause) of every EV skip: `ev_skip`, else the SKIP transitions of `ev_state`
        (cores that trace no cause)."""
        if self.of(qpn, "ev_skip"):
            return [(r["t"], str(r.get("cause"))) for r in self.of(qpn, "ev_skip")]
        return [(r["t"], "cause not traced") for r in self.of(qpn, "ev_state") if r.get("new") == "SKIP"]

    def benchings(self, qpn: int) -> list[tuple[float, str]]:
        """(t, rule) of every EV benched: `ev_bad`, else the ASSUMED_BAD transitions."""
        if self.of(qpn, "ev_bad"):
            return [(r["t"], str(r.get("rule", r.get("reason")))) for r in self.of(qpn, "ev_bad")]
        return [(r["t"], "rule not traced") for r in self.of(qpn, "ev_state")
                if r.get("new") == "ASSUMED_BAD"]

    def timeouts(self, qpn: int) -> list[float]:
        """Times of every RTO expiry: `timeout`, else the distinct times of RTO retransmissions."""
        if self.of(qpn, "timeout"):
            return [r["t"] for r in self.of(qpn, "timeout")]
        return sorted({r["t"] for r in self.of(qpn, "retx") if r.get("reason") == "rto"})


def _json_lines(path: Path) -> Iterable[dict[str, Any]]:
    if not path.exists():
        return
    with path.open() as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed agent
            if isinstance(rec, dict):
                yield rec


def load(results: Path, label: str, summary: dict[str, Any] | None = None) -> CcData:
    """`label`'s signals from a results folder (its summary.json unless given)."""
    if summary is None:
        summary = json.loads((results / "summary.json").read_text())
    info = summary.get("traces", {})
    window = info.get("windows", {}).get(label)
    if window is None:
        raise ValueError(f"no trace window for {label!r} in {results}: choose one of "
                         f"{', '.join(info.get('windows', {})) or '(none: a run from before traces)'}")
    t0, t1 = window
    qps = {int(q): (src, dst) for src, dst, q, *_ in info.get("qps", {}).get(label, [])}
    data = CcData(label, t1 - t0, qps)
    lo, hi = t0 - MARGIN_S, t1 + TAIL_S
    traces = results / "traces"
    hosts = {h for pair in qps.values() for h in pair}
    for host in sorted(hosts):
        for rec in _json_lines(traces / f"{host}-trace.jsonl"):
            kind, qpn, t = rec.get("event"), rec.get("qpn"), rec.get("t")
            if not isinstance(t, (int, float)) or not lo <= t <= hi:
                continue
            if kind in CC_EVENTS and qpn in qps:
                data.events.setdefault(qpn, {}).setdefault(kind, []).append({**rec, "t": t - t0})
            elif kind == "host" and isinstance(rec.get("nics"), dict):  # the agent's own samples
                data.hosts.setdefault(host, []).append((t - t0, rec["nics"]))
    sampled = set(data.hosts)
    for rec in _json_lines(traces / "host-queues.jsonl"):  # the runner's, for the others
        t = rec.get("t", 0.0)
        if lo <= t <= hi:
            for host, nics in rec.get("hosts", {}).items():
                if host in hosts and host not in sampled:
                    data.hosts.setdefault(host, []).append((t - t0, nics))
    for rec in _json_lines(traces / "switch-queues.jsonl"):
        t = rec.get("t", 0.0)
        if lo <= t <= hi:
            data.switch.append((t - t0, rec.get("ports", {})))
    return data


def busiest_ports(switch: list[tuple[float, Ports]], n: int = BUSIEST_PORTS) -> list[str]:
    """The `n` ports with the largest peak HTB backlog (ties: the larger virtual queue)."""
    peak: dict[str, tuple[int, int]] = {}
    for _t, ports in switch:
        for name, (_qlen, backlog, vq) in ports.items():
            old = peak.get(name, (0, 0))
            peak[name] = (max(old[0], backlog), max(old[1], vq or 0))
    ranked = sorted(((v, k) for k, v in peak.items() if v != (0, 0)), reverse=True)
    return [k for _, k in ranked[:n]]


def port_labels(fabric: dict[str, Any] | None) -> dict[str, str]:
    """ifname -> `p0l0-eth3 (p0l0>p0s1)`: which way each switch port sends, from the model."""
    if not fabric:
        return {}
    from topologies.model import Fabric, FabricParams

    out = {}
    for link in Fabric(FabricParams.from_dict(fabric)).links:
        out[link.b_ifname] = f"{link.b_ifname} ({link.b}>{link.a})"
        out[link.a_ifname] = f"{link.a_ifname} ({link.a}>{link.b})"
    return out


def _no_data(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", transform=ax.transAxes, ha="center", va="center",
            color="grey", fontsize=9)


def _legend_or_no_data(ax: Axes, drawn: object, nothing: str, **legend: Any) -> None:
    """The panel's legend (upper right) when it drew something, else why it is empty."""
    if drawn:
        ax.legend(loc="upper right", **legend)
    else:
        _no_data(ax, nothing)


def plot(data: CcData, out: Path, summary: dict[str, Any]) -> Path:
    from experiments.analysis.plots import fabric_label, fidelity_stamp, pyplot  # matplotlib, Agg backend

    qps = sorted(data.qps)[:MAX_QPS]
    fig, axes = pyplot.subplots(8, 1, figsize=(12, 22), dpi=80, sharex=True)
    colour = {q: f"C{i % 10}" for i, q in enumerate(qps)}
    name = {q: f"{data.qps[q][0]}>{data.qps[q][1]}" for q in qps}  # QPNs are long random numbers
    senders = [q for q in qps if data.of(q, "cc")]

    ax = axes[0]
    for q in senders:
        cc = data.of(q, "cc")
        t = [r["t"] for r in cc]
        ax.plot(t, [r.get("cwnd") for r in cc], color=colour[q], lw=1, label=name[q])
        ax.plot(t, [r.get("inflight") for r in cc], color=colour[q], lw=0.6, ls=":")
    _legend_or_no_data(ax, senders, "no congestion window in the traces (no `cc` events)",
                       fontsize=7, ncol=4)
    ax.set_ylabel("cwnd (—), in flight (··)\npackets")

    ax = axes[1]
    sampled = [q for q in qps if data.of(q, "rtt")]
    for q in sampled:  # every RTT sample a SACK gave, faint under the estimates
        ax.scatter([r["t"] for r in data.of(q, "rtt")], [r["rtt"] * 1e3 for r in data.of(q, "rtt")],
                   color=colour[q], s=1, alpha=0.3, label=None if senders else name[q])
    for i, q in enumerate(senders):
        cc = data.of(q, "cc")
        t = [r["t"] for r in cc]
        ms = [[None if r.get(k) is None else r[k] * 1e3 for r in cc]
              for k in ("srtt", "path_rtt", "base_rtt", "target")]
        ax.plot(t, ms[0], color=colour[q], lw=1)
        ax.plot(t, ms[1], color=colour[q], lw=0.6, ls="--")
        ax.plot(t, ms[2], color=colour[q], lw=0.6, ls=":")
        if i == 0:
            ax.plot(t, ms[3], color="black", lw=1.5, label="target")
            ax.legend(fontsize=7, loc="upper right")
    if not senders and sampled:
        ax.legend(fontsize=7, ncol=4, loc="upper right", markerscale=6)
    elif not sampled and not senders:
        _no_data(ax, "no RTT samples or estimates in the traces")
    ax.set_ylabel("RTT ms: samples (.), srtt (—),\nmedian path (--), base (··)")

    ax = axes[2]
    for q in senders:
        cc = data.of(q, "cc")
        ax.plot([r["t"] for r in cc], [r.get("ecn_frac") for r in cc], color=colour[q], lw=1)
    if not senders:
        _no_data(ax, "no ECN fraction in the traces")
    ax.set_ylabel("ECN-marked\nfraction (EWMA)")

    ax = axes[3]
    decreases: dict[Mark, list[tuple[float, float]]] = {}
    for i, q in enumerate(qps):
        for r in data.of(q, "cwnd_dec"):
            cause = str(r.get("cause"))
            decreases.setdefault(Mark(cause, "o", CAUSE_COLOURS.get(cause, "grey"), 12),
                                 []).append((r["t"], i))
    _scatter_rows(ax, decreases, qps, name, 5, "no window decrease recorded")
    ax.set_ylabel("window decreases\nby cause")

    ax = axes[4]
    marks: dict[Mark, list[tuple[float, float]]] = {}
    for i, q in enumerate(qps):
        for when, cause in data.skips(q):
            marks.setdefault(Mark(f"skip: {cause}", "o", CAUSE_COLOURS.get(cause, "grey"), 6),
                             []).append((when, i + 0.15))
        for when, rule in data.benchings(q):
            marks.setdefault(Mark(f"benched: {rule}", "x", "tab:red", 30), []).append((when, i - 0.15))
        for when in data.timeouts(q):
            marks.setdefault(Mark("timeout", "|", "black", 30), []).append((when, i - 0.3))
    _scatter_rows(ax, marks, qps, name, 4, "no EV skipped or benched, no timeout")
    ax.set_ylabel("EV skips (o), benchings (x),\ntimeouts (|)")

    ax = axes[5]
    gap_ax = ax.twinx()
    receivers = [q for q in qps if data.of(q, "sack_cadence")]
    for q in receivers:
        cad = data.of(q, "sack_cadence")
        t = [r["t"] for r in cad]
        ax.plot(t, [r["pkts"] / r["sacks"] if r.get("sacks") else None for r in cad],
                color=colour[q], lw=1)
        gap_ax.plot(t, [(r.get("max_gap") or 0) * 1e3 for r in cad], color=colour[q], lw=0.6, ls=":")
    if not receivers:
        _no_data(ax, "no SACK cadence in the traces (no `sack_cadence` events)")
    ax.set_ylabel("packets per SACK (—)")
    gap_ax.set_ylabel("longest SACK gap ms (··)", fontsize=8)

    ax = axes[6]
    drawn = 0
    for i, (host, rows) in enumerate(sorted(data.hosts.items())):
        planes = sorted({p for _, nics in rows for p in nics})
        for p in planes:
            ax.plot([t for t, _ in rows], [nics.get(p, [0])[0] for _, nics in rows],
                    color=f"C{i % 10}", lw=0.8, ls="-" if p == "0" else "--", label=f"{host} plane {p}")
            drawn += 1
    _legend_or_no_data(ax, drawn, "no host NIC samples (topologies/queuesampler.py)",
                       fontsize=6, ncol=6)
    ax.set_ylabel("host NIC queue\n(packets)")

    ax = axes[7]
    top = busiest_ports(data.switch)
    labels = port_labels(summary.get("fabric"))
    for i, port in enumerate(top):
        t = [s for s, _ in data.switch]
        real = [ports.get(port, [0, 0, None])[1] / 1e3 for _, ports in data.switch]
        vq = [None if ports.get(port, [0, 0, None])[2] is None else ports[port][2] / 1e3
              for _, ports in data.switch]
        ax.plot(t, real, color=f"C{i % 10}", lw=1, label=labels.get(port, port))
        ax.plot(t, vq, color=f"C{i % 10}", lw=0.6, ls=":")
    dp = summary.get("dataplane", {})
    if top and dp.get("mode") == "ebpf":
        for key, style in (("mark_bytes", "--"), ("trim_bytes", "-.")):
            if dp.get(key):
                ax.axhline(dp[key] / 1e3, color="grey", lw=0.8, ls=style,
                           label=key.replace("_bytes", " threshold"))
    _legend_or_no_data(ax, top, "no switch queue samples, or every queue empty", fontsize=6, ncol=3)
    ax.set_ylabel("switch queue KB:\nHTB (—), eBPF vq (··)")
    ax.set_xlabel(f"seconds since {data.label} started")
    ax.set_xlim(-MARGIN_S, data.duration + TAIL_S)

    for event in summary.get("faults", []):
        if event.get("transport") == data.label:
            for a in axes:
                a.axvline(event["t"], color="black", ls="--", lw=0.7)
    fidelity_stamp(axes[0], summary)
    fig.suptitle(f"{summary.get('scenario')} seed {summary.get('seed')}, {data.label}: congestion "
                 f"signals ({fabric_label(summary)}); dashed: faults", fontsize=10, y=0.995)
    # Fixed margins: tight_layout would draw the 8 panels once more just to measure them. The
    # top one leaves the title (0.995 down, one line of 10 pt on 22 in) clear of the first panel.
    fig.subplots_adjust(left=0.11, right=0.92, top=0.96, bottom=0.035, hspace=0.12)
    fig.savefig(out)
    pyplot.close(fig)
    return out


class Mark(NamedTuple):
    """How one group of events is drawn in a panel with a row per QP."""
    label: str
    marker: str
    colour: str
    size: float


def _scatter_rows(ax: Axes, groups: dict[Mark, list[tuple[float, float]]], qps: list[int],
                  name: dict[int, str], ncol: int, nothing: str) -> None:
    """Each group's (t, row) points, its legend entry counting them, one row per QP; `nothing`
    says why a panel without a point is empty."""
    for mark, xy in sorted(groups.items()):
        xs, ys = zip(*xy, strict=True)
        ax.scatter(xs, ys, marker=mark.marker, s=mark.size, color=mark.colour,
                   label=f"{mark.label} ({len(xy)})")
    ax.set_yticks(range(len(qps)), [name[q] for q in qps], fontsize=7)
    ax.set_ylim(-0.7, max(len(qps), 1) - 0.3)
    _legend_or_no_data(ax, groups, nothing, fontsize=7, ncol=ncol)


def figure_name(label: str, first: bool) -> str:
    return "cc.png" if first else f"cc-{label}.png"


def main_label(labels: list[str]) -> str | None:
    """The label whose figure is cc.png, where a reader looks first: MRC's when it ran (the
    demo runs the baseline first), else the first transport's."""
    return "mrc" if "mrc" in labels else (labels[0] if labels else None)


def plot_run(results: Path, summary: dict[str, Any]) -> list[Path]:
    """cc.png for MRC's QPs (`main_label`), cc-LABEL.png for each other label that has QPs
    (cc-roce.png, cc-tcp.png...); returns what was drawn, cc.png first."""
    labels = [lb for lb, qps in summary.get("traces", {}).get("qps", {}).items() if qps]
    first = main_label(labels)
    ordered = sorted(labels, key=lambda lb: lb != first)
    return [plot(load(results, lb, summary), results / figure_name(lb, lb == first), summary)
            for lb in ordered]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.analysis.ccplot",
                                 description="redraw a run's congestion figure (cc.png)")
    ap.add_argument("results", type=Path, help="a run's results folder (results/NAME)")
    ap.add_argument("--label", default=None, help="a transport label of the run (default: the first)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    summary = json.loads((args.results / "summary.json").read_text())
    labels = list(summary.get("traces", {}).get("windows", {}))
    label = args.label or main_label(labels) or ""
    try:
        data = load(args.results, label, summary)
    except ValueError as exc:
        print(f"ccplot: error: {exc}")
        return 2
    out = args.out or args.results / figure_name(label, label == main_label(labels))
    print(plot(data, out, summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
