"""`mrclab cli`: Mininet's own CLI (a subclass of `mininet.cli.CLI`) over a running Testbed, with
MRC commands. Every MRC command goes through the Python API (experiments/api/testbed.py), nothing
else: what the CLI can do, a script can do.

Mininet's commands keep working on this fabric: `nodes`, `net`, `dump`, `links`, `intfs`,
`ports`, `sh`, `py` (with `bed`, the Testbed, in scope), `source`, `time`, `dpctl`, `xterm`
where a display exists, and `h0 ping6 h2` (a host name after the command becomes its plane-0
baseline IPv6 address: the hosts have no IPv4). `pingall` and `pingpair` ping those baseline
addresses. `link a b up|down` becomes `restore`/`cut`, so the fault is recorded like any other;
`iperf` (IPv4 only) and `switch` (it would delete the bridge) point to what to use instead;
the cluster edition's `status` and `placement` too (experiments/shell/clustercmds.py).
After any command during which the controller or an agent died, the console says so once.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

from mininet.cli import CLI

from experiments.analysis.transports import TRANSPORTS
from experiments.api.flows import AgentFlow, Flow
from experiments.api.testbed import Testbed
from experiments.outdir import RESULTS
from experiments.shell.clustercmds import ClusterCommands
from experiments.shell.complete import Completion
from experiments.shell.faultcmds import FaultCommands
from experiments.shell.script import ScriptCommands
from experiments.shell.text import Usage, fmt_bytes, fmt_mbps, parse_size, table

PROGRESS_EVERY_S = 0.25  # the foreground `send` line
RATE_WINDOW_S = 1.0  # "rate now": bytes delivered over this last stretch
# What the session writes unless told where: results/cli/ (never the current folder).
SESSION_RESULTS = RESULTS / "cli"
DEFAULT_PLOT = "session.png"
MRC_COMMANDS = ("paths", "send", "flows", "stop", "wait", "evs", "cut", "restore", "fail", "recover",
                "loss", "flap", "faults", "capture", "plot", "sleep")


class _Nodes:
    """The network as Mininet's CLI sees it (`net`, `dump`, `nodes`, `py`): its hosts and
    switches. The controller is a process of its own (os-ken) that Mininet only holds a
    reference to, not a node those commands could show. Everything else is the Mininet object."""

    def __init__(self, net: object) -> None:
        self._net = net

    def __getattr__(self, name: str) -> object:
        return getattr(self._net, name)

    def __iter__(self):  # noqa: ANN204 - an iterator of node names
        for node in (*self._net.hosts, *self._net.switches):  # type: ignore[attr-defined]
            yield node.name

    def __len__(self) -> int:
        return len(list(iter(self)))

    def __contains__(self, name: object) -> bool:
        return name in set(self)

    def __getitem__(self, name: str) -> object:
        return self._net.nameToNode[name]  # type: ignore[attr-defined]

    def keys(self) -> list[str]:
        return list(self)

    def values(self) -> list[object]:
        return [self[name] for name in self]

    def items(self) -> list[tuple[str, object]]:
        return [(name, self[name]) for name in self]


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, and the session goes on
        raise Usage(f"{message} (see `help {self.prog}`)")


def _send_parser() -> argparse.ArgumentParser:
    p = _ArgParser(prog="send", add_help=False)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("size")
    p.add_argument("--transport", "-t", default="mrc", choices=TRANSPORTS)
    p.add_argument("--background", "-b", action="store_true")
    p.add_argument("--param", "-p", action="append", default=[])
    return p


class MrcCli(ScriptCommands, FaultCommands, ClusterCommands, Completion, CLI):
    """The session's console; constructing it runs it until `exit` (Mininet's way)."""

    prompt = "mrclab> "

    def __init__(self, bed: Testbed, stdin=sys.stdin, script: str | None = None) -> None:
        self.bed = bed
        self.fabric = bed.fabric
        self.hosts = [h.name for h in self.fabric.hosts]
        self.switches = [s.name for s in self.fabric.switches]
        self.links = [link.name for link in self.fabric.links]
        self.background: set[int] = set()  # flow numbers running on their own
        self.ended: dict[int, str] = {}  # flow number -> how it ended (its result read, closed)
        self.reported: set[str] = set()  # deaths of the controller or agents already said
        self.last_evs: dict[int, dict] = {}  # flow number -> its EV set when it ended
        self.failures = 0  # commands that printed an error (a script's exit status)
        super().__init__(_Nodes(bed.net), stdin=stdin, script=script)

    # ----- the loop -------------------------------------------------------------------------
    def getLocals(self) -> dict:  # noqa: N802 - Mininet's name
        return {**super().getLocals(), "net": self.bed.net, "bed": self.bed}

    def preloop(self) -> None:
        try:
            import readline
        except ImportError:
            return
        readline.set_completer_delims(" \t\n")  # names contain '-': complete them whole

    def onecmd(self, line: str) -> bool:
        """Run one command; bad input prints one line and the session goes on."""
        try:
            return bool(super().onecmd(line))
        except KeyError as exc:  # its message is the repr of the key
            self._error(str(exc).strip("'\"") or "KeyError")
        except (ValueError, RuntimeError, OSError, ConnectionError) as exc:
            self._error(str(exc) or type(exc).__name__)
        return False

    def postcmd(self, stop: bool, line: str) -> bool:
        self._reap_background()
        self._report_deaths()
        return stop

    def _report_deaths(self) -> None:
        """Say once, after the command it happened during, that the controller or an agent
        died (killed, crashed): the session goes on, but results from then on are suspect."""
        for line in self.bed.deaths():
            if line not in self.reported:
                self.reported.add(line)
                self._error(line)

    def _error(self, message: str) -> None:
        self.failures += 1
        sys.stderr.write(f"*** {message}\n")
        sys.stderr.flush()

    def _say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def do_help(self, line: str) -> None:
        """Describe the commands: `help` lists them, `help COMMAND` explains one."""
        if line.strip():
            return super().do_help(line)
        self._say("MRC commands (help COMMAND for each):")
        for name in MRC_COMMANDS:
            doc = (getattr(self, f"do_{name}").__doc__ or "").strip().splitlines()
            self._say(f"  {doc[0] if doc else name}")
        self._say("\nMininet's commands work as in `mn` (hosts have IPv6 baseline addresses only):")
        names = sorted(n[3:] for n in self.get_names()
                       if n.startswith("do_") and n[3:] not in MRC_COMMANDS and n != "do_EOF")
        self.columnize(names, 80)
        self._say(self.helpStr.rstrip())

    # ----- looking -------------------------------------------------------------------------
    def do_paths(self, line: str) -> None:
        """paths SRC DST: every path from SRC to DST: EV, plane, spine, uSID address, up or down.

        Each path is a static source route: its uSIDs (one per switch, then the destination's)
        ride in the IPv6 destination address after the locator block fcbb:bb00::/32. `up` means
        no fault injected so far (cut link, failed switch) lies on it; a lossy link is named."""
        src, dst = self._args(line, 2, "paths SRC DST")
        rows: list[tuple] = [("EV", "plane", "spine", "uSID address", "state", "links")]
        for p in self.bed.paths(src, dst):
            r = p.route
            state = "up" if p.up else "DOWN"
            rows.append((f"{r.ev:#x}", r.plane, "-" if r.spine is None else f"s{r.spine}",
                         r.address, state + (f" ({p.why})" if p.why else ""), " ".join(r.links)))
        self._say(table(rows))

    def do_evs(self, line: str) -> None:
        """evs HOST [QP]: the EV set of HOST's sending QPs (or of QP): state, skips, RTT, bytes.

        Per EV: its path (plane, spine), state (GOOD, SKIP, ASSUMED_BAD, DENIED), whether it is in
        the active set or a backup, how often it was skipped (ECN, trimming) and benched (a real
        loss), its own smoothed RTT and the payload bytes sent on it. QP is the flow number
        `flows` shows."""
        args = self._args(line, (1, 2), "evs HOST [QP]")
        host = args[0]
        self.fabric.host(host)
        flows: list[Flow] = [f for f in self._open_agent_flows() if f.src == host]
        if len(args) == 2:
            flow = self._flow(args[1])
            if not isinstance(flow, AgentFlow) or flow.src != host:
                raise Usage(f"QP {args[1]} is not a sending QP of {host} (see `flows`)")
            flows = [flow]
        elif not flows:  # the last flow that ended, as it ended
            flows = [f for f in self.bed.flows if f.src == host and f.number in self.last_evs][-1:]
        if not flows:
            raise Usage(f"{host} has sent on no QP yet: `send {host} ...` first (`flows` lists them)")
        for flow in flows:
            assert isinstance(flow, AgentFlow)
            if flow.closed and flow.number not in self.last_evs:
                raise Usage(f"flow {flow.number} ended ({self.ended.get(flow.number, 'closed')}): "
                            f"its EV set was not kept")
            self._print_evs(flow, self.last_evs[flow.number] if flow.closed else flow.evs())

    def _print_evs(self, flow: AgentFlow, report: dict) -> None:
        cc = report.get("congestion")
        window = (f"cwnd {cc['cwnd_pkts']} pkts, srtt {cc['srtt_ms']} ms, target {cc['target_ms']} ms, "
                  if cc else "")
        ended = f" (ended: {self.ended[flow.number]}; its EV set as it ended)" if flow.closed else ""
        self._say(f"flow {flow.number} {flow.transport} {flow.src}->{flow.dst}{ended}: {window}"
                  f"{fmt_bytes(report['bytes_acked'])} acknowledged")
        routes = {r.ev: r for r in self.fabric.routes(flow.src, flow.dst)}
        rows: list[tuple] = [("EV", "plane", "spine", "state", "set", "skips", "benched", "rtt ms", "sent")]
        for row in report["rows"]:
            route = routes.get(row["ev"])
            spine = "-" if route is None or route.spine is None else f"s{route.spine}"
            in_set = "active" if row["active"] else ("-" if row["state"] != "GOOD" else "backup")
            rows.append((f"{row['ev']:#x}", row["plane"], spine, row["state"], in_set, row["skips"],
                         row["benched"], row["srtt_ms"], fmt_bytes(row["bytes_sent"])))
        self._say(table(rows))

    def do_flows(self, line: str) -> None:
        """flows: every flow of the session: transport, hosts, size, progress, rate now, state."""
        self._args(line, 0, "flows")
        if not self.bed.flows:
            self._say("no flows yet: `send h0 h2 20M` starts one")
            return
        rows: list[tuple] = [("flow", "transport", "src->dst", "size", "done", "rate now", "state")]
        for flow in self.bed.flows:
            prog = flow.progress()
            size = fmt_bytes(prog.nbytes) if prog.nbytes else "-"
            if flow.number in self.ended:
                state, rate = self.ended[flow.number], "-"
            else:
                state = "running" + (" (background)" if flow.number in self.background else "")
                rate = fmt_mbps(self._rate_now(flow))
            rows.append((flow.number, flow.transport, f"{flow.src}->{flow.dst}", size,
                         fmt_bytes(prog.bytes_done), rate, state))
        self._say(table(rows))

    # ----- traffic -------------------------------------------------------------------------
    def do_send(self, line: str) -> None:
        """send SRC DST SIZE [--transport mrc|roce|spray|tcp|mptcp] [--background] [--param N=V]

        Transfer SIZE bytes (K, M, G suffixes: binary, 200M = 200 MiB) from SRC to DST with the
        transport (mrc by default). In the foreground a progress line shows the bytes
        acknowledged, the rate and the EV states; Ctrl-C stops the transfer and the session goes
        on. --background (-b) returns at once (`flows`, `stop N`). --param NAME=VALUE (repeatable)
        sets a transport parameter for this QP only, e.g. --param ev_set_size=4."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise Usage(f"{exc} (see `help send`)") from None
        args = _send_parser().parse_args(words)
        from endpoints.protocol.config import parse_overrides, with_overrides

        nbytes = parse_size(args.size)
        config = None
        if args.param:
            overrides = parse_overrides(args.param)
            config = with_overrides(self.bed.transport, overrides, per_qp=True)
        flow = self.bed.flow(args.transport, args.src, args.dst, config=config)
        flow.start(nbytes=nbytes)
        if args.background:
            self.background.add(flow.number)
            self._say(f"flow {flow.number}: {args.transport} {args.src}->{args.dst}, {fmt_bytes(nbytes)}, "
                      f"in the background (`flows`, `stop {flow.number}`)")
            return
        self._foreground(flow)

    def _foreground(self, flow: Flow) -> None:
        t0 = time.monotonic()
        history: list[tuple[float, int]] = [(t0, 0)]
        tty = self.stdout.isatty() if hasattr(self.stdout, "isatty") else False
        last_print = 0.0
        try:
            while True:
                prog = flow.progress()
                now = time.monotonic()
                history.append((now, prog.bytes_done))
                while len(history) > 2 and history[1][0] < now - RATE_WINDOW_S:
                    history.pop(0)
                if prog.done:
                    break
                if tty or now - last_print >= 2.0:
                    text = self._progress_line(flow, prog.bytes_done, prog.nbytes, history)
                    self.stdout.write(("\r\x1b[K" + text) if tty else text + "\n")
                    self.stdout.flush()
                    last_print = now
                time.sleep(PROGRESS_EVERY_S)
        except KeyboardInterrupt:
            self.stdout.write("\n" if tty else "")
            self._stop(flow, "interrupted: ")
            return
        if tty:
            self.stdout.write("\r\x1b[K")
        self._finish(flow, time.monotonic() - t0)

    def _progress_line(self, flow: Flow, done: int, total: int | None,
                       history: list[tuple[float, int]]) -> str:
        (t_a, b_a), (t_b, b_b) = history[0], history[-1]
        rate = (b_b - b_a) / (t_b - t_a) if t_b > t_a else 0.0
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        text = (f"flow {flow.number} {flow.transport} {flow.src}->{flow.dst}: {fmt_bytes(done)} of "
                f"{fmt_bytes(total or 0)}{pct}, {fmt_mbps(rate)}")
        if isinstance(flow, AgentFlow) and flow.transport != "roce":
            counts: dict[str, int] = {}
            for row in flow.evs()["rows"]:
                counts[row["state"]] = counts.get(row["state"], 0) + 1
            text += ", EVs " + " ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return text + "  (Ctrl-C stops it)"

    def _keep_evs(self, flow: Flow) -> None:
        """Keep an agent flow's EV set as it ends (`evs` shows it once its QP is gone)."""
        if isinstance(flow, AgentFlow) and not flow.closed:
            try:
                self.last_evs[flow.number] = flow.evs()
            except (ValueError, RuntimeError, OSError):  # its agent died: nothing to keep
                pass

    def _finish(self, flow: Flow, seconds: float | None = None) -> None:
        """Read a finished flow's result, close it, say so."""
        self._keep_evs(flow)
        res = flow.result()
        flow.close()
        self.background.discard(flow.number)
        self.ended[flow.number] = "done, " + ("data ok" if res.data_ok else "DATA WRONG")
        took = f" in {seconds:.1f} s ({fmt_mbps(res.bytes_delivered / seconds)})" if seconds else ""
        self._say(f"flow {flow.number} done: {fmt_bytes(res.bytes_delivered)}{took}, "
                  + ("data ok" if res.data_ok else "DATA WRONG: the receiver's bytes differ"))

    def _stop(self, flow: Flow, why: str = "") -> None:
        flow.stop()
        deadline = time.monotonic() + 2.0  # what was already posted completes
        while not flow.progress().done and time.monotonic() < deadline:
            time.sleep(0.05)
        self._keep_evs(flow)
        res = flow.result()
        flow.close()
        self.background.discard(flow.number)
        self.ended[flow.number] = "stopped, " + ("data ok" if res.data_ok else "DATA WRONG")
        self._say(f"{why}flow {flow.number} stopped after {fmt_bytes(res.bytes_delivered)}, "
                  + ("data ok" if res.data_ok else "DATA WRONG"))

    def do_stop(self, line: str) -> None:
        """stop N|all: stop flow N (or every running flow); what it delivered is checked."""
        (which,) = self._args(line, 1, "stop N|all")
        if which == "all":
            flows = [f for f in self.bed.flows if f.number not in self.ended]
        else:
            flows = [self._flow(which)]
            if flows[0].number in self.ended:
                raise Usage(f"flow {which} has already ended (see `flows`)")
        for flow in flows:
            self._stop(flow)

    def _reap_background(self) -> None:
        """Say when a background flow has finished (checked after every command)."""
        for number in sorted(self.background):
            flow = self.bed.flows[number - 1]
            try:
                done = flow.progress().done
            except (ValueError, RuntimeError, OSError, ConnectionError) as exc:
                self._error(f"flow {number}: {exc}")
                self.background.discard(number)
                continue
            if done:
                self._finish(flow)

    # ----- observation ---------------------------------------------------------------------
    def do_capture(self, line: str) -> None:
        """capture TARGET [FILE] | capture stop [TARGET] | capture

        Write a pcap of TARGET: a host (h1: every NIC), a host NIC (h1-eth0) or a switch port
        (p0l0-eth3), to FILE (results/cli/TARGET.pcap by default), for Wireshark: `tshark -X
        lua_script:experiments/tools/wireshark/mrc.lua -r FILE` shows MRC's headers too.
        `capture stop` ends every capture (or TARGET's); `capture` alone lists them."""
        args = self._args(line, (0, 1, 2), "capture TARGET [FILE] | capture stop [TARGET]")
        running = [c for c in self.bed.captures if c.running]
        if not args:
            self._say("\n".join(f"{c.target} -> {c.path}" for c in running) or "no capture running")
            return
        if args[0] == "stop":
            chosen = [c for c in running if len(args) == 1 or c.target == args[1]]
            if not chosen:
                raise Usage("no such capture running (`capture` lists them)")
            for c in chosen:
                packets = c.stop()
                self._say(f"{c.target}: {'?' if packets is None else packets} packets in {c.path}")
            return
        if any(c.target == args[0] for c in running):
            raise Usage(f"{args[0]} is already being captured (`capture stop {args[0]}` first)")
        path = Path(args[1]) if len(args) > 1 else self._results_file(f"{args[0]}.pcap")
        if len(args) == 1:
            from experiments.api.capture import resolve

            resolve(self.fabric, args[0])  # a bad target says so before any folder is made
            path.parent.mkdir(parents=True, exist_ok=True)
        capture = self.bed.capture(args[0], path)
        self._say(f"capturing {args[0]} to {capture.path} (`capture stop` ends it)")

    def do_plot(self, line: str) -> None:
        """plot [FILE]: the flows' goodput and EV states so far, with the faults, as a PNG
        (results/cli/session.png by default)."""
        args = self._args(line, (0, 1), "plot [FILE]")
        path = Path(args[0]) if args else self._results_file(DEFAULT_PLOT)
        if args and not path.parent.is_dir():  # results/cli/ is made by the plot itself
            raise Usage(f"cannot write {path}: {path.parent} is not a folder")
        self._say(f"plotted {len(self.bed.flows)} flow(s) to {self.bed.plot(path).resolve()}")

    # ----- Mininet's commands on this fabric ------------------------------------------------
    def default(self, line: str) -> None:
        """`h0 CMD ...`: a later host name becomes its plane-0 baseline address (IPv6: the
        hosts have no IPv4, which Mininet would look for)."""
        first, args, _ = self.parseline(line)
        if first not in self.mn:
            raise Usage(f"Unknown command: {line.strip()} (`help` lists the commands)")
        if args:
            words = [str(self.fabric.host(w).nics[0].addr) if w in self.hosts else w
                     for w in args.split(" ")]
            line = f"{first} {' '.join(words)}"
        super().default(line)

    def do_iperf(self, line: str) -> None:
        """iperf: Mininet's iperf is IPv4-only; use `send SRC DST SIZE --transport tcp`."""
        raise Usage("Mininet's iperf needs IPv4, which these hosts do not have: use "
                    "`send h0 h2 10M --transport tcp` (or `h0 iperf -V -c h2` with a server)")

    def do_iperfudp(self, line: str) -> None:
        """iperfudp: IPv4-only in Mininet; use `send` (mrc, roce and spray run over UDP)."""
        self.do_iperf(line)

    def do_switch(self, line: str) -> None:
        """switch: Mininet's start/stop would delete the bridge; use `fail` / `recover`."""
        raise Usage("Mininet's `switch NAME stop` would delete the switch: use `fail NAME` / "
                    "`recover NAME` (stops forwarding with ports up)")

    def do_xterm(self, line: str, term: str = "xterm") -> None:
        """xterm NODE...: an xterm in each node's namespace (needs an X display)."""
        if not os.environ.get("DISPLAY"):
            raise Usage(f"{term} needs an X display: DISPLAY is not set (ssh -X, or a desktop)")
        if shutil.which("xterm" if term == "xterm" else "gnome-terminal") is None:
            raise Usage(f"{term} is not installed here")
        super().do_xterm(line, term)

    def do_exit(self, line: str) -> str:
        """exit: tear everything down (flows, faults, captures, the fabric) and leave."""
        return super().do_exit(line)

    # ----- completion ----------------------------------------------------------------------
    def completenames(self, text: str, *ignored: object) -> list[str]:
        return super().completenames(text, *ignored) + [n for n in self.mn if n.startswith(text)]

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return [n for n in self.mn if n.startswith(text)]  # `h0 ping h<TAB>`

    # ----- helpers -------------------------------------------------------------------------
    def _args(self, line: str, count: int | tuple[int, ...], usage: str) -> list[str]:
        try:
            args = shlex.split(line)
        except ValueError as exc:
            raise Usage(f"{exc}: {usage}") from None
        allowed = (count,) if isinstance(count, int) else count
        if len(args) not in allowed:
            raise Usage(f"usage: {usage}")
        return args

    def _results_file(self, name: str) -> Path:
        """A file the session writes when not told where: under results/cli/ (made when the
        file is written)."""
        return SESSION_RESULTS / name

    def _flow(self, text: str) -> Flow:
        if not self.bed.flows:
            raise Usage(f"no flow {text!r}: no flows yet (`send` starts one)")
        if not text.isdigit() or not 1 <= int(text) <= len(self.bed.flows):
            raise Usage(f"no flow {text!r}: flows are numbered 1..{len(self.bed.flows)} (`flows`)")
        return self.bed.flows[int(text) - 1]

    def _rate_now(self, flow: Flow) -> float:
        """Bytes per second delivered over the last RATE_WINDOW_S (from its goodput bins)."""
        from endpoints.host.goodput import BIN_S

        bins = flow.goodput()
        last = int(time.monotonic() / BIN_S)
        span = round(RATE_WINDOW_S / BIN_S)
        return sum(bins.get(b, 0) for b in range(last - span, last)) / RATE_WINDOW_S
