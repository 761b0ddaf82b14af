"""Which uSID behaviours a run takes, and what it records (no kernel needed: the probe is
replaced)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from topologies.dataplane import usid


@pytest.fixture
def kernel_says(monkeypatch):
    def say(refusal):
        monkeypatch.setattr(usid, "kernel_refusal", lambda: refusal)
    monkeypatch.delenv(usid.ENV, raising=False)
    return say


def test_the_kernels_own_where_it_has_seg6local_else_ebpf(kernel_says, monkeypatch):
    kernel_says(None)
    assert usid.mode() == usid.KERNEL and usid.unavailable(usid.KERNEL) is None
    kernel_says("Error: lwt encapsulation type not supported.")
    assert usid.mode() == usid.EBPF
    assert usid.unavailable(usid.KERNEL) == ("this kernel has no SRv6 seg6local End "
                                             "(Error: lwt encapsulation type not supported.)")
    monkeypatch.setenv(usid.ENV, "kernel")  # asked for: taken, and then refused with the reason
    assert usid.mode() == usid.KERNEL and usid.unavailable(usid.mode()) is not None


def test_a_wrong_choice_is_named_in_one_line(kernel_says, monkeypatch):
    kernel_says(None)
    monkeypatch.setenv(usid.ENV, "bpf")
    assert usid.unavailable(usid.mode()) == "MRCLAB_USID='bpf': expected one of kernel, ebpf"
    monkeypatch.setenv(usid.ENV, "ebpf")
    assert usid.mode() == usid.EBPF


def test_a_run_records_which_behaviours_it_used():
    assert "seg6local" in usid.describe(usid.KERNEL)
    assert "usid_end" in usid.describe(usid.EBPF) and "usid_decap" in usid.describe(usid.EBPF)


def test_each_interface_gets_a_clsact_kept_if_there_and_one_filter_of_ours():
    lines = usid.ingress_lines(["a", "b"], usid.END_SECTION)
    assert lines[0] == "qdisc replace dev a clsact" and lines[2] == "qdisc replace dev b clsact"
    assert lines[1] == (f"filter replace dev a ingress pref {usid.FILTER_PREF} handle 1 bpf da "
                        f"obj {usid.USID_OBJECT} sec tc/usid_end")


def test_a_split_fabric_takes_one_choice_for_every_machine(monkeypatch):
    monkeypatch.delenv(usid.ENV, raising=False)
    lwt = "Error: lwt encapsulation type not supported."
    assert usid.across(usid.KERNEL, {}) == (usid.KERNEL, None)
    assert usid.across(usid.KERNEL, {"s2": lwt}) == (usid.EBPF, None)  # one server lacks it: eBPF
    assert usid.across(usid.EBPF, {}) == (usid.EBPF, None)  # the head lacks it: eBPF everywhere
    monkeypatch.setenv(usid.ENV, "kernel")  # asked for what a server lacks: refused, named
    assert usid.across(usid.KERNEL, {"s3": "refused", "s2": lwt}) == (
        usid.KERNEL, f"MRCLAB_USID=kernel, but s2's kernel has no SRv6 seg6local End ({lwt})")
    assert usid.across(usid.KERNEL, {}) == (usid.KERNEL, None)


def test_a_probe_says_taken_or_the_kernels_last_line():
    assert usid.refusal(0, "") is None
    assert usid.refusal(2, "Warning: x\nError: lwt encapsulation type not supported.\n") == \
        "Error: lwt encapsulation type not supported."
    assert usid.refusal(1, "") == "refused"


@pytest.fixture
def servers_shell(monkeypatch, tmp_path):
    """Each server's check run by a local shell, its tools stubs on PATH: `unshare` refuses
    the probe as a kernel without seg6local does for the addresses in `lwt` (one call per
    ssh round trip in `asked`)."""
    from topologies import servers

    (tmp_path / "bin").mkdir()
    for tool in (*servers.SERVER_TOOLS, "unshare"):
        stub = tmp_path / "bin" / tool
        stub.write_text('#!/bin/sh\ncase " $LWT " in *" $SERVER "*) '
                        'echo "Error: lwt encapsulation type not supported." >&2; exit 2;; esac\n')
        stub.chmod(0o755)
    asked: list[tuple[str, str]] = []
    lwt: list[str] = []

    def run(ip, remote, stdin=None, timeout=60):
        asked.append((ip, remote))
        env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SERVER": ip, "LWT": " ".join(lwt)}
        return subprocess.run(["sh", "-c", remote], capture_output=True, text=True, env=env)

    monkeypatch.setattr(servers, "server_run", run)
    monkeypatch.setattr(servers, "resolve", lambda server: {"s2": "10.0.0.2", "s3": "10.0.0.3"}[server])
    return asked, lwt


def _split(servers_=("head", "s2", "s3")):
    from topologies import placement
    from topologies.model import build
    return placement.place(build(planes=4, leaves=2, spines=2, hosts_per_leaf=1), servers_)


def test_each_server_is_asked_the_same_probe_in_its_one_ssh_check(servers_shell):
    from topologies import servers

    asked, lwt = servers_shell
    lwt.append("10.0.0.3")
    ips, refused = servers.survey_servers(_split())
    assert ips == {"s2": "10.0.0.2", "s3": "10.0.0.3"}
    assert refused == {"s3": "Error: lwt encapsulation type not supported."}
    assert [ip for ip, _ in asked] == ["10.0.0.2", "10.0.0.3"]  # one round trip each
    assert all(shlex.join(usid.PROBE_ARGV) in remote for _, remote in asked)
    lwt.clear()
    assert servers.survey_servers(_split()) == (ips, {})
    asked.clear()
    assert servers.check_servers(_split()) == ips  # the plain check does not ask it
    assert not any("unshare" in remote for _, remote in asked)


def test_a_server_that_cannot_be_asked_is_one_line_not_a_refusal(monkeypatch, servers_shell):
    from topologies import servers
    from topologies.preflight import PreflightError

    def lost(ip, remote, stdin=None, timeout=60):
        return subprocess.CompletedProcess(remote, 255, "", "ssh: connect to host 10.0.0.2: No route\n")

    def hung(ip, remote, stdin=None, timeout=60):
        raise subprocess.TimeoutExpired(remote, timeout)

    def cut(ip, remote, stdin=None, timeout=60):  # its shell ended before the probe's line
        return subprocess.CompletedProcess(remote, 0, "", "")

    lost_words = "cannot ssh to root@s2 \\(10.0.0.2\\): ssh: connect to host 10.0.0.2: No route"
    for run, words in ((lost, lost_words),
                       (hung, "ssh to s2 \\(10.0.0.2\\) did not answer within 15 s"),
                       (cut, "s2 gave no answer to the seg6local probe")):
        monkeypatch.setattr(servers, "server_run", run)
        with pytest.raises(PreflightError, match=words):
            servers.survey_servers(_split())
