"""The fidelity verdict on synthetic runs (no root): a run whose link was held below its rate is
not faithful and says why, whatever the CPU idle says; the demo's table says so too."""

from __future__ import annotations

from pathlib import Path

from experiments import runner
from experiments.analysis import fidelity
from experiments.demo import format_table
from experiments.scenarios import default_options
from experiments.scenarios.base import Record
from topologies.switches.base import BOOT_ID


def _cpu(idle: float) -> fidelity.CpuSampler:
    cpu = fidelity.CpuSampler()  # never started: its samples are what the test says
    cpu.samples = [(t / 4, idle) for t in range(40)]
    return cpu


def _verdict(rates: dict[str, float], idle: float = 35.0) -> dict:
    opts = default_options("link-failure")
    record = Record(windows={t: (0.0, 10.0) for t in rates}, link_rates=dict(rates))
    return runner._fidelity(opts, record, _cpu(idle), datapath="kernel")


def test_a_link_held_below_its_rate_is_not_faithful_and_says_why():
    fid = _verdict({"roce": 19.5, "mrc": 17.41})  # the demo: plenty of CPU idle
    assert fid["faithful"] is False
    (problem,) = fid["problems"]
    assert problem.startswith("mrc: the receiver's plane-0 link carried 17.41 of 20 Mbit/s (87%")
    assert fid["per_transport"]["mrc"]["link_mbps_achieved"] == 17.41


def test_full_links_and_plenty_of_cpu_are_faithful():
    fid = _verdict({"roce": 12.0, "mrc": 19.9, "spray": 19.95, "tcp": 19.9, "mptcp": 18.3})
    assert fid["faithful"] is True and fid["problems"] == []


def test_the_floor_is_stated_and_mptcp_has_its_own():
    assert fidelity.LINK_FULL_FLOOR == 0.95
    assert fidelity.link_problem("tcp", 18.9, 20.0) is not None  # 94.5%
    assert fidelity.link_problem("tcp", 19.0, 20.0) is None
    assert fidelity.link_problem("mptcp", 18.3, 20.0) is None  # 91.5%: above its 85%
    assert fidelity.link_problem("mptcp", 16.0, 20.0) is not None
    assert fidelity.link_problem("roce", 1.0, 20.0) is None  # a single window need not fill it
    assert fidelity.link_problem("mrc", None, 20.0) is None  # not measured


def _stolen(peak: float) -> fidelity.CpuSampler:
    cpu = _cpu(35.0)
    cpu.steal_samples = [(t / 4, peak if t == 20 else 1.0) for t in range(40)]
    return cpu


def test_steal_is_recorded_and_names_a_disturbed_run_without_changing_its_verdict():
    """The hypervisor taking the VM's CPU is the machine's doing, not the run's: it is named
    (a test may run such a run again), and the verdict stays what the figures say."""
    opts = default_options("link-failure")
    peak = fidelity.STEAL_DISTURBED_PCT + 5
    for rates, faithful in (({"mrc": 18.6}, False), ({"mrc": 19.9}, True)):
        record = Record(windows={"mrc": (0.0, 10.0)}, link_rates=rates)
        fid = runner._fidelity(opts, record, _stolen(peak), datapath="kernel")
        assert fid["faithful"] is faithful
        (why,) = fid["disturbed"]
        assert why.startswith(f"mrc: the hypervisor took up to {peak}% of the VM's CPU")
        entry = fid["per_transport"]["mrc"]
        assert entry["cpu_steal_max_pct"] == peak and 1.0 < entry["cpu_steal_mean_pct"] < 2.0
    record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 18.6})
    below = runner._fidelity(opts, record, _stolen(fidelity.STEAL_DISTURBED_PCT - 0.5), datapath="kernel")
    assert below["disturbed"] == [] and below["faithful"] is False
    from experiments.report import fidelity_line

    line = fidelity_line({"fidelity": runner._fidelity(opts, record, _stolen(peak), datapath="kernel")})
    assert line.startswith("fidelity: NOT FAITHFUL: mrc: the receiver's plane-0 link carried 18.6")
    assert "; the machine was disturbed: mrc: the hypervisor took" in line


def test_the_sampler_reads_steal_from_proc_stat():
    idle, steal, total = fidelity._cpu_times()
    assert 0 <= steal <= total and 0 < idle <= total


def test_the_demo_says_not_faithful_and_why():
    fid = _verdict({"roce": 19.5, "mrc": 17.41})
    fid.update(cpu_idle_min_pct=27.9, cpu_idle_p10_pct=35.6, link_mbps_achieved=17.41, warnings=[])
    summary = {"transports": {"mrc": {"recovery_ms": 0.0, "stall_ms": 10.0, "goodput_before_mbps": 67.3,
                                      "goodput_during_mbps": 61.9, "data_ok": True}},
               "failure": {"link": "p0l0-p0s1", "at_s": 3.0, "restored_at_s": 6.0},
               "routing": {"detect_ms": 900.0}, "fidelity": fid}
    text = format_table(summary, Path("results/demo"))
    assert "link 17.41/20.0 Mbit/s  NOT FAITHFUL: mrc: the receiver's plane-0 link carried 17.41" in text
    assert "disturbed" not in text
    fid["disturbed"] = ["mrc: the hypervisor took up to 30.0% of the VM's CPU"]
    text = format_table(summary, Path("results/demo"))
    assert text.endswith("17.41 of 20 Mbit/s (87%, below the 95% a full link carries in a faithful run)"
                         "  disturbed: mrc: the hypervisor took up to 30.0% of the VM's CPU\n"
                         "results: results/demo/summary.json, results/demo/recovery.png")


def test_another_programs_busy_loop_counts_as_headroom_and_the_runs_own_processes_do_not():
    """A program that never sleeps takes idle time the run could take back (the verdict reads
    idle plus its share); a process of the run (it carries the run's marker) is the run's load."""
    import os
    import subprocess
    import sys
    import time

    from experiments.analysis import fidelity
    from topologies import cleanup

    loop = [sys.executable, "-c", "while True: pass"]
    env = {k: v for k, v in os.environ.items() if k != cleanup.MARKER}
    other = subprocess.Popen(loop, env=env)
    ours = subprocess.Popen(loop, env={**env, cleanup.MARKER: "test-run"})
    try:
        time.sleep(0.3)  # both busy before sampling starts
        with fidelity.CpuSampler(interval=0.2) as cpu:
            time.sleep(1.3)
    finally:
        other.kill()
        ours.kill()
        other.wait()
        ours.wait()
    assert other.pid in cpu.background and ours.pid not in cpu.background
    # The loop had a core's share of the machine when it could get one: at least half of that.
    share = 100.0 / (os.cpu_count() or 1)
    idle, headroom = cpu.mean_idle(), cpu.low_headroom(q=50)
    assert idle is not None and headroom is not None and headroom >= idle + share / 2


def test_another_machines_cpu_is_read_from_the_lines_its_command_prints_and_stops_with_it():
    """A split fabric's server (here: a local shell standing in for ssh) is sampled as the head
    is, and stopping the sampler ends its command."""
    import time

    loop = ["sh", "-c", f"echo Warning: a banner; cat {BOOT_ID}; "
            "while :; do head -1 /proc/stat; sleep 0.1; done"]
    server = fidelity.RemoteCpu(loop)
    other = fidelity.RemoteCpu(["sh", "-c", "echo 1b4e28ba-2fa1-11d2-883f-0016d3cca427; head -1 /proc/stat"])
    try:
        time.sleep(0.8)
        assert len(server.samples) >= 3 and len(server.steal_samples) == len(server.samples)
        assert all(0.0 <= v <= 100.0 for _, v in server.samples + server.steal_samples)
        # the first line names its kernel: this one's is this machine, another boot's is not
        assert server.same_machine and not other.same_machine and other.boot_id
    finally:
        server.stop()
        other.stop()
    assert server._proc.poll() is not None


def _with_server(idle: float, samples: int = 40, boot_id: str = "") -> fidelity.CpuSampler:
    cpu = _cpu(35.0)
    server = object.__new__(fidelity.RemoteCpu)  # never started: its samples are what the test says
    server.samples = [(t / 4, idle) for t in range(samples)]
    server.steal_samples = []
    server.boot_id = boot_id
    cpu.servers = {"s1": server}
    return cpu


def test_a_busy_server_makes_a_split_run_unfaithful_and_a_silent_one_is_a_warning():
    opts = default_options("link-failure")
    record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 19.9})
    fid = runner._fidelity(opts, record, _with_server(4.0), datapath="kernel")
    assert fid["faithful"] is False
    assert fid["problems"] == ["mrc: server s1's CPU idle was below 4.0% for 10% of the run (< 10.0%)"]
    assert fid["per_transport"]["mrc"]["servers"] == {
        "s1": {"cpu_idle_p10_pct": 4.0, "cpu_idle_mean_pct": 4.0, "samples": 40}}
    fid = runner._fidelity(opts, record, _with_server(50.0), datapath="kernel")
    assert fid["faithful"] is True
    assert fid["per_transport"]["mrc"]["servers"]["s1"]["cpu_idle_p10_pct"] == 50.0
    # A "server" on this very machine (a lab server): its /proc/stat is the head's own, judged
    # by the head's verdict (with other programs' load apart), not a second time without.
    here = Path(BOOT_ID).read_text().strip()
    fid = runner._fidelity(opts, record, _with_server(4.0, boot_id=here), datapath="kernel")
    assert fid["faithful"] is True and fid["per_transport"]["mrc"]["servers"]["s1"] == {
        "cpu_idle_p10_pct": 4.0, "cpu_idle_mean_pct": 4.0, "samples": 40, "same_machine": True}
    fid = runner._fidelity(opts, record, _with_server(4.0, boot_id="1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
                           datapath="kernel")
    assert fid["faithful"] is False  # another machine's busy CPU still counts
    fid = runner._fidelity(opts, record, _with_server(50.0, samples=0), datapath="kernel")
    assert fid["faithful"] is True and "servers" not in fid["per_transport"]["mrc"]
    assert fid["warnings"] == [
        "mrc: server s1's CPU was not sampled (its /proc/stat did not arrive over ssh)"]


def test_the_busiest_agents_process_is_sampled_once_it_starts():
    """The agents start after the sampler (the fabric first): their pids are asked at every
    sample, and a process that works between two samples is read as a share of one core."""
    import os
    import time

    pids: list[int] = []
    sampler = fidelity.CpuSampler(interval=0.05, agent_pids=lambda: list(pids))
    with sampler:
        time.sleep(0.15)
        assert sampler.agent_samples == []  # no agents yet
        pids.append(os.getpid())
        end = time.monotonic() + 0.6
        while time.monotonic() < end:  # this process works: it is the agents' process here
            sum(range(1000))
    busy = sampler.agents_busy()
    assert sampler.agent_samples and busy is not None and 0 < busy <= 100 * (os.cpu_count() or 1)
    assert sampler.agents_busy(start=time.monotonic() + 1) is None  # outside the window: none


def test_a_saturated_agents_process_is_not_faithful_though_the_machine_idles():
    """The default permutation at 20 Mbit/s with one process for every agent: that process at
    0.95 of a core, MRC 0.93 of capacity, the machine 47% idle."""
    opts = default_options("link-failure")
    record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 19.9})
    for busy, faithful in ((97.0, False), (fidelity.AGENTS_BUSY_CEILING_PCT - 5, True)):
        cpu = _cpu(47.0)
        cpu.agent_samples = [(t / 4, busy) for t in range(40)]
        fid = runner._fidelity(opts, record, cpu, datapath="kernel")
        assert fid["faithful"] is faithful, fid
        assert fid["per_transport"]["mrc"]["agents_cpu_p90_pct"] == busy
        if not faithful:
            (problem,) = fid["problems"]
            assert problem.startswith("mrc: the agents' process used 97.0% of a core") and \
                "not the links, set the pace" in problem


def test_senders_that_could_not_use_their_echoes_make_a_run_not_faithful():
    """A run whose MRC senders got SACKs echoing timestamps from their future (the agents'
    former batched refills: 608 RTT samples from about 25,000 SACKs) had a blind congestion
    control, whatever its links and CPU said."""
    opts = default_options("link-failure")
    for unusable, faithful in ((24_800, False), (300, False), (200, True), (0, True)):
        record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 19.9},
                        echoes={"mrc": (unusable, 25_000)})
        fid = runner._fidelity(opts, record, _cpu(35.0), datapath="kernel")
        assert fid["faithful"] is faithful, (unusable, fid["problems"])
        assert fid["per_transport"]["mrc"]["sacks_echo_unusable"] == [unusable, 25_000]
        if not faithful:
            (why,) = fid["problems"]
            assert why.startswith(f"mrc: the senders could use no RTT sample from {unusable} of 25000")
    # No SACKs counted (RoCE, TCP, a run before the counter): nothing to judge.
    assert fidelity.echo_problem("roce", 0, 0) is None


class _Flow(runner.AgentFlow):
    """An agent flow's result without an agent (its stats as the sender's `stats` reply)."""

    def __init__(self, transport: str, stats: dict[str, int], closed_unread: bool = False) -> None:
        self.transport, self.stats, self.closed = transport, stats, closed_unread
        self.final = None

    def result(self):  # type: ignore[override]
        from types import SimpleNamespace

        return SimpleNamespace(detail={"sender_stats": self.stats})


def test_the_echo_counts_sum_the_mrc_and_spray_senders_of_a_transport():
    flows = [_Flow("mrc", {"rtt_unusable": 5, "sacks": 100}),
             _Flow("spray", {"rtt_unusable": 1, "sacks": 50}),
             _Flow("roce", {"rtt_unusable": 9, "sacks": 9}),  # go-back-N has no such counter
             _Flow("mrc", {"rtt_unusable": 7, "sacks": 7}, closed_unread=True), object()]
    assert runner._echo_counts(flows) == (6, 150)


def test_one_stall_in_the_window_is_not_a_link_held_below_its_rate():
    """The window's parts: one part emptied by a stall of the agents' loop leaves the verdict
    faithful (the rehearsal's 18.97 of 20 Mbit/s); a link short in most parts does not."""
    opts = default_options("link-failure")
    stall = [19.9, 19.9, 14.8, 19.9, 19.9]
    record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 18.97}, link_parts={"mrc": stall})
    fid = runner._fidelity(opts, record, _cpu(35.0), datapath="kernel")
    assert fid["faithful"] is True and fid["per_transport"]["mrc"]["link_mbps_parts"] == stall
    for short in ([18.9, 18.8, 18.9, 18.7, 19.9], [14.8, 19.9, 15.0, 19.9, 16.0]):
        record = Record(windows={"mrc": (0.0, 10.0)}, link_rates={"mrc": 18.6}, link_parts={"mrc": short})
        fid = runner._fidelity(opts, record, _cpu(35.0), datapath="kernel")
        (problem,) = fid["problems"]
        assert problem.endswith(f"faithful run; {sorted(short)[2]:g} in most of it)")
    assert fidelity.link_problem("mrc", 18.97, 20.0) is not None  # without parts: the window's rate
