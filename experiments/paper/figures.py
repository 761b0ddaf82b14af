"""The paper's figures as the testbed reproduces them: the claim, the runs, the judgement.

Each `Figure` names what the paper showed (arXiv 2605.04333, section 6), the scenario
runs that show the same shape at emulation scale (with a shorter `--quick` form), and `judge`,
which reads the runs' summaries and says what was measured and whether the paper's shape holds,
by thresholds that are the paper's own claim, stated in `claim`. A figure whose runs are not
faithful gets no verdict on its shape (page.py says so). Figures the testbed cannot express yet
have no runs and say what they need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from experiments.scenarios.allreduce import ALGBW_MBPS
from experiments.scenarios.ecnbalance import GOODPUT_OF_CEILING
from experiments.scenarios.evloss import BENCH_RTTS, EV_GAP_MS, LOST_AGE_MS
from experiments.scenarios.incast import INCAST_FRACTION_OF_RECEIVER_LINK, VICTIM_GOODPUT_FRACTION
from experiments.scenarios.permutation import FLOW_FRACTION_MIN, THROUGHPUT_FRACTION, THROUGHPUT_OF_CEILING
from experiments.scenarios.schedule import BINS_WITHIN, WORST_BIN_FRACTION
from experiments.scenarios.schema import (
    A_SHARED_SHARE_AFTER,
    GOODPUT_BEFORE_MBPS,
    GOODPUT_DURING_MBPS,
    GOODPUT_FRACTION,
    STALL_MS,
)

Summary = dict[str, Any]

# The shape thresholds, each the paper's claim in numbers (the figure's `claim` says which).
STEADY_FRACTION = 0.95  # "no steady-state loss": MRC keeps this much of its goodput
VICTIM_FRACTION = 0.95  # "leaves the victim untouched"
CEILING_FRACTION = 0.95  # 390 of 400 Gb/s per flow is 0.975 of line rate: 0.95 of the payload ceiling
SHARED_LEFT = 0.03  # ECN balancing: what A may leave on the path B was forced onto
PAIR_FRACTION = 0.95  # ... while the pair gets this share of what the fabric carries as payload
BIN_S = 0.2  # the paper's bandwidth samples (Fig. 9c): every time series is drawn in these bins


@dataclass(frozen=True)
class Run:
    """One `mrclab run`: its scenario and options, full and `--quick` (added to `args`), and
    what it is called on the figure (its transports' names when empty)."""

    scenario: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class Verdict:
    measured: str  # what the runs showed, in one sentence
    holds: bool  # the paper's shape, by the figure's claim
    figures: dict[str, Any] = field(default_factory=dict)  # the numbers behind it


Judge = Callable[[list[Summary]], Verdict]


@dataclass(frozen=True)
class Figure:
    key: str  # "fig11": the folder results/paper/<key>/ and the name on the command line
    title: str
    paper: str  # what the paper showed (its setup in brief)
    claim: str  # the shape checked here, in numbers
    setup: str  # what runs here and why it differs from the paper's setup
    runs: tuple[Run, ...] = ()
    judge: Judge | None = None
    # "timeseries" (goodput in BIN_S bins, faults marked), "flows", "ev_states" (the
    # timeseries above every EV's state over time, as the paper's Fig. 13) or "algbw" (algorithm
    # bandwidth against message size, a panel per loss rate, as the paper's Fig. 16)
    plot: str = "timeseries"
    needs: str = ""  # for a figure with no runs: what the testbed lacks

    @property
    def expressible(self) -> bool:
        return bool(self.runs) and self.judge is not None


def _t(summary: Summary, transport: str) -> dict[str, Any]:
    out: dict[str, Any] = summary["transports"][transport]
    return out


SENDER_STALL_MS, RECEIVER_STALL_MS = 50.0, 100.0  # Fig. 9a: "each step interrupts briefly"


def _fig9a(s: list[Summary]) -> Verdict:
    """Runs: receiver side with and without port status, then sender side with and without."""
    recv, recv_off, send, send_off = (_t(x, "mrc") for x in s)
    holds = send[STALL_MS] <= SENDER_STALL_MS and recv[STALL_MS] <= RECEIVER_STALL_MS
    return Verdict(f"with port status a NIC port down stalled MRC {send[STALL_MS]:g} ms on the "
                   f"sender's side and {recv[STALL_MS]:g} ms on the receiver's (without: "
                   f"{send_off[STALL_MS]:g} and {recv_off[STALL_MS]:g} ms); goodput while down "
                   f"{send[GOODPUT_DURING_MBPS]:g} / {recv[GOODPUT_DURING_MBPS]:g} Mbit/s (without: "
                   f"{send_off[GOODPUT_DURING_MBPS]:g} / {recv_off[GOODPUT_DURING_MBPS]:g})", holds,
                   {"sender_stall_ms": send[STALL_MS], "receiver_stall_ms": recv[STALL_MS],
                    "sender_stall_ms_without": send_off[STALL_MS],
                    "receiver_stall_ms_without": recv_off[STALL_MS]})


WITHIN = 0.9  # Figs. 9c, 9d, 19: "within 10% of the remaining capacity" in every 200 ms bin


def _schedule(s: list[Summary]) -> Verdict:
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    worst = mrc[WORST_BIN_FRACTION]
    return Verdict(f"MRC's worst 200 ms bin carried {worst} of what the fabric had left "
                   f"({mrc[BINS_WITHIN]:.0%} of bins within 10%), {mrc['faults_applied']} faults "
                   f"applied, longest stall "
                   f"{mrc[STALL_MS]:g} ms; RoCE's worst bin {roce[WORST_BIN_FRACTION]}, stall "
                   f"{roce[STALL_MS]:g} ms", worst is not None and worst >= WITHIN,
                   {"mrc_worst_bin_fraction": worst, "mrc_bins_within": mrc[BINS_WITHIN],
                    "roce_worst_bin_fraction": roce[WORST_BIN_FRACTION]})


def _fig11(s: list[Summary]) -> Verdict:
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    frac = mrc[GOODPUT_DURING_MBPS] / mrc[GOODPUT_BEFORE_MBPS] if mrc[GOODPUT_BEFORE_MBPS] else 0.0
    return Verdict(f"MRC carried {mrc[GOODPUT_DURING_MBPS]:g} of its {mrc[GOODPUT_BEFORE_MBPS]:g} "
                   f"Mbit/s while a spine was down ({frac:.0%}), longest stall {mrc[STALL_MS]:g} ms; "
                   f"RoCE stalled {roce[STALL_MS]:g} ms", frac >= STEADY_FRACTION,
                   {"mrc_during_fraction": round(frac, 3), "mrc_stall_ms": mrc[STALL_MS],
                    "roce_stall_ms": roce[STALL_MS]})


T0_TOLERANCE = 0.1  # Fig. 10: "about one NIC port": during/before within this of 1 - 1/planes


def t0_expected(planes: int) -> float:
    """Fig. 10: the share of its goodput a host keeps with one of its planes' T0 down."""
    return 1 - 1 / planes


def _fig10(s: list[Summary]) -> Verdict:
    """Runs: the receiver's T0 down, then the sender's."""
    fracs, parts = [], []
    for x, side in zip(s, ("receiver's", "sender's"), strict=False):
        mrc = _t(x, "mrc")
        before, during = mrc[GOODPUT_BEFORE_MBPS], mrc[GOODPUT_DURING_MBPS]
        fracs.append(during / before if before else 0.0)
        parts.append(f"{during:g} of {before:g} Mbit/s ({fracs[-1]:.2f}) with the {side} T0 down, "
                     f"stall {mrc[STALL_MS]:g} ms")
    expected = t0_expected(s[0]["fabric"]["planes"])
    holds = all(abs(f - expected) <= T0_TOLERANCE for f in fracs)
    return Verdict(f"MRC carried {'; '.join(parts)}; one port of {s[0]['fabric']['planes']} leaves "
                   f"{expected:.2f}", holds,
                   {"during_fractions": [round(f, 3) for f in fracs], "expected": round(expected, 3),
                    "tolerance": T0_TOLERANCE})


EV_BAD_RTTS = 3.0  # Figs. 12-13: "the EV goes inactive at once": benched within 3 smoothed RTTs


def _fig12(s: list[Summary]) -> Verdict:
    """The bench is timed from the sending of the packet judged lost (the wait for the first
    drop is chance, not the transport's)."""
    mrc = _t(s[0], "mrc")
    rtts, frac, backup = mrc[BENCH_RTTS], mrc[GOODPUT_FRACTION], mrc["backup_label"]
    took_over = backup is not None and bool(mrc["backup_packets_during"]) and not mrc["backup_packets_before"]
    bench = "never benched" if rtts is None else \
        f"benched {mrc[LOST_AGE_MS]:g} ms after the packet it judged lost was sent ({rtts:g} smoothed " \
        f"RTTs of {mrc['srtt_ms']:g} ms; the EV carried a packet every {mrc[EV_GAP_MS]:g} ms; " \
        f"{mrc['bad_after_ms']:g} ms after the loss began)"
    backup_text = f"backup {backup} took its place" if took_over else "no backup took its place"
    return Verdict(f"EV {mrc['ev_label']} dropping: {bench}; {backup_text}; goodput while it dropped "
                   f"{mrc[GOODPUT_DURING_MBPS]:g} of {mrc[GOODPUT_BEFORE_MBPS]:g} Mbit/s ({frac})",
                   rtts is not None and rtts <= EV_BAD_RTTS and took_over and frac is not None
                   and frac >= STEADY_FRACTION,
                   {LOST_AGE_MS: mrc[LOST_AGE_MS], BENCH_RTTS: rtts, "srtt_ms": mrc["srtt_ms"],
                    EV_GAP_MS: mrc[EV_GAP_MS], "bad_after_ms": mrc["bad_after_ms"], "backup": backup,
                    GOODPUT_FRACTION: frac, "dropped": mrc["dropped"]})


def _fig14(s: list[Summary]) -> Verdict:
    mrc = _t(s[0], "mrc")
    left, pair, links = mrc[A_SHARED_SHARE_AFTER], mrc[GOODPUT_OF_CEILING], mrc[GOODPUT_FRACTION]
    return Verdict(f"after B was forced onto A's path, A left {left:.3f} of its data on it and the pair "
                   f"got {pair:.3f} of what the fabric carries as payload ({links:.3f} of the links' "
                   f"rate; A {mrc['a_mbps_after']:g}, B {mrc['b_mbps_after']:g} Mbit/s)",
                   left <= SHARED_LEFT and pair >= PAIR_FRACTION,
                   {A_SHARED_SHARE_AFTER: left, "pair_goodput_of_ceiling": pair,
                    "pair_goodput_fraction": links})


def _fig18(s: list[Summary]) -> Verdict:
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    return Verdict(f"the victim kept {mrc[VICTIM_GOODPUT_FRACTION]:.2f} of its goodput beside MRC's "
                   f"incast ({roce[VICTIM_GOODPUT_FRACTION]:.2f} beside RoCE's); the incast got "
                   f"{mrc[INCAST_FRACTION_OF_RECEIVER_LINK]:.2f} of the receiver's link with MRC, "
                   f"{roce[INCAST_FRACTION_OF_RECEIVER_LINK]:.2f} with RoCE",
                   mrc[VICTIM_GOODPUT_FRACTION] >= VICTIM_FRACTION,
                   {"mrc_victim_fraction": mrc[VICTIM_GOODPUT_FRACTION],
                    "roce_victim_fraction": roce[VICTIM_GOODPUT_FRACTION]})


def _fig20(s: list[Summary]) -> Verdict:
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    return Verdict(f"MRC {mrc[THROUGHPUT_OF_CEILING]:.3f} of the payload ceiling (every flow at least "
                   f"{mrc[FLOW_FRACTION_MIN]:.2f} of its fair share), RoCE "
                   f"{roce[THROUGHPUT_FRACTION]:.3f} of capacity (its weakest flow "
                   f"{roce[FLOW_FRACTION_MIN]:.2f})",
                   mrc[THROUGHPUT_OF_CEILING] >= CEILING_FRACTION
                   and roce[THROUGHPUT_FRACTION] < mrc[THROUGHPUT_FRACTION],
                   {"mrc_of_ceiling": mrc[THROUGHPUT_OF_CEILING],
                    "mrc_flow_min": mrc[FLOW_FRACTION_MIN], "roce_fraction": roce[THROUGHPUT_FRACTION]})


# Fig. 16, each the paper's claim in numbers (issue 21): at 1% loss MRC keeps a quarter of its
# no-loss bandwidth (the paper: "about a third") and beats RoCE at every QP count; at 0.1% it
# keeps 0.9; with no loss one MRC QP is within 3% of RoCE's most QPs and 1.5x RoCE's one QP.
LOSSY_KEEPS, LIGHT_LOSS_KEEPS = 0.25, 0.9
MRC_VS_MOST_QPS, MRC_VS_ONE_QP = 0.97, 1.5


def _over(mrc: float, roce: float) -> float | None:
    """MRC's algorithm bandwidth over RoCE's, 0 being a collective that did not finish: inf when
    RoCE's alone did not (MRC ahead), None when neither did (no lead to claim). Figs. 16 and 17
    read an unfinished RoCE alike."""
    if roce:
        return mrc / roce
    return float("inf") if mrc else None


def _ratio_text(ratio: float | None, who: str) -> str:
    if ratio is None:
        return f"neither MRC nor {who} finished"
    return f"{who} did not finish" if ratio == float("inf") else f"{ratio:.2f}x {who}"


def _ratio_json(ratio: float | None) -> float | None:
    """A ratio as the summary's JSON keeps it: None where it is not a number (the text says
    which), strict JSON having no infinity."""
    return None if ratio is None or ratio == float("inf") else round(ratio, 3)


def _fig16(s: list[Summary]) -> Verdict:
    """At the sweep's largest message size (the paper's claims are about large messages; small
    ones measure the step's latency). An all-reduce that did not finish counts 0: unusable."""
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    size = str(max(mrc["sizes_kb"]))
    none, light, heavy = (f"{r:g}" for r in mrc["loss_rates"])

    def bw(t: dict[str, Any], qps: str, rate: str) -> float:
        return float(t[ALGBW_MBPS][qps][rate][size] or 0.0)

    m0, m_light, m_heavy = (bw(mrc, "1", r) for r in (none, light, heavy))
    counts = sorted(roce[ALGBW_MBPS], key=int)
    most = counts[-1]
    keeps, keeps_light = (m_heavy / m0, m_light / m0) if m0 else (0.0, 0.0)
    roce_heavy = {q: bw(roce, q, heavy) for q in counts}
    vs_most = _over(m0, bw(roce, most, none))
    vs_one = _over(m0, bw(roce, "1", none)) if "1" in counts else None
    checks = [keeps >= LOSSY_KEEPS, all(m_heavy > v for v in roce_heavy.values()),
              keeps_light >= LIGHT_LOSS_KEEPS, vs_most is not None and vs_most >= MRC_VS_MOST_QPS,
              vs_one is not None and vs_one >= MRC_VS_ONE_QP]
    heavy_pct, light_pct = f"{float(heavy):.1%}", f"{float(light):.1%}"
    # RoCE's own share kept: the paper's "unusable" is a fact to show beside the verdict
    roce_text = ", ".join(f"{q} QP(s) {v:g} ({v / bw(roce, q, none):.2f} of its no-loss)"
                          if bw(roce, q, none) else f"{q} QP(s) {v:g}" for q, v in roce_heavy.items())
    against = f"{_ratio_text(vs_most, f'RoCE with {most} QPs')} and {_ratio_text(vs_one, 'RoCE with 1')}"
    return Verdict(f"at {size} KB per host: with no loss MRC {m0:g} Mbit/s, {against}; "
                   f"at {light_pct} loss at every NIC MRC kept {keeps_light:.2f} of it; at {heavy_pct} "
                   f"it kept {keeps:.2f} ({m_heavy:g} Mbit/s) against RoCE's {roce_text}", all(checks),
                   {"size_kb": int(size), "mrc_no_loss_mbps": m0, "mrc_kept_light": round(keeps_light, 3),
                    "mrc_kept_heavy": round(keeps, 3), "roce_heavy_mbps": roce_heavy,
                    "mrc_vs_roce_most_qps": _ratio_json(vs_most),
                    "mrc_vs_roce_one_qp": _ratio_json(vs_one),
                    "roce_unfinished_no_loss": [int(q) for q in counts if not bw(roce, q, none)],
                    "roce_most_qps": int(most)})


def _fig17(s: list[Summary]) -> Verdict:
    """MRC against RoCE's best QP count at every size and loss rate (`_over`: an unfinished
    collective counts 0); the lowest ratio decides, neither finishing lowest of all, and the
    lowest under loss (the paper's emphasis) is said beside it."""
    mrc, roce = _t(s[0], "mrc"), _t(s[0], "roce")
    ratios = []  # (MRC over RoCE's best, loss rate, size KB)
    for rate, by_size in mrc[ALGBW_MBPS]["1"].items():
        for size, value in by_size.items():
            best = max(float(roce[ALGBW_MBPS][q][rate][size] or 0.0) for q in roce[ALGBW_MBPS])
            ratios.append((_over(float(value or 0.0), best), rate, size))

    def lowest(r: tuple[float | None, str, str]) -> float:
        return -1.0 if r[0] is None else r[0]

    ratio, rate, size = min(ratios, key=lowest)
    lossy = min((r for r in ratios if float(r[1]) > 0), key=lowest, default=None)
    under_loss = "" if lossy is None else \
        f"; under loss lowest at {lossy[2]} KB with {float(lossy[1]):.1%}: {_ratio_text(lossy[0], 'RoCE')}"
    counts = ", ".join(sorted(roce[ALGBW_MBPS], key=int))
    return Verdict(f"MRC's algorithm bandwidth over RoCE's best ({counts} QPs) was lowest at {size} KB "
                   f"per host with {float(rate):.1%} loss at every NIC: {_ratio_text(ratio, 'RoCE')}"
                   f"{under_loss}",
                   ratio is not None and ratio > 1.0,
                   {"mrc_over_roce_best_min": _ratio_json(ratio), "at_size_kb": int(size),
                    "at_loss": float(rate),
                    "under_loss_min": None if lossy is None else _ratio_json(lossy[0])})


_SHORT_FAULT = ("--duration", "5", "--fault-at", "1.5", "--fault-end", "3.5")
# Fig. 9a's quick form keeps the default fault time: the link-rate check before the fault needs
# MRC to have filled its links (at 1.5 s one run carried 84% of its plane-0 link).
_PORT_QUICK = ("--duration", "6", "--fault-at", "2.5", "--fault-end", "4.5")
# Fig. 12's EV set: 2 EVs per plane (one per spine), one active and one backup.
EV_SET = ("--param", "ev_set_size=16", "--param", "active_fraction=0.5", "--param", "backup_min_paths=2")

FIGURES: tuple[Figure, ...] = (
    Figure("fig9a", "a NIC port down and up",
           "Cluster B, 8 x 100G planes, NIC-T0 links down and up one after another: each step "
           "interrupts for less than a second; a failed port is announced to peers in SACKs",
           f"with port status, a NIC port down stalls MRC at most {SENDER_STALL_MS:g} ms on the "
           f"sender's side and {RECEIVER_STALL_MS:g} ms on the receiver's",
           "port-failure on the default fabric (4 planes: one port is a quarter of a host's "
           "bandwidth, the paper's one of 8), the receiver's port then the sender's, each with port "
           "status and without (--port-status off)",
           tuple(Run("port-failure", (*side, *status, "--transports", "mrc"), _PORT_QUICK, label)
                 for side, side_name in (((), "receiver"), (("--link", "h0-p0l0"), "sender"))
                 for status, label in (((), f"{side_name}'s port, port status"),
                                       (("--port-status", "off"), f"{side_name}'s port, no port status"))),
           _fig9a),
    Figure("fig9b", "half of a host's NIC links flapping",
           "4 of 8 NIC links flapped: bandwidth settles near half by about 5 s and recovers fully",
           "MRC within 10% of the remaining capacity in every 200 ms bin",
           "port-flaps on the default fabric: the sender's NIC ports on 2 of its 4 planes flap "
           "together once a second, 300 ms down, with port status",
           (Run("port-flaps", ("--transports", "mrc,roce"),
                ("--duration", "6", "--fault-at", "1.5", "--fault-end", "5")),), _schedule),
    Figure("fig9c", "20 T0-T1 links down, one per second",
           "bandwidth sampled every 200 ms: minimal impact",
           "MRC within 10% of the remaining capacity in every 200 ms bin",
           "link-cascade on the default fabric: of its 24 T0-T1 links, 16 go down one per second in a "
           "seeded order (never a leaf's last uplink of a plane: the paper's fabric had hundreds), "
           "MRC against RoCE",
           (Run("link-cascade", ("--transports", "mrc,roce"),
                ("--fault-count", "8", "--fault-every", "0.5", "--duration", "7")),), _schedule),
    Figure("fig9d", "8 T0-T1 links flapping together", "negligible impact",
           "MRC within 10% of the remaining capacity in every 200 ms bin",
           "flap-together on the default fabric: 8 of its 24 T0-T1 links flap together once a second, "
           "300 ms down", (Run("flap-together", ("--transports", "mrc,roce"),
                               ("--duration", "6", "--fault-at", "1.5", "--fault-end", "5")),), _schedule),
    Figure("fig10", "a T0 (leaf) down", "Cluster B, 8 x 100G planes: steady state drops by about "
           "one NIC port (100 of 800 Gb/s); every host under the T0 sees its port on that plane down",
           f"MRC keeps 1 - 1/planes of its goodput (0.75 on 4 planes) within {T0_TOLERANCE:g}, with "
           f"the receiver's T0 down and with the sender's",
           "t0-failure on the default fabric (4 planes x 2 leaves x 3 spines, one host per leaf: one "
           "plane is a quarter of a host's bandwidth, the paper's one of 8): a plane-0 leaf's every "
           "link cut (its hosts lose carrier on plane 0, port status tells the peer), then restored; "
           "the receiver's leaf, then the sender's",
           tuple(Run("t0-failure", ("--transports", "mrc", *leaf), _PORT_QUICK, label)
                 for leaf, label in (((), "receiver's T0"), (("--fail-switch", "p0l0"), "sender's T0"))),
           _fig10),
    Figure("fig11", "a T1 (spine) down", "Cluster B: no steady-state loss while a T1 is down",
           f"MRC keeps at least {STEADY_FRACTION:.0%} of its goodput while the spine is down",
           "switch-failure on the default fabric (4 planes x 2 leaves x 3 spines, one host per leaf: "
           "12 paths per host pair; the paper: 8 planes of 100G), MRC against single-path RoCE",
           (Run("switch-failure", ("--transports", "mrc,roce"), _SHORT_FAULT),),
           _fig11),
    Figure("fig12", "one EV dropping 20% in a 16-EV set (and Fig. 13, the EVs' states)",
           "Cluster B, EV set of 2 per plane x 8 planes (one active, one backup): the lossy EV goes "
           "inactive at once, a backup of its plane takes over, line rate holds",
           f"the lossy EV ASSUMED_BAD within {EV_BAD_RTTS:g} smoothed RTTs of sending the packet it "
           f"judged lost, a "
           f"backup of its plane carrying its share, goodput >= {STEADY_FRACTION} of before",
           "ev-loss on 8 planes x 2 leaves x 2 spines, one host per leaf (the fewest hosts, 2 EVs per "
           "plane as the paper's 16; links at 10 Mbit/s, so the host's 8 ports carry what the default "
           "fabric's 4 do at 20, or slower where `mrclab run` finds that not faithful on this VM), "
           "EV set --param active_fraction=0.5 backup_min_paths=2: the sender's "
           "active plane-0 EV drops 20% (an nftables rule on its leaf's uplink, that way only)",
           (Run("ev-loss", ("--transports", "mrc", *EV_SET), ("--duration", "5", "--fault-at", "2",
                                                             "--fault-end", "4")),),
           _fig12, plot="ev_states"),
    Figure("fig14", "ECN load balancing", "a second flow forced onto the first one's EV: the first "
           "moves to another EV with no visible dip",
           f"A leaves at most {SHARED_LEFT} of its data on the shared path and the pair gets at least "
           f"{PAIR_FRACTION} of what the fabric carries as payload",
           "ecn-balance on 2 planes x 2 leaves x 2 spines x 2 hosts per leaf: the smallest fabric with a "
           "path to share and another to move to",
           (Run("ecn-balance", ("--transports", "mrc")),), _fig14),
    Figure("fig16", "ring all-reduce under loss at every NIC",
           "64 GPUs, 4 MB-16 GB messages, loss 0 / 0.1% / 1% at every NIC on every plane: RoCE with "
           "1 QP gets about half, more QPs stop helping beyond 8, one MRC QP beats 16 RoCE QPs; at "
           "1% RoCE is unusable and MRC keeps about a third",
           f"at the largest size: at 1% loss MRC >= {LOSSY_KEEPS:g} of its no-loss bandwidth and above "
           f"RoCE at every QP count; at 0.1% >= {LIGHT_LOSS_KEEPS:g} of it; with no loss one MRC QP >= "
           f"{MRC_VS_MOST_QPS:g}x RoCE with its most QPs (16) and >= {MRC_VS_ONE_QP:g}x RoCE with 1",
           "allreduce on 2 planes x 2 leaves x 2 spines x 2 hosts per leaf (a 4-host ring; 4 paths per "
           "host pair), messages of 128 KB-2 MB per host (quick: 32-512 KB), loss by nftables rules "
           "on every host link's leaf port both ways, RoCE with 1, 4 and 16 QPs per host pair "
           "(quick: 1 and 16) spread over the planes, one MRC QP; an all-reduce not done in 20 s "
           "counts as unusable",
           (Run("allreduce", ("--transports", "mrc,roce"), ("--step-kb", "512", "--qps", "1,16")),),
           _fig16, plot="algbw"),
    Figure("fig17", "all-to-all", "MRC wins at every message size, most at small messages under "
           "loss; 16 RoCE QPs do slightly worse than 1",
           "MRC above RoCE (its best QP count) at every message size and loss rate",
           "alltoall on Fig. 16's fabric (4 hosts, every host writing S/4 to each other at once), its "
           "sizes, loss at every NIC and QP counts (quick: 1 and 16)",
           (Run("alltoall", ("--transports", "mrc,roce"), ("--step-kb", "512", "--qps", "1,16")),),
           _fig17, plot="algbw"),
    Figure("fig18", "incast beside a victim flow",
           "7 senders into one receiver plus a victim in the same rack: DCQCN costs the victim; MRC "
           "leaves it untouched",
           f"the victim keeps at least {VICTIM_FRACTION:.0%} of its goodput beside MRC's incast",
           "incast on 2 planes x 2 leaves x 5 spines x 5 hosts per leaf (the paper's 7 senders "
           "across the spine, at emulation scale), MRC against RoCE",
           (Run("incast", ("--transports", "mrc,roce"),
                ("--duration", "5", "--fault-at", "1.5", "--fault-end", "4.5")),), _fig18),
    Figure("fig19", "progressive uplink failures", "3 of 4 T0-T1 uplinks failed in turn: "
           "throughput tracks the remaining capacity", "MRC within 10% of the remaining capacity "
           "in every 200 ms bin", "uplink-failures on the default fabric: the sending leaf's uplinks in "
           "2 of 4 planes down one per second, then back one per second (capacity steps 4 -> 3 -> 2 "
           "planes and back: one host per leaf has 3 uplinks per plane)",
           (Run("uplink-failures", ("--transports", "mrc,roce"),
                ("--fault-every", "0.5", "--duration", "8")),),
           _schedule),
    Figure("fig20", "permutation", "two racks send to the other two: single-QP RoCE flows get 1/2 or "
           "1/3 of line rate; MRC 390 of 400 Gb/s on every flow",
           f"MRC at least {CEILING_FRACTION} of its payload ceiling, above RoCE",
           "permutation on 2 planes x 4 leaves x 2 spines x 2 hosts per leaf, seed 3 (ECMP collides "
           "on it, as the paper's RoCE flows did)",
           (Run("permutation", ("--transports", "mrc,roce", "--seed", "3"), ("--duration", "5")),),
           _fig20, plot="flows"),
)

BY_KEY = {f.key: f for f in FIGURES}
