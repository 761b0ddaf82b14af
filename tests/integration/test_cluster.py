"""A fabric split over two servers on this one machine: the second "server" is a network, PID
and mount namespace with its own sshd (topologies/cluster_lab.py), reached over ssh as a real
machine would be. check-fabric, the link-failure, switch-failure and t0-failure scenarios (with a
capture of a port on the server), an incast trimming there (the eBPF counters read over ssh) and
`mrclab cli` through the real CLI,
nothing left on either side after a normal end, after a Ctrl-C, and after a kill -9 of the head
and `mrclab clean`; bad --servers refused in one line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require_or_skip
from tests.integration.helpers import REPO, again_if_disturbed, assert_nothing_left
from topologies import cluster_lab
from topologies.dataplane import usid
from topologies.servers import SSH_CONFIG_ENV

pytestmark = pytest.mark.usefixtures("emulation_ready")
LAB_NUMBER = 7  # not the 1 `python -m topologies.cluster_lab up` makes by hand
SHAPE = {"planes": 2, "leaves": 2, "spines": 2, "hosts-per-leaf": 1}


@pytest.fixture(scope="module")
def server():
    require_or_skip(None if os.path.exists("/usr/sbin/sshd") else "sshd missing: run `make setup`")
    from topologies.switches import linux

    if linux.LinuxBackend.unavailable() is not None:
        pytest.skip(linux.LinuxBackend.unavailable())
    lab = cluster_lab.start(LAB_NUMBER)
    try:
        yield lab
    finally:
        cluster_lab.stop(lab)
        assert f"{cluster_lab.LAB_PREFIX}{LAB_NUMBER}" not in cluster_lab.leftovers()
        assert not os.path.exists(lab.folder)


def _argv(servers: str, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "experiments.cli", "check-fabric", "--switch", "linux",
            "--servers", servers, *extra]
    for key, value in SHAPE.items():
        argv += [f"--{key}", str(value)]
    return argv


def _env(lab) -> dict:
    return {**os.environ, SSH_CONFIG_ENV: str(lab.ssh_config)}


def _server_left(lab) -> list[str]:
    """What runs or remains on the server besides its sshd: router shells, control planes,
    interfaces other than its own, run folders, the BPF file systems of the data plane's pins."""
    out = lab.ssh("ps -eo args= | grep -E 'mininet:|controller.run|mnexec' | grep -v grep; "
                  "ip -o link show | grep -vE ': (lo|eth0)[@:]'; "
                  "ls -d /tmp/mrclab-*/server-* 2>/dev/null; "
                  "awk '$3 == \"bpf\" && $2 != \"/sys/fs/bpf\"' /proc/mounts")
    return [line for line in out.stdout.splitlines() if line.strip()]


def _split_run(server, tmp_path, scenario: str,
               *extra: str) -> tuple[dict, Path, subprocess.CompletedProcess]:
    """`mrclab run SCENARIO` split over the head and the server (MRC and roce, 5 s, seed 1, the
    test's shape): (summary, results folder, the finished command), once more if the VM
    disturbed the first run (helpers.again_if_disturbed)."""
    for attempt in (1, 2):
        out = tmp_path / f"split-{attempt}"
        argv = [sys.executable, "-m", "experiments.cli", "run", scenario, "--switch", "linux",
                "--servers", f"head,{server.address}", "--transports", "mrc,roce", "--duration", "5",
                "--seed", "1", "--out", str(out), *extra]
        for key, value in SHAPE.items():
            argv += [f"--{key}", str(value)]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=400, env=_env(server))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        s = json.loads((out / "summary.json").read_text())
        if not again_if_disturbed(s["fidelity"], attempt):
            break
    return s, out, proc


def test_split_fabric_proves_every_path_and_leaves_nothing(server):
    proc = subprocess.run(_argv(f"head,{server.address}"), cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_env(server))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    hosts = SHAPE["leaves"] * SHAPE["hosts-per-leaf"]
    pairs = hosts * (hosts - 1)
    # From first principles: every cross-leaf pair has planes x spines paths.
    assert result["paths_total"] == SHAPE["planes"] * SHAPE["spines"] * pairs
    assert result["paths_delivered"] == result["paths_total"]
    assert result["paths_lost"] == result["paths_expected_lost"] > 0
    assert result["paths_lost_unexpected"] == 0 and result["paths_survived_cut"] == 0
    assert result["paths_restored"] == result["paths_total"]
    assert result["ok"] is True
    assert result["placement"] == {"servers": ["head", server.address], "head": "head", "split": True,
                                   "planes": {"head": [], server.address: [0, 1]}}
    assert result["remote_servers"] == [server.address]
    assert _server_left(server) == []
    assert_nothing_left()


def test_split_link_failure_rides_through_and_the_servers_cpu_is_in_the_verdict(server, tmp_path):
    """The link-failure scenario on the split fabric (the cut link's routers on the server): MRC
    rides through and the single-path baseline stalls for the routing delay, as unsplit
    (test_scenarios); the server's CPU is sampled over ssh into every transport's verdict; its
    rate was bounded by the server's own forwarding calibration."""
    s, out, proc = _split_run(server, tmp_path, "link-failure", "--fault-at", "2.5", "--fault-end", "4")
    assert s["fidelity"]["faithful"], s["fidelity"]["problems"]
    # the rate was sized on the server's own forwarding figure too, read back (or measured once)
    there = s["capacity"]["servers"][server.address]
    assert there["source"] == "calibrated" and there["planes"] == [0, 1] and there["within"]
    assert there["packet_hops_per_s"] > 0 and there["calibration"]["fingerprint"]["kind"] == "forwarding"
    assert ("measuring it there once" in proc.stdout) == there["calibration"]["calibrated_now"]
    placed = s["switches"]["placement"]
    assert placed["split"] is True and placed["planes"][server.address] == [0, 1]
    # The server's kernel was asked the head's own seg6local probe over ssh (the same kernel
    # here, so the same answer), and one choice made for both.
    refused = usid.kernel_refusal()
    assert s["switches"]["seg6local_refused"] == ({} if refused is None else {server.address: refused})
    assert s["switches"]["usid_behaviours"] == usid.mode()
    mrc, roce = s["transports"]["mrc"], s["transports"]["roce"]
    assert mrc["stall_ms"] < 200 and roce["stall_ms"] >= s["routing"]["detect_ms"] / 2
    for transport, entry in s["fidelity"]["per_transport"].items():
        seen = entry["servers"][server.address]  # sampled there, every 250 ms of the run
        assert seen["samples"] >= 8, (transport, seen)
        assert seen["same_machine"] is True  # the lab server's kernel is this one (its boot id)
        assert 0 <= seen["cpu_idle_p10_pct"] <= seen["cpu_idle_mean_pct"] <= 100
    assert _server_left(server) == []
    assert_nothing_left()


def test_split_switch_failure_is_real_on_the_server_and_its_events_reach_the_summary(server, tmp_path):
    """switch-failure with the failed spine on the server: it stops forwarding there and the
    server's control plane is told over ssh, as a local one is; MRC rides through and roce
    stalls for the routing delay (the floor test_split_link_failure and the unsplit
    test_scenarios use) but not for the whole failure (the routing plane acted); the server's
    events are merged into the summary and the traces, tagged with it."""
    window_s = 2.0
    s, out, _ = _split_run(server, tmp_path, "switch-failure", "--fault-at", "2",
                           "--fault-end", str(2 + window_s))
    assert s["fidelity"]["faithful"], s["fidelity"]["problems"]
    mrc, roce = s["transports"]["mrc"], s["transports"]["roce"]
    assert mrc["stall_ms"] < 200, mrc["stall_ms"]
    assert s["routing"]["detect_ms"] / 2 <= roce["stall_ms"] < window_s * 1000, roce["stall_ms"]
    events = s["routing"]["controller_events"]
    for transport in ("mrc", "roce"):
        target = s["transports"][transport]["target"]
        mine = [e for e in events if e["transport"] == transport]
        kinds = [(e["event"], e.get("switch"), e["server"]) for e in mine if e["event"].startswith("switch_")]
        assert kinds == [("switch_down", target, server.address), ("switch_up", target, server.address)], mine
        converged = [e for e in mine if e["event"] == "baseline_converged"]
        assert converged and all(e["server"] == server.address for e in converged), mine
        assert any(e["withdrawn"] for e in converged) and not converged[-1]["withdrawn"], converged
    traced = (out / "traces" / "controller-events.jsonl").read_text().splitlines()
    traced = [json.loads(line) for line in traced]
    assert {e["event"] for e in traced} >= {"switch_down", "switch_up", "baseline_converged"}
    assert (out / "traces" / f"controller-{server.address}.log").exists()
    assert _server_left(server) == []
    assert_nothing_left()


def _frames(pcap: Path) -> int:
    from labs.checker import pcapfile

    return len(pcapfile.frames(pcap))


def _mrc_packets(pcap: Path) -> int:
    """Frames of a capture that carry MRC: IPv6-in-IPv6 whose inner UDP goes to MRC's port,
    read by the project's own pcap reader."""
    from endpoints.protocol.wire import MRC_PORT
    from labs.checker import pcapfile

    ipv6_in_ipv6, udp, inner, udp_at = 41, 17, 40, 80
    return sum(1 for _, ip in pcapfile.frames(pcap) if len(ip) >= udp_at + 4 and ip[6] == ipv6_in_ipv6
               and ip[inner + 6] == udp and int.from_bytes(ip[udp_at + 2:udp_at + 4], "big") == MRC_PORT)


def test_split_t0_failure_is_seen_by_the_hosts_and_a_remote_port_is_captured(server, tmp_path):
    """t0-failure with the failed leaf on the server: its host link is a tunnel whose head end
    keeps its carrier by itself, so the cut takes that carrier too (protodown) and the receiver's
    agent sees its NIC port go down and come back, as unsplit (test_port_status); MRC rides
    through on the other plane with that plane's share (the unsplit claim) and roce, whose one
    port is dead, stalls; a capture of a switch port on the server runs there and its pcap,
    streamed back, holds the run's MRC frames."""
    port = "p0l0-eth1"  # h0's plane-0 port on its leaf, on the server
    s, out, _ = _split_run(server, tmp_path, "t0-failure", "--fault-at", "2", "--fault-end", "3.5",
                           "--capture", port)
    assert s["fidelity"]["faithful"], s["fidelity"]["problems"]
    mrc, roce = s["transports"]["mrc"], s["transports"]["roce"]
    assert mrc["stall_ms"] < 200, mrc["stall_ms"]
    cap = mrc["capacity_mbps"]
    assert mrc["goodput_during_mbps"] >= 0.8 * mrc["goodput_before_mbps"] * cap["during"] / cap["before"]
    assert roce["stall_ms"] >= s["routing"]["detect_ms"] / 2, roce["stall_ms"]
    dst = mrc["dst"]
    lines = (out / "traces" / f"{dst}-trace.jsonl").read_text().splitlines()
    ports = [e["local"] for e in map(json.loads, lines) if e.get("event") == "ports"]
    assert ports[:2] == [1, 0], ports  # plane 0 down (bit 0), then every port up again
    pcap = out / f"{port}.pcap"
    assert _frames(pcap) == s["captures"][port]["packets"]  # all tcpdump took, here
    assert _mrc_packets(pcap) > 0
    # the eBPF program's counters of the server's ports, read there over ssh (every switch is there)
    dataplane = s["dataplane"]
    assert dataplane["remote"] == [server.address] and "counters" not in dataplane, dataplane
    assert dataplane["totals"]["packets"] > 0 and dataplane["totals"]["control"] > 0, dataplane
    assert _server_left(server) == []
    assert_nothing_left()


def test_split_incast_trims_on_the_server_and_its_drop_tail_variant_does_not(server, tmp_path):
    """An incast whose switches all run on the server: the eBPF program's counters come back
    over ssh, and trimming is switched off there for the drop-tail variant. Three senders into
    one receiver's two NICs overrun its leaf's ports (on the server): with trimming they trim,
    as drop-tail switches they never do. The smallest shape with 3 senders (2 x 2 x 2 x 3)."""
    out = tmp_path / "incast"
    argv = [sys.executable, "-m", "experiments.cli", "run", "incast", "--switch", "linux",
            "--servers", f"head,{server.address}", "--transports", "mrc", "--duration", "3",
            "--fault-at", "1", "--fault-end", "2.5", "--senders", "3", "--seed", "1",
            "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "3",
            "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env=_env(server))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["fidelity"]["faithful"], s["fidelity"]["problems"]
    assert s["switches"]["placement"]["planes"][server.address] == [0, 1]
    assert s["dataplane"]["remote"] == [server.address] and "counters" not in s["dataplane"]
    trimming, droptail = s["transports"]["mrc"], s["transports"]["mrc-droptail"]
    assert trimming["trimming"] is True and droptail["trimming"] is False
    assert trimming["switch_ports"]["trimmed"] > 0, trimming["switch_ports"]
    assert droptail["switch_ports"]["trimmed"] == 0, droptail["switch_ports"]
    for entry in (trimming, droptail):  # each variant's own counts (reset over there between)
        assert entry["switch_ports"]["packets"] > 0 and entry["switch_ports"]["control"] > 0
    assert _server_left(server) == []
    assert_nothing_left()


CLI_SCRIPT = """\
pingall
p0s0 ip -o link show dev p0s0-eth1
link p0l0 p0s0 down
p0s0 ip -o link show dev p0s0-eth1
paths h0 h1
fail p0s0
p0s0 sysctl net.ipv6.conf.all.forwarding
recover p0s0
link p0l0 p0s0 up
links
capture p0l0-eth1 {pcap}
send h0 h1 1M
capture stop
faults
status
placement
"""


def _fabric():
    from topologies.model import build

    return build(**{key.replace("-", "_"): value for key, value in SHAPE.items()})


def test_mininets_cli_on_a_split_fabric(server, tmp_path):
    """`mrclab cli --servers`: pingall over the tunnels, `link` down/up on a T0-T1 link whose
    routers run on the server (the port there goes down and comes back: `p0s0 CMD` runs in that
    router's shell, over ssh), `paths` sees the cut, `links` lists the tunnels, a flow goes
    through, captured on the leaf's port there (tcpdump over ssh, its pcap here); a switch
    failure is real there (the router stops forwarding) and undone; the cluster edition's
    `status` and `placement` work."""
    script = tmp_path / "split.mrc"
    pcap = tmp_path / "remote-port.pcap"
    script.write_text(CLI_SCRIPT.format(pcap=pcap))
    argv = [sys.executable, "-m", "experiments.cli", "cli", "--switch", "linux", "--servers",
            f"head,{server.address}", "--script", str(script)]
    for key, value in SHAPE.items():
        argv += [f"--{key}", str(value)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=200, env=_env(server))
    out = done.stdout + done.stderr  # Mininet's own commands print through its log (stderr)
    assert done.returncode == 0, out
    assert "*** Results: 0% dropped (2/2 received)" in out
    states = [line for line in out.splitlines() if ": p0s0-eth1@" in line]
    assert len(states) == 2 and "state UP" in states[0] and "state DOWN" in states[1], states
    assert "p0l0-p0s0 cut" in out and "p0l0-p0s0 restored" in out
    assert "DOWN (p0l0-p0s0 cut)" in out
    assert "h0-eth0<->p0l0-eth1 (OK OK) VXLAN" in out
    assert "flow 1 done: 1.0 MiB" in out and "data ok" in out
    assert "p0s0 no longer forwards" in out and "net.ipv6.conf.all.forwarding = 0" in out
    assert "p0s0 forwards again" in out
    assert "no faults: every link and switch works" in out
    # Mininet's cluster edition's own commands: every shell (the remote routers' ssh sessions)
    # runs, and the routers are placed on the server, the hosts here
    assert "All nodes are still running." in out
    placed = dict(line.split(": ", 1) for line in out.splitlines()
                  if line.startswith(("localhost: ", f"{server.address}: ")))
    assert sorted(placed[server.address].split()) == sorted(s.name for s in _fabric().switches)
    assert sorted(placed["localhost"].split()) == sorted(h.name for h in _fabric().hosts)
    said = [line for line in out.splitlines() if line.startswith("p0l0-eth1: ")]  # `capture stop`
    assert said == [f"p0l0-eth1: {_frames(pcap)} packets in {pcap}"] and _mrc_packets(pcap) > 0, said
    assert _server_left(server) == []
    assert_nothing_left()


def _started_on_server(server) -> subprocess.Popen:
    """A split check-fabric, returned once its control plane runs on the server."""
    head = subprocess.Popen(_argv(f"head,{server.address}"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env(server))
    deadline = time.monotonic() + 120
    while not any("controller.run" in line for line in _server_left(server)):
        if head.poll() is not None or time.monotonic() > deadline:
            head.kill()
            pytest.fail(f"no control plane on the server: {head.communicate()[1][-1000:]}")
        time.sleep(0.2)
    return head


def test_interrupted_head_leaves_nothing_on_either(server):
    head = _started_on_server(server)
    head.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        _, err = head.communicate(timeout=120)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    assert head.returncode != 0 and "interrupted" in err.lower(), err[-1000:]
    assert _server_left(server) == []
    assert_nothing_left()


def test_killed_head_then_clean_leaves_nothing_on_either(server):
    head = _started_on_server(server)
    try:
        head.send_signal(signal.SIGKILL)
        head.wait(timeout=10)
        assert _server_left(server), "the server's part should outlive a killed head until a clean"
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    clean = subprocess.run([sys.executable, "-m", "experiments.cli", "clean"], cwd=REPO,
                           capture_output=True, text=True, timeout=120, env=_env(server))
    assert clean.returncode == 0, clean.stderr
    assert "1 servers" in clean.stdout
    assert _server_left(server) == []
    assert_nothing_left()


@pytest.mark.parametrize("servers, words", [
    ("head,head", "twice"), ("head,no_such", "not a host name"),
    ("head,no-such-server.invalid", "unknown server"),
    ("head,10.252.250.2", "cannot ssh to root@10.252.250.2"),
])
def test_bad_servers_refused_in_one_line(server, servers, words):
    proc = subprocess.run(_argv(servers), cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=_env(server))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert_nothing_left()
