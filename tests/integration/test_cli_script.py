"""`mrclab cli --script` on a real fabric: a background transfer paced with `sleep` through a
cut, `wait` until it ends, `evs` on the ended flow (its EV set as it ended, the cut EV among
the benched), and a script with a failing line exits 1 after tearing everything down."""

import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")

SCRIPT = """\
# a cut during a background transfer, as README's example
send h0 h1 6M --background
sleep 0.7
cut p0l0-p0s0
sleep 0.3
wait
evs h0
restore p0l0-p0s0
plot {png}
frobnicate
"""


def test_a_script_sleeps_waits_shows_the_ended_flow_and_fails_on_a_bad_line(tmp_path):
    script = tmp_path / "cut.mrc"
    png = tmp_path / "session.png"
    script.write_text(SCRIPT.format(png=png))
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "cli", "--planes", "2", "--leaves", "2",
                           "--spines", "2", "--hosts-per-leaf", "1", "--script", str(script)],
                          cwd=REPO, capture_output=True, text=True, timeout=170)
    assert done.returncode == 1, done.stdout + done.stderr  # `frobnicate` failed
    assert "Unknown command: frobnicate" in done.stderr
    assert f"1 command(s) of {script} failed" in done.stderr
    out = done.stdout
    assert "flow 1 done: 6.0 MiB" in out and "data ok" in out
    ended = out.index("(ended: done, data ok; its EV set as it ended)")
    rows = out[ended:].splitlines()[2:]
    assert any("ASSUMED_BAD" in row and " s0 " in row for row in rows), out  # the cut path's EV
    assert png.stat().st_size > 10_000
    assert_nothing_left()
