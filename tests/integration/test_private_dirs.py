"""Root never works in a fixed, guessable /tmp path: a local user who creates it first and plants
symlinks there must not make root overwrite or create files where the user chose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")
NOBODY = 65534


def test_check_fabric_ignores_a_planted_tmp_tree(tmp_path):
    fixed = Path("/tmp/mrclab")
    aside = None
    if os.path.lexists(fixed):  # an earlier version's folder: keep it, out of the way
        aside = fixed.with_name(f"mrclab.aside-{os.getpid()}")
        os.rename(fixed, aside)
    victim = tmp_path / "victim"
    victim.write_text("root's secret")
    victim.chmod(0o600)
    lair = Path(f"/tmp/lair-{os.getpid()}")
    try:
        # What a local user can do: own /tmp/mrclab and point its work folder at a folder of
        # theirs, whose controller.log is a link to a file root must not touch.
        fixed.mkdir()
        lair.mkdir()
        (lair / "controller.log").symlink_to(victim)
        (fixed / "check-fabric").symlink_to(lair)
        for path in (fixed, lair):
            os.chown(path, NOBODY, NOBODY)
        os.lchown(fixed / "check-fabric", NOBODY, NOBODY)
        os.lchown(lair / "controller.log", NOBODY, NOBODY)
        proc = subprocess.run([sys.executable, "-m", "experiments.cli", "check-fabric", "--planes", "1",
                               "--leaves", "2", "--spines", "1", "--hosts-per-leaf", "1"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True
        assert victim.read_text() == "root's secret"
        assert sorted(p.name for p in lair.iterdir()) == ["controller.log"], "root wrote in the lair"
        assert sorted(p.name for p in fixed.iterdir()) == ["check-fabric"]
    finally:
        shutil.rmtree(lair, ignore_errors=True)
        if fixed.is_symlink() or fixed.is_file():
            fixed.unlink()
        else:
            shutil.rmtree(fixed, ignore_errors=True)
        if aside is not None:
            os.rename(aside, fixed)
    assert_nothing_left()
