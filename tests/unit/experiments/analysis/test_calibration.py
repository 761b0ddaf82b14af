"""The machine's own cost figures: cached with a fingerprint, stale when it no longer matches;
the cost benchmark's fit."""

from __future__ import annotations

import os

import pytest

from experiments.analysis import calibration
from experiments.tools import cost_bench


def test_a_calibration_holds_only_for_the_machine_backend_and_code_it_was_made_on(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    assert calibration.load("linux", path) is None and calibration.stale("linux", path)
    calibration.save({"fingerprint": calibration.fingerprint("linux"), "fixed_cores": 0.2}, path)
    assert calibration.load("linux", path)["fixed_cores"] == 0.2
    assert calibration.load("ovs", path) is None  # another backend
    monkeypatch.setattr(calibration, "code_hash", lambda: "changed")
    assert calibration.stale("linux", path)  # the code that sets the cost changed


def test_each_backend_has_its_own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "RESULTS", tmp_path)
    assert calibration.cache_path("linux") != calibration.cache_path("ovs")
    for backend, cores in (("linux", 0.2), ("ovs", 0.9)):
        calibration.save({"fingerprint": calibration.fingerprint(backend), "backend": backend,
                          "fixed_cores": cores})
    assert calibration.load("linux")["fixed_cores"] == 0.2  # the other's did not overwrite it
    assert calibration.load("ovs")["fixed_cores"] == 0.9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration-linux.json", "calibration-ovs.json"]


def test_the_code_hash_follows_the_agents_code(tmp_path, monkeypatch):
    (tmp_path / "endpoints").mkdir()
    (tmp_path / "endpoints" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(calibration, "REPO", tmp_path)
    monkeypatch.setattr(calibration, "COST_CODE", ("endpoints",))
    before = calibration.code_hash()
    (tmp_path / "endpoints" / "a.py").write_text("x = 2\n")
    assert calibration.code_hash() != before


def test_busy_and_steal_shares():
    # user nice system idle iowait irq softirq steal
    busy, steal = calibration.busy_fraction([0] * 8, [30, 0, 10, 40, 0, 0, 10, 10])
    assert (busy, steal) == pytest.approx((0.5, 0.1))


def _run(rate, pps, busy, faithful=True):
    return {"link_mbps": rate, "delivered_data_pps": pps, "busy_cores": busy, "faithful": faithful}


def test_the_fit_splits_fixed_and_marginal_over_the_faithful_runs():
    runs = [_run(5, 2000, 0.3 + 2000 * 200e-6), _run(10, 4000, 0.3 + 4000 * 200e-6),
            _run(20, 8000, 1.9, faithful=False)]  # saturated: off the line
    got = cost_bench.fit(runs)
    assert got["fixed_cores"] == pytest.approx(0.3) and got["marginal_us_per_packet"] == pytest.approx(200)
    assert got["fitted_rates"] == [5, 10]
    # With fewer than two faithful runs every run counts.
    assert cost_bench.fit([_run(5, 2000, 0.7, False), _run(10, 4000, 1.1, False)])["fitted_rates"] == [5, 10]


def test_a_loaded_machine_calibrates_lower_until_two_runs_are_faithful():
    assert cost_bench.lower_rate([_run(5, 2000, 1.2, False), _run(10, 4000, 1.9, False)]) == 2.5
    assert cost_bench.lower_rate([_run(5, 2000, 0.9), _run(10, 4000, 1.9, False)]) == 2.5
    assert cost_bench.lower_rate([_run(5, 2000, 0.9), _run(10, 4000, 1.3)]) is None  # two faithful
    assert cost_bench.lower_rate([_run(1.5, 600, 1.2, False)]) is None  # nothing lower to try


def test_a_busy_program_is_told_apart_from_the_run(monkeypatch):
    """A process busy before the run (a busy loop) is the machine's load, not the run's; what it
    takes during the run is counted apart."""
    monkeypatch.setattr(calibration.os, "sysconf", lambda name: 100)
    before = {1: 0, 2: 10, 3: 0}
    after = {1: 100, 2: 11, 4: 50}  # over 1 s: pid 1 a whole core, 2 a hundredth, 3 gone, 4 new
    assert calibration.busy_pids(before, after, 1.0) == {1}
    during0, during1 = {1: 100, 5: 0}, {1: 150, 5: 180}  # over 2 s: the loop a quarter of a core
    assert calibration.cores_used({1}, during0, during1, 2.0) == pytest.approx(0.25)
    readings = iter([{7: 0, os.getpid(): 0}, {7: 100, os.getpid(): 100}])
    monkeypatch.setattr(calibration, "process_ticks", lambda: next(readings))
    monkeypatch.setattr(cost_bench.time, "sleep", lambda s: None)
    assert cost_bench.background() == {7}  # the benchmark's own process is never its load


def test_one_reading_of_proc_serves_both_the_run_and_the_user_space_processes(tmp_path, monkeypatch):
    """`processes` reads every process (a kernel thread with an empty command line too; a
    command whose name holds ") " is split at the last parenthesis); `process_ticks` is the same
    reading without the kernel's threads, user and system time added."""
    def stat(pid: int, comm: str, utime: int, stime: int) -> str:
        return f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n"

    for pid, cmdline, comm, utime, stime in ((2, b"", "kthreadd", 3, 40),
                                             (41, b"python3\0-m\0endpoints.host.agent\0", "py) x", 7, 5)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
        (tmp_path / str(pid) / "stat").write_text(stat(pid, comm, utime, stime))
    (tmp_path / "self").mkdir()  # not a process's folder
    (tmp_path / "99").mkdir()  # a process gone between the listing and the reading
    read = calibration.processes(tmp_path)
    assert read == {2: ("", 3, 40), 41: ("python3 -m endpoints.host.agent ", 7, 5)}
    assert read[41].user == 7 and read[41].system == 5
    original = calibration.processes
    monkeypatch.setattr(calibration, "processes", lambda: original(tmp_path))
    assert calibration.process_ticks() == {41: 12}


def test_a_program_the_run_did_not_start_is_not_the_run_even_if_it_starts_during_it(monkeypatch):
    """Only the run's processes (marked, and its runner) and the kernel's threads are the run's:
    a program started mid-run (not busy before it) is counted apart, from its first tick."""
    monkeypatch.setattr(calibration.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(cost_bench.cleanup, "marked_processes", lambda: {20: "run", 21: "run"})
    runner, me = 10, os.getpid()
    before = {runner: ("python -m experiments.cli run", 0, 0), 20: ("agent", 0, 0), 21: ("agent", 0, 0),
              2: ("", 0, 0), 30: ("sshd", 0, 0), me: ("cost_bench", 0, 0)}
    after = {**before, runner: ("python -m experiments.cli run", 20, 0), 20: ("agent", 50, 30),
             21: ("agent", 60, 20), 2: ("", 0, 40), 30: ("sshd", 1, 0), 40: ("mypy", 80, 0)}
    others = cost_bench.strangers({99}, after, runner)
    assert others == {99, 30, 40}  # the busy-before one, a daemon, the newcomer; not ksoftirqd (2)
    # over 2 s: mypy 0.4 of a core from its start, sshd 0.005
    assert calibration.cores_used(others, cost_bench._since(before, after), cost_bench._ticks(after),
                                  2.0) == pytest.approx(0.405)


def test_without_its_own_calibration_a_machine_counts_on_the_committed_reference(tmp_path):
    own, ref = tmp_path / "calibration.json", tmp_path / "cost.json"
    calibration.save({"backend": "linux", "fixed_cores": 0.5, "marginal_us_per_packet": 180.0}, ref)
    got = calibration.effective("linux", own, ref)
    assert got is not None and got["reference"] is True and got["fixed_cores"] == 0.5
    assert calibration.effective("ovs", own, ref) is None  # the reference is another backend's
    calibration.save({"fingerprint": calibration.fingerprint("linux"), "backend": "linux",
                      "fixed_cores": 0.3, "marginal_us_per_packet": 150.0}, own)
    got = calibration.effective("linux", own, ref)
    assert got is not None and "reference" not in got and got["fixed_cores"] == 0.3  # its own first


def test_free_cores_counts_load_that_stays_not_a_burst(monkeypatch):
    """Two cores; each slice of the window adds 100 ticks per core. One core busy throughout
    (a busy loop) counts in every slice; a burst taking the other core in one slice does not."""
    monkeypatch.undo()  # the real free_cores (conftest stands every core free in for it)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(calibration.time, "sleep", lambda s: None)
    busy_per_slice = iter([100, 100, 200, 100, 100])  # user ticks: the third slice has the burst
    state = {"user": 0, "idle": 0}

    def times():
        return [state["user"], 0, 0, state["idle"], 0, 0, 0, 0]

    readings = iter(range(6))

    def reader():
        if next(readings) > 0:
            user = next(busy_per_slice)
            state["user"] += user
            state["idle"] += 200 - user
        return times()

    monkeypatch.setattr(calibration, "machine_times", reader)
    assert calibration.free_cores(window=1.0, parts=5, retries=0) == 1.0


def _machine(monkeypatch, busy_ticks: list[int]):
    """Two cores, 200 ticks a slice: `busy_ticks` of them busy in each slice, in turn; returns
    how many slices were read."""
    monkeypatch.undo()
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(calibration.time, "sleep", lambda s: None)
    state = {"user": 0, "idle": 0, "slices": -1}
    slices = iter(busy_ticks)

    def reader():
        state["slices"] += 1
        if state["slices"] > 0 and state["slices"] % 6 != 0:  # a window's first reading is its start
            user = next(slices)
            state["user"] += user
            state["idle"] += 200 - user
        return [state["user"], 0, 0, state["idle"], 0, 0, 0, 0]

    monkeypatch.setattr(calibration, "machine_times", reader)
    return state


def test_free_cores_watches_again_when_a_burst_outlasts_a_window(monkeypatch):
    # A busy loop (100 ticks a slice) and a burst taking the other core for a whole window: the
    # next window, the burst over, counts.
    _machine(monkeypatch, [200] * 5 + [100] * 5 + [100] * 5)
    assert calibration.free_cores(window=1.0, parts=5) == 1.0
    # Load that stays (both cores busy) reads the same every time: no core free, after 3 windows.
    state = _machine(monkeypatch, [200] * 15)
    assert calibration.free_cores(window=1.0, parts=5) == 0.0 and state["slices"] == 17
    # An idle machine is read once.
    state = _machine(monkeypatch, [10] * 15)
    assert calibration.free_cores(window=1.0, parts=5) == 1.9 and state["slices"] == 5


def test_a_forwarding_calibration_has_a_cache_and_a_fingerprint_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "RESULTS", tmp_path)
    assert calibration.forwarding_path("linux") != calibration.cache_path("linux")
    assert calibration.load_forwarding("linux") is None
    path = calibration.forwarding_path("linux")
    calibration.save({"fingerprint": calibration.fingerprint("linux"), "packet_hops_per_s": 5}, path)
    assert calibration.load_forwarding("linux") is None  # the cost calibration's form: not this
    calibration.save({"fingerprint": calibration.forwarding_fingerprint("linux"), "backend": "linux",
                      "packet_hops_per_s": 5}, path)
    assert calibration.load_forwarding("linux")["packet_hops_per_s"] == 5
    monkeypatch.setattr(calibration, "code_hash", lambda: "changed")
    assert calibration.load_forwarding("linux") is None  # the code that forwards changed


def test_setup_leaves_a_stale_calibration_for_later_while_another_run_holds_the_emulation(
        tmp_path, monkeypatch, capsys):
    """`make setup` beside a run (a `make lint` during a long `make paper` used to start one):
    measuring would read that run's CPU as this machine's and take the emulation from the
    suite's next run, so it waits for a later `make setup`; with the lock free it measures."""
    from topologies import cleanup, switches
    monkeypatch.setattr(switches, "resolve", lambda name: "linux")
    monkeypatch.setattr(calibration, "stale", lambda backend: True)
    monkeypatch.setattr(cleanup, "holder", lambda directory=None: {"pid": 4242})
    measured: list[list[float]] = []

    def run(rates, *args, **kwargs):
        measured.append(rates)
        raise SystemExit("measured")

    monkeypatch.setattr(cost_bench, "run", run)
    monkeypatch.setattr(cost_bench.runctx, "interrupts_raise", lambda: None)
    monkeypatch.setattr(cleanup, "lock_free", lambda directory=None: False)
    assert cost_bench.main(["--calibrate", "--if-stale"]) == 0 and measured == []
    out = capsys.readouterr().out
    assert "stale, not measured now" in out and "pid 4242" in out
    monkeypatch.setattr(cleanup, "lock_free", lambda directory=None: True)
    with pytest.raises(SystemExit):
        cost_bench.main(["--calibrate", "--if-stale"])
    assert measured == [list(cost_bench.CALIBRATE_RATES)]
