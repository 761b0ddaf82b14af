"""The console's signals, in a fresh interpreter started the way a shell without job control
starts a background command (a CI job, `cmd &` in a script): with SIGINT ignored."""

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]

CHILD = """
import os, signal, time
from experiments.shell import session
print("inherited", "ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "other")
session._console_signals()
try:
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during a foreground command
    time.sleep(5)
    print("Ctrl-C was lost")
except KeyboardInterrupt:
    print("Ctrl-C raised KeyboardInterrupt")
"""


def test_ctrl_c_reaches_the_console_even_when_sigint_was_inherited_ignored():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True,
                         timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["inherited ignored", "Ctrl-C raised KeyboardInterrupt"]
