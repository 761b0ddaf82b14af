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


def test_each_server_is_asked_the_same_probe_over_ssh(monkeypatch):
    from topologies import servers

    asked = []

    def run(ip, remote, stdin=None, timeout=60):
        asked.append((ip, remote))
        lwt = "Error: lwt encapsulation type not supported.\n" if ip == "10.0.0.3" else ""
        return subprocess.CompletedProcess(remote, 2 if lwt else 0, "", lwt)

    monkeypatch.setattr(servers, "server_run", run)
    got = servers.seg6local_refusals({"s2": "10.0.0.2", "s3": "10.0.0.3"})
    assert got == {"s3": "Error: lwt encapsulation type not supported."}
    assert [ip for ip, _ in asked] == ["10.0.0.2", "10.0.0.3"]
    assert all(shlex.split(remote) == list(usid.PROBE_ARGV) for _, remote in asked)


def test_a_server_that_cannot_be_asked_is_one_line_not_a_refusal(monkeypatch):
    from topologies import servers
    from topologies.preflight import PreflightError

    def lost(ip, remote, stdin=None, timeout=60):
        return subprocess.CompletedProcess(remote, 255, "", "ssh: connect to host 10.0.0.2: No route\n")

    def hung(ip, remote, stdin=None, timeout=60):
        raise subprocess.TimeoutExpired(remote, timeout)

    for run, words in ((lost, "ssh to s2 failed: ssh: connect to host 10.0.0.2: No route"),
                       (hung, "s2's seg6local probe did not end within 15 s")):
        monkeypatch.setattr(servers, "server_run", run)
        with pytest.raises(PreflightError, match=words):
            servers.seg6local_refusals({"s2": "10.0.0.2"})
