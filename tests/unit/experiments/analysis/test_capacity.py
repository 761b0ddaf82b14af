"""experiments/analysis/capacity.py: what a run asks of the switches against what its backend carries."""

from __future__ import annotations

import json

import pytest

from endpoints.protocol import wire
from experiments.analysis import capacity
from topologies.model import FabricParams

SMALL = FabricParams(planes=4, leaves=4, spines=2, hosts_per_leaf=4, link_mbps=100000.0)
LARGE = FabricParams(planes=8, leaves=8, spines=4, hosts_per_leaf=8, link_mbps=100000.0)
MEASURED = {"ovs": {"16x4": {"packet_hops_per_s": 120000, "fabric": SMALL.as_dict()},
                    "64x8": {"packet_hops_per_s": 60000, "fabric": LARGE.as_dict()}},
            "software": {"python": "3"}}  # not a backend: ignored
REFERENCE = {"ovs": {"16x4": {"packet_hops_per_s": 30000, "fabric": SMALL.as_dict()}},
             "linux": {"64x8": {"packet_hops_per_s": 400000, "fabric": LARGE.as_dict()}}}
MTU = 4096


def test_load_counts_every_nic_of_every_busy_sender_over_three_hops():
    p = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    per_nic = 10e6 / 8 / wire.frame_bytes(MTU)
    assert capacity.load(p, 3, MTU) == pytest.approx(3 * 2 * per_nic * 3 * 1.1)
    assert capacity.load(p, 6, MTU) == pytest.approx(2 * capacity.load(p, 3, MTU))


def test_switch_ports_match_the_model():
    from topologies.model import build

    for p in (SMALL, FabricParams(planes=2, leaves=3, spines=2, hosts_per_leaf=1)):
        fabric = build(p)
        switches = {sw.name for sw in fabric.switches}
        switch_ends = sum((link.a in switches) + (link.b in switches) for link in fabric.links)
        assert capacity.switch_ports(p) == switch_ends


def test_the_smallest_measured_fabric_at_least_as_large_is_used():
    tiny = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    mid = FabricParams(planes=8, leaves=4, spines=2, hosts_per_leaf=4)  # between the two
    huge = FabricParams(planes=8, leaves=16, spines=8, hosts_per_leaf=4)
    assert capacity.capacity("ovs", tiny, MEASURED, REFERENCE)["shape"] == "16x4"
    assert capacity.capacity("ovs", mid, MEASURED, REFERENCE)["shape"] == "64x8"
    got = capacity.capacity("ovs", huge, MEASURED, REFERENCE)  # larger than any: the largest
    assert got == {"packet_hops_per_s": 60000, "forwarding_cores": 0.0, "shape": "64x8",
                   "source": "measured"}


def test_measured_figures_win_then_the_reference_then_nothing():
    assert capacity.capacity("ovs", SMALL, MEASURED, REFERENCE)["source"] == "measured"
    assert capacity.capacity("ovs", SMALL, {}, REFERENCE) == \
        {"packet_hops_per_s": 30000, "forwarding_cores": 0.0, "shape": "16x4", "source": "reference"}
    assert capacity.capacity("linux", SMALL, MEASURED, REFERENCE)["source"] == "reference"
    assert capacity.capacity("other", SMALL, MEASURED, REFERENCE)["source"] == "none"


def test_assess_compares_the_load_with_the_faithful_share():
    p = FabricParams(planes=4, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    need = capacity.load(p, 4, MTU)
    fits = {"ovs": {"x": {"packet_hops_per_s": int(need / capacity.FAITHFUL_SHARE) + 1,
                          "fabric": SMALL.as_dict()}}}
    short = {"ovs": {"x": {"packet_hops_per_s": int(need / capacity.FAITHFUL_SHARE) - 1,
                           "fabric": SMALL.as_dict()}}}
    assert capacity.assess("ovs", p, 4, MTU, fits, {})["within"] is True
    a = capacity.assess("ovs", p, 4, MTU, short, {})
    assert a["within"] is False and a["needed_packet_hops_per_s"] == round(need)
    assert "measured here" in capacity.describe(a) and "ovs" in capacity.describe(a)
    unknown = capacity.assess("other", p, 4, MTU, MEASURED, REFERENCE)
    assert unknown["within"] is True and "unknown" in capacity.describe(unknown)


def test_faithful_rate_is_the_fastest_rung_that_fits():
    p = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=3, link_mbps=1000.0)
    rate = capacity.faithful_rate("ovs", p, 12, MTU, MEASURED, REFERENCE)
    faster = [r for r in capacity.LADDER if r > rate]
    assert capacity.assess("ovs", FabricParams(**{**p.as_dict(), "link_mbps": rate}), 12, MTU,
                           MEASURED, REFERENCE)["within"]
    assert faster and not capacity.assess("ovs", FabricParams(**{**p.as_dict(), "link_mbps": faster[-1]}),
                                          12, MTU, MEASURED, REFERENCE)["within"]
    # 120k x 0.5 / (12 x 2 NICs x 3.3 hops per packet): ~760 frames/s per NIC: 20 Mbit/s.
    assert rate == 20.0
    assert capacity.faithful_rate("ovs", p, 10**6, MTU, MEASURED, REFERENCE) == capacity.LADDER[-1]


# ----- the runner and the CLI read the benchmark's file --------------------------------------
@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A results/bench/dataplane.json with one OVS figure, and no reference."""
    from experiments import runner

    path = tmp_path / "dataplane.json"
    path.write_text(json.dumps({"ovs": {"16x4": {"packet_hops_per_s": 40000, "fabric": SMALL.as_dict()}}}))
    monkeypatch.setattr(runner, "MEASURED_CAPACITY", path)
    monkeypatch.setattr(runner, "REFERENCE_CAPACITY", tmp_path / "missing.json")
    return path


def test_each_kind_counts_its_busy_senders(measured):
    from experiments import runner
    from experiments.scenarios import default_options

    perm = default_options("permutation")
    hosts = perm.fabric.leaves * perm.fabric.hosts_per_leaf
    assert runner.assess_load(perm, "ovs")["busy_senders"] == hosts
    # The crowd shares its receiver's NICs: two hosts' worth, however many send.
    for senders in (4, 7):
        assert runner.assess_load(default_options("incast", senders=senders), "ovs")["busy_senders"] == 2
    assert runner.assess_load(default_options("link-failure"), "ovs")["busy_senders"] == 1
    a = runner.assess_load(perm, "ovs")
    assert (a["source"], a["faithful_packet_hops_per_s"]) == ("measured", 20000)
    assert a["needed_packet_hops_per_s"] == round(capacity.load(perm.fabric, hosts, MTU))


@pytest.mark.parametrize("free", [2.0, 1.0])
def test_link_mbps_auto_picks_the_fastest_faithful_rate(measured, monkeypatch, free):
    """With the cores this machine has free when the run starts (not the machine's load while
    the test runs: another program may keep a core busy)."""
    from experiments import cli, runner
    from experiments.analysis import calibration
    from topologies import switches

    monkeypatch.setattr(switches, "resolve", lambda requested="auto": "ovs")
    monkeypatch.setattr(calibration, "free_cores", lambda window=0.0: free)
    args = cli.make_parser().parse_args(["run", "permutation", "--link-mbps", "auto"])
    opts = cli.run_options(args)
    assert opts.fabric.link_mbps in capacity.LADDER
    assert runner.assess_load(opts, "ovs", free)["within"]
    faster = [r for r in capacity.LADDER if r > opts.fabric.link_mbps]
    from dataclasses import replace

    assert not runner.assess_load(replace(opts, fabric=replace(opts.fabric, link_mbps=faster[-1])),
                                  "ovs", free)["within"]
    with pytest.raises(cli.CliError, match="expected Mbit/s or auto"):
        cli.make_parser().parse_args(["run", "permutation", "--link-mbps", "fast"])



def test_a_run_reads_the_free_cores_once(measured, monkeypatch, tmp_path):
    """Reading the free cores takes 0.75 s: `mrclab run --link-mbps auto` sizes the run on one
    reading, carried in its Options to the load check; a run given a rate (or started from the
    Python API) reads them as it starts, once."""
    from experiments import cli, runner
    from experiments.analysis import calibration
    from topologies import switches

    reads: list[float] = []

    def free_cores(window: float = 0.0) -> float:
        reads.append(window)
        return 1.5

    class Started(Exception):
        pass

    def testbed(*args, **kwargs):
        raise Started  # the load check is done by now; nothing is started

    monkeypatch.setattr(switches, "resolve", lambda requested="auto": "ovs")
    monkeypatch.setattr(calibration, "free_cores", free_cores)
    monkeypatch.setattr(runner, "Testbed", testbed)
    for argv in (["--link-mbps", "auto"], []):  # no rate given: auto under the scenario's
        reads.clear()
        opts = cli.run_options(cli.make_parser().parse_args(["run", "permutation", *argv]))
        assert opts.free_cores == 1.5 and len(reads) == 1
        with pytest.raises(Started):
            runner.execute(opts, tmp_path, lambda line: None)
        assert len(reads) == 1
    assert "free_cores" not in opts.as_dict()  # the summary's config is as it was
    reads.clear()
    given = cli.run_options(cli.make_parser().parse_args(["run", "permutation", "--link-mbps", "5"]))
    assert given.free_cores is None and reads == []
    with pytest.raises(Started):
        runner.execute(given, tmp_path, lambda line: None)
    assert len(reads) == 1
    assert runner.run_free_cores(given) == 1.5

def test_the_agents_are_a_bound_of_their_own():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    per_nic = 10e6 / 8 / wire.frame_bytes(MTU)
    assert capacity.agent_load(p, 8, MTU) == pytest.approx(8 * 2 * per_nic)
    ample = {"linux": {"x": {"packet_hops_per_s": 10**7, "fabric": SMALL.as_dict()}}}
    # Without the cores, only the switches count (as before); with them, the agents too.
    fast = FabricParams(**{**p.as_dict(), "link_mbps": 100.0})
    assert capacity.assess("linux", fast, 8, MTU, ample, {})["within"] is True
    a = capacity.assess("linux", fast, 8, MTU, ample, {}, agent_cores=2)
    assert a["switches_within"] is True and a["agents_within"] is False and a["within"] is False
    # The committed figure counts on a VM a third slower than the one it was measured on.
    assert a["agent_data_pps_faithful"] == round(2 * capacity.AGENT_DATA_PPS_PER_CORE["linux"] * 3 / 4)
    assert "agents send" in capacity.describe(a) and "data packets/s" in capacity.describe(a)
    # What the permutation measured on kernel routers: faithful at 20 Mbit/s, not at 40, on the
    # VM it was measured on; on one a third slower the figure keeps it at 15 (20 is out of
    # reach: 9.5k data packets/s against 7.2k; 15 sends 7.1k); half the cores, half the packets.
    assert capacity.faithful_rate("linux", p, 8, MTU, ample, {}, agent_cores=2) == 15.0
    assert capacity.faithful_rate("linux", p, 8, MTU, ample, {}, agent_cores=1) == 6.0
    per_20 = capacity.agent_load(FabricParams(**{**p.as_dict(), "link_mbps": 20.0}), 8, MTU)
    assert 2 * capacity.agent_pps_per_core("linux") < per_20 <= 2 * capacity.AGENT_DATA_PPS_PER_CORE["linux"]
    assert capacity.faithful_rate("linux", p, 8, MTU, ample, {}) == capacity.LADDER[0]


def test_the_agents_get_the_cores_a_userspace_switch_leaves():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    ample = 10**7  # the switches carry anything: only the agents bind
    bench = {"ovs": {"16x4": {"packet_hops_per_s": ample, "forwarding_cores": 0.98,
                              "fabric": SMALL.as_dict()}},
             "linux": {"16x4": {"packet_hops_per_s": ample, "fabric": SMALL.as_dict()}}}
    ovs = capacity.assess("ovs", p, 8, MTU, bench, {}, agent_cores=2)
    linux = capacity.assess("linux", p, 8, MTU, bench, {}, agent_cores=2)
    assert ovs["forwarding_cores"] == 0.98 and linux["forwarding_cores"] == 0.0
    assert ovs["agent_cores"] == 1.02 and linux["agent_cores"] == 2
    assert ovs["agent_data_pps_faithful"] == round(1.02 * capacity.agent_pps_per_core("ovs"))
    assert capacity.agent_pps_per_core("ovs") == round(capacity.AGENT_DATA_PPS_PER_CORE["ovs"] * 3 / 4)
    # A backend nothing was measured for: the lowest figure.
    assert capacity.agent_pps_per_core("other") == capacity.agent_pps_per_core("ovs")
    # What the default permutation measured: on OVS not faithful at 10 Mbit/s (CPU idle p10 4%),
    # faithful at 5; on kernel routers faithful at 20. Counting on a VM a third slower, each
    # backend's `auto` rate is the ladder's next step down.
    assert not ovs["agents_within"] and linux["agents_within"]
    assert "1.02 cores the ovs switches leave them" in capacity.describe(ovs)
    assert capacity.faithful_rate("ovs", p, 8, MTU, bench, {}, agent_cores=2) == 3.0
    assert capacity.faithful_rate("linux", p, 8, MTU, bench, {}, agent_cores=2) == 15.0
    # A calibration of OVS read the whole machine, its switch processes too: the free cores
    # count whole, not less what the benchmark saw ovs-vswitchd take.
    cal = {**_idle_calibration(), "backend": "ovs"}
    calibrated = capacity.assess("ovs", p, 8, MTU, bench, {}, agent_cores=2, calibration=cal)
    assert calibrated["calibrated"] and calibrated["agent_cores"] == 2
    assert calibrated["cores_allowed"] == pytest.approx(2 * capacity.AUTO_CPU_SHARE)
    # However many cores the benchmark saw the switches take, the agents keep a floor.
    greedy = {"ovs": {"16x4": {**bench["ovs"]["16x4"], "forwarding_cores": 5.0}}}
    floor = capacity.assess("ovs", p, 8, MTU, greedy, {}, agent_cores=2)
    assert floor["agent_cores"] == capacity.MIN_AGENT_CORES



def test_the_agents_cores_are_the_free_ones_calibrated_or_what_forwarding_leaves():
    """One reading of the agents' cores per case: with a calibration of the run's backend,
    every free core (the calibration counted the switches' processes); without one, the free
    cores less the benchmark's forwarding cores, never under the floor."""
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    bench = {"ovs": {"16x4": {"packet_hops_per_s": 10**7, "forwarding_cores": 5.0,
                              "fabric": SMALL.as_dict()}}}
    cal = {**_idle_calibration(), "backend": "ovs"}
    for free in (1.0, 3.0):
        calibrated = capacity.assess("ovs", p, 8, MTU, bench, {}, agent_cores=free, calibration=cal)
        assert calibrated["calibrated"] and calibrated["agent_cores"] == free
        assert calibrated["cores_allowed"] == pytest.approx(free * capacity.AUTO_CPU_SHARE)
    other = capacity.assess("ovs", p, 8, MTU, bench, {}, agent_cores=6.0,
                            calibration={**cal, "backend": "linux"})
    assert not other["calibrated"] and other["agent_cores"] == 1.0  # 6 less 5 forwarding
    floor = capacity.assess("ovs", p, 8, MTU, bench, {}, agent_cores=3.0)
    assert floor["agent_cores"] == capacity.MIN_AGENT_CORES

def _calibration(fixed=0.2, marginal=200.0, backend="linux"):
    """A calibration as `make setup` writes it, measured on the default permutation."""
    fabric = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    return {"backend": backend, "fabric": fabric.as_dict(), "fixed_cores": fixed,
            "marginal_us_per_packet": marginal,
            "runs": [{"busy_cores": 0.7, "delivered_data_pps": 2300},
                     {"busy_cores": 1.3, "delivered_data_pps": 4600}]}


def test_a_calibration_replaces_the_per_core_figures_for_its_backend():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    cal = _calibration()
    a = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal)
    need = capacity.agent_load(p, 8, MTU)
    assert a["calibrated"] is True
    assert a["cores_needed"] == pytest.approx(0.2 + 200e-6 * need, abs=0.01)
    assert a["cores_allowed"] == pytest.approx(2 * capacity.AUTO_CPU_SHARE)
    assert a["agents_within"] is (a["cores_needed"] <= a["cores_allowed"])
    assert "calibration" in capacity.describe({**a, "agents_within": False})
    # The committed reference (another VM of the kind) counts on one a third slower.
    ref = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration={**cal, "reference": True})
    assert ref["cores_needed"] == pytest.approx(4 / 3 * (0.2 + 200e-6 * need), abs=0.01)
    assert ref["calibration_is_reference"] is True and a["calibration_is_reference"] is False
    # Another backend's calibration does not apply: the committed figures count.
    other = capacity.assess("ovs", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal)
    assert other["calibrated"] is False


def test_without_an_idle_reading_the_fits_line_is_the_cost():
    cal = _calibration(fixed=0.4, marginal=100.0)
    small = FabricParams(planes=1, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)  # 2 ports
    big = FabricParams(planes=4, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)  # 32 ports
    for params, ports in ((small, 2), (big, 32)):  # the fixed part grows with host NIC ports
        points = capacity.cost_points(cal, params)
        for pps in (0, 1000, 7000):
            assert capacity.cores_for(points, pps) == pytest.approx(0.4 * ports / 16 + 100e-6 * pps)
    # A fit whose fixed part came out negative (noise): none fixed, the dearest packet measured.
    points = capacity.cost_points(_calibration(fixed=-0.1), big)
    assert capacity.cores_for(points, 0) == 0.0
    assert capacity.cores_for(points, 1000) == pytest.approx(1000 * 0.7 / 2300)


def _idle_calibration(idle=0.05, runs=((2300, 0.7), (4600, 1.0))):
    """A calibration with the idle reading: the cost per packet falls as the rate grows."""
    return {**_calibration(fixed=0.4, marginal=130.0), "idle": {"fabric_and_agents_cores": idle},
            "runs": [{"busy_cores": c, "delivered_data_pps": p, "faithful": True} for p, c in runs]}


def test_the_cost_runs_from_the_idle_reading_through_every_measured_run():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)  # as measured
    points = capacity.cost_points(_idle_calibration(), p)
    assert points == [(0.0, 0.05), (2300.0, 0.7), (4600.0, 1.0)]
    assert capacity.cores_for(points, 0) == pytest.approx(0.05)  # not the fit's 0.4
    assert capacity.cores_for(points, 1150) == pytest.approx((0.05 + 0.7) / 2)
    assert capacity.cores_for(points, 4600) == pytest.approx(1.0)
    # Past the last run: the line from no data through it, dearer than the last step's slope.
    beyond = capacity.cores_for(points, 9200)
    assert beyond == pytest.approx(1.0 + 0.95 / 4600 * 4600)
    assert beyond > 1.0 + (1.0 - 0.7) / 2300 * 4600
    # pps_for is its inverse, and a budget under the idle cost carries nothing.
    for pps in (500.0, 2300.0, 3000.0, 8000.0):
        assert capacity.pps_for(points, capacity.cores_for(points, pps)) == pytest.approx(pps)
    assert capacity.pps_for(points, 0.01) == 0.0
    # The idle part grows with host NIC ports, the rest with the packets.
    big = FabricParams(planes=4, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)  # 2x ports
    assert capacity.cores_for(capacity.cost_points(_idle_calibration(), big), 2300) == pytest.approx(0.75)
    # Noise never makes more packets cheaper; an unfaithful run (saturated) is left out.
    noisy = _idle_calibration(runs=((2300, 0.7), (4600, 0.6)))
    assert [c for _, c in capacity.cost_points(noisy, p)] == [0.05, 0.7, 0.7]
    saturated = _idle_calibration()
    saturated["runs"].append({"busy_cores": 1.1, "delivered_data_pps": 9000, "faithful": False})
    assert capacity.cost_points(saturated, p) == points


def test_a_machine_with_a_core_taken_still_gets_a_usable_rate():
    """A CI rehearsal with a busy loop on one core: its calibration (other programs left out)
    measured 0.71 cores at 2.3k data packets/s and 0.87 at 4.6k, 0.05 with no data moving; the
    fit's line (0.54 + 71 us) left the default permutation 1 Mbit/s of the one free core. From
    the idle reading it gets what the measured runs show fits."""
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=20.0)
    busy = _idle_calibration(idle=0.05, runs=((2313, 0.71), (4609, 0.87)))
    line = {**busy, "fixed_cores": 0.54, "marginal_us_per_packet": 71.0}
    del line["idle"]
    old = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=1.0, calibration=line)
    new = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=1.0, calibration=busy)
    assert old == 1.0 and new >= 4.0
    fits = capacity.assess("linux", FabricParams(**{**p.as_dict(), "link_mbps": new}), 8, MTU, {}, {},
                           agent_cores=1.0, calibration=busy)
    assert fits["within"] and fits["cores_needed"] <= 1.0 * capacity.AUTO_CPU_SHARE


def test_auto_takes_the_free_cores_and_a_ceiling():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    cal = _calibration(fixed=0.2, marginal=200.0)
    idle = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal)
    busy = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=1, calibration=cal)
    assert busy < idle  # a core another program keeps busy is not counted on
    for rate, cores in ((idle, 2), (busy, 1)):
        fits = capacity.assess("linux", FabricParams(**{**p.as_dict(), "link_mbps": rate}), 8, MTU,
                               {}, {}, agent_cores=cores, calibration=cal)
        assert fits["within"] and fits["cores_needed"] <= cores * capacity.AUTO_CPU_SHARE
        faster = [r for r in capacity.LADDER if r > rate][-1]
        over = capacity.assess("linux", FabricParams(**{**p.as_dict(), "link_mbps": faster}), 8, MTU,
                               {}, {}, agent_cores=cores, calibration=cal)
        assert not over["within"]
    cheap = _calibration(fixed=0.0, marginal=1.0)
    assert capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cheap,
                                  ceiling=20.0) == 20.0


def _shared_calibration():
    """As measured on the 2-core VM with every host's agent in one process (2026-12-02): the
    machine 0.41 and 0.65 cores at 2.3k and 4.6k data packets/s, the agents' process 0.33 and
    0.55 of them, 0.04 with no data moving (0.01 of it the fabric)."""
    cal = _idle_calibration(idle=0.04, runs=((2317, 0.41), (4614, 0.65)))
    cal["idle"]["fabric_cores"] = 0.01
    cal["agents"] = "shared"
    for run, process in zip(cal["runs"], (0.33, 0.55), strict=True):
        run["agents_process_cores"] = process
    return cal


def test_one_process_for_every_agent_is_bound_by_its_one_core():
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    cal = _shared_calibration()
    points = capacity.agents_process_points(cal, p)
    assert points == [(0.0, pytest.approx(0.03)), (2317.0, pytest.approx(0.33)),
                      (4614.0, pytest.approx(0.55))]
    # On two free cores the machine's bound (1.2) would take the permutation well past 20
    # Mbit/s; the agents' one process (0.7 of its core) stops it first.
    rate = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal)
    at = capacity.assess("linux", FabricParams(**{**p.as_dict(), "link_mbps": rate}), 8, MTU, {}, {},
                         agent_cores=2, calibration=cal)
    assert at["within"] and at["agents_process_cores_needed"] <= capacity.AGENTS_PROCESS_SHARE
    faster = [r for r in capacity.LADDER if r > rate][-1]
    over = capacity.assess("linux", FabricParams(**{**p.as_dict(), "link_mbps": faster}), 8, MTU, {}, {},
                           agent_cores=2, calibration=cal)
    assert not over["within"] and over["cores_needed"] <= over["cores_allowed"]
    assert over["agents_process_cores_needed"] > capacity.AGENTS_PROCESS_SHARE
    assert "the process that runs every host's agent" in capacity.describe(over)
    # A process per host: no one-core bound, but the calibration's cost times PER_HOST_COST.
    per_host = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal,
                               agents="per-host")
    shared = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal)
    assert "agents_process_cores_needed" not in per_host
    assert per_host["cores_needed"] == pytest.approx(shared["cores_needed"] * capacity.PER_HOST_COST,
                                                     abs=0.01)
    # A calibration made with a process per host (no such reading) applies as before.
    old = {k: v for k, v in cal.items() if k != "agents"}
    assert capacity.agents_process_points(old, p) is None
    assert "agents_process_cores_needed" not in capacity.assess("linux", p, 8, MTU, {}, {},
                                                                agent_cores=2, calibration=old)



def test_a_kind_dearer_per_packet_gets_a_slower_auto_rate():
    """The collectives' agents cost twice the permutation's per packet (allreduce.AGENT_COST):
    `auto` counts each of their packets that many times, on both the machine's and the agents'
    process bounds."""
    from experiments.scenarios import allreduce, default_options

    p = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    cal = _shared_calibration()
    plain = capacity.assess("linux", p, 4, MTU, {}, {}, agent_cores=2, calibration=cal)
    dear = capacity.assess("linux", p, 4, MTU, {}, {}, agent_cores=2, calibration=cal, agent_cost=2.0)
    assert dear["agent_data_pps_needed"] == pytest.approx(2 * plain["agent_data_pps_needed"], abs=1)
    assert dear["agent_cost"] == 2.0
    assert dear["cores_needed"] > plain["cores_needed"]
    assert dear["agents_process_cores_needed"] > plain["agents_process_cores_needed"]
    fast = capacity.faithful_rate("linux", p, 4, MTU, {}, {}, agent_cores=2, calibration=cal)
    slow = capacity.faithful_rate("linux", p, 4, MTU, {}, {}, agent_cores=2, calibration=cal,
                                  agent_cost=2.0)
    assert slow < fast
    # the kinds say it: the collectives of the paper's Figs. 16 and 17, not the others
    assert default_options("allreduce").scenario.kind.agent_cost(default_options("allreduce")) == \
        allreduce.AGENT_COST == 2.0
    assert default_options("alltoall").scenario.kind.agent_cost(default_options("alltoall")) == \
        allreduce.ALLTOALL_AGENT_COST == 3.0
    assert default_options("permutation").scenario.kind.agent_cost(default_options("permutation")) == 1.0

# ----- a split run: each server bounds its own planes ------------------------------------------
SPLIT = FabricParams(planes=4, leaves=2, spines=2, hosts_per_leaf=2, link_mbps=10.0)


def test_a_server_carries_its_planes_share_of_the_load():
    whole = capacity.load(SPLIT, 4, MTU)
    assert capacity.server_load(SPLIT, 4, MTU, 1) == pytest.approx(whole / 4)
    assert capacity.server_load(SPLIT, 4, MTU, 3) == pytest.approx(whole * 3 / 4)
    assert capacity.server_load(SPLIT, 4, MTU, 0) == 0


def test_each_server_is_bounded_by_its_own_figure():
    need_one = capacity.server_load(SPLIT, 4, MTU, 1)  # a plane's load
    fast = int(3 * need_one / capacity.FAITHFUL_SHARE) + 1  # carries three planes, not four
    servers = {"s1": {"planes": [0, 2], "packet_hops_per_s": fast, "source": "calibrated"},
               "s2": {"planes": [1, 3], "packet_hops_per_s": fast, "source": "head"}}
    b = capacity.server_bounds(SPLIT, 4, MTU, servers)
    assert b["s1"]["within"] and b["s2"]["within"] and b["s1"]["source"] == "calibrated"
    assert b["s1"]["needed_packet_hops_per_s"] == round(2 * need_one)
    assert b["s1"]["faithful_packet_hops_per_s"] == round(fast * capacity.FAITHFUL_SHARE)
    # all four planes on s1: over its figure, however much the other could carry
    heavy = {"s1": {**servers["s1"], "planes": [0, 1, 2, 3]}, "s2": {**servers["s2"], "planes": []}}
    b = capacity.server_bounds(SPLIT, 4, MTU, heavy)
    assert not b["s1"]["within"] and b["s2"]["within"] and b["s2"]["needed_packet_hops_per_s"] == 0
    # a figure of 0 is nothing known: within, as an unknown backend is
    unknown = {"s": {"planes": [0], "packet_hops_per_s": 0}}
    assert capacity.server_bounds(SPLIT, 4, MTU, unknown)["s"]["within"]


def test_a_split_runs_switch_bound_is_its_servers_not_the_heads():
    tight = {"s1": {"planes": [0, 1, 2, 3], "source": "calibrated",
                    "packet_hops_per_s": int(capacity.load(SPLIT, 4, MTU) / capacity.FAITHFUL_SHARE) - 1}}
    # the head's figure (MEASURED's 120k) would carry it; s1's own does not
    assert capacity.assess("ovs", SPLIT, 4, MTU, MEASURED, REFERENCE)["switches_within"]
    a = capacity.assess("ovs", SPLIT, 4, MTU, MEASURED, REFERENCE, servers=tight)
    assert a["switches_within"] is False and a["within"] is False
    assert a["servers"]["s1"]["within"] is False
    said = capacity.describe(a)
    assert "server s1 (planes 0,1,2,3)" in said and "its own calibration" in said
    roomy = {"s1": {**tight["s1"], "packet_hops_per_s": 10**9}}
    # ... and a server that carries more than the head's figure lifts the bound
    assert capacity.assess("ovs", replace_rate(SPLIT, 1000.0), 4, MTU, MEASURED, REFERENCE,
                           servers=roomy)["switches_within"]


def replace_rate(p: FabricParams, mbps: float) -> FabricParams:
    return FabricParams(**{**p.as_dict(), "link_mbps": mbps})


def test_auto_picks_the_fastest_rate_every_server_carries():
    per_plane_at_10 = capacity.server_load(SPLIT, 4, MTU, 1)  # linear in the rate
    # s1 carries three planes, s2 one: s2's figure lets 40 Mbit/s through, s1's 10 only
    servers = {"s1": {"planes": [0, 1, 2], "packet_hops_per_s": int(3 * per_plane_at_10 / 0.5) + 1},
               "s2": {"planes": [3], "packet_hops_per_s": int(4 * per_plane_at_10 / 0.5) + 1}}
    assert capacity.faithful_rate("ovs", SPLIT, 4, MTU, {}, {}, servers=servers) == 10.0
    servers["s1"]["packet_hops_per_s"] *= 4
    assert capacity.faithful_rate("ovs", SPLIT, 4, MTU, {}, {}, servers=servers) == 40.0


def test_a_server_without_a_figure_counts_on_the_heads_for_as_many_planes():
    got = capacity.head_figure("ovs", SMALL, 1, MEASURED, REFERENCE)
    assert got == capacity.capacity("ovs", FabricParams(**{**SMALL.as_dict(), "planes": 1}),
                                    MEASURED, REFERENCE)


# ----- a fabric whose queues stand: each packet costs more once they did ------------------------

def test_a_run_counts_the_standing_queues_cost_only_if_it_lasts_past_their_onset():
    """The default permutation's queues may stand `STANDING_ONSET_S` into a run
    (experiments/analysis/standing.py): a run that lasts past it is assessed at the standing
    phase's cost per packet, a shorter one, or a kind whose queues never stand, at the calm one."""
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    cal = {**_shared_calibration(), "standing_queues": {"busy_cores": 1.5, "agents_process_cores": 1.6,
                                                        "saturated": False}}
    onset_s = capacity.STANDING_ONSET_S

    def assess(**kw):
        return capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal, **kw)

    calm = assess()
    short = assess(queues_stand=True, duration=onset_s * 0.9)
    long = assess(queues_stand=True, duration=onset_s * 1.1)
    endless = assess(queues_stand=True, duration=None)
    assert "standing_factors" not in calm and "standing_factors" not in short
    assert short["cores_needed"] == calm["cores_needed"]
    assert long["standing_factors"] == [1.5, 1.6] == endless["standing_factors"]
    assert long["cores_needed"] == pytest.approx(1.5 * calm["cores_needed"], abs=0.01)
    assert long["agents_process_cores_needed"] == pytest.approx(
        1.6 * calm["agents_process_cores_needed"], abs=0.01)
    # a kind whose queues do not stand is never scaled, however long it runs
    assert assess(queues_stand=False, duration=1000.0)["cores_needed"] == calm["cores_needed"]
    # so `auto` picks no faster a rate for a long permutation than for a short one
    fast = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal,
                                  queues_stand=True, duration=1.0)
    slow = capacity.faithful_rate("linux", p, 8, MTU, {}, {}, agent_cores=2, calibration=cal,
                                  queues_stand=True, duration=60.0)
    assert slow < fast


def test_the_standing_factor_is_the_calibrations_unless_it_saw_a_saturated_process():
    assert capacity.standing_factors(None) == capacity.STANDING_COST
    assert capacity.standing_factors({"runs": []}) == capacity.STANDING_COST  # an earlier form
    cheap = {"busy_cores": 1.2, "agents_process_cores": 1.3, "saturated": False}
    assert capacity.standing_factors({"standing_queues": cheap}) == (1.2, 1.3)
    # a process at its ceiling could not show what it needed: the measured ratio is a floor
    capped = {**cheap, "saturated": True}
    assert capacity.standing_factors({"standing_queues": capped}) == capacity.STANDING_COST
    dear = {"busy_cores": 2.4, "agents_process_cores": 2.1, "saturated": True}
    assert capacity.standing_factors({"standing_queues": dear}) == (2.4, 2.1)
    # without a calibration, the per-core figure is divided by the whole machine's factor
    p = FabricParams(planes=2, leaves=4, spines=2, hosts_per_leaf=2, link_mbps=10.0)
    plain = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2)
    stood = capacity.assess("linux", p, 8, MTU, {}, {}, agent_cores=2, queues_stand=True, duration=None)
    assert stood["agent_data_pps_faithful"] == pytest.approx(
        plain["agent_data_pps_faithful"] / capacity.STANDING_COST[0], abs=1)


def test_the_permutation_is_the_kind_whose_queues_stand():
    from experiments.scenarios import default_options

    assert default_options("permutation").scenario.kind.queues_stand is True
    for name in ("incast", "allreduce", "link-failure"):
        assert default_options(name).scenario.kind.queues_stand is False, name
