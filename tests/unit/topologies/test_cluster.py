"""What a split fabric decides before it touches a machine (no root, no ssh)."""

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
    assert cluster.resolve("10.1.2.3") == "10.1.2.3"
    with pytest.raises(PreflightError, match="unknown server 'no-such-server.invalid'"):
        cluster.resolve("no-such-server.invalid")


def test_ssh_takes_the_configured_file(monkeypatch):
    monkeypatch.delenv(servers.SSH_CONFIG_ENV, raising=False)
    assert "-F" not in servers.ssh_command("10.0.0.2", "true")
    monkeypatch.setenv(servers.SSH_CONFIG_ENV, "/x/ssh_config")
    argv = servers.ssh_command("10.0.0.2", "true", tty=True)
    assert argv[argv.index("-F") + 1] == "/x/ssh_config"
    assert argv[-2:] == ["root@10.0.0.2", "true"] and "-tt" in argv and "BatchMode=yes" in argv
