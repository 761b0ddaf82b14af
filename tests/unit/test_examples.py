"""examples/ that need no root, run as a user would run them, their printed output checked.
(The emulated ones are in tests/integration/test_examples.py.)"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_simulated_transfer_rides_through_the_outage_exactly():
    out = _run("simulated_transfer.py")
    assert "delivered 8 of 8 messages, exact: True" in out
    mbps = float(re.search(r"goodput ([\d.]+) Mbit/s over 8 paths", out).group(1))
    # 4 planes x 10 Mbit/s less headers (~9.7 Mbit/s of 4 KB payloads per link): the outage of
    # one of 8 paths costs almost nothing, the plane's other path takes its share.
    assert 36.0 < mbps < 40.0
    changes = re.findall(r"([\d.]+) s  EV (0x[0-9a-f]+): (\w+) -> (\w+)", out)
    # Benched from GOOD, or from SKIP once its overdue packets were presumed lost (presume_dark)
    assert [(ev, old, new) for _, ev, old, new in changes] == [
        ("0x1c000", changes[0][2], "ASSUMED_BAD"), ("0x1c000", "ASSUMED_BAD", "GOOD")]
    assert changes[0][2] in ("GOOD", "SKIP")
    bad_at, good_at = float(changes[0][0]), float(changes[1][0])
    assert 0.5 < bad_at < 0.6 and 1.5 < good_at < 1.65  # the outage is [0.5, 1.5)
    rows = {m[0]: (int(m[1]), float(m[2])) for m in
            re.findall(r"^(0x[0-9a-f]+)\s+GOOD\s+(\d+)\s+[\d.]+\s+([\d.]+)$", out, re.M)}
    assert len(rows) == 8 and rows["0x1c000"][0] == 1
    assert sum(b for ev, (b, _) in rows.items() if ev != "0x1c000") == 0
    # Plane 0 carried its share all the same: its surviving path took the benched one's.
    assert abs(rows["0x1c000"][1] + rows["0x1c001"][1] - 2.0) < 0.05


def test_simulated_transfer_is_deterministic_for_a_seed():
    assert _run("simulated_transfer.py", "--seed", "7") == _run("simulated_transfer.py", "--seed", "7")
