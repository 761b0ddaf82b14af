"""This machine's own figures for what the agents cost, and the cores free when a run starts.

`make setup` runs the cost benchmark's short form (`python -m experiments.tools.cost_bench
--calibrate`) for every switch backend this machine runs: the default permutation at two link
rates (lower ones until two are faithful), the whole machine's CPU (switch processes included)
against the data packets delivered, and the same fabric with no data moving (what the agents'
idle loops, timers, probes and queue sampling cost: it grows with the host NIC ports, not the
packets; capacity.cost_points). Each is cached in `results/calibration-BACKEND.json` with what it
was measured on (`fingerprint`): the CPU model, the core count, the kernel, the backend, a hash
of the code that sets the per-packet cost and the calibration's form; a cache whose fingerprint
no longer matches is stale and is measured again by the next `make setup`. Where there is none,
capacity falls back to the committed cost reference (kernel routers) or per-core figures
(experiments/analysis/capacity.py) and says so.

A server of a split fabric (`--servers`) carries switches only: its figure is what its kernel
routers forward (`python -m experiments.tools.dataplane_bench --calibrate`, the data-plane
benchmark's short form, run there over ssh by topologies/server_calibration.py), cached there in
`results/calibration-forwarding-BACKEND.json` with that server's fingerprint (`load_forwarding`).

`free_cores` reads /proc/stat over a short window just before a run: a core that another
program keeps busy is not counted on (`--link-mbps auto` and the default rate look at it).
`busy_pids` names such programs' processes, so that what they take is told apart from what a
run takes (the cost benchmark's figures, the fidelity sampler's headroom).
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple

from experiments.outdir import REPO, RESULTS
from topologies import files


def cache_path(backend: str) -> Path:
    """Where this machine's calibration of `backend` is cached: one file per switch backend."""
    return RESULTS / f"calibration-{backend}.json"


# The cost benchmark's committed result (`make bench` on the 2-core VM kind this project is
# tested on): what a machine without a calibration of its own counts on for that backend.
REFERENCE = REPO / "experiments" / "reference" / "cost.json"
# The code whose speed the figures measure: the agents, the cores they run, the data plane.
COST_CODE = ("endpoints", "topologies/dataplane", "topologies/hostnet.py", "topologies/shaping.py")
FREE_WINDOW_S, FREE_PARTS = 0.75, 5  # how long `free_cores` watches the machine, in how many slices
# A window that finds more than this share of the cores busy is watched again, this many times
# more at most, and the freest window counts: a burst longer than a window's median can hide.
FREE_BUSY_CORES, FREE_RETRIES = 0.5, 2
# A process busier than this share of a core is load of its own (another program, a busy
# loop); below it, a daemon's housekeeping.
BUSY_MIN_CORES = 0.05


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def code_hash() -> str:
    """SHA-256 over the files of `COST_CODE` (names and contents), in a stable order."""
    digest = hashlib.sha256()
    for top in COST_CODE:
        root = REPO / top
        paths = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in paths:
            if path.is_file() and path.suffix in (".py", ".c", ".h") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# What a calibration holds; a cache of an earlier form is stale (2: the idle reading too; 3:
# the standing-queue phase, experiments/analysis/standing.py).
FORM = 3


def fingerprint(backend: str) -> dict[str, Any]:
    return {"cpu": _cpu_model(), "cores": os.cpu_count() or 1, "kernel": platform.release(),
            "backend": backend, "code": code_hash(), "form": FORM}


def load(backend: str, path: Path | None = None) -> dict[str, Any] | None:
    """The cached calibration for `backend` if it was made on this machine with this code."""
    data = files.read_json(cache_path(backend) if path is None else path)
    if not data or data.get("fingerprint") != fingerprint(backend):
        return None
    return data


def effective(backend: str, path: Path | None = None, reference: Path = REFERENCE) -> dict[str, Any] | None:
    """This machine's calibration for `backend` (`load`), or else the committed reference of
    that backend marked `"reference": True`: measured on this VM kind, not on this machine,
    and far closer to it than the per-core figures (capacity.py) the project started with. None
    for a backend with neither."""
    own = load(backend, path)
    if own is not None:
        return own
    ref = files.read_json(reference)
    return {**ref, "reference": True} if ref and ref.get("backend") == backend else None


# The forwarding calibration's form (what `load_forwarding` accepts).
FORWARDING_FORM = 1


def forwarding_path(backend: str) -> Path:
    """Where this machine's forwarding calibration of `backend` is cached."""
    return RESULTS / f"calibration-forwarding-{backend}.json"


def forwarding_fingerprint(backend: str) -> dict[str, Any]:
    return {**fingerprint(backend), "form": FORWARDING_FORM, "kind": "forwarding"}


def load_forwarding(backend: str, path: Path | None = None) -> dict[str, Any] | None:
    """The cached forwarding calibration for `backend` if it was made on this machine with this
    code (as `load` holds the cost calibration to it)."""
    data = files.read_json(forwarding_path(backend) if path is None else path)
    if not data or data.get("fingerprint") != forwarding_fingerprint(backend):
        return None
    return data


def stale(backend: str, path: Path | None = None) -> bool:
    return load(backend, path) is None


def save(data: dict[str, Any], path: Path | None = None) -> None:
    files.write_json(cache_path(data["backend"]) if path is None else path, data)


def machine_times() -> list[int]:
    """/proc/stat's first line: user nice system idle iowait irq softirq steal (clock ticks)."""
    with open("/proc/stat") as fh:
        return [int(x) for x in fh.readline().split()[1:9]]


def busy_fraction(before: list[int], after: list[int]) -> tuple[float, float]:
    """(busy, steal) shares of the machine between two `machine_times` readings: busy is user,
    nice, system, irq and softirq; steal (time the hypervisor gave elsewhere) is neither busy
    nor free."""
    d = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(d) or 1
    return (d[0] + d[1] + d[2] + d[5] + d[6]) / total, d[7] / total


def free_cores(window: float = FREE_WINDOW_S, parts: int = FREE_PARTS,
               retries: int = FREE_RETRIES) -> float:
    """Cores not busy (nor stolen) over `window` seconds now: the median of `parts` equal
    slices, so that load that stays (another program, a busy loop) counts and a burst does not
    (the kernel tearing down the namespaces of a run that just ended: a CI rehearsal's run
    started then read 0.25 free cores beside a busy loop's one, and ran at 1 Mbit/s). A window
    with more than `FREE_BUSY_CORES` busy is watched again, up to `retries` times, and the
    freest counts: a later CI rehearsal, beside a busy loop, read 0 free cores for longer than
    a window's median could hide, and its all-reduce ran at 1 Mbit/s, where RoCE's collectives
    did not end within their limit. Load that stays reads the same every time."""
    cores = os.cpu_count() or 1
    best = 0.0
    for _ in range(1 + max(retries, 0)):
        free = []
        before = machine_times()
        for _ in range(parts):
            time.sleep(window / parts)
            after = machine_times()
            busy, steal = busy_fraction(before, after)
            free.append(cores * max(0.0, 1.0 - busy - steal))
            before = after
        best = max(best, statistics.median(free))
        if best >= cores - FREE_BUSY_CORES:
            break
    return round(best, 2)


class ProcessTimes(NamedTuple):
    cmd: str  # the command line, words joined by spaces; empty for a kernel thread
    user: int  # CPU time so far, clock ticks (utime)
    system: int  # (stime)


def processes(proc: Path = Path("/proc")) -> dict[int, ProcessTimes]:
    """pid -> command line and CPU time so far of every process, kernel threads included: the
    one reading of /proc/PID that the fidelity sampler and the cost benchmark share."""
    out = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            cmd = (proc / name / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            # The command's name (in parentheses) may hold spaces and ")": split after the last.
            fields = (proc / name / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(name)] = ProcessTimes(cmd, int(fields[11]), int(fields[12]))
    return out


def process_ticks() -> dict[int, int]:
    """pid -> CPU time so far (utime + stime, clock ticks) of every user-space process (kernel
    threads, whose cmdline is empty, are the kernel's work: forwarding, softirq)."""
    return {pid: p.user + p.system for pid, p in processes().items() if p.cmd}


def busy_pids(before: dict[int, int], after: dict[int, int], seconds: float,
              min_cores: float = BUSY_MIN_CORES) -> set[int]:
    """The processes of two `process_ticks` readings `seconds` apart that used more than
    `min_cores` of a core between them."""
    hz = os.sysconf("SC_CLK_TCK")
    return {pid for pid, ticks in after.items()
            if pid in before and (ticks - before[pid]) / hz / seconds > min_cores}


def cores_used(pids: set[int], before: dict[int, int], after: dict[int, int], seconds: float) -> float:
    """Cores the processes `pids` used between two `process_ticks` readings."""
    hz = os.sysconf("SC_CLK_TCK")
    return sum(after[p] - before[p] for p in pids if p in before and p in after) / hz / seconds
