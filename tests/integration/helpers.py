from __future__ import annotations

import fcntl
import os
import re
import subprocess
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_MODULES = ("controller.run", "endpoints.host.agent", "endpoints.host.tcpflow")


def _processes_of(paths: list[str]) -> list[str]:
    """Command lines of live processes that name one of `paths` (a run's work directory is
    in its controller's and agents' arguments)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(p in cmd for p in paths):
            out.append(f"{entry}: {cmd[:120]}")
    return out


def _marked() -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if b"MRCLAB_RUN=" in env:
            out.append(entry)
    return out


def _lock_held() -> bool:
    path = Path("/run/mrclab/lock")
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def assert_nothing_left(workdirs: list[str] | tuple[str, ...] = ()) -> None:
    """No mrclab bridge, emulated interface, host shell, process of a run, nftables table,
    stale BPF pin or run lock survives; nor `workdirs` (a run's work and staging folders) or
    anything running from them. Checked independently of topologies/cleanup.py, and by its
    `leftovers` (which also knows every switch backend's own)."""
    from topologies import cleanup

    left = {kind: items[:10] for kind, items in cleanup.leftovers().items() if items}
    assert not left, f"left behind: {left}"
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    ours = [b for b in bridges if re.fullmatch(r"p\d+[ls]\d+", b)]
    assert not ours, f"bridges left behind: {ours}"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    stray = re.findall(r"^\d+: ((?:p\d+[ls]\d+|h\d+)-eth\d+)", links, re.M)
    assert not stray, f"interfaces left behind: {stray[:10]}"
    assert not _marked(), f"processes of a run left behind: {_marked()}"
    procs = _processes_of(list(workdirs))
    assert not procs, f"processes of the run left behind: {procs}"
    nft = subprocess.run(["nft", "list", "table", "netdev", "mrclab_faults"], capture_output=True)
    assert nft.returncode != 0, "nftables table mrclab_faults left behind"
    pins = Path("/sys/fs/bpf/mrclab")
    if pins.is_dir():
        dead = [p.name for p in pins.iterdir()
                if p.name.split("-", 1)[0].isdigit() and not Path(f"/proc/{p.name.split('-')[0]}").exists()]
        assert not dead, f"BPF pins of dead processes left behind: {dead}"
    left = [d for d in workdirs if os.path.lexists(d)]
    assert not left, f"directories left behind: {left}"
    assert not Path("/run/mrclab.lock").exists(), "a pid lock file left behind"
    assert not _lock_held(), "the run lock is still held"


def again_if_disturbed(fidelity: dict, attempt: int) -> bool:
    """Whether a test should run its emulation once more: the first run was not faithful while
    the hypervisor took the VM's CPU (its verdict's `disturbed`, experiments/analysis/fidelity.py
    STEAL_DISTURBED_PCT). Such a run measured the machine's host, not the product; a second run
    that is not faithful fails the test, disturbed or not. Says so as a warning in the report."""
    if attempt > 1 or fidelity["faithful"] or not fidelity.get("disturbed"):
        return False
    warnings.warn(f"not faithful while disturbed, run once more: {fidelity['problems']}; "
                  f"{fidelity['disturbed']}", stacklevel=2)
    return True
