"""What a split fabric decides before it touches a machine (no root, no ssh)."""

import time

import pytest

from topologies import cluster, servers
from topologies.emulation import Emulation
from topologies.model import build
from topologies.preflight import PreflightError


def test_split_only_when_switches_leave_the_head(tmp_path):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    local = cluster.make_emulation(fabric, tmp_path, None)
    head_only = cluster.make_emulation(fabric, tmp_path, ("head",))
    split = cluster.make_emulation(fabric, tmp_path, ("head", "s1"))
    assert type(local) is Emulation and type(head_only) is Emulation
    assert isinstance(split, cluster.SplitEmulation)
    assert split.placement.planes_on("s1") == [0, 1]
    assert head_only.placement.as_dict()["planes"] == {"head": [0, 1]}


def test_split_refuses_ovs_before_anything_starts(tmp_path):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    em = cluster.make_emulation(fabric, tmp_path, ("head", "s1"), switch="ovs")
    with pytest.raises(PreflightError, match="linux switch backend only"):
        em.start()
    assert em.net is None and em.switches is None


def test_addresses_pass_and_unknown_names_are_one_line():
    assert servers.resolve("10.1.2.3") == "10.1.2.3"
    with pytest.raises(PreflightError, match="unknown server 'no-such-server.invalid'"):
        servers.resolve("no-such-server.invalid")


def test_ssh_takes_the_configured_file(monkeypatch):
    monkeypatch.delenv(servers.SSH_CONFIG_ENV, raising=False)
    assert "-F" not in servers.ssh_command("10.0.0.2", "true")
    monkeypatch.setenv(servers.SSH_CONFIG_ENV, "/x/ssh_config")
    argv = servers.ssh_command("10.0.0.2", "true", tty=True)
    assert argv[argv.index("-F") + 1] == "/x/ssh_config"
    assert argv[-2:] == ["root@10.0.0.2", "true"] and "-tt" in argv and "BatchMode=yes" in argv


class _Sessions(cluster.SplitLinuxBackend):
    """A split backend whose control-plane sessions are local commands (no ssh): each
    `start_controller` takes the next of `commands`; a server reports its switches ready once
    its session has lived for half a second."""

    def __init__(self, fabric, workdir, commands):
        split = cluster.placement.place(fabric, ("head", "s1"))
        super().__init__(fabric, workdir, split, {"s1": "192.0.2.1"})
        self.commands = list(commands)

    def start_controller(self, server):
        import subprocess

        with open(self.ssh_errors(server), "w") as errors:
            self.controllers[server] = subprocess.Popen(["sh", "-c", self.commands.pop(0)], stderr=errors)
        self.started = time.monotonic()

    def read_status(self, server):
        ready = self.controllers[server].poll() is None and time.monotonic() - self.started > 0.5
        return {"ready_dpids": [sw.dpid for sw in self.fabric.switches]} if ready else {}

    def log_tail(self, server):
        return "json.decoder.JSONDecodeError: Expecting value"


def _waited(tmp_path, commands):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    em = cluster.make_emulation(fabric, tmp_path, ("head", "s1"))
    em.switches = backend = _Sessions(fabric, tmp_path, commands)
    backend.start_controller("s1")
    try:
        em._wait_flows(timeout=10)
    finally:
        for proc in backend.controllers.values():
            proc.kill()
            proc.wait()
    return backend


def test_a_control_plane_session_that_ssh_lost_is_started_once_more(tmp_path):
    backend = _waited(tmp_path, ["sleep 0.2; echo 'mux_client_request_session: failed' >&2; exit 255",
                                 "sleep 30"])
    assert backend.commands == []  # the second session was started, and it serves


def test_a_control_plane_that_exits_is_one_line_with_what_ssh_said(tmp_path):
    from topologies.preflight import EmulationError

    with pytest.raises(EmulationError) as err:
        _waited(tmp_path, ["echo 'Connection closed by 192.0.2.1' >&2; exit 1"])
    assert str(err.value).startswith(
        "the control plane on s1 exited (status 1; ssh: Connection closed by 192.0.2.1; its log: "
        "json.decoder.JSONDecodeError: Expecting value): see ")
    with pytest.raises(EmulationError, match=r"exited \(status 255; ssh: lost again; its log: "):
        _waited(tmp_path, ["exit 255", "sleep 0.3; echo 'lost again' >&2; exit 255"])


def test_a_file_put_on_a_server_appears_whole(tmp_path, monkeypatch):
    """The control plane there polls for routers.json and reads it as soon as it exists: the
    file is written beside its name and renamed into place (a rehearsal's control plane read it
    empty and exited). The command runs here through a local shell standing in for ssh."""
    import subprocess

    ran = []

    def local(ip, command, stdin=None, timeout=60):
        ran.append(command)
        return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True)

    monkeypatch.setattr(cluster, "server_run", local)
    backend = _Sessions(build(planes=2, leaves=2, spines=2, hosts_per_leaf=1), tmp_path, [])
    target = tmp_path / "routers.json"
    backend._put("s1", target, '{"p0l0": 1}')
    assert target.read_text() == '{"p0l0": 1}' and not (tmp_path / "routers.json.part").exists()
    assert ran[0].startswith("cat > ") and " && mv -f " in ran[0]


def test_a_notification_reaches_the_servers_socket_as_the_same_datagram(tmp_path, monkeypatch):
    """servers.notify's command, run by a local shell in place of ssh: the socket over there
    gets the message a local control plane gets (controller/routing.py parses it)."""
    import json
    import socket

    monkeypatch.setattr(servers, "ssh_command", lambda ip, remote, tty=False: ["sh", "-c", remote])
    path = tmp_path / "notify sock"  # a space: the path is quoted
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        message = {"cmd": "switch_down", "switch": "p0s1"}
        assert servers.notify("192.0.2.1", str(path), message) is None
        assert json.loads(sock.recv(4096)) == message
    assert "No such file" in servers.notify("192.0.2.1", str(tmp_path / "none"), message)


def test_the_servers_events_merge_in_time_order_tagged_with_their_server():
    s1 = '{"t": 2.0, "event": "switch_down", "switch": "p0s1"}\n{"t": 5.0, "event": "baseline_converged"}\n'
    s2 = '{"t": 3.5, "event": "port_down", "switch": "p1s0", "port": 1}\n{"t": 6.0, "eve'  # cut short
    merged = servers.merge_events({"s1": s1, "s2": s2})
    assert [(e["t"], e["event"], e["server"]) for e in merged] == [
        (2.0, "switch_down", "s1"), (3.5, "port_down", "s2"), (5.0, "baseline_converged", "s1")]
