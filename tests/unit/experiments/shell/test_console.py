"""The CLI's commands without an emulation (no root): a Testbed that is never started, so what
is checked is the parsing, the one-line errors, `paths`, help and completion. The pexpect test
in tests/integration/test_cli.py drives the real thing."""

import os

from experiments import testbed
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


def _run(tmp_path, capsys, *lines):
    bed = testbed.Testbed(FABRIC, tmp_path)
    bed.em.net = _Net()
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
        ("evs h0", "h0 sends on no open QP"),
        ("evs h0 3", "no flow '3': no flows yet"),
        ("stop 1", "no flow '1'"),
        ("capture h9", "cannot capture 'h9'"),
        ("plot", "no flow to plot yet"),
        ("plot /no/such/folder/x.png", "is not a folder"),
        ("iperf h0 h1", "needs IPv4"),
        ("switch p0s0 stop", "`fail NAME`"),
        ("link h0 p1s1 down", "no link between h0 and p1s1"),
        ("frobnicate", "Unknown command: frobnicate"),
    ]
    cli, out, err = _run(tmp_path, capsys, *[line for line, _ in bad], "paths h0 h1")
    errors = [line for line in err.splitlines() if line.strip()]
    assert len(errors) == len(bad), err  # exactly one line per bad command
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
