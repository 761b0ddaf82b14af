"""`mrclab run` end to end on short runs: every scenario kind produces its summary contract,
time series, plots, fidelity block and trustworthy bytes; the comparisons the scenarios exist
for hold in direction (MRC rides out what stalls the single-path transports)."""

import json
import re
import subprocess
import sys

import pytest

from endpoints.protocol import wire
from tests.integration.helpers import REPO, again_if_disturbed, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")

# Issue 10's goals, with the slack of one short run on a shared 2-core VM: the permutation's MRC
# >= 0.95 of what the fabric carries (every flow >= 0.85); the 7:1 incast's victim >= 0.95 of
# its goodput alone, the crowd >= 0.9 of the receiver's link, no EV benched, a handful of
# timeouts.
PERMUTATION_MIN, FLOW_MIN = 0.9, 0.8
VICTIM_MIN, CROWD_MIN, BENCHED_MAX, TIMEOUTS_MAX = 0.9, 0.85, 2, 5


def _run(tmp_path, name, backend, *args, timeout=400):
    for attempt in (1, 2):
        out = tmp_path / (name if attempt == 1 else f"{name}-again")
        argv = [sys.executable, "-m", "experiments.cli", "run", name, "--out", str(out),
                "--switch", backend, *args]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        if not again_if_disturbed(summary["fidelity"], attempt):
            break
    _assert_faithful(summary)
    assert (out / "goodput.png").stat().st_size > 10_000
    header = (out / "timeseries.csv").read_text().splitlines()[0]
    assert header.startswith("t_s,")
    for key in ("fabric", "config", "seed", "software", "fidelity", "dataplane", "transports"):
        assert key in summary, key
    assert summary["fidelity"]["per_transport"] and "faithful" in summary["fidelity"]
    assert all(t["data_ok"] is True for t in summary["transports"].values()), summary["transports"]
    assert summary["switch_backend"] == backend == summary["switches"]["switch_backend"]
    _check_traces(summary, out)
    return summary, out


def _assert_faithful(summary):
    """Every figure below is asserted only of a faithful run, and a run that is not faithful is a
    fault of the product itself: its link rate was chosen for this machine (the scenario's rate,
    or less where this machine's calibration and the cores free at the start said so)."""
    fid, cap = summary["fidelity"], summary.get("capacity", {})
    how = ("the committed cost reference" if cap.get("calibration_is_reference") else
           "this machine's calibration") if cap.get("calibrated") else "the committed per-core figures"
    assert fid["faithful"], (
        f"not faithful at {summary['fabric']['link_mbps']:g} Mbit/s, the rate {how} chose "
        f"(free cores {cap.get('agent_cores')}, needed {cap.get('cores_needed')} of "
        f"{cap.get('cores_allowed')} allowed): {fid['problems']}")


def _check_traces(summary, out):
    """Every run keeps its congestion traces and draws cc.png: each transport's window and QPs,
    queue samples of every switch egress port and host NIC taken during the runs, what the
    sampler cost."""
    traces = summary["traces"]
    assert set(traces["windows"]) == set(traces["qps"]) == set(summary["transports"])
    assert all(traces["qps"][label] for label in traces["qps"])
    assert (out / "cc.png").stat().st_size > 20_000
    from experiments.analysis import ccplot

    for label, qps in traces["qps"].items():  # the agents' QPs are found in their traces
        if qps[0][3] in ("mrc", "spray"):
            data = ccplot.load(out, label, summary)
            assert all(data.of(q, "cc") for q in data.qps), label
    for label in list(summary["transports"])[1:]:
        assert (out / f"cc-{label}.png").exists()
    switch = [json.loads(x) for x in (out / "traces" / "switch-queues.jsonl").read_text().splitlines()]
    hosts = [json.loads(x) for x in (out / "traces" / "host-queues.jsonl").read_text().splitlines()]
    fabric = summary["fabric"]
    host_links = fabric["planes"] * fabric["leaves"] * fabric["hosts_per_leaf"]
    egress = host_links + 2 * fabric["planes"] * fabric["leaves"] * fabric["spines"]
    assert switch and all(len(x["ports"]) == egress for x in switch)
    # every host's NICs: from the agents' own samples, or the runner's when no agent ran
    sampled = {h for x in hosts for h in x["hosts"]} | {
        f.name.split("-")[0] for f in (out / "traces").glob("h*-trace.jsonl")
        if re.search(r'"event":\s*"host"', f.read_text())}
    assert len(sampled) == host_links // fabric["planes"]
    # only while a transport runs (its set-up, its tail and the routing pause after it included),
    # as the runner recorded it around each transport
    sampling = traces["sampling"]
    assert set(sampling) == set(traces["windows"])
    assert all(sampling[lb][0] <= traces["windows"][lb][0] for lb in sampling)
    assert all(any(a <= x["t"] <= b for a, b in sampling.values()) for x in switch)
    cost = traces["queue_sampler"]
    assert cost["errors"] == 0 and cost["switch"]["samples"] == len(switch)
    # 50 ms / 20 ms sampling: a few percent of one core at most, even on a busy CPU
    assert cost["core_share_pct"] < 15


def test_link_failure_mrc_rides_through_single_path_transports_stall(tmp_path, switch_backend):
    # The fault at the scenario's 2.5 s: the link-rate check before it needs MRC's links full
    # (with the fault at 1.5 s one rehearsal measured 88% of the plane-0 link).
    s, out = _run(tmp_path, "link-failure", switch_backend, "--transports", "mrc,roce,tcp", "--duration", "6",
                  "--fault-at", "2.5", "--fault-end", "4.5")
    mrc, roce, tcp = (s["transports"][t] for t in ("mrc", "roce", "tcp"))
    for t in (mrc, roce, tcp):
        for key in ("recovery_ms", "stall_ms", "data_ok", "goodput_fraction", "target"):
            assert key in t
    # The routing delay (summary's routing.detect_ms), less what was in flight: when the ECMP
    # hash sends only a flow's acknowledgements across the cut link (the hash is the backend's),
    # its data already sent keeps arriving for up to a queue-inflated round trip after the cut
    # (TCP on kernel routers: 590-760 ms of a 900 ms delay, measured before the routers hashed
    # the packet's own 5-tuple, when TCP could also move itself). Half the delay still tells a
    # single-path stall from MRC's (< 200 ms) and fails if the baseline stops waiting for it.
    floor = s["routing"]["detect_ms"] / 2
    assert roce["stall_ms"] >= floor and tcp["stall_ms"] >= floor
    assert mrc["stall_ms"] < 200
    assert mrc["recovery_ms"] is not None and mrc["recovery_ms"] < 500
    assert (out / "path_state.png").exists()
    cuts = [e for e in s["faults"] if e["action"] == "cut"]
    assert {e["transport"] for e in cuts} == {"mrc", "roce", "tcp"}
    assert_nothing_left()


def test_switch_failure_and_lossy_link(tmp_path, switch_backend):
    # Faults at 2.5 s, as link-failure's above: the link-rate check reads the window from the
    # warm-up to the fault, and with the fault at 1.5 s one second of it let two 25 ms stalls
    # of the agents' loop (CPU idle 82%, no steal) leave the plane-0 link at 94% (a rehearsal,
    # 2026-12-03). The faults last as long as before.
    s, _ = _run(tmp_path, "switch-failure", switch_backend, "--transports", "mrc,roce", "--duration", "6",
                "--fault-at", "2.5", "--fault-end", "4.5")
    fails = [e for e in s["faults"] if e["action"] == "fail_switch"]
    assert fails and all(e["target"].startswith("p0s") for e in fails)
    assert s["transports"]["roce"]["stall_ms"] >= 800
    assert s["transports"]["mrc"]["stall_ms"] < 200
    s, _ = _run(tmp_path, "lossy-link", switch_backend, "--transports", "mrc,spray", "--loss", "0.2",
                "--duration", "6", "--fault-at", "2.5", "--fault-end", "5.8")
    loss = [e for e in s["faults"] if e["action"] == "loss_cleared"]
    assert loss and all(sum(e["dropped"].values()) > 0 for e in loss)  # nftables really dropped
    mrc, spray = s["transports"]["mrc"], s["transports"]["spray"]
    # The goal: MRC keeps 90% of its no-fault goodput at p = 0.2. The state machine benches the
    # lossy path; plain spraying keeps feeding it and pays in losses (which a NIC-bound flow
    # with a large window may or may not feel in goodput).
    assert mrc["goodput_fraction"] >= 0.9
    # How many more spraying loses varies with the backend and the rate (measured, seed 1: 67
    # against 24 at 10 Mbit/s and 130 against 41 at 20 on kernel routers, 60 against 31 at 10
    # on OVS). 1.5 still fails a sender that keeps feeding the lossy path as spraying does
    # (about 1). MRC pays a handful of losses to find the lossy path whatever the rate, spraying
    # in proportion to its traffic: only where spraying met enough of the link's drops does the
    # ratio tell (a machine with a core taken left OVS 1 Mbit/s: 8 lost against 8; 3 Mbit/s: 21
    # against 14).
    dropped = {e["transport"]: sum(e["dropped"].values()) for e in loss}
    if dropped["spray"] >= 40:
        assert spray["sender_stats"]["lost"] > 1.5 * mrc["sender_stats"]["lost"]
    assert_nothing_left()


def test_permutation_incast_collective_and_report(tmp_path, switch_backend):
    # Issue 10's goals on the default fabrics, shortened, at tolerances that still fail if a root
    # cause comes back (before the fixes: MRC 0.70-0.80 of capacity and below RoCE; the incast's
    # crowd 0.65, dozens of timeouts and benched EVs). Seed 3: ECMP collides on this fabric. At
    # the rate each backend carries faithfully (`auto`: the default on kernel routers, less on OVS).
    s, _ = _run(tmp_path, "permutation", switch_backend, "--transports", "mrc,roce", "--duration", "5",
                "--seed", "3", "--link-mbps", "auto")
    for t in s["transports"].values():
        assert 0 < t["throughput_fraction"] <= 1.05 and len(t["flow_goodput_mbps"]) == 8
        # Measured against the frame's own ceiling too: MRC's encapsulation makes it lower.
        assert t["throughput_of_ceiling"] == pytest.approx(
            t["throughput_fraction"] / t["payload_ceiling"], abs=0.002)
    assert s["transports"]["mrc"]["payload_ceiling"] < s["transports"]["roce"]["payload_ceiling"] < 0.97
    mrc, roce = s["transports"]["mrc"], s["transports"]["roce"]
    perm = mrc["permutation"]
    assert sorted(perm) == sorted(perm.values()) and all(a != b for a, b in perm.items())
    assert mrc["throughput_fraction"] >= PERMUTATION_MIN and mrc["flow_fraction_min"] >= FLOW_MIN
    assert mrc["throughput_fraction"] > roce["throughput_fraction"] + 0.1
    s, _ = _run(tmp_path, "incast", switch_backend, "--transports", "mrc", "--senders", "7",
                "--duration", "5", "--fault-at", "1.5", "--fault-end", "4.5")
    variants = set(s["transports"])
    assert variants in ({"mrc"}, {"mrc", "mrc-droptail"})  # both when the eBPF data plane runs
    for t in s["transports"].values():
        assert t["victim_goodput_fraction"] is not None and len(t["senders"]) == 7
    if s["dataplane"]["mode"] == "ebpf":
        trim, drop = s["transports"]["mrc"], s["transports"]["mrc-droptail"]
        assert trim["victim_goodput_fraction"] >= VICTIM_MIN
        assert trim["incast_fraction_of_receiver_link"] >= CROWD_MIN
        assert trim["evs_marked_bad"] <= BENCHED_MAX and trim["timeouts"] <= TIMEOUTS_MAX
        # Trimming no worse than drop-tail (a little slack on the goodputs: one short run each).
        # A victim cannot keep more than all of what it had alone: above 1 is the noise of its
        # alone measurement (a rehearsal: drop-tail 1.033, trimming 0.997), so it counts as 1.
        assert trim["incast_fraction_of_receiver_link"] >= drop["incast_fraction_of_receiver_link"] - 0.03
        assert trim["victim_goodput_fraction"] >= min(drop["victim_goodput_fraction"], 1.0) - 0.03
        assert trim["timeouts"] <= drop["timeouts"] and trim["evs_marked_bad"] <= drop["evs_marked_bad"]
    if s["dataplane"]["mode"] == "ebpf":
        # The switch counters move as an incast makes them: the receiver's port trims (and
        # drops no MRC data: every data packet past the threshold can be cut; on kernel routers
        # none was before the switch program could cut an skb the sending host had flagged
        # encapsulated: 0 trimmed, 6777 dropped, 1805 EVs benched), control packets in the
        # priority class, and no trimming at all while the switches run drop-tail.
        trim, drop = s["transports"]["mrc"]["switch_ports"], s["transports"]["mrc-droptail"]["switch_ports"]
        assert trim["trimmed"] > 0 and trim["dropped"] == 0, trim
        assert trim["control"] > 0 and trim["packets"] > 0
        assert drop["trimmed"] == 0 and drop["packets"] > 0
        assert s["transports"]["mrc"]["trimming"] is True
        assert s["transports"]["mrc-droptail"]["trimming"] is False
    s, out = _run(tmp_path, "collective", switch_backend, "--transports", "mrc", "--steps", "6",
                  "--step-kb", "32")
    t = s["transports"]["mrc"]
    assert t["steps_timed_out"] == 0 and t["steps_timed_out_no_fault"] == 0
    assert 0 < t["step_time_p50_ms_no_fault"] <= t["step_time_p99_ms_no_fault"]
    assert (out / "cdf.png").exists()
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "report", "--results", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report.md").read_text()
    assert "## permutation" in page and "## incast" in page and "## collective" in page
    assert "(collective/cdf.png)" in page
    assert_nothing_left()


def test_ecn_balance_moves_the_first_flows_load_off_the_shared_path(tmp_path, switch_backend):
    """The paper's Fig. 14, short: once the second flow is forced onto one of the first one's
    paths, MRC's ECN skips move the first flow's load off it; spray, with no path state, keeps a
    quarter there. Both keep their goodput before the force."""
    s, out = _run(tmp_path, "ecn-balance", switch_backend, "--duration", "5", "--fault-at", "2")
    mrc, spray = s["transports"]["mrc"], s["transports"]["spray"]
    forces = [e for e in s["faults"] if e["action"] == "force_shared_path"]
    assert sorted(e["transport"] for e in forces) == ["mrc", "spray"]
    assert all(len(e["evs"]) == 1 and abs(e["t"] - 2.0) < 0.1 for e in forces)
    assert (out / "ev_load.png").stat().st_size > 20_000
    for t in (mrc, spray):
        assert t["goodput_fraction_before"] >= 0.9
        assert t["a_shared_share_before"] == pytest.approx(0.25, abs=0.04)  # even spraying
        assert t["b_kept"] == [t["shared_ev"]["b"]]
    assert spray["a_shared_share_after"] == pytest.approx(0.25, abs=0.04)
    # 0.027-0.028 with skips counted in the hot path's round trips (8 s runs, seeds 1-3); 0.08-0.09
    # counted in the QP's RTT; 0.17 before issue 10's fixes (no ACK on CE, one-rotation skips);
    # spray 0.25
    assert mrc["a_shared_share_after"] <= 0.05
    # 0.945 now (spray 0.80); 0.91 with skips in the QP's RTT; 0.84-0.86 before issue 10's fixes
    assert mrc["goodput_fraction"] >= 0.9 and mrc["a_mbps_after"] > 0.9 * 2 * s["fabric"]["link_mbps"]
    # Fig. 14's pair is judged against what can be payload: full encapsulated frames, no SACKs
    assert mrc["payload_ceiling"] == round(wire.payload_ceiling(4096, None), 4)
    assert mrc["goodput_of_ceiling"] == pytest.approx(mrc["goodput_fraction"] / mrc["payload_ceiling"],
                                                      abs=0.002)
    assert_nothing_left()
