"""`make soak`: a mix of scenarios run again and again with faults injected into the testbed
itself, checking after each that nothing is left and earlier results are intact, and that the
clean runs' figures agree.

    python -m experiments.tools.soak [--runs 20] [--seed 1] [--out results/soak]

Each run is `mrclab run` as a user starts it, with short durations (one of them keeping a
capture), or an `mrclab cli` session running a script (a loss rule and a transfer). Faults, at
a random moment while traffic flows (seeded): none, kill -9 of the run, SIGINT, SIGINT twice
(the second during the teardown), kill -9 of the controller, kill -9 of an agent; a session
meets none, kill -9, SIGTERM, or SIGHUP then SIGTERM during its teardown. After a kill -9 of the run, half
the time `mrclab clean` removes what it left, the other half the next run's start does (checked
after that run). After each run: no bridge, interface, namespace, nftables table, stale BPF
pin, process of a run, registered or staging folder, or held lock (`topologies.cleanup.
leftovers`, and a check of its own for staging folders); the earlier result in the run's
folder is byte for byte what it was, unless the run completed; the exit status and the one-line
error are what that fault must give. Clean runs of a scenario must agree on its figures within
`TOLERANCE` of their median: a run poisoned by a predecessor's leftovers would not (a leftover
loss rule cost roce 2.67 of 9.7 Mbit/s).

results/soak/report.json and report.md say what held, run by run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiments.outdir import REPO, RESULTS
from experiments.scenarios.permutation import THROUGHPUT_FRACTION
from experiments.scenarios.schema import DATA_OK, GOODPUT_BEFORE_MBPS
from topologies import cleanup, files, runctx

SOAK_RESULTS = RESULTS / "soak"
FAULTS = ("none", "kill_run", "sigint", "double_sigint", "kill_controller", "kill_agent")
# Short runs of three scenarios (a fault, random loss, many flows): seconds each; one keeps a
# capture (its tcpdump is a process of the run too, and its pcap moves into the result).
SCENARIOS: dict[str, list[str]] = {
    "link-failure": ["--transports", "mrc,roce", "--duration", "3", "--fault-at", "1",
                     "--fault-end", "2", "--capture", "h0-eth0"],
    "lossy-link": ["--transports", "mrc,roce", "--duration", "3", "--fault-at", "1.5",
                   "--fault-end", "2.8"],
    "permutation": ["--transports", "mrc", "--duration", "2.5"],
}
# And an interactive session, `mrclab cli` running a script: a loss rule (the nftables table a
# killed run must not leave to the next fabric) and a transfer through it. The console ends on
# SIGTERM or SIGHUP (Ctrl-C stops one command, not the session): those replace SIGINT.
CLI = "cli"
CLI_ARGS = ["--planes", "1", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "1"]
CLI_SCRIPT = "loss p0l0-p0s0 0.2\nsend h0 h1 8M\n"  # ~4 s: faults come within 2 s
CLI_SIGNALS = {"sigint": signal.SIGTERM, "double_sigint": signal.SIGHUP}
CLI_FAULT_NAMES = {"sigint": "sigterm", "double_sigint": "sighup_then_sigterm"}  # in the report
CLI_FAULTS = ("none", "kill_run", "sigint", "double_sigint")
# Headline figures clean runs must agree on (relative to their median), per scenario.
FIGURES = {"link-failure": [("mrc", GOODPUT_BEFORE_MBPS), ("roce", GOODPUT_BEFORE_MBPS)],
           "lossy-link": [("mrc", GOODPUT_BEFORE_MBPS), ("roce", GOODPUT_BEFORE_MBPS)],
           "permutation": [("mrc", THROUGHPUT_FRACTION)]}
TOLERANCE = 0.15
EXPECTED = {"none": (0,), "kill_run": (-9,), "sigint": (130,), "double_sigint": (130,),
            "kill_controller": (1,), "kill_agent": (1,)}


@dataclass
class RunRecord:
    index: int
    scenario: str
    fault: str
    inject_after_s: float | None
    exit_status: int | None = None
    last_line: str = ""
    expected_exit: bool = False
    error_line_ok: bool = True
    cleaned_by: str = ""  # "teardown", "mrclab clean", "next start"
    leftovers: dict = field(default_factory=dict)
    earlier_result_intact: bool | None = None
    completed: bool = False
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0
    ok: bool = False


def plan(runs: int, rng: random.Random) -> list[tuple[str, str]]:
    """(scenario, fault) for each run: every fault kind, at least two clean runs of each
    scenario, and (from 5 runs) `mrclab cli` sessions, one per kind of end they can meet, spread
    over the soak, in a seeded order."""
    sessions = min(len(CLI_FAULTS), runs // 5)
    runs -= sessions
    names = list(SCENARIOS)
    faults = ["none"] * max(2 * len(names), runs // 3)
    faults += [FAULTS[1 + i % (len(FAULTS) - 1)] for i in range(runs - len(faults))]
    faults = faults[:runs]
    rng.shuffle(faults)
    out, clean_seen = [], dict.fromkeys(names, 0)
    for i, fault in enumerate(faults):
        name = names[i % len(names)]
        if fault == "none":  # spread the clean runs evenly over the scenarios
            name = min(names, key=lambda n: (clean_seen[n], names.index(n)))
            clean_seen[name] += 1
        out.append((name, fault))
    cli = [(CLI, fault) for fault in CLI_FAULTS[:sessions]]
    rng.shuffle(cli)
    for k, session in enumerate(cli):
        out.insert(k * (len(out) + 1) // len(cli) + k // 2, session)
    return out


def _digest(folder: Path) -> str | None:
    if not folder.exists():
        return None
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _run_pids(module: str, run_pid: int) -> list[int]:
    """Processes that run `python -m module` for the run of process `run_pid`, once it holds
    the lock (the registry may still name a killed predecessor, whose processes live on until
    the next start removes them)."""
    holder = cleanup.holder()
    if holder.get("pid") != run_pid:
        return []
    rid = holder.get("run")
    out = []
    for pid, marker in cleanup.marked_processes().items():
        if marker != rid:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if module.encode() in argv:
            out.append(pid)
    return sorted(out)


def _left(folder: Path) -> dict:
    left = {k: v for k, v in cleanup.leftovers().items() if v}
    staging = [str(p) for p in folder.parent.glob(f".{folder.name}-*")]
    if staging:
        left["staging"] = staging
    return left


def one_run(index: int, scenario: str, fault: str, out: Path, rng: random.Random,
            clean_after_kill: bool) -> RunRecord:
    folder = out / "runs" / (scenario if fault != "kill_controller" else f"{scenario}-controller-killed")
    before = _digest(folder)
    session = scenario == CLI
    if session:  # a session writes no result: `folder` must simply stay as it was (absent)
        script = out / "cli-script.txt"
        script.write_text(CLI_SCRIPT)
        argv = [sys.executable, "-m", "experiments.cli", "cli", *CLI_ARGS, "--script", str(script)]
    else:
        argv = [sys.executable, "-m", "experiments.cli", "run", scenario, *SCENARIOS[scenario],
                "--out", str(folder)]
    rec = RunRecord(index, scenario, fault, None)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    if fault != "none":
        rec.inject_after_s = round(rng.uniform(0.3, 2.0), 2)
        _inject(proc, fault, rec.inject_after_s, session)
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    rec.seconds = round(time.monotonic() - t0, 1)
    rec.exit_status = proc.returncode
    lines = [line for line in stderr.strip().splitlines() if line]
    rec.last_line = lines[-1] if lines else ""
    rec.expected_exit = proc.returncode in EXPECTED[fault]
    if fault in ("kill_controller", "kill_agent"):
        # one line naming what died: the controller, or the agent (the hosts' one process:
        # every host's agent, named)
        words = ("controller died",) if fault == "kill_controller" else ("agent on h", "the agents of h")
        rec.error_line_ok = len(lines) == 1 and any(w in lines[0] for w in words) and \
            "died" in lines[0] and "Traceback" not in stderr
    elif fault in ("sigint", "double_sigint"):
        said = "the session ended and was torn down" if session else "the emulation was torn down"
        rec.error_line_ok = "Traceback" not in stderr and said in stderr
    summary_path = folder / "summary.json"
    rec.completed = proc.returncode in (0, 1) and summary_path.exists() and _digest(folder) != before
    if fault == "kill_run":
        if clean_after_kill:
            subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                           capture_output=True, timeout=300)
            rec.cleaned_by = "mrclab clean"
        else:
            rec.cleaned_by = "next start"
    else:
        rec.cleaned_by = "teardown"
    rec.leftovers = _left(folder) if rec.cleaned_by != "next start" else {}
    # An interrupted run leaves the earlier result as it was; a completed one replaced it.
    rec.earlier_result_intact = None if rec.completed else _digest(folder) == before
    if session and fault == "none":  # the script ran to its end: the transfer's own check
        rec.completed = proc.returncode == 0
        rec.figures = {DATA_OK: "data ok" in stdout and "Traceback" not in stderr}
    elif rec.completed and fault == "none":
        summary = json.loads(summary_path.read_text())
        rec.figures = {f"{t}.{k}": summary["transports"].get(t, {}).get(k)
                       for t, k in FIGURES[scenario]}
        from experiments.scenarios.schema import data_ok

        rec.figures[DATA_OK] = data_ok(summary)
        rec.figures["faithful"] = summary["fidelity"]["faithful"]
    if session:
        rec.fault = CLI_FAULT_NAMES.get(fault, fault)
    rec.ok = rec.expected_exit and rec.error_line_ok and not rec.leftovers and \
        rec.earlier_result_intact is not False and (fault != "none" or rec.figures.get(DATA_OK, False))
    return rec


def _inject(proc: subprocess.Popen, fault: str, after: float, session: bool = False) -> None:
    """Wait until the run's traffic flows (its agents or TCP peers are up), `after` seconds
    more, then inject `fault` (to a `session`, SIGTERM and SIGHUP instead of SIGINT)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if _run_pids("endpoints.host.agent", proc.pid) or \
                _run_pids("endpoints.host.tcpflow", proc.pid):
            break
        time.sleep(0.05)
    time.sleep(after)
    if proc.poll() is not None:
        return
    if fault == "kill_run":
        os.kill(proc.pid, signal.SIGKILL)
    elif fault in ("sigint", "double_sigint"):
        sig = CLI_SIGNALS[fault] if session else signal.SIGINT
        os.kill(proc.pid, sig)
        if fault == "double_sigint":
            time.sleep(0.3)  # into the teardown
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGINT if not session else signal.SIGTERM)
    else:
        module = "controller.run" if fault == "kill_controller" else "endpoints.host.agent"
        pids = _run_pids(module, proc.pid)
        if pids:
            os.kill(random.Random(after).choice(pids), signal.SIGKILL)


def agreement(records: list[RunRecord]) -> dict:
    """Per scenario and figure: the clean runs' values, their median, and whether each lies
    within TOLERANCE of it."""
    out: dict = {}
    for scenario, figures in FIGURES.items():
        clean = [r for r in records if r.scenario == scenario and r.fault == "none" and r.completed]
        for transport, key in figures:
            name = f"{transport}.{key}"
            values: list[float] = [v for r in clean if isinstance(v := r.figures.get(name), (int, float))]
            if not values:
                continue
            median = statistics.median(values)
            within = [abs(v - median) <= TOLERANCE * abs(median) for v in values]
            out[f"{scenario} {name}"] = {"values": values, "median": round(median, 3),
                                         "agree": all(within) and len(values) >= 2}
    return out


def run(runs: int = 20, seed: int = 1, out: Path = SOAK_RESULTS,
        schedule: list[tuple[str, str]] | None = None, say=print) -> dict:
    rng = random.Random(seed)
    schedule = schedule or plan(runs, rng)
    out.mkdir(parents=True, exist_ok=True)
    records: list[RunRecord] = []
    kills = 0
    started = time.time()
    for i, (scenario, fault) in enumerate(schedule, 1):
        clean_after = fault == "kill_run" and kills % 2 == 0
        kills += fault == "kill_run"
        rec = one_run(i, scenario, fault, out, rng, clean_after)
        if records and records[-1].cleaned_by == "next start":
            # The previous kill -9 was left to this run's start: what it left is gone now too.
            records[-1].leftovers = rec.leftovers
            records[-1].ok = records[-1].ok and not rec.leftovers and rec.exit_status not in (2,)
        records.append(rec)
        say(f"[soak {i}/{len(schedule)}] {scenario} {rec.fault}: exit {rec.exit_status}, "
            f"{'ok' if rec.ok else 'FAIL'} ({rec.seconds} s){' ' + rec.last_line if not rec.ok else ''}")
    if records and records[-1].cleaned_by == "next start":
        subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                       capture_output=True, timeout=300)
        records[-1].cleaned_by = "mrclab clean (end of soak)"
        records[-1].leftovers = _left(out / "runs" / records[-1].scenario)
        records[-1].ok = records[-1].ok and not records[-1].leftovers
    agree = agreement(records)
    report = {"runs": len(records), "passed": sum(r.ok for r in records), "seed": seed,
              "minutes": round((time.time() - started) / 60, 1),
              "clean_runs_agree": all(a["agree"] for a in agree.values()) and bool(agree),
              "agreement": agree, "tolerance": TOLERANCE,
              "leftovers_after_all": {k: v for k, v in cleanup.leftovers().items() if v},
              "records": [asdict(r) for r in records]}
    report["ok"] = report["passed"] == report["runs"] and report["clean_runs_agree"] and \
        not report["leftovers_after_all"]
    files.write_json(out / "report.json", report)
    files.write_text(out / "report.md", _markdown(report))
    return report


def _markdown(r: dict) -> str:
    lines = ["# Soak report", "",
             f"{r['passed']} of {r['runs']} runs passed in {r['minutes']} min (seed {r['seed']}); "
             f"clean runs agree within {int(r['tolerance'] * 100)}%: "
             f"{'yes' if r['clean_runs_agree'] else 'NO'}; left behind at the end: "
             f"{r['leftovers_after_all'] or 'nothing'}. **{'PASS' if r['ok'] else 'FAIL'}**", "",
             "| # | scenario | fault | at (s) | exit | one line | cleaned by | left | earlier result | ok |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["records"]:
        intact = "replaced" if x["earlier_result_intact"] is None else \
            ("intact" if x["earlier_result_intact"] else "CHANGED")
        lines.append(f"| {x['index']} | {x['scenario']} | {x['fault']} | {x['inject_after_s'] or ''} | "
                     f"{x['exit_status']} | {'ok' if x['error_line_ok'] else 'NO'} | {x['cleaned_by']} | "
                     f"{x['leftovers'] or 'nothing'} | {intact} | {'ok' if x['ok'] else 'FAIL'} |")
    lines += ["", "Clean runs' figures:", "", "| figure | values | median | agree |", "|---|---|---|---|"]
    for name, a in r["agreement"].items():
        lines.append(f"| {name} | {a['values']} | {a['median']} | {'yes' if a['agree'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_raise()  # Ctrl-C and SIGTERM tear the emulation down, even as a background job
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=SOAK_RESULTS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("soak: run it as root (sudo make soak)", file=sys.stderr)
        return 2
    report = run(args.runs, args.seed, args.out)
    print(f"soak: {report['passed']}/{report['runs']} runs passed, clean runs agree: "
          f"{report['clean_runs_agree']}; report: {args.out / 'report.md'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
