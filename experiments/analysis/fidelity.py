"""Emulation-fidelity checks recorded with every run: CPU headroom and achieved link rates.

An emulated 10 Mbit/s link only behaves like one while the host has CPU to spare: once the two
cores are saturated, OVS-netdev and the agents fall behind and every figure measures the VM,
not the protocol. The sampler records the idle share over 250 ms windows; a run whose 10th
percentile falls below `CPU_IDLE_FLOOR_PCT` (sustained overload) is flagged.

Another program keeping a core busy (a build, a busy loop) takes no idle time from the run that
the run could not take back: the scheduler runs a waking agent ahead of a process that never
sleeps. Such processes (busy when sampling starts, not the run's: calibration.busy_pids, less
every process carrying the run's marker) are sampled too, and the verdict reads the headroom,
idle plus what they took; on a quiet machine the two are the same.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from experiments.analysis import calibration, metrics
from topologies import cleanup, netns
from topologies.emulation import Emulation
from topologies.switches.base import BOOT_ID

BOOT_ID_LEN = 36  # a boot id is a UUID in its text form

CPU_IDLE_FLOOR_PCT = 10.0
# What a link that should be full must carry, as a share of its configured rate (the bytes the
# receiver's plane-0 leaf port sent, headers included, between the flow's warm-up and its
# fault): below it the emulation, not the transport, set the pace, whatever the CPU idle says.
# In faithful runs MRC, spray and TCP fill it: the README's 77.02 Mbit/s of MRC goodput over 4
# planes of 20 Mbit/s is 19.9 Mbit/s on each wire (0.996); a demo whose link carried 17.41 of
# 20 (0.87, MRC 67.3 Mbit/s) had been called faithful by the old 0.85 floor. 0.95 leaves room
# for the counters' sampling window and nothing for a link held below its rate.
LINK_FULL_FLOOR = 0.95
# MPTCP's scheduler does not keep every subflow's link full (it favours the lowest-RTT one): its
# plane-0 link gets a looser floor, the old one (its faithful reference runs carry 0.92 of the
# rate per plane on average).
LINK_FULL_FLOOR_BY_TRANSPORT = {"mptcp": 0.85}
FILLS_ITS_LINK = frozenset({"mrc", "spray", "tcp", "mptcp"})  # offer more than a link carries


# The same window (scenarios/failure.py's RATE_WINDOW_S) is also read in LINK_RATE_PARTS parts.
# One stall of the agents' loop (tens of ms: two 25 ms stalls left a link at 94% in a rehearsal,
# and 18.97 of 20 Mbit/s in another) empties part of one or two parts; a link held below its
# rate is short in most of them. So the verdict reads the better of the window's rate and its
# parts' median, which an odd count makes one measured part.
LINK_RATE_PARTS = 5
# A part shorter than this holds too few frames for its rate to mean anything (at 10 Mbit/s,
# 0.15 s is about 45 full frames): a shorter window is read whole, with no parts.
LINK_PART_MIN_S = 0.15


def rate_parts(window_s: float) -> int:
    """How many parts a link-rate window of `window_s` seconds is read in: LINK_RATE_PARTS, or
    1 (the window whole) when its parts would be shorter than LINK_PART_MIN_S.

    >>> rate_parts(1.0), rate_parts(0.5)
    (5, 1)
    """
    return LINK_RATE_PARTS if window_s >= LINK_RATE_PARTS * LINK_PART_MIN_S else 1


def steady_rate(parts: Sequence[float]) -> float | None:
    """The median of a window's per-part rates: what the link carried in most of the window.

    >>> steady_rate([19.9, 15.8, 19.9, 19.8, 17.1]), steady_rate([]) is None
    (19.8, True)
    """
    return statistics.median(parts) if parts else None


def link_problem(transport: str, achieved: float | None, configured: float,
                 parts: Sequence[float] = ()) -> str | None:
    """Why a run's link rate makes it not faithful (one line), or None: a transport that should
    fill the receiver's plane-0 link (FILLS_ITS_LINK) and carried less than its floor of the
    configured rate over the window, and in most of the window's `parts` (steady_rate).

    >>> print(link_problem("mrc", 17.41, 20.0))  # doctest: +NORMALIZE_WHITESPACE
    mrc: the receiver's plane-0 link carried 17.41 of 20 Mbit/s (87%, below the 95% a full
    link carries in a faithful run)
    >>> print(link_problem("mrc", 18.6, 20.0, [18.9, 18.4, 18.7, 18.5, 18.6]))
    ... # doctest: +NORMALIZE_WHITESPACE
    mrc: the receiver's plane-0 link carried 18.6 of 20 Mbit/s (93%, below the 95% a full
    link carries in a faithful run; 18.6 in most of it)
    >>> link_problem("mrc", 18.97, 20.0, [19.9, 16.2, 19.9, 19.8, 19.9]) is None  # one stall
    True
    >>> link_problem("mrc", 19.9, 20.0) is None, link_problem("roce", 5.0, 20.0) is None
    (True, True)
    """
    if achieved is None or transport not in FILLS_ITS_LINK or configured <= 0:
        return None
    floor = LINK_FULL_FLOOR_BY_TRANSPORT.get(transport, LINK_FULL_FLOOR)
    steady = steady_rate(parts)
    if max(achieved, steady or 0.0) >= floor * configured:
        return None
    most = f"; {steady:g} in most of it" if steady is not None else ""
    return (f"{transport}: the receiver's plane-0 link carried {achieved:g} of {configured:g} Mbit/s "
            f"({achieved / configured:.0%}, below the {floor:.0%} a full link carries in a "
            f"faithful run{most})")


# Of the SACKs an MRC sender took, the share whose echoed timestamp it could not use (one from
# its future, or ancient) past which its congestion control ran blind: NSCC acts only on an
# acknowledgement with an RTT sample. A healthy run has none; the agents' former batched
# refills, stamping frames later than the host qdisc sent them, lost 98% (docs/history.md).
ECHO_UNUSABLE_CEILING = 0.01


def echo_problem(transport: str, unusable: int, sacks: int) -> str | None:
    """Why a run's RTT echoes make it not faithful (one line), or None: its senders could not
    use more than ECHO_UNUSABLE_CEILING of their SACKs' echoed timestamps.

    >>> print(echo_problem("mrc", 24800, 25408))  # doctest: +NORMALIZE_WHITESPACE
    mrc: the senders could use no RTT sample from 24800 of 25408 SACKs (98%: echoed timestamps
    from the senders' future, or ancient): the congestion control ran blind
    >>> echo_problem("mrc", 0, 25408) is None, echo_problem("spray", 3, 0) is None
    (True, True)
    """
    if sacks <= 0 or unusable <= ECHO_UNUSABLE_CEILING * sacks:
        return None
    return (f"{transport}: the senders could use no RTT sample from {unusable} of {sacks} SACKs "
            f"({unusable / sacks:.0%}: echoed timestamps from the senders' future, or ancient): "
            f"the congestion control ran blind")


# The hypervisor's share of the VM's CPU (steal, /proc/stat) in one sampling window past which a
# run is called disturbed: on a shared host the VM's cores stop for a while, its links' senders
# with them, and a 250 ms window with this much stolen can hold a link a few percent under its
# rate for the second its fill is read. Quiet, this VM kind shows 0-1%; rehearsals of the suite
# that left links at 93-94% ran with 4-second samples of up to 30%. Steal is recorded beside the
# verdict, never part of it: a disturbed run whose figures held is as faithful as any.
STEAL_DISTURBED_PCT = 10.0


def stat_times(line: str) -> tuple[int, int, int] | None:
    """(idle + iowait, steal, total) clock ticks from /proc/stat's first line (None: not one).

    >>> stat_times("cpu  10 0 5 80 5 0 0 3 0 0\\r\\n")
    (85, 3, 103)
    >>> stat_times("Warning: Permanently added '10.0.0.2' (ED25519)") is None
    True
    """
    fields = line.split()
    if len(fields) < 9 or fields[0] != "cpu" or not all(f.isdigit() for f in fields[1:9]):
        return None
    ticks = [int(x) for x in fields[1:9]]
    return ticks[3] + ticks[4], ticks[7], sum(ticks)


def _cpu_times() -> tuple[int, int, int]:
    """(idle + iowait, steal, total) clock ticks of the whole machine, from /proc/stat."""
    with open("/proc/stat") as fh:
        times = stat_times(fh.readline())
    assert times is not None
    return times


class RemoteCpu:
    """Another machine's CPU idle and steal over 250 ms windows, from the /proc/stat lines a
    command prints there (`SwitchBackend.remote_cpu_commands`: a split fabric's servers, whose
    switches forward the run's packets), timed on this machine's clock as they arrive."""

    def __init__(self, argv: list[str]) -> None:
        self.boot_id = ""  # its kernel's (the command's first line; `same_machine`)
        self.samples: list[tuple[float, float]] = []  # (monotonic time here, idle %)
        self.steal_samples: list[tuple[float, float]] = []  # (monotonic time here, steal %)
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        last: tuple[int, int, int] | None = None
        for line in self._proc.stdout:
            times = stat_times(line)
            if times is None:
                if not self.boot_id and len(line.strip()) == BOOT_ID_LEN and line.count("-") == 4:
                    self.boot_id = line.strip()
                continue
            if last is not None and times[2] > last[2]:
                total, now = times[2] - last[2], time.monotonic()
                self.samples.append((now, 100.0 * (times[0] - last[0]) / total))
                self.steal_samples.append((now, 100.0 * (times[1] - last[1]) / total))
            last = times

    @property
    def same_machine(self) -> bool:
        """Whether the server is this machine (a lab server: a namespace beside the head), so
        its /proc/stat is the head's own, which the head's verdict reads with other programs'
        busy processes set apart, as a server's cannot be."""
        return bool(self.boot_id) and self.boot_id == Path(BOOT_ID).read_text().strip()

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._thread.join(timeout=2)


# The ovs backend sets net.core.wmem_default to this before ovs-vswitchd opens its packet
# socket: with the 208 KB default, frames queued in the ports' qdiscs fill its send buffer and
# OVS drops what it cannot send without counting it (40-80 silent losses per incast run).
OVS_SEND_BUFFER = 16 << 20
# A forwarding process's (ovs-vswitchd's) share of one core past which it is saturated: its
# main loop is one thread. With one instance per plane, the busiest instance counts.
OVS_BUSY_CEILING_PCT = 95.0
# The same for a process of several hosts' agents (endpoints/host/shared.py), one thread too:
# past this share of one core for a tenth of a run it wakes late, and the agents, not the links,
# set the pace while the other core may still idle. (The default permutation at 20 Mbit/s on
# the 2-core VM: the agents' process at 0.95 of a core on average, MRC 0.93 of capacity
# against 0.94-0.95 with a process per host.)
AGENTS_BUSY_CEILING_PCT = 90.0


def _proc_cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


class CpuSampler:
    """Background sampler of whole-machine CPU idle %, and of the busiest forwarding process's
    share of one core (`forwarding_pids()`, asked when sampling starts: the switch backend's
    ovs-vswitchd instances): the userspace datapath forwards in one thread, so it can be the
    bottleneck while the other core still idles. A backend that forwards in the kernel has no
    such process and no such samples."""

    def __init__(self, interval: float = 0.25,
                 forwarding_pids: Callable[[], list[int]] = lambda: [],
                 remote: Callable[[], dict[str, list[str]]] = dict,
                 agent_pids: Callable[[], list[int]] = lambda: []) -> None:
        self.interval = interval
        self.forwarding_pids = forwarding_pids
        self.agent_pids = agent_pids  # asked at every sample: the agents start after the fabric
        self.remote = remote
        self.servers: dict[str, RemoteCpu] = {}  # other machines' CPU, by server name
        self.samples: list[tuple[float, float]] = []  # (monotonic time, idle %)
        self.steal_samples: list[tuple[float, float]] = []  # (monotonic time, steal %)
        # (monotonic time, idle % + the background processes' share of the machine %)
        self.headroom_samples: list[tuple[float, float]] = []
        self.background: set[int] = set()  # other programs' busy processes (module docstring)
        self.ovs_samples: list[tuple[float, float]] = []  # (monotonic time, % of one core)
        self.agent_samples: list[tuple[float, float]] = []  # the busiest agents' process, the same
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self.servers = {name: RemoteCpu(argv) for name, argv in self.remote().items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for server in self.servers.values():
            server.stop()

    def server_idle(self, server: str, start: float = 0.0, end: float = float("inf"),
                    q: float = 10) -> tuple[float, float, int] | None:
        """(q-th percentile, mean) of a remote server's idle % over the window, and its sample
        count; None when none came."""
        values = sorted(v for t, v in self.servers[server].samples if start <= t <= end)
        if not values:
            return None
        return round(metrics.percentile(values, q), 1), round(sum(values) / len(values), 1), len(values)

    def _find_background(self, before: dict[int, int], seconds: float, own: set[int]) -> None:
        """The processes busy over the first window that are not the run's (`own`)."""
        busy = calibration.busy_pids(before, calibration.process_ticks(), seconds)
        self.background = busy - own - set(cleanup.marked_processes()) - {os.getpid(), os.getppid()}

    def _run(self) -> None:
        idle0, steal0, total0 = _cpu_times()
        pids = self.forwarding_pids()
        hz = os.sysconf("SC_CLK_TCK")
        cores = os.cpu_count() or 1
        ticks0, t0 = {p: _proc_cpu_ticks(p) for p in pids}, time.monotonic()
        agents0: dict[int, int | None] = {}
        scan: dict[int, int] | None = calibration.process_ticks()  # until the background is known
        other0: dict[int, int] = {}
        while not self._stop.wait(self.interval):
            idle1, steal1, total1 = _cpu_times()
            now = time.monotonic()
            if scan is not None:
                self._find_background(scan, now - t0, set(pids))
                scan = None
                other0 = {p: t for p in self.background if (t := _proc_cpu_ticks(p)) is not None}
            other1 = {p: t for p in self.background if (t := _proc_cpu_ticks(p)) is not None}
            if total1 > total0:
                idle = 100.0 * (idle1 - idle0) / (total1 - total0)
                self.samples.append((now, idle))
                self.steal_samples.append((now, 100.0 * (steal1 - steal0) / (total1 - total0)))
                other = calibration.cores_used(set(other1), other0, other1, now - t0) if other1 else 0.0
                self.headroom_samples.append((now, min(100.0, idle + 100.0 * other / cores)))
            idle0, steal0, total0, other0 = idle1, steal1, total1, other1
            ticks1 = {p: _proc_cpu_ticks(p) for p in pids}
            busy = [(t1 - t) for p, t1 in ticks1.items()
                    if t1 is not None and (t := ticks0.get(p)) is not None]
            if busy and now > t0:
                self.ovs_samples.append((now, 100.0 * max(busy) / hz / (now - t0)))
            agents1 = {p: _proc_cpu_ticks(p) for p in self.agent_pids()}
            busy = [(t1 - t) for p, t1 in agents1.items()
                    if t1 is not None and (t := agents0.get(p)) is not None]
            if busy and now > t0:
                self.agent_samples.append((now, 100.0 * max(busy) / hz / (now - t0)))
            ticks0, agents0, t0 = ticks1, agents1, now

    def ovs_busy(self, start: float = 0.0, end: float = float("inf"), q: float = 90) -> float | None:
        """The q-th percentile of the busiest forwarding process's CPU (% of one core)."""
        values = sorted(v for t, v in self.ovs_samples if start <= t <= end)
        return round(metrics.percentile(values, q), 1) if values else None

    def agents_busy(self, start: float = 0.0, end: float = float("inf"), q: float = 90) -> float | None:
        """The q-th percentile of the busiest agents' process's CPU (% of one core)."""
        values = sorted(v for t, v in self.agent_samples if start <= t <= end)
        return round(metrics.percentile(values, q), 1) if values else None

    def min_idle(self, start: float = 0.0, end: float = float("inf")) -> float | None:
        values = [v for t, v in self.samples if start <= t <= end]
        return round(min(values), 1) if values else None

    def low_idle(self, start: float = 0.0, end: float = float("inf"), q: float = 10) -> float | None:
        """The q-th percentile of idle %: sustained overload, not one 250 ms burst (a port
        going down makes OVS busy for a moment; that alone is not a loaded host)."""
        values = sorted(v for t, v in self.samples if start <= t <= end)
        return round(metrics.percentile(values, q), 1) if values else None

    def low_headroom(self, start: float = 0.0, end: float = float("inf"), q: float = 10) -> float | None:
        """As `low_idle`, of idle plus what other programs' busy processes took (the module
        docstring): the CPU the run could have had."""
        values = sorted(v for t, v in self.headroom_samples if start <= t <= end)
        return round(metrics.percentile(values, q), 1) if values else None

    def steal(self, start: float = 0.0, end: float = float("inf")) -> tuple[float, float] | None:
        """(mean, peak) % of the machine the hypervisor took over the window's samples."""
        values = [v for t, v in self.steal_samples if start <= t <= end]
        return (round(sum(values) / len(values), 1), round(max(values), 1)) if values else None

    def mean_idle(self, start: float = 0.0, end: float = float("inf")) -> float | None:
        values = [v for t, v in self.samples if start <= t <= end]
        return round(sum(values) / len(values), 1) if values else None


def describe_headroom(cpu: dict[str, object]) -> str:
    """`Testbed.cpu_headroom()`'s verdict in words.

    >>> describe_headroom({"cpu_idle_p10_pct": 31.5, "faithful": True})
    'CPU idle 10th percentile 31.5%, faithful'
    >>> describe_headroom({"cpu_idle_p10_pct": 2.0, "cpu_headroom_p10_pct": 40.0, "faithful": True})
    "CPU idle 10th percentile 2.0% (40.0% with what other programs' busy processes took), faithful"
    """
    extra = f" ({cpu['cpu_headroom_p10_pct']}% with what other programs' busy processes took)" \
        if "cpu_headroom_p10_pct" in cpu else ""
    return f"CPU idle 10th percentile {cpu['cpu_idle_p10_pct']}%{extra}, " + \
        ("faithful" if cpu["faithful"] else "NOT faithful")


def software_versions() -> dict[str, str]:
    def pkg(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    def cmd(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError):
            return "absent"

    try:
        import mininet.net
        mn = mininet.net.VERSION
    except ImportError:
        mn = "absent"
    return {"python": sys.version.split()[0], "kernel": platform.release(),
            "os_ken": pkg("os-ken"), "pyroute2": pkg("pyroute2"), "matplotlib": pkg("matplotlib"),
            "mininet": mn, "ovs": cmd(["ovs-vswitchd", "--version"])}


def dataplane_totals(em: Emulation) -> dict[str, int]:
    """Marked / trimmed / dropped packets summed over every switch port (eBPF data plane), and
    `fifo_drops`: what the ports' real queues (HTB leaves) dropped, whichever data plane ran."""
    totals: dict[str, int] = {}
    for counters in em.dataplane_counters().values():
        for key in ("packets", "marked", "trimmed", "dropped", "control", "demoted"):
            totals[key] = totals.get(key, 0) + counters.get(key, 0)
    totals["fifo_drops"] = qdisc_drops(em)
    totals["switch_port_drops"] = switch_port_drops(em)
    totals["host_fifo_drops"] = host_qdisc_drops(em)
    return totals


def _fifo_drops(prefix: list[str], devs: set[str] | None = None) -> int:
    """Drops of the pfifo qdiscs `tc -s qdisc` shows (run after `prefix`, e.g. mnexec into a
    host), on `devs` only if given; -1 if tc's output cannot be read."""
    out = subprocess.run([*prefix, "tc", "-s", "-j", "qdisc", "show"], capture_output=True,
                         text=True).stdout
    try:
        qdiscs = json.loads(out or "[]")
    except ValueError:
        return -1
    return sum(q.get("drops", 0) for q in qdiscs
               if q.get("kind") == "pfifo" and (devs is None or q.get("dev") in devs))


def host_qdisc_drops(em: Emulation) -> int:
    """Packets dropped by the hosts' NIC queues (a sender outrunning its own NIC)."""
    total = 0
    for host in em.fabric.hosts:
        drops = _fifo_drops(netns.command(em.pid(host.name), []))
        if drops < 0:
            return -1
        total += drops
    return total


def qdisc_drops(em: Emulation) -> int:
    """Packets dropped by the leaf FIFOs of every switch egress port (`tc -s qdisc`, in each
    namespace that holds switch ports)."""
    fabric = em.fabric
    ports = {link.b_ifname for link in fabric.links} | \
        {link.a_ifname for link in fabric.links if link.kind == "fabric"}
    total = 0
    for prefix in {tuple(em.port_command(name)) for name in ports}:
        drops = _fifo_drops(list(prefix), ports)
        if drops < 0:
            return -1
        total += drops
    return total


def switch_port_drops(em: Emulation) -> int:
    """Packets the switches themselves dropped on their ports (receive or send), e.g. a veth
    whose socket buffer overflowed in OVS's userspace datapath: losses no queue counter shows."""
    return sum(c["rx_drop"] + c["tx_drop"] for sw in em.fabric.switches
               for c in em.port_counters(sw.name).values())
