"""One emulation per lab: the first check that needs the real fabric starts a `Testbed` (or
runs a scenario), every later check of the run shares it, and the run's end closes it
(whatever happened).

Labs whose student code runs in the host agents (4-6) run one of the product's scenarios
(experiments/scenarios/) with the student's file at the product's named override points
(endpoints/protocol/replaceable.py): `scenario_run`. The run is kept in results/lab-NN/ (the
solution's in results/lab-NN-solution/): its summary.json names the file and its SHA-256.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from labs.checker.core import CheckFailed, Context, Skipped
from topologies.face import whole
from topologies.model import Fabric

if TYPE_CHECKING:
    from experiments.api.testbed import Testbed


def testbed(ctx: Context, fabric: Fabric, **options: object) -> Testbed:
    """The lab's running emulation of `fabric` (started on first use, closed with the run)."""
    bed = ctx.shared.get("testbed")
    if bed is not None:
        return bed
    if os.geteuid() != 0:
        raise CheckFailed(f"the emulation needs root: run `{rerun(ctx)}` (or --no-emulation to "
                          f"check the rest)")
    from experiments.api.testbed import Testbed

    bed = Testbed(fabric, **options)  # type: ignore[arg-type]
    bed.start()
    ctx.shared["testbed"] = bed
    ctx.closers.append(bed.close)
    return bed


def send_udp(bed: Testbed, host: str, address: str, count: int, port: int = 9) -> None:
    """`count` small UDP datagrams from `host` to `address` (the host's own routes pick the NIC
    and the source address), sent by a Python in the host's namespace."""
    script = ("import socket\n"
              "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
              f"for _ in range({count}): s.sendto(b'mrclab lab', ({address!r}, {port}))\n")
    out = bed.net[host].cmd(f"python3 -c {shlex.quote(script)}; echo rc=$?")
    if "rc=0" not in out:
        raise CheckFailed(f"sending from {host} to {address} failed: {out.strip().splitlines()[0]}")


def nic_rx_packets(bed: Testbed, host: str, ifname: str) -> int:
    """Packets the host's NIC `ifname` has received (the kernel's own interface counter)."""
    out = bed.net[host].cmd(f"cat /sys/class/net/{ifname}/statistics/rx_packets")
    return int(out.strip())


def port_packets(bed: Testbed) -> dict[tuple[str, int], tuple[int, int]]:
    """{(switch, port): (rx packets, tx packets)} of every switch, as the switches count them."""
    out = {}
    for sw in bed.fabric.switches:
        for port, c in whole(bed.em).port_counters(sw.name).items():
            out[(sw.name, port)] = (c["rx_pkts"], c["tx_pkts"])
    return out


def settle(seconds: float = 0.3) -> None:
    """Let counters catch up (OVS refreshes port statistics itself, not on every packet)."""
    time.sleep(seconds)


REPO = Path(__file__).resolve().parents[2]


def rerun(ctx: Context) -> str:
    """The command that checks these files again with the emulation."""
    number = int(ctx.lab_dir.name.split("-", 1)[0])
    return f"sudo make check-lab N={number}{' SOLUTION=1' if ctx.solution else ''}"


def run_dir(ctx: Context) -> Path:
    """Where the lab's emulated run is kept: results/lab-NN/ (the solution's in
    results/lab-NN-solution/), or the folder the run was given (grading: one per student)."""
    if ctx.results_dir is not None:
        return ctx.results_dir
    return REPO / "results" / f"lab-{ctx.lab_dir.name[:2]}{'-solution' if ctx.solution else ''}"


def scenario_run(ctx: Context, name: str, replace: dict[str, tuple[str, str]],
                 **options: Any) -> dict:
    """The summary of scenario `name` run with `options` (Options fields) and, in every agent,
    the student's code at the override points `replace` ({point: (file, attribute)}, the file
    one the student edits: the solution's with --solution). Run once per lab run."""
    if "scenario" in ctx.shared:
        return ctx.shared["scenario"]
    if os.geteuid() != 0:
        raise Skipped(f"the emulation needs root: run `{rerun(ctx)}` (or --no-emulation)")
    from endpoints.host import overrides
    from experiments.runner import run_scenario
    from experiments.scenarios import default_options

    reps = tuple(overrides.Replacement(point, str(ctx.path(file)), attr)
                 for point, (file, attr) in replace.items())
    opts = default_options(name, replace=overrides.check(reps), **options)
    out = run_dir(ctx)
    summary = run_scenario(opts, out, progress=lambda _: None)
    summary["_out"] = str(out.relative_to(REPO) if out.is_relative_to(REPO) else out)
    summary["_rerun"] = rerun(ctx)
    ctx.shared["scenario"] = summary
    return summary


def unfaithful(summary: dict) -> str | None:
    """Why the run cannot be trusted (the run's own fidelity verdict), or None."""
    fid = summary["fidelity"]
    if fid["faithful"]:
        return None
    return (f"the emulated run in {summary['_out']} was not faithful ({fid['problems'][0]}): "
            f"if the checks before this one pass, the machine was too busy to judge your code: "
            f"run `{summary.get('_rerun', 'sudo make check-lab N=..')}` again when it is quiet")


def fail(summary: dict, message: str) -> NoReturn:
    """Fail a check of the emulated run `summary`, naming the run's folder. On a run the
    machine's load made unfaithful the machine may be to blame, and the line says so; it still
    fails (a broken reaction can load the machine itself)."""
    busy = unfaithful(summary)
    raise CheckFailed(f"{message} (the run: {summary['_out']})" + (f"; but {busy}" if busy else ""))
