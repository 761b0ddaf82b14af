"""`mrclab cli`: bring a fabric up and explore it interactively, like Mininet's `mn`.

`run_cli` starts a Testbed (controller, switches, hosts, the switches' data plane), drops into
the console (experiments/shell/console.py: Mininet's CLI plus MRC commands) and tears it all
down when the console ends: `exit`, Ctrl-D, end of a --script, SIGTERM or a hang-up. A script
any of whose commands failed exits 1.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from endpoints.host.overrides import Replacement
from endpoints.protocol.config import TransportConfig
from experiments.api.testbed import Testbed, describe_switches
from topologies import runctx
from topologies.face import whole
from topologies.model import DEFAULT_DETECT_MS, Fabric


class SessionEnd(BaseException):
    """SIGTERM or SIGHUP: leave the console (which catches Ctrl-C's KeyboardInterrupt) so the
    teardown runs."""


def _end(signum: int, frame: object) -> None:
    raise SessionEnd(signal.Signals(signum).name)


def _console_signals() -> None:
    """Ctrl-C raises KeyboardInterrupt (the console stops the foreground command with it, and
    the session goes on), set rather than inherited as every command's is
    (`runctx.interrupts_raise`: a console on its own terminal, pexpect or ssh -t, inherits
    SIGINT ignored too); SIGTERM and SIGHUP end the session."""
    runctx.interrupts_raise()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _end)


def run_cli(fabric: Fabric, transport: TransportConfig, seed: int = 1, datapath: str = "auto",
            dataplane: str = "auto", detect_ms: float = DEFAULT_DETECT_MS, workdir: Path | None = None,
            script: Path | None = None, switch: str = "auto",
            replace: tuple[Replacement, ...] = (), servers: tuple[str, ...] = ()) -> int:
    from mininet.log import setLogLevel

    from experiments.shell.console import MrcCli

    _console_signals()
    print(f"*** starting {fabric.params.describe()}", flush=True)
    t0 = time.monotonic()
    ended: SessionEnd | None = None
    failures = 0
    try:
        with Testbed(fabric, workdir, seed=seed, transport=transport, datapath=datapath,
                     detect_ms=detect_ms, dataplane=dataplane, switch=switch,
                     replace=replace, servers=servers) as bed:
            em = whole(bed.em)
            setLogLevel("output")  # Mininet's own commands print at this level
            print(f"*** up in {time.monotonic() - t0:.1f} s: {len(fabric.hosts)} hosts "
                  f"h0..h{len(fabric.hosts) - 1}, {len(fabric.switches)} switches, "
                  f"{len(fabric.links)} links ({describe_switches(em)}, "
                  f"{em.dataplane_info['mode']} switch egress)")
            for r in bed.replace:  # the agents start with the first flow: they will run it
                print(f"*** agents run {r.name} from {r.file} as the product's {r.point}")
            print("*** `help` lists the commands, `exit` tears everything down", flush=True)
            try:
                failures = MrcCli(bed, script=str(script) if script else None).failures
            except SessionEnd as why:
                ended = why
            finally:
                # Nothing may interrupt the teardown: a second signal would leave half of it.
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                    signal.signal(sig, signal.SIG_IGN)
                print("*** tearing down: flows, faults, captures, agents, switches, hosts", flush=True)
                t1 = time.monotonic()
        print(f"*** done in {time.monotonic() - t1:.1f} s", flush=True)
    except SessionEnd as why:  # during start-up: the Testbed tore down what had started
        ended = why
    if ended is not None:
        print(f"*** {ended}: the session ended and was torn down", file=sys.stderr)
        return 130
    return script_status(script, failures)


def script_status(script: Path | None, failures: int) -> int:
    """A session's exit status: 1 when a line of its `--script` failed (said on stderr), else 0
    (at the prompt, a mistake is said where it happens and the session goes on)."""
    if script is None or not failures:
        return 0
    print(f"*** {failures} command(s) of {script} failed (above): exit status 1", file=sys.stderr)
    return 1
