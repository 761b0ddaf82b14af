"""The switch backend seam without root: choosing a backend, and what each says about itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from topologies import preflight, switches
from topologies.model import build
from topologies.switches import linux, routers
from topologies.switches.ovs import OvsBackend


def test_unknown_backend_is_named_with_the_choices():
    with pytest.raises(preflight.PreflightError, match="use one of auto, ovs, linux"):
        switches.resolve("frob")


def test_an_unavailable_backend_says_why(monkeypatch):
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: "no OVS here: run x"))
    with pytest.raises(preflight.PreflightError, match="no OVS here"):
        switches.resolve("ovs")


def test_auto_takes_the_first_available_and_says_why_not_the_others(monkeypatch):
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: None))
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: None))
    assert switches.resolve("auto") == switches.AUTO_ORDER[0] == "linux"
    assert switches.choose("auto") == ("linux", "auto: linux")
    assert switches.choose("ovs") == ("ovs", "asked for")
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: "no next-csid"))
    assert switches.choose("auto") == ("ovs", "auto: ovs; not linux (no next-csid)")  # one line
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: None))
    monkeypatch.setattr(OvsBackend, "unavailable", classmethod(lambda cls: "no OVS: make setup"))
    assert switches.choose("auto") == ("linux", "auto: linux; not ovs (no OVS: make setup)")
    monkeypatch.setattr(linux.LinuxBackend, "unavailable", classmethod(lambda cls: "no next-csid"))
    with pytest.raises(preflight.PreflightError, match="no OVS: make setup"):  # OVS's reason
        switches.resolve("auto")


def test_every_backend_is_a_choice_and_implements_the_seam():
    assert set(switches.CHOICES) == {"auto", *switches.BACKENDS}
    assert set(switches.FASTEST_FIRST) == set(switches.AUTO_ORDER) == set(switches.BACKENDS)
    for name, cls in switches.BACKENDS.items():
        assert cls.name == name and not getattr(cls, "__abstractmethods__", None), name


def test_ovs_instances_hold_whole_planes_up_to_a_port_budget(tmp_path):
    from topologies.switches import ovs as ovs_mod

    small = build(planes=3, leaves=2, spines=1, hosts_per_leaf=1)  # 6 ports a plane: one instance
    assert ovs_mod.plane_groups(small.params) == [(0, 1, 2)]
    large = build(planes=8, leaves=8, spines=4, hosts_per_leaf=8)  # 128 ports a plane: one each
    assert ovs_mod.plane_groups(large.params) == [(p,) for p in range(8)]
    for shape in (dict(planes=4, leaves=4, spines=2, hosts_per_leaf=4),
                  dict(planes=5, leaves=3, spines=2, hosts_per_leaf=2),
                  dict(planes=8, leaves=16, spines=8, hosts_per_leaf=4)):
        params = build(**shape).params
        groups = ovs_mod.plane_groups(params)
        per_plane = params.leaves * (params.hosts_per_leaf + 2 * params.spines)
        assert [p for g in groups for p in g] == list(range(params.planes))  # each plane once
        assert all(len(g) == 1 or len(g) * per_plane <= ovs_mod.PORTS_PER_INSTANCE for g in groups)
        # As few instances as the budget allows.
        assert len(groups) == -(-params.planes // max(1, ovs_mod.PORTS_PER_INSTANCE // per_plane))


def test_ovs_backend_instances(tmp_path, monkeypatch):
    from topologies.switches import ovs as ovs_mod

    monkeypatch.setattr(ovs_mod, "PORTS_PER_INSTANCE", 1)  # one instance per plane
    fabric = build(planes=3, leaves=2, spines=1, hosts_per_leaf=1)
    ovs = switches.make("ovs", fabric, tmp_path, datapath="user")
    assert isinstance(ovs, OvsBackend) and ovs.info()["ovs_instances"] == 3
    assert {ovs.instance(sw.name).planes for sw in fabric.switches} == {(0,), (1,), (2,)}
    inst = ovs.instance("p2s0")
    assert inst.netns == "mrclab-ovs2" and inst.rundir.name == "i2"
    # Unix socket paths (the bridges' .mgmt sockets included) must fit in sun_path.
    longest = max(len(s.name) for s in fabric.switches) + len(".mgmt")
    assert len(str(inst.rundir)) + 1 + longest < 108
    assert inst.env["OVS_RUNDIR"] == str(inst.rundir)
    assert inst.vswitchd_argv()[:2] == ["nsenter", f"--net=/run/netns/{inst.netns}"]
    monkeypatch.setenv(ovs_mod.PORTS_PER_INSTANCE_ENV, "1000")  # the environment wins
    shared = switches.make("ovs", fabric, tmp_path, datapath="user")
    assert {shared.instance(sw.name).index for sw in fabric.switches} == {0}
    assert shared.info()["planes_per_instance"] == [3]


def test_ovs_allocator_is_preloaded_unless_glibc_is_asked_for(monkeypatch):
    from topologies.switches import ovs as ovs_mod

    found = {}
    monkeypatch.setattr(ovs_mod.ctypes.util, "find_library",
                        lambda name: found.setdefault(name, f"lib{name}.so.4"))
    monkeypatch.delenv(ovs_mod.ALLOCATOR_ENV, raising=False)
    assert ovs_mod.allocator_library() == f"lib{ovs_mod.ALLOCATOR}.so.4"
    assert list(found) == [ovs_mod.ALLOCATOR]
    monkeypatch.setenv(ovs_mod.ALLOCATOR_ENV, "glibc")
    assert ovs_mod.allocator_library() is None
    inst = ovs_mod.Instance(0, (0,))
    argv = inst.vswitchd_argv("libtcmalloc_minimal.so.4")
    # The preload reaches ovs-vswitchd itself, inside the instance's namespace.
    assert argv[1:5] == [f"--net={inst.netns_path}", "env", "LD_PRELOAD=libtcmalloc_minimal.so.4",
                         "ovs-vswitchd"]
    assert "env" not in inst.vswitchd_argv(None)


def test_queued_vsctl_words_lose_only_the_shell_escaping():
    from topologies.switches.ovs import _unquote_words

    cmd = '-- --id=@cp0l0 create Controller target=\\"unix:of.sock\\" max_backoff=1000 -- add-br p0l0'
    assert _unquote_words(cmd) == ["--", "--id=@cp0l0", "create", "Controller",
                                   'target="unix:of.sock"', "max_backoff=1000", "--", "add-br", "p0l0"]


def test_linux_backend_before_start(tmp_path):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    backend = switches.make("linux", fabric, tmp_path)
    assert backend.info()["switch_backend"] == "linux"
    assert not backend.cut_both_ends and backend.removes_port_namespaces
    assert backend.forwarding_pids() == []  # the kernel forwards in softirq
    cmd = backend.controller_command(tmp_path / "c.json")
    assert cmd[-4:] == ["--backend", "linux", "--config", str(tmp_path / "c.json")]
    # The control plane's view of a port: down exactly when its status says so.
    assert backend.link_state("p0s0", "p0s0-eth1") == ""  # no status yet
    (tmp_path / "controller-status.json").write_text('{"ports_down": ["p0s0-eth1"]}')
    assert backend.link_state("p0s0", "p0s0-eth1") == "down"
    assert backend.link_state("p0l0", "p0l0-eth2") == "up"


def test_each_router_keys_its_ecmp_hash_from_the_runs_seed(tmp_path):
    # One key per router and seed, never 0 (the kernel's "random"); a run's draw is its seed's.
    names = [sw.name for sw in build(planes=4, leaves=8, spines=4, hosts_per_leaf=1).switches]
    for seed in (0, 1, 2, 3):
        keys = [routers.multipath_seed(seed, name) for name in names]
        assert len(set(keys)) == len(names) and 0 not in keys
        assert keys == [routers.multipath_seed(seed, name) for name in names]
    assert routers.multipath_seed(1, "p0l0") != routers.multipath_seed(2, "p0l0")
    # The summary says the key only once the routers have it (not before start, nor on a
    # kernel without the sysctl); OVS says its hash is not the run's.
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
    backend = switches.make("linux", fabric, tmp_path, ecmp_seed=3)
    assert isinstance(backend, linux.LinuxBackend) and backend.ecmp_seed == 3
    assert backend.info()["ecmp_hash_seed"] is None
    backend.ecmp_seeded = True
    assert backend.info()["ecmp_hash_seed"] == 3
    assert "ecmp_hash_seed" in OvsBackend(fabric, tmp_path).info()


def test_linux_ports_get_the_models_macs_and_ifindexes_unique_over_the_fabric(tmp_path):
    fabric = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    backend = switches.make("linux", fabric, tmp_path)
    opts = {(sw.name, p): backend.port_link_options(sw.name, p).split()
            for sw in fabric.switches for p in fabric.ports(sw.name)}
    indexes = [int(o[o.index("index") + 1]) for o in opts.values()]
    assert len(indexes) == len(set(indexes)) and min(indexes) >= routers.IFINDEX_BASE
    assert all(o[o.index("address") + 1] == fabric.port_mac(*key) for key, o in opts.items())
    assert switches.make("ovs", fabric, tmp_path, datapath="user").port_link_options("p0l0", 1) == ""


def test_a_run_folders_pid_file_names_its_daemon_only_while_that_daemon_holds_the_pid(tmp_path):
    """Pids are reused: the pid in a run folder's pid file is the daemon's only when that
    process is the daemon (by name) serving that run folder (by its command line)."""
    import subprocess
    import sys

    from topologies.switches import ovsprocs

    mine, other = tmp_path / "i0", tmp_path / "i1"
    mine.mkdir()
    other.mkdir()
    proc = subprocess.Popen([str(tmp_path / "ovsdb-server"), "-c", "import time; time.sleep(600)",
                             str(mine)], executable=sys.executable)
    try:
        # Popen returns once exec has closed the child's close-on-exec pipe, which the kernel
        # does before it sets up the new command line: a loaded machine reads it empty a while.
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 30
        while not cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        for folder in (mine, other):
            (folder / "ovsdb-server.pid").write_text(f"{proc.pid}\n")
            (folder / "ovs-vswitchd.pid").write_text(f"{proc.pid}\n")
        assert ovsprocs.daemon_pid(mine, "ovsdb-server") == proc.pid
        assert ovsprocs.daemon_pid(mine, "ovs-vswitchd") is None  # another daemon's name
        assert ovsprocs.daemon_pid(other, "ovsdb-server") is None  # serving another folder
        (mine / "ovsdb-server.pid").write_text("not a pid\n")
        assert ovsprocs.daemon_pid(mine, "ovsdb-server") is None
    finally:
        proc.kill()
        proc.wait()
