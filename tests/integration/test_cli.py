"""`mrclab cli` driven through a pseudo-terminal (pexpect, as Mininet's own tests do): the
default fabric comes up, paths are listed, an MRC transfer runs in the background through a
link cut and its restore while `evs` shows the cut EV go ASSUMED_BAD and come back; bad input
prints one line; Mininet's own commands work on the IPv6-only hosts; a capture and a plot are
written; Ctrl-C stops a foreground transfer only; tab completion names links and hosts; `exit`
leaves nothing behind. One session for the whole file (the tests run in order)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")
PROMPT = "mrclab> "
# 4 hosts (h0..h3) on 2 leaves at 10 Mbit/s: what these tests were written on (the default
# fabric has one host per leaf).
FABRIC = ("--planes", "4", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2", "--link-mbps", "10")
CUT = "p0l0-p0s0"  # on h0->h2's first path, EV 0x1c000
CUT_EV = "0x1c000"


class Session:
    def __init__(self, workdir):
        self.workdir = workdir
        env = {**os.environ, "TERM": "dumb"}  # no bracketed-paste escapes around the prompt
        env.pop("DISPLAY", None)
        # SIGINT ignored, as a shell without job control starts a background job (CI can be
        # one): Ctrl-C must still stop a foreground transfer, whatever the console inherited.
        self.child = pexpect.spawn(sys.executable, ["-m", "experiments.cli", "cli", *FABRIC, "--workdir",
                                                    str(workdir)], cwd=str(REPO), env=env,
                                   encoding="utf-8", timeout=30, dimensions=(60, 300),
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        self.child.logfile_read = open(workdir / "session.log", "w")
        self.child.expect(PROMPT, timeout=180)

    def run(self, command: str, timeout: float = 30) -> str:
        """Send one line, return what it printed up to the next prompt."""
        self.child.sendline(command)
        self.child.expect(PROMPT, timeout=timeout)
        out = self.child.before.replace("\r\n", "\n")
        return out.split("\n", 1)[1] if "\n" in out else ""  # drop the echoed command

    def sync(self) -> None:
        """Read past every prompt printed so far (readline redraws it after listing
        completions): what the command prints, not its echo, says where we are."""
        self.child.sendline("py 'in' + 'sync'")
        self.child.expect("insync")
        self.child.expect(PROMPT)

    def rows(self, command: str) -> dict[str, list[str]]:
        """A table's rows by their first cell."""
        return {cells[0]: cells for line in self.run(command).splitlines() if (cells := line.split())}


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    session = Session(tmp_path_factory.mktemp("cli"))
    yield session
    child = session.child
    if child.isalive():  # a test failed half-way: stop what runs, leave, never SIGKILL it
        child.sendintr()
        child.sendline("exit")
        if child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=60) == 1:
            child.kill(signal.SIGTERM)  # the console's own teardown runs on SIGTERM
            child.expect(pexpect.EOF, timeout=60)


def test_paths_lists_every_route_up(cli):
    rows = cli.rows("paths h0 h2")
    evs = [k for k in rows if k.startswith("0x")]
    assert len(evs) == 8  # default fabric: 4 planes x 2 spines
    assert rows[CUT_EV][1:3] == ["0", "s0"] and rows[CUT_EV][4] == "up" and CUT in rows[CUT_EV]
    assert rows[CUT_EV][3].startswith("fcbb:bb00:")


def test_background_transfer_through_a_cut_the_ev_goes_bad_and_comes_back(cli):
    out = cli.run("send h0 h2 200M --background")
    assert "flow 1: mrc h0->h2, 200.0 MiB, in the background" in out
    time.sleep(1.5)
    before = cli.rows("evs h0")
    assert sum(1 for r in before.values() if r[0].startswith("0x")) == 8
    assert before[CUT_EV][3] == "GOOD" and before[CUT_EV][6] == "0"  # benched 0 times
    assert f"{CUT} cut" in cli.run(f"cut {CUT}")
    deadline, state = time.monotonic() + 3, None
    while time.monotonic() < deadline and state != "ASSUMED_BAD":
        time.sleep(0.2)
        state = cli.rows("evs h0")[CUT_EV][3]
    assert state == "ASSUMED_BAD"
    assert "DOWN" in cli.rows("paths h0 h2")[CUT_EV][4]
    assert f"{CUT} restored" in cli.run(f"restore {CUT}")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and state != "GOOD":
        time.sleep(0.2)
        row = cli.rows("evs h0")[CUT_EV]
        state = row[3]
    assert state == "GOOD" and row[6] == "1"  # benched once, back in use
    flows = cli.rows("flows")
    assert flows["1"][1:3] == ["mrc", "h0->h2"] and "running" in " ".join(flows["1"])


def test_other_faults_are_injected_and_listed(cli):
    assert "drops 5.0% of packets" in cli.run("loss p1l0-p1s0 5%")
    assert "flaps" in cli.run("flap p2l0-p2s1 100 400")
    assert "no longer forwards" in cli.run("fail p3s1")
    faults = cli.run("faults")
    assert "failed: p3s1" in faults and "p1l0-p1s0 (0.05)" in faults and "flapping: p2l0-p2s1" in faults
    cli.run("loss p1l0-p1s0 0")
    cli.run("flap stop")
    cli.run("recover p3s1")
    assert "no faults" in cli.run("faults")


def test_bad_input_prints_one_line_and_the_session_goes_on(cli):
    for command, words in [("evs h9", "no host named 'h9'"), ("cut p7l7-p0s0", "no link named"),
                           ("frobnicate now", "Unknown command"), ("send h0 h2 12Q", "bad size"),
                           ("stop 9", "no flow '9'"), ("fail h0", "no switch named 'h0'")]:
        out = cli.run(command).strip().splitlines()
        assert len(out) == 1 and words in out[0], (command, out)
    assert cli.rows("paths h0 h1")  # still alive and answering


def test_mininet_commands_work_on_the_ipv6_hosts(cli):
    net = cli.run("net")
    assert re.search(r"^h0 h0-eth0:p0l0-eth1 h0-eth1:p1l0-eth1", net, re.M)
    assert "<Host h0: h0-eth0:fd00::1" in cli.run("dump")
    links = cli.run("links")
    assert links.count("(OK OK)") == 32
    ping = cli.run("pingall", timeout=60)
    assert "Results: 0% dropped (12/12 received)" in ping
    assert " 0% packet loss" in cli.run("h0 ping6 -c 2 -W 2 h2")
    assert "h0 h1 h2 h3" in cli.run("nodes")
    assert "DISPLAY is not set" in cli.run("xterm h0")
    assert "fd00::3" in cli.run("py bed.net['h2'].IP()")


def test_capture_and_plot_write_their_files(cli):
    pcap, png = cli.workdir / "h2.pcap", cli.workdir / "session.png"
    assert "capturing h2" in cli.run(f"capture h2 {pcap}")
    time.sleep(0.5)
    stopped = re.search(r"h2: (\d+) packets in (\S+)", cli.run("capture stop"))
    assert stopped and int(stopped.group(1)) > 20 and stopped.group(2) == str(pcap)
    # MRC travels IPv6-in-IPv6: NIC to NIC inside, the uSID carrier (here h2's SID) outside.
    read = subprocess.run(["tcpdump", "-n", "-r", str(pcap), "ip6 proto 41"], capture_output=True,
                          text=True)
    lines = read.stdout.splitlines()
    assert len(lines) > 20 and all("fcbb:bb00" in line and ".4791" in line for line in lines), lines[:3]
    assert "plotted 1 flow(s)" in cli.run(f"plot {png}", timeout=60)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ctrl_c_stops_a_foreground_transfer_and_nothing_else(cli):
    cli.child.sendline("send h1 h3 1G")
    cli.child.expect(r"flow 2 mrc h1->h3: [\d.]+ \w+ of 1\.0 GiB \(\d+%\), [\d.]+ Mbit/s, EVs \d+ GOOD",
                     timeout=20)
    time.sleep(1.0)
    cli.child.sendintr()
    cli.child.expect(PROMPT, timeout=20)
    assert re.search(r"interrupted: flow 2 stopped after [\d.]+ \w+, data ok", cli.child.before)
    flows = cli.rows("flows")
    assert "stopped, data ok" in " ".join(flows["2"]) and "running" in " ".join(flows["1"])


def test_tab_completion_names_links_and_hosts(cli):
    cli.child.send("restore p0l0-p0s\t\t")
    cli.child.expect("p0l0-p0s0 +p0l0-p0s1")
    cli.child.send("\x15")  # readline: discard the line
    cli.child.send("evs h\t\t")
    cli.child.expect("h0 +h1 +h2 +h3")
    cli.child.send("\x15")
    cli.child.send("fail p3s\t\t")
    cli.child.expect("p3s0 +p3s1")
    cli.child.send("\x15")
    cli.sync()
    assert cli.rows("paths h0 h1")


def _session_pid(workdir, name: str) -> int:
    """The process of the session whose command line names `name` in its work folder."""
    needle = str(workdir / name)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmd:
            return int(entry)
    raise AssertionError(f"no process of the session names {needle}")


def test_a_dead_controller_or_agent_is_said_once(cli):
    """Issue 11, item 6, in the console: the session goes on, but says (once) what died."""
    os.kill(_session_pid(cli.workdir, "controller.json"), signal.SIGKILL)
    os.kill(_session_pid(cli.workdir, "agent-h3.json"), signal.SIGKILL)
    time.sleep(0.5)
    out = cli.run("flows")
    assert "*** the controller died (exit status -9)" in out and "controller.log" in out, out
    # every host's agent runs in one process (the default): h3's killed, they all died
    assert "*** the agents of h0, h1, h2, h3 (one process) died (exit status -9)" in out, out
    assert "died" not in cli.run("flows")


def test_exit_tears_everything_down(cli):
    cli.child.sendline("exit")
    cli.child.expect("tearing down")
    cli.child.expect(pexpect.EOF, timeout=60)
    cli.child.close()
    assert cli.child.exitstatus == 0
    assert_nothing_left()
    left = subprocess.run(["pgrep", "-f", str(cli.workdir)], capture_output=True, text=True).stdout
    assert not left.strip(), f"processes of the session left: {left}"
    assert "mrclab_faults" not in subprocess.run(["nft", "list", "tables"], capture_output=True,
                                                 text=True).stdout
