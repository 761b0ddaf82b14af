"""The `mrclab` command: demo, cli, check-fabric, run, report, validate, docs, bench, clean, plan.

Every expected failure (bad parameters, no root, no OVS or Mininet) ends with one line naming the
problem and the fix, exit status 2, and nothing left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import sys
from pathlib import Path

from experiments import outdir
from experiments.analysis.transports import AGENT_PROCESSES
from experiments.outdir import RESULTS, OutDirError
from experiments.shell.cliwords import ArgParser as _ArgParser
from experiments.shell.cliwords import CliError, clean_text, probability, scenario_defaults
from topologies import runctx
from topologies.cleanup import CLEAN_HINT
from topologies.model import DEFAULT_DETECT_MS, DETECT_MS, FabricError, FabricParams, build, check_number
from topologies.preflight import EmulationError, PreflightError

SWITCH_CHOICES = ("auto", "ovs", "linux")  # topologies.switches.CHOICES (not imported: fast --help)
PACKET_LOG_WITH_CAPTURE = 20_000  # datagrams per agent: a short run's whole exchange


ROUTING_PRESETS = ", ".join(f"{name} = {ms:g} ms" for name, ms in DETECT_MS.items())


def _fabric_args(parser: argparse.ArgumentParser, defaults: FabricParams) -> None:
    parser.add_argument("--planes", type=int, default=defaults.planes, help="planes (one NIC port each)")
    parser.add_argument("--leaves", type=int, default=defaults.leaves, help="T0 switches per plane")
    parser.add_argument("--spines", type=int, default=defaults.spines, help="T1 switches per plane")
    parser.add_argument("--hosts-per-leaf", type=int, default=defaults.hosts_per_leaf, help="hosts per leaf")
    parser.add_argument("--link-mbps", type=float, default=defaults.link_mbps,
                        help="every link's rate, Mbit/s")
    _switch_args(parser)


def _switch_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--switch", choices=SWITCH_CHOICES, default="auto",
                        help="switch backend: ovs (Open vSwitch + os-ken), linux (kernel SRv6 "
                             "routers), auto (the fastest this machine runs)")
    parser.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto",
                        help="OVS datapath (auto: kernel where the module exists)")


def _servers_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--servers", default=None, metavar="HEAD,S1,...",
                        help="split the fabric over machines: hosts on the head (this one), each "
                             "plane's switches on a server after it, over ssh (docs/cluster.md)")


def _servers(args: argparse.Namespace) -> tuple[str, ...] | None:
    from topologies.placement import parse_servers

    return parse_servers(args.servers) if args.servers is not None else None


def _replace_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replace", action="append", default=[], metavar="POINT=FILE:NAME",
                        help="run NAME from FILE in every agent in place of the product's POINT "
                             "(evset, nscc, trim_nack_reason, trim_reaction, port_steering: a "
                             "lab's student code); a run records it in its summary")


def _replacements(args: argparse.Namespace):  # -> tuple[overrides.Replacement, ...]
    """The `--replace` options, checked (one line, exit 2, before anything starts)."""
    from endpoints.host import overrides

    try:
        return overrides.check(overrides.parse(text) for text in args.replace)
    except overrides.OverrideError as exc:
        raise CliError(f"--replace: {exc}") from None


def _link_rate(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected Mbit/s or auto, got {text!r}") from None


def _qp_counts(text: str) -> tuple[int, ...]:
    """--qps: comma-separated whole numbers (their range is checked with the other options)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected QP counts like 1,4,16, got {text!r}") from None


def _params(args: argparse.Namespace) -> FabricParams:
    return FabricParams(planes=args.planes, leaves=args.leaves, spines=args.spines,
                        hosts_per_leaf=args.hosts_per_leaf, link_mbps=args.link_mbps)


def make_parser() -> argparse.ArgumentParser:
    parser = _ArgParser(prog="mrclab", description="MRC emulation testbed")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgParser)

    from experiments.demo import DEMO_FABRIC
    from experiments.scenarios.base import DEFAULT_FABRIC  # the one default fabric
    demo = sub.add_parser("demo", help="MRC vs single-path ECMP through a T0-T1 link cut")
    _fabric_args(demo, DEMO_FABRIC)
    demo.add_argument("--duration", type=float, default=8.0, help="seconds of traffic")
    demo.add_argument("--cut-at", type=float, default=3.0, help="seconds after start")
    demo.add_argument("--restore-at", type=float, default=6.0, help="seconds after start")
    demo.add_argument("--detect-ms", type=float, default=DEFAULT_DETECT_MS,
                      help="baseline routing detection delay (BFD: 3 x 300 ms)")
    demo.add_argument("--routing", choices=tuple(DETECT_MS), default=None,
                      help=f"shorthand for --detect-ms: {ROUTING_PRESETS} (3 s keepalive, 9 s hold)")
    demo.add_argument("--dataplane", choices=("auto", "ebpf", "droptail"), default="auto",
                      help="switch egress: ECN marking and trimming in eBPF (auto: where it loads)")
    demo.add_argument("--seed", type=int, default=1, help="drives every random choice")
    demo.add_argument("--out", default=str(RESULTS / "demo"), help="the results folder")
    _servers_arg(demo)

    check = sub.add_parser("check-fabric", help="probe every path, cut a link, check, restore")
    _fabric_args(check, DEFAULT_FABRIC)
    check.add_argument("--sample-pairs", type=int, default=None, help="probe K random host pairs")
    _servers_arg(check)
    check.add_argument("--cut", default=None, help="T0-T1 link to cut, like p0l0-p0s1")
    check.add_argument("--seed", type=int, default=1, help="drives every random choice")

    shell = sub.add_parser("cli", help="bring the fabric up and explore it interactively (like mn)")
    _fabric_args(shell, DEFAULT_FABRIC)
    shell.add_argument("--dataplane", choices=("auto", "ebpf", "droptail"), default="auto",
                       help="switch egress: ECN marking and trimming in eBPF (auto: where it loads)")
    shell.add_argument("--detect-ms", type=float, default=DEFAULT_DETECT_MS,
                       help="baseline routing detection delay")
    shell.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                       help="a transport parameter for the session, e.g. ev_set_size=16 (repeatable)")
    shell.add_argument("--seed", type=int, default=1, help="drives every random choice")
    _servers_arg(shell)
    shell.add_argument("--workdir", default=None,
                       help="keep the agents' logs and traces here (default: a temporary folder)")
    shell.add_argument("--script", type=Path, default=None,
                       help="run the commands in FILE (one a line; `sleep S` and `wait` pace "
                            "them) instead of reading them, then tear down; exit status 1 when "
                            "one failed")
    _replace_arg(shell)

    from experiments.scenarios import SCENARIOS
    run = sub.add_parser("run", help="run one experiment scenario (see `mrclab run --help`)",
                         epilog=scenario_defaults(SCENARIOS))
    run.add_argument("scenario", choices=list(SCENARIOS), metavar="NAME",
                     help="one of: " + ", ".join(SCENARIOS))
    for name in ("planes", "leaves", "spines", "hosts-per-leaf"):
        run.add_argument(f"--{name}", type=int, default=None, help="default: the scenario's (below)")
    run.add_argument("--link-mbps", type=_link_rate, default=None,
                     help="link rate in Mbit/s, or auto: the fastest this machine runs the "
                          "scenario at faithfully (its calibration); default: the scenario's")
    _switch_args(run)
    run.add_argument("--dataplane", choices=("auto", "ebpf", "droptail"), default="auto",
                     help="switch egress: ECN marking and trimming in eBPF (auto: where it loads)")
    run.add_argument("--transports", default=None,
                     help="comma-separated subset of mrc,roce,spray,tcp,mptcp (default: the scenario's)")
    run.add_argument("--duration", type=float, default=None,
                     help="seconds per transport (default: the scenario's, below)")
    run.add_argument("--fault-at", type=float, default=None,
                     help="seconds after each transport starts (incast: the crowd starts; "
                          "ecn-balance: the second flow is forced onto the first one's path)")
    run.add_argument("--fault-end", type=float, default=None,
                     help="restore / end of the fault (default: the scenario's, below)")
    run.add_argument("--detect-ms", type=float, default=None,
                     help=f"baseline routing detection delay (default: {DEFAULT_DETECT_MS:g})")
    run.add_argument("--routing", choices=tuple(DETECT_MS), default=None,
                     help=f"shorthand for --detect-ms: {ROUTING_PRESETS}")
    run.add_argument("--link", default=None, help="fault target link (default: the one the flow uses)")
    run.add_argument("--fail-switch", default=None, help="switch-failure: spine to fail")
    run.add_argument("--loss", type=probability, default=None,
                     help="lossy-link: drop probability, 0.2 or 20%% (default: 0.2)")
    run.add_argument("--flaps-per-min", type=float, default=None, help="link-flap, port-flap (default: 60)")
    run.add_argument("--fault-count", type=int, default=None,
                     help="link-cascade, flap-together, uplink-failures: how many links (default: "
                          "the scenario's)")
    run.add_argument("--fault-every", type=float, default=None,
                     help="link-cascade, uplink-failures: seconds between steps (default: 1)")
    run.add_argument("--down-ms", type=float, default=None,
                     help="link-flap, port-flap: each flap's down time (default: 300)")
    run.add_argument("--senders", type=int, default=None,
                     help="incast: number of senders (default: 7, fewer on a fabric of fewer hosts)")
    run.add_argument("--steps", type=int, default=None, help="collective: ring steps per phase (default: 20)")
    run.add_argument("--step-kb", type=int, default=None,
                     help="collective: chunk per host per step (default: 64)")
    run.add_argument("--qps", type=_qp_counts, default=None, metavar="N[,N...]",
                     help="allreduce: RoCE's QPs per host pair, a sweep per count (default: 1,4,16)")
    run.add_argument("--seed", type=int, default=1, help="drives every random choice")
    run.add_argument("--port-status", choices=("on", "off"), default="on",
                     help="MRC hosts stop using a plane whose NIC port (theirs or a peer's, told "
                          "in SACKs and probes) is down; off: each EV of it fails on its own")
    _servers_arg(run)
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="a transport parameter for the run's agents, e.g. active_fraction=0.5 "
                          "(repeatable; the EV set: ev_set_size, active_fraction, backup_min_paths)")
    run.add_argument("--out", default=None, help="default: results/NAME")
    run.add_argument("--agents", choices=AGENT_PROCESSES, default=AGENT_PROCESSES[0],
                     help="the hosts' agents in one process (shared) or one each (per-host)")
    run.add_argument("--capture", default=None, metavar="TARGET[,TARGET...]",
                     help="keep a pcap of the whole run per target in the results, TARGET.pcap: "
                          "a host (h1: every NIC), a host NIC (h1-eth0) or a switch port (p0l0-eth3)")
    run.add_argument("--packet-log", type=int, default=None, metavar="N",
                     help="each agent logs its first N datagrams sent and received in its trace, "
                          f"to check a capture against (default: {PACKET_LOG_WITH_CAPTURE} with "
                          "--capture, else 0)")
    _replace_arg(run)

    report = sub.add_parser("report", help="one Markdown page over every result in results/")
    report.add_argument("--results", type=Path, default=RESULTS)
    validate = sub.add_parser("validate", help="rerun the quick set and check it against the reference")
    validate.add_argument("--out", default=str(RESULTS / "validate"))
    validate.add_argument("--write-reference", action="store_true",
                          help="rewrite experiments/reference/quick.json from this run")
    validate.add_argument("--scenario", action="append", default=None, metavar="NAME",
                          help="only this scenario of the quick set (repeatable); with "
                               "--write-reference only its entry is rewritten")
    docs = sub.add_parser("docs", help="rewrite the measured figures in README.md and docs/ from "
                                       "experiments/reference/full.json")
    docs.add_argument("--from", dest="results", type=Path, default=None,
                      help="first rewrite the reference from a full run's results (make experiment)")
    docs.add_argument("--cost", type=Path, default=None, metavar="FILE",
                      help="first take the cost figures from this cost benchmark result "
                           "(results/bench/cost.json, `make bench`)")
    docs.add_argument("--paper", type=Path, default=None, metavar="FOLDER",
                      help="first take the paper's figures from a `mrclab paper` run (results/paper)")
    sub.add_parser("bench", help="the agent's packet rate per CPU core (results/bench/agent.json)")
    clean = sub.add_parser("clean", help="remove bridges, interfaces and processes left by a killed run")
    clean.add_argument("--json", action="store_true", help="print what was removed and left as JSON")
    # (its options are its own: main hands `mrclab paper ...` to experiments.paper.command)
    sub.add_parser("paper", help="the MRC paper's figures, each run, plotted and judged against the "
                                 "paper's claim (`mrclab paper --help`)")
    plan = sub.add_parser("plan", help="the paper's scale arithmetic: tiers, switches and optics of "
                                       "a multi-plane two-tier fabric against a single plane")
    plan.add_argument("--planes", type=int, default=8)
    plan.add_argument("--radix", type=int, default=512, help="ports per switch at --port-gbps")
    plan.add_argument("--nic-ports", type=int, default=None, help="ports per NIC (default: one per plane)")
    plan.add_argument("--port-gbps", type=int, default=100, help="speed of a NIC port and a switch port")
    plan.add_argument("--gpus", type=int, default=None, help="one NIC each (default: all two tiers reach)")
    plan.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.commands = dict(sub.choices)
    return parser


def _check_workdir(text: str) -> Path:
    """`mrclab cli --workdir`: a new folder (created 0700) or a private one of root's; never an
    empty name, `/`, the repository or a parent of it, nor a folder open to others."""
    if not text.strip():
        raise CliError("--workdir is empty: name a folder for the session's logs, like /tmp/mine")
    path = Path(text)
    where = path.resolve()
    what = "/" if where == Path(where.anchor) else \
        "the repository or a parent of it" if outdir.REPO.is_relative_to(where) else None
    if what:
        raise CliError(f"--workdir {text} is {what}: name a folder of its own, like /tmp/mine")
    if os.path.lexists(path):
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise CliError(f"--workdir {text} exists and is not a private folder of this user (a "
                           f"file, a symlink, someone else's or open to others): name a new folder "
                           f"(it is created 0700)")
    return path


# `mrclab run` flags that set one Options field each (None: not given, the default applies).
RUN_FIELDS = ("duration", "fault_at", "fault_end", "detect_ms", "link", "fail_switch", "loss",
              "flaps_per_min", "down_ms", "senders", "steps", "step_kb", "fault_count", "fault_every",
              "qps")


def run_options(args: argparse.Namespace):  # -> experiments.scenarios.Options
    """The options of `mrclab run`, every one checked in one place (scenarios.base.check),
    those the user gave checked against the scenario too."""
    from experiments.scenarios import Options, check, parse_transports, scenario

    sc = scenario(args.scenario)
    f = sc.fabric
    fabric = FabricParams(
        planes=f.planes if args.planes is None else args.planes,
        leaves=f.leaves if args.leaves is None else args.leaves,
        spines=f.spines if args.spines is None else args.spines,
        hosts_per_leaf=f.hosts_per_leaf if args.hosts_per_leaf is None else args.hosts_per_leaf,
        link_mbps=f.link_mbps if args.link_mbps in (None, "auto") else args.link_mbps)
    build(fabric)  # validates, with the model's own messages
    if args.routing is not None:
        if args.detect_ms is not None:
            raise CliError("give --routing or --detect-ms, not both")
        args.detect_ms = DETECT_MS[args.routing]
    given = {name for name in RUN_FIELDS if getattr(args, name) is not None}
    fields = {name: getattr(args, name) for name in given}
    fields.setdefault("duration", sc.duration)
    fields.setdefault("fault_at", sc.fault_at)
    fields.setdefault("fault_end", sc.fault_end)
    if sc.kind.name == "incast" and "senders" not in given:
        fields["senders"] = min(Options.senders, len(build(fabric).hosts) - 3)
    capture = tuple(t.strip() for t in args.capture.split(",")) if args.capture else ()
    if args.capture is not None and (not capture or "" in capture):
        raise CliError(f"--capture takes comma-separated targets like h1,p0l0-eth3, got {args.capture!r}")
    packet_log = args.packet_log if args.packet_log is not None else \
        (PACKET_LOG_WITH_CAPTURE if capture else 0)
    replacements = _replacements(args)
    from endpoints.protocol.config import parse_overrides
    try:
        params = tuple(parse_overrides(args.param).items())
    except ValueError as exc:
        raise CliError(f"--param {exc}") from None
    opts = Options(sc, fabric, parse_transports(args.transports, sc.transports), seed=args.seed,
                   datapath=args.datapath, dataplane=args.dataplane, switch_backend=args.switch,
                   capture=capture, packet_log=packet_log, replace=replacements,
                   port_status=args.port_status == "on", servers=_servers(args) or (),
                   agents=args.agents,
                   params=params, given=frozenset(given), **fields)
    if args.link_mbps in (None, "auto"):
        # auto: the fastest rate this machine carries faithfully now (its calibration, the
        # cores free as the run starts); no rate given: the scenario's, or less where that one
        # would not be faithful here.
        from dataclasses import replace

        from experiments.analysis import calibration
        from experiments.runner import faithful_link_mbps, server_figures
        from topologies import switches

        backend = switches.resolve(args.switch)
        # a split run: each server's own forwarding figure bounds it too (read, or measured once)
        opts = check(opts)
        opts = replace(opts, servers_forwarding=server_figures(
            opts, backend, lambda m: print(f"[{args.scenario}] {m}", flush=True)))
        free = calibration.free_cores()  # 0.75 s: read once, carried to the run's load check
        rate = faithful_link_mbps(opts, backend, free,
                                  ceiling=None if args.link_mbps == "auto" else f.link_mbps)
        opts = replace(opts, fabric=replace(fabric, link_mbps=rate), free_cores=free)
    return check(opts)


def scenario_default_mbps(name: str) -> float:
    from experiments.scenarios import scenario
    return scenario(name).fabric.link_mbps


def _after_interrupt() -> str:
    """Finish any teardown the interrupt left undone; the line to print, true either way."""
    from topologies.emulation import live_emulations

    for em in live_emulations():
        em.stop()
    left = live_emulations()
    if left:
        errors = "; ".join(e for em in left for e in em.teardown_errors)[:300]
        return f"interrupted; teardown incomplete ({errors}): run {CLEAN_HINT}"
    return "interrupted; the emulation was torn down"


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_once()
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["paper"]:  # its runs are `mrclab run`s, which check root and the backend
        from experiments.paper import command
        # Ctrl-C reaches the running `mrclab run` too (it tears down, exits 130): wait for it.
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        return command.main(raw[1:])
    try:
        args = make_parser().parse_args(argv)
        if args.command != "cli":  # the console's Ctrl-C stops a command, not the session
            signal.signal(signal.SIGINT, runctx.interrupt_once)
        code = _dispatch(args)
        if runctx.interrupted():  # its KeyboardInterrupt was swallowed on the way (a library's)
            raise KeyboardInterrupt
        return code
    except (CliError, FabricError, PreflightError, OutDirError) as exc:
        print(f"mrclab: error: {exc}", file=sys.stderr)
        return 2
    except EmulationError as exc:  # the run failed (a process of it died, OVS stalled)
        print(f"mrclab: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"mrclab: {_after_interrupt()}", file=sys.stderr)
        # Done: a further Ctrl-C must not kill the exiting interpreter, which puts the default
        # action back for Python-level handlers (a fast teardown ends inside a burst of them).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "plan":  # pure arithmetic: no root, nothing started
        from topologies import scale
        plan = scale.plan(args.planes, args.radix, args.nic_ports, args.gpus, args.port_gbps)
        print(json.dumps(plan.as_dict(), indent=1) if args.json else scale.render(plan))
        return 0
    from topologies import preflight

    if args.command == "clean":
        preflight.require_root()
        from topologies import cleanup, runctx
        removed = runctx.clean_all()
        left = {kind: items for kind, items in cleanup.leftovers().items() if items}
        print(json.dumps({"removed": removed, "left": left}) if args.json else clean_text(removed, left))
        return 0 if not left else 1

    if args.command == "report":
        from experiments.report import write_report
        print(write_report(args.results))
        return 0
    from topologies import switches

    if args.command == "run":
        opts = run_options(args)
        out = outdir.check(RESULTS / args.scenario if args.out is None else args.out)
        nominal = scenario_default_mbps(args.scenario)
        if args.link_mbps is None and opts.fabric.link_mbps < nominal:
            print(f"[{args.scenario}] links at {opts.fabric.link_mbps:g} Mbit/s, not the scenario's "
                  f"{nominal:g}: that would not be faithful on this machine's free CPU now "
                  f"(`--link-mbps {nominal:g}` forces it)", flush=True)
        switches.check(opts.switch_backend)
        from experiments.runner import run_scenario
        summary = run_scenario(opts, out, progress=lambda m: print(f"[{args.scenario}] {m}", flush=True))
        from experiments.report import format_summary
        from experiments.runner import failure_line
        from experiments.scenarios.schema import data_ok
        print(format_summary(summary, out))
        failed = failure_line(summary, out)
        if failed:
            print(f"mrclab: error: {failed}", file=sys.stderr)
        return 0 if data_ok(summary) and not failed else 1
    if args.command == "docs":
        from experiments.docs_gen import update
        if args.paper is not None and not (args.paper / "index.md").is_file():
            raise CliError(f"--paper {args.paper}: no `mrclab paper` run there (no index.md)")
        for path in update(args.results, cost=args.cost, paper=args.paper):
            print(f"rewrote {path}")
        return 0
    if args.command == "validate":
        from experiments.validate import QUICK, validate_all
        unknown = sorted(set(args.scenario or ()) - set(QUICK))
        if unknown:  # bad input first: one line, nothing started
            raise CliError(f"--scenario {', '.join(unknown)}: not in the quick set ({', '.join(QUICK)})")
        out = outdir.check_collection(args.out)
        switches.check()
        return 0 if validate_all(out, args.write_reference, args.scenario) else 1
    if args.command == "bench":
        preflight.require_root()
        from experiments.tools import bench
        return bench.main([])

    fabric = build(_params(args))
    if args.command == "cli":
        from endpoints.protocol.config import TransportConfig, parse_overrides, with_overrides

        try:
            transport = with_overrides(TransportConfig(), parse_overrides(args.param))
        except ValueError as exc:
            raise CliError(f"--param {exc}") from None
        check_number("--detect-ms", args.detect_ms, 0, 60_000, lo_open=True)  # as `run`'s
        if args.script is not None and not args.script.is_file():
            raise CliError(f"--script {args.script}: no such file")
        workdir = None if args.workdir is None else _check_workdir(args.workdir)
        switches.check(args.switch)
        replacements = _replacements(args)
        from experiments.shell.session import run_cli

        return run_cli(fabric, transport, args.seed, args.datapath, args.dataplane, args.detect_ms,
                       workdir, args.script, switch=args.switch, replace=replacements,
                       servers=_servers(args) or ())
    demo_out = outdir.check(args.out) if args.command == "demo" else None
    switches.check(args.switch)
    if args.command == "check-fabric":
        from experiments.tools.check_fabric import check_fabric
        result = check_fabric(fabric, None, args.sample_pairs, args.seed, args.cut, args.datapath,
                              switch=args.switch, servers=_servers(args))
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    if args.command == "demo":
        from experiments.demo import run_demo
        detect_ms = DETECT_MS.get(args.routing or "", args.detect_ms)
        if not 0 < args.cut_at < args.restore_at < args.duration:
            raise CliError("need 0 < --cut-at < --restore-at < --duration")
        assert demo_out is not None
        summary = run_demo(fabric, demo_out, duration=args.duration, cut_at=args.cut_at,
                           restore_at=args.restore_at, detect_ms=detect_ms, seed=args.seed,
                           datapath=args.datapath, dataplane=args.dataplane, switch=args.switch,
                           servers=_servers(args) or ())
        from experiments.runner import failure_line
        failed = failure_line(summary, demo_out)
        if failed:
            print(f"mrclab: error: {failed}", file=sys.stderr)
        return 0 if summary["ok"] and not failed else 1
    raise CliError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
