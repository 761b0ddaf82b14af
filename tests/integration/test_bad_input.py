"""Bad input: one line naming the problem and the fix, exit status 2, nothing left behind."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, assert_nothing_left


def _mrclab(*args, env=None):
    argv = [sys.executable, "-m", "experiments.cli", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def readable_copy():
    """The project's tracked Python and JSON files in a folder any user can read: the checkout
    itself may live where only root can (a clone in root's home, a private temporary folder),
    and the venv with it, so an unprivileged user runs the system interpreter on the copy."""
    folder = Path(tempfile.mkdtemp(prefix="mrclab-readable-"))
    try:
        files = subprocess.run(["git", "ls-files", "-z", "*.py", "*.json"], cwd=REPO, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for name in filter(None, files):
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, target)
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("args, words", [
    (["check-fabric", "--planes", "0"], "planes must be"),
    (["check-fabric", "--planes", "16"], "exceeds the uSID plan"),
    (["check-fabric", "--leaves", "600", "--hosts-per-leaf", "2"], "1200 hosts"),
    (["check-fabric", "--planes", "two"], "invalid int value"),
    (["check-fabric", "--cut", "p9l9-p9s9"], "no link named"),
    (["check-fabric", "--cut", "h0-p0l0"], "is a host link"),
    (["demo", "--spines", "1"], "2+ spines"),
    (["demo", "--cut-at", "5", "--restore-at", "4"], "--cut-at < --restore-at"),
    (["frobnicate"], "invalid choice"),
    (["run", "frobnicate"], "invalid choice"),
    (["run", "lossy-link", "--loss", "1.5"], "--loss: bad probability '1.5': it must lie in [0, 1]"),
    (["run", "permutation", "--duration", "inf"], "--duration must be a finite number"),
    (["run", "permutation", "--duration", "nan"], "--duration must be a finite number"),
    (["run", "collective", "--steps", "1000000000"], "--steps must be a whole number"),
    (["run", "link-failure", "--transports", "mrc,mrc"], "lists a transport twice"),
    (["run", "permutation", "--loss", "0.1"], "does not apply to the permutation scenario"),
    (["demo", "--detect-ms", "nan"], "--detect-ms must be a finite number"),
    (["demo", "--detect-ms", "-1000"], "--detect-ms must be a finite number"),
    (["demo", "--duration", "inf"], "--duration must be a finite number"),
    (["run", "incast", "--senders", "40"], "at most"),
    (["run", "link-failure", "--link", "p0l0-p0s9"], "no link named"),
    (["run", "switch-failure", "--fail-switch", "p0l0"], "is a leaf"),
    (["run", "link-failure", "--switch", "frob"], "invalid choice"),
    (["run", "link-failure", "--fault-at", "5", "--fault-end", "4"], "--fault-at < --fault-end"),
    (["run", "link-failure", "--transports", "mrc,quic"], "unknown transport"),
    (["run", "collective", "--transports", "tcp"], "agents' transports only"),
    (["validate", "--scenario", "nope"], "not in the quick set"),
    (["run", "link-failure", "--capture", "h0,p9l9-eth1"], "cannot capture 'p9l9-eth1'"),
    (["run", "link-failure", "--capture", ","], "comma-separated targets"),
    (["run", "link-failure", "--packet-log", "-1"], "--packet-log must be a whole number in [0,"),
    (["cli", "--planes", "0"], "planes must be"),
    (["cli", "--param", "warp=9"], "expected NAME=VALUE"),
    (["cli", "--param", "mtu_payload=99999"], "would not fit a jumbo frame"),
    (["cli", "--param", "ev_set_size=many"], "ev_set_size takes a whole number"),
    (["cli", "--script", "/no/such/file"], "no such file"),
    (["cli", "--detect-ms", "nan"], "--detect-ms must be a finite number"),
    (["cli", "--workdir", "/"], "--workdir / is /"),
    (["cli", "--workdir", "."], "the repository or a parent of it"),
    (["cli", "--workdir", ""], "--workdir is empty"),
    (["cli", "--workdir", "/usr"], "not a private folder"),
    (["run", "link-failure", "--out", ""], "--out is empty"),
    (["run", "link-failure", "--out", "."], "the repository or a parent of it"),
    (["demo", "--out", "/"], "--out / is /"),
    (["validate", "--out", ".."], "the repository or a parent of it"),
])
def test_bad_parameters_get_one_line_and_exit_2(args, words, emulation_ready):
    proc = _mrclab(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mrclab: error:"), proc.stderr
    assert words in lines[0]
    assert "Traceback" not in proc.stderr
    assert_nothing_left()


def test_not_root_is_named_with_the_fix(readable_copy):
    python = os.path.realpath(sys.executable)  # the venv's interpreter is the system one
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python,
                           "-m", "experiments.cli", "check-fabric"], cwd=readable_copy,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(readable_copy)})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "mrclab: error: mrclab needs root to build namespaces and " \
                                  "switches: run it with sudo"


def test_missing_ovs_is_named_with_the_fix(tmp_path, emulation_ready):
    # A PATH with python but without any Open vSwitch tool.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("mnexec", "ip", "tc", "pgrep"):
        real = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if real:
            (bindir / tool).symlink_to(real)
    proc = _mrclab("check-fabric", env={"PATH": str(bindir)})
    assert proc.returncode == 2
    assert "Open vSwitch is not installed" in proc.stderr and "make setup" in proc.stderr
    assert_nothing_left()


def test_missing_mininet_is_named_with_the_fix(tmp_path):
    fake = tmp_path / "mininet"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    proc = _mrclab("check-fabric", env={"PYTHONPATH": str(tmp_path)})
    if os.geteuid() != 0:
        pytest.skip("the root check comes first")
    assert proc.returncode == 2
    assert "Mininet is not installed" in proc.stderr


def test_out_never_deletes_a_folder_mrclab_did_not_make(tmp_path, emulation_ready):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    for args in (["run", "link-failure", "--transports", "mrc", "--duration", "2", "--fault-at", "0.5",
                  "--fault-end", "1"],
                 ["demo", "--duration", "3", "--cut-at", "1", "--restore-at", "2"]):
        proc = _mrclab(*args, "--out", str(mine))
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "exists and is not an mrclab result" in lines[0], proc.stderr
        assert (mine / "thesis.tex").read_text() == "years of work"
    assert_nothing_left()
