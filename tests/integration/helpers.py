from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assert_nothing_left() -> None:
    """No mrclab bridge, emulated interface or host shell survives a run."""
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    ours = [b for b in bridges if re.fullmatch(r"p\d+[ls]\d+", b)]
    assert not ours, f"bridges left behind: {ours}"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    stray = re.findall(r"^\d+: ((?:p\d+[ls]\d+|h\d+)-eth\d+)", links, re.M)
    assert not stray, f"interfaces left behind: {stray[:10]}"
    shells = subprocess.run(["pgrep", "-f", "mininet:h[0-9]+$"], capture_output=True, text=True).stdout
    assert not shells.strip(), f"host shells left behind: {shells.split()}"
