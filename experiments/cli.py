"""The `mrclab` command: demo, check-fabric, clean.

Every expected failure (bad parameters, no root, no OVS or Mininet) ends with one line naming the
problem and the fix, exit status 2, and nothing left behind.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from topologies.model import FabricError, FabricParams, build
from topologies.preflight import PreflightError

RESULTS = Path(__file__).resolve().parent.parent / "results"


class CliError(Exception):
    """A user error detected by the CLI itself."""


def _fabric_args(parser: argparse.ArgumentParser, defaults: FabricParams) -> None:
    parser.add_argument("--planes", type=int, default=defaults.planes)
    parser.add_argument("--leaves", type=int, default=defaults.leaves, help="T0 switches per plane")
    parser.add_argument("--spines", type=int, default=defaults.spines, help="T1 switches per plane")
    parser.add_argument("--hosts-per-leaf", type=int, default=defaults.hosts_per_leaf)
    parser.add_argument("--link-mbps", type=float, default=defaults.link_mbps)
    parser.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto",
                        help="OVS datapath (auto: kernel where the module exists)")


def _params(args: argparse.Namespace) -> FabricParams:
    return FabricParams(planes=args.planes, leaves=args.leaves, spines=args.spines,
                        hosts_per_leaf=args.hosts_per_leaf, link_mbps=args.link_mbps)


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        raise CliError(f"{message} (see `mrclab {self.prog.split()[-1]} --help`)"
                       if " " in self.prog else message)


def make_parser() -> argparse.ArgumentParser:
    parser = _ArgParser(prog="mrclab", description="MRC emulation testbed")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgParser)

    from experiments.demo import DEMO_FABRIC
    demo = sub.add_parser("demo", help="MRC vs single-path ECMP through a T0-T1 link cut")
    _fabric_args(demo, DEMO_FABRIC)
    demo.add_argument("--duration", type=float, default=8.0, help="seconds of traffic")
    demo.add_argument("--cut-at", type=float, default=3.0, help="seconds after start")
    demo.add_argument("--restore-at", type=float, default=6.0, help="seconds after start")
    demo.add_argument("--detect-ms", type=float, default=900.0,
                      help="baseline routing detection delay (BFD 3 x 300 ms by default)")
    demo.add_argument("--routing", choices=("bfd", "bgp"), default=None,
                      help="shorthand for --detect-ms: bfd = 900, bgp = 9000 (3 s keepalive, 9 s hold)")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--out", type=Path, default=RESULTS / "demo")

    check = sub.add_parser("check-fabric", help="probe every path, cut a link, check, restore")
    _fabric_args(check, FabricParams())
    check.add_argument("--sample-pairs", type=int, default=None, help="probe K random host pairs")
    check.add_argument("--cut", default=None, help="T0-T1 link to cut, like p0l0-p0s1")
    check.add_argument("--seed", type=int, default=1)

    sub.add_parser("clean", help="remove bridges, interfaces and processes left by a killed run")
    return parser


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through every context manager, so teardown runs


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        args = make_parser().parse_args(argv)
        return _dispatch(args)
    except (CliError, FabricError, PreflightError) as exc:
        print(f"mrclab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mrclab: interrupted; the emulation was torn down", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    from topologies import preflight

    if args.command == "clean":
        preflight.require_root()
        preflight.require_ovs()
        from topologies.emulation import cleanup_leftovers
        print(json.dumps(cleanup_leftovers(kill_shells=True)))
        return 0

    fabric = build(_params(args))
    preflight.check_all()
    if args.command == "check-fabric":
        from experiments.check_fabric import check_fabric
        result = check_fabric(fabric, Path("/tmp/mrclab/check-fabric"), args.sample_pairs,
                              args.seed, args.cut, args.datapath)
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    if args.command == "demo":
        from experiments.demo import run_demo
        detect_ms = {"bfd": 900.0, "bgp": 9000.0}.get(args.routing or "", args.detect_ms)
        if not 0 < args.cut_at < args.restore_at < args.duration:
            raise CliError("need 0 < --cut-at < --restore-at < --duration")
        summary = run_demo(fabric, args.out, duration=args.duration, cut_at=args.cut_at,
                           restore_at=args.restore_at, detect_ms=detect_ms, seed=args.seed,
                           datapath=args.datapath)
        return 0 if summary["ok"] else 1
    raise CliError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
