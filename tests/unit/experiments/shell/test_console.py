"""The CLI's commands without an emulation (no root): a Testbed that is never started, so what
is checked is the parsing, the one-line errors, `paths`, help and completion. The pexpect test
in tests/integration/test_cli.py drives the real thing."""

import os
import time
from pathlib import Path

from experiments.api import testbed
from experiments.shell.console import MRC_COMMANDS, MrcCli
from topologies.model import build

FABRIC = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)


class _Node:
    def __init__(self, name: str) -> None:
        self.name = name


class _Net:
    """What the CLI reads of a Mininet network when it runs a script: its nodes by name."""

    def __init__(self) -> None:
        self.hosts = [_Node(h.name) for h in FABRIC.hosts]
        self.switches = [_Node(s.name) for s in FABRIC.switches]
        self.controllers = [_Node("c0")]  # a reference only: the CLI must not list it
        self.nameToNode = {n.name: n for n in self.hosts + self.switches}


def _run(tmp_path, capsys, *lines, flows=()):
    bed = testbed.Testbed(FABRIC, tmp_path)
    bed.em.net = _Net()
    bed.flows.extend(flows)
    script = tmp_path / "script"
    script.write_text("\n".join(lines) + "\n")
    with open(os.devnull) as stdin:
        cli = MrcCli(bed, stdin=stdin, script=str(script))
    out = capsys.readouterr()
    return cli, out.out, out.err


def test_bad_input_prints_one_line_each_and_the_session_goes_on(tmp_path, capsys):
    bad = [
        ("paths h0 h9", "no host named 'h9'"),
        ("paths h0", "usage: paths SRC DST"),
        ("send h0 h1 12Q", "bad size '12Q'"),
        ("send h0 h1 0", "at least 1"),
        ("send h0 h1 1M --transport carrier-pigeon", "invalid choice"),
        ("send h0 h1 1M --param mtu_payload=1024", "whole run"),
        ("send h0 h1 1M --param warp=9", "NAME=VALUE"),
        ("cut p9l9-p0s0", "no link named 'p9l9-p0s0'"),
        ("fail p0s7", "no switch named 'p0s7'"),
        ("loss p0l0-p0s0 2", "bad probability '2'"),
        ("flap p0l0-p0s0 500 300", "0 < down time < period"),
        ("flap p0l0-p0s0 x", "bad down time"),
        ("evs h0", "h0 has sent on no QP yet"),
        ("sleep x", "bad number of seconds 'x'"),
        ("sleep 99999", "at most 3600"),
        ("wait 4", "no flow '4'"),
        ("evs h0 3", "no flow '3': no flows yet"),
        ("stop 1", "no flow '1'"),
        ("capture h9", "cannot capture 'h9'"),
        ("plot", "no flow to plot yet"),
        ("plot /no/such/folder/x.png", "is not a folder"),
        ("iperf h0 h1", "needs IPv4"),
        ("switch p0s0 stop", "`fail NAME`"),
        ("link h0 p1s1 down", "no link between h0 and p1s1"),
        ("frobnicate", "Unknown command: frobnicate"),
        ("placement plot", "needs a display, networkx and pygraphviz"),
    ]
    cli, out, err = _run(tmp_path, capsys, *[line for line, _ in bad], "paths h0 h1")
    errors = [line for line in err.splitlines() if line.strip()]
    assert len(errors) == len(bad), err  # exactly one line per bad command
    assert cli.failures == len(bad)  # what a script's exit status says
    for (line, words), got in zip(bad, errors, strict=True):
        assert words in got, f"{line!r} printed {got!r}"
    assert "fcbb:bb00:" in out  # the last command still ran


def test_paths_lists_every_route_with_its_ev_and_whether_faults_leave_it_up(tmp_path, capsys):
    bed_routes = FABRIC.routes("h0", "h1")
    _, out, err = _run(tmp_path, capsys, "paths h0 h1")
    assert not err
    rows = out.splitlines()
    assert rows[0].split()[:4] == ["EV", "plane", "spine", "uSID"]
    assert len(rows) == 1 + len(bed_routes) == 5
    for route, row in zip(bed_routes, rows[1:], strict=True):
        cells = row.split()
        assert cells[0] == f"{route.ev:#x}" and cells[1] == str(route.plane)
        assert cells[3] == str(route.address) and cells[4] == "up"
        assert cells[5:] == list(route.links)


def test_help_explains_every_mrc_command(tmp_path, capsys):
    _, out, err = _run(tmp_path, capsys, "help", *[f"help {c}" for c in MRC_COMMANDS])
    assert not err
    listing, _, details = out.partition("You may also send a command to a node")
    for name in MRC_COMMANDS:
        assert f"\n  {name}" in listing  # one summary line each, usage first
        assert f"{name}" in details
    for mininet_command in ("net", "dump", "links", "pingall", "xterm", "nodes"):
        assert mininet_command in listing


def test_tab_completion_names_hosts_switches_links_and_options(tmp_path, capsys):
    cli, _, _ = _run(tmp_path, capsys)
    assert cli.complete_paths("h", "paths h", 6, 7) == ["h0", "h1"]
    assert cli.complete_paths("", "paths h0 ", 9, 9) == ["h0", "h1"]
    assert cli.complete_cut("p0l0-", "cut p0l0-", 4, 9) == ["p0l0-p0s0", "p0l0-p0s1"]
    assert cli.complete_fail("p1s", "fail p1s", 5, 8) == ["p1s0", "p1s1"]
    assert cli.complete_send("--t", "send h0 h1 1M --t", 14, 17) == ["--transport"]
    assert cli.complete_send("m", "send h0 h1 1M --transport m", 26, 27) == ["mrc", "mptcp"]
    assert "h1-eth1" in cli.complete_capture("h1-", "capture h1-", 8, 11)
    assert "p0l0-eth2" in cli.complete_capture("p0l0-", "capture p0l0-", 8, 13)
    assert set(cli.completenames("p0l")) >= {"p0l0", "p0l1"}
    assert "paths" in cli.completenames("pa")
    assert cli.complete_flap("", "flap p0l0-p0s0 ", 15, 15) == ["stop"]


def test_the_py_command_sees_the_testbed(tmp_path, capsys):
    cli, _, _ = _run(tmp_path, capsys)
    scope = cli.getLocals()
    assert scope["bed"] is cli.bed and scope["net"] is cli.bed.net and "h0" in scope
    assert "c0" not in scope and list(cli.mn) == ["h0", "h1"] + [s.name for s in FABRIC.switches]


class _Agent:
    """An agent's control channel as a finished 4 KiB MRC transfer leaves it."""

    EVS = {"rows": [{"ev": 0x1C000, "plane": 0, "state": "ASSUMED_BAD", "active": False, "skips": 2,
                     "benched": 1, "srtt_ms": 1.5, "bytes_sent": 4096}],
           "bytes_acked": 4096, "congestion": None}

    def __init__(self) -> None:
        self.qps: set[int] = set()

    def call(self, command, qpn=None, **_):
        if command == "open":
            self.qps.add(qpn)
        elif command == "close":
            self.qps.discard(qpn)
        elif qpn not in self.qps:
            raise ValueError(f"no QP {qpn}")
        return {"progress": {"bytes": 4096, "streaming": False, "messages": 1, "posted": 1},
                "evs": self.EVS, "digest": {"pending": 0},
                "stats": {"digests": {"0": "d"}, "bins": {}, "bytes_delivered": 4096,
                          "messages_acked": 1}}.get(command, {})


def _finished_flow():
    from experiments.api.flows import AgentFlow

    agents = {"h0": _Agent(), "h1": _Agent()}
    flow = AgentFlow(agents, "mrc", "h0", "h1", qpn=1, number=1)
    flow.nbytes = 4096
    return flow


def test_scripts_wait_for_flows_sleep_and_evs_shows_an_ended_flow_as_it_ended(tmp_path, capsys):
    flow = _finished_flow()
    t0 = time.monotonic()
    cli, out, err = _run(tmp_path, capsys, "wait", "evs h0", "evs h0 1", "sleep 0.2", "wait",
                         "wait 1", flows=[flow])
    assert time.monotonic() - t0 >= 0.2
    assert not err and cli.failures == 0
    lines = out.splitlines()
    assert lines[0] == "flow 1 done: 4.0 KiB, data ok"
    assert flow.closed  # the QP is gone, and `evs` still shows how its EVs ended
    shown = [i for i, line in enumerate(lines) if "(ended: done, data ok; its EV set as it ended)" in line]
    assert len(shown) == 2, out
    assert "ASSUMED_BAD" in lines[shown[0] + 2] and "0x1c000" in lines[shown[0] + 2]
    assert "no flow running: nothing to wait for" in out
    assert "flow 1 has already ended: done, data ok" in out


def test_a_script_stops_at_exit_and_counts_its_failed_lines(tmp_path, capsys):
    from experiments.shell.session import script_status

    cli, out, err = _run(tmp_path, capsys, "# a comment", "paths h0 h9", "frobnicate", "exit",
                         "paths h0 h1")
    assert cli.failures == 2 and "fcbb:bb00:" not in out  # nothing after `exit` ran
    assert script_status(tmp_path / "script", cli.failures) == 1
    assert "2 command(s) of" in capsys.readouterr().err
    assert script_status(tmp_path / "script", 0) == 0
    assert script_status(None, 3) == 0  # at the prompt, mistakes do not make an exit status


def test_plot_and_capture_write_under_results_not_the_current_folder(tmp_path, capsys, monkeypatch):
    from experiments.shell import console

    repo = Path(__file__).resolve().parents[4]
    assert console.SESSION_RESULTS == repo / "results" / "cli"  # never the current folder
    written = []
    monkeypatch.setattr(console, "SESSION_RESULTS", tmp_path / "results" / "cli")
    monkeypatch.setattr(testbed.Testbed, "plot", lambda self, path, flows=None: written.append(path) or path)
    monkeypatch.setattr(testbed.Testbed, "capture",
                        lambda self, target, path: written.append(path) or type("C", (), {"path": path})())
    monkeypatch.chdir(tmp_path)
    cli, out, err = _run(tmp_path, capsys, "plot", "capture h1")
    assert not err, err
    assert written == [tmp_path / "results" / "cli" / "session.png",
                       tmp_path / "results" / "cli" / "h1.pcap"]
    assert (tmp_path / "results" / "cli").is_dir()  # made for the capture (the plot makes its own)


def test_a_command_that_fails_makes_no_results_folder(tmp_path, capsys, monkeypatch):
    from experiments.shell import console

    monkeypatch.setattr(console, "SESSION_RESULTS", tmp_path / "results" / "cli")
    _, _, err = _run(tmp_path, capsys, "plot", "capture h9")
    assert "no flow to plot yet" in err and "cannot capture 'h9'" in err
    assert not (tmp_path / "results").exists()


def test_mininets_link_command_cuts_and_restores_a_hosts_nic_port(tmp_path, capsys, monkeypatch):
    """`link h0 p0l0 down` as in Mininet's CLI: the host's plane-0 NIC link, either order of
    the two nodes; `flap` takes host links too."""
    calls = []
    for name in ("cut_link", "restore_link", "flap_link"):
        monkeypatch.setattr(testbed.FaultInjector, name,
                            lambda self, *args, name=name: calls.append((name, *args)))
    cli, out, err = _run(tmp_path, capsys, "link h0 p0l0 down", "link p1l1 h1 up",
                         "cut h1-p1l1", "flap h0-p1l0 100 500 2")
    assert not err and cli.failures == 0
    assert calls == [("cut_link", "h0-p0l0"), ("restore_link", "h1-p1l1"), ("cut_link", "h1-p1l1"),
                     ("flap_link", "h0-p1l0", 0.1, 0.5, 2)]
    assert "h0-p0l0 cut" in out and "h1-p1l1 restored" in out
