"""The agent bench as root: two namespaces joined by veth pairs, no OVS (so no
`emulation_ready`), and the kernel-checksum send path's frames against `build_packet`'s.

Skips without root, except in CI (CI=true), where that is a failure."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from endpoints.host import netio
from endpoints.protocol import wire
from experiments.tools import benchnet
from tests.integration.helpers import REPO
from topologies import cleanup, netns
from topologies.model import Fabric, FabricParams


@pytest.fixture
def root() -> None:
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("the bench needs root in CI")
    pytest.skip("the bench creates network namespaces: needs root")


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_bench_writes_sane_numbers_and_leaves_nothing_behind(root, tmp_path):
    out = tmp_path / "agent.json"
    before = set(_namespaces())
    proc = subprocess.run([sys.executable, "-m", "experiments.tools.bench", "--seconds", "2",
                           "--runs", "1", "--profile-seconds", "1", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["data_ok"] is True and result["transfer"]["data_ok"] is True
    # Containerised emulators reach < 1000 packets/s; anything near that here is a regression.
    assert result["agent_pps_per_core"] > 1000
    for side in ("sender", "receiver"):
        s = result[side]
        assert s["data_packets"] > 0 and s["cpu_s"] > 0 and s["data_pps_per_cpu_s"] > 0
        assert 0 < s["cpu_utilisation"] <= 1.5  # one thread, plus kernel work on its account
    assert result["agent_pps_per_core"] == min(result["sender"]["data_pps_per_cpu_s"],
                                               result["receiver"]["data_pps_per_cpu_s"])
    assert result["transfer"]["messages_completed"] > 0
    counters = result["transfer"]["agent_counters"]
    assert counters["h0"]["kernel_checksum_paths"] > 0 and counters["h0"]["raw_paths"] == 0
    assert result["software"]["python"] and result["machine"]["cpu_model"]
    for side in ("sender", "receiver"):
        assert result["profile"][side]["top_by_own_time"], "the cProfile run produced nothing"
    assert not [n for n in set(_namespaces()) - before if n.startswith(f"{cleanup.NETNS_PREFIX}b")], \
        "bench namespaces left behind"
    assert not list(tmp_path.glob(".agent.json.*")), "temporary JSON left behind"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_bench_cleans_up(root, tmp_path, sig):
    out = tmp_path / "agent.json"
    # SIGINT ignored, as a shell without job control starts a background job (CI can be one):
    # Ctrl-C must still stop the bench, whatever it inherited.
    proc = subprocess.Popen([sys.executable, "-m", "experiments.tools.bench", "--seconds", "30",
                             "--profile-seconds", "0", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    tag = f"{cleanup.NETNS_PREFIX}b{proc.pid}"
    agents: list[int] = []
    try:
        for _ in range(200):  # until both agents run (their configs name this run's workdir)
            found = subprocess.run(["pgrep", "-f", r"endpoints\.host\.agent --config /tmp/mrclab-bench-"],
                                   capture_output=True, text=True).stdout.split()
            agents = [int(pid) for pid in found if _child_of(int(pid), proc.pid)]
            if len(agents) == 2:
                break
            time.sleep(0.1)
        assert len(agents) == 2, "the bench's agents did not start"
        time.sleep(1.0)  # streaming by now
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert not out.exists()
    assert not [n for n in _namespaces() if n.startswith(tag)]
    assert not [pid for pid in agents if os.path.exists(f"/proc/{pid}")], "agents left running"


def _child_of(pid: int, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return False
    return int(text[text.rindex(")") + 2:].split()[1]) == parent


@pytest.mark.parametrize("size, ev, tclass", [
    (wire.data_len(1024), 0x2_C002, netio.ECN_ECT0),  # a full data packet, plane 1: flow label 2
    (41, 0x2_C003, wire.DATA_TCLASS),  # odd length (checksum padding), another traffic class
    (1, 0x1_C001, netio.ECN_ECT0),  # plane 0, spine 1
])
def test_kernel_checksum_frames_equal_build_packet_frames(root, size, ev, tclass):
    """The fast send path must put on the wire exactly what the Python packet builder does,
    encapsulated by the host to the path's carrier; so must the raw fallback."""
    fabric = Fabric(FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=1))
    path = {r.ev: r for r in fabric.routes(benchnet.SENDER, benchnet.RECEIVER)}[ev]
    peer_if = fabric.host(benchnet.RECEIVER).nics[path.plane].ifname
    payload = os.urandom(size)
    args = (path.src_addr.packed, path.dst_addr.packed, str(path.dst_addr), ev, tclass)
    with benchnet.BenchNet(fabric, f"mrcbt{os.getpid()}") as net:
        with netns.inside_named(net.ns[benchnet.RECEIVER]):
            # ETH_P_ALL: the frame as it came off the wire (a tap); a socket for IPv6 alone is
            # served after tc ingress, where an eBPF End.DT6 has taken the outer header off.
            cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        with netns.inside_named(net.ns[benchnet.SENDER]):  # path sockets open in the caller's namespace
            tx = netio.Transmitter()
            raw = netio.Transmitter(kernel_checksum=False)
            paths = [tx.path(*args, mark=ev), raw.path(*args, mark=ev)]
        try:
            assert paths[0].sock is not None and paths[1].sock is None
            cap.bind((peer_if, 0))
            cap.settimeout(2.0)
            frames = []
            for sender, p in zip((tx, raw), paths, strict=True):
                assert sender.send(p, payload)
                while True:  # skip neighbour discovery and router solicitations
                    frame = cap.recv(4096)
                    if frame[12:14] == b"\x86\xdd" and frame[20] == 41:  # IPv6-in-IPv6
                        break
                frames.append(frame[14:])
            stats = net.encap.stats() if net.encap is not None else {}
        finally:
            cap.close()
            tx.close()
            raw.close()
    inner = netio.build_packet(path.src_addr.packed, path.dst_addr.packed, ev, payload, tclass)
    ref = netio.encapsulate(path.src_addr.packed, path.address.packed, inner)
    assert frames[1] == ref
    assert frames[0] == ref, "kernel-built packet differs from build_packet's"
    assert stats["encapsulated"] == 2 and stats["no_path"] == stats["error"] == 0


@pytest.mark.usefixtures("emulation_ready")
def test_the_idle_cost_is_read_with_nothing_moving_and_idle_agents_do_not_spin(root):
    """`make bench`'s direct reading of what does not grow with the rate: the default
    permutation's fabric, then its agents, with no data moving. An agent loop that spun instead
    of sleeping would take a core by itself; idle, all eight take a few hundredths."""
    from experiments.tools import cost_bench
    from tests.integration.helpers import assert_nothing_left

    idle = cost_bench.idle_cost("linux")
    cores = os.cpu_count() or 1
    assert 0 <= idle["fabric_cores"] <= idle["fabric_and_agents_cores"] + 0.05
    assert idle["fabric_and_agents_cores"] < 0.25 * cores, idle
    assert set(idle) == {f"{part}_{what}" for part in ("fabric", "fabric_and_agents")
                         for what in ("cores", "steal_cores", "background_cores")}
    assert_nothing_left()
