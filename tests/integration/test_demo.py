"""`mrclab demo` end to end, as a user runs it: the summary contract, the plot, the figures MRC
and the baseline must show, and an interrupted run that leaves the earlier results intact."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import REPO, assert_nothing_left

pytestmark = pytest.mark.usefixtures("emulation_ready")

DETECT_MS = 900


def _demo(out, *extra):
    return [sys.executable, "-m", "experiments.cli", "demo", "--duration", "6", "--cut-at", "2",
            "--restore-at", "4", "--detect-ms", str(DETECT_MS), "--out", str(out), *extra]


def test_demo_summary_contract_and_figures(tmp_path, switch_backend):
    out = tmp_path / "demo"
    proc = subprocess.run(_demo(out, "--switch", switch_backend), cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recovery ms" in proc.stdout and "fidelity:" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["switch_backend"] == switch_backend
    assert (out / "recovery.png").stat().st_size > 10_000
    assert (out / "goodput.csv").read_text().startswith("t_s,mrc_mbps,roce_mbps\n")

    assert set(summary["fabric"]) == {"planes", "leaves", "spines", "hosts_per_leaf", "link_mbps"}
    failure = summary["failure"]
    assert failure["link"].startswith("p0l0-p0s") and 1.9 < failure["at_s"] < 2.2
    assert 3.9 < failure["restored_at_s"] < 4.2
    for name in ("mrc", "roce"):
        t = summary["transports"][name]
        for key in ("recovery_ms", "stall_ms", "goodput_before_mbps", "goodput_during_mbps",
                    "goodput_after_mbps", "bytes_delivered", "data_ok"):
            assert key in t, (name, key)
        assert t["data_ok"] is True, name
        assert t["bytes_delivered"] > 0
    for key in ("cpu_idle_min_pct", "link_mbps_configured", "link_mbps_achieved", "faithful"):
        assert key in summary["fidelity"]
    assert summary["seed"] == 1 and summary["software"]["os_ken"] != "absent"

    mrc, base = summary["transports"]["mrc"], summary["transports"]["roce"]
    # The baseline's one path is dead until routing withdraws it: at least the detection delay.
    assert base["stall_ms"] >= DETECT_MS - 100
    # MRC steps around the cut by itself: no long stall, and it recovers long before routing.
    assert mrc["stall_ms"] < 200
    assert mrc["recovery_ms"] is not None and mrc["recovery_ms"] < DETECT_MS / 2
    # It sprays over every plane: several times the single-path baseline's goodput.
    assert mrc["goodput_before_mbps"] > 2 * base["goodput_before_mbps"]
    # The routing plane reacted only after its delay, and only for the baseline.
    events = summary["routing"]["controller_events"]
    converged = [e for e in events if e["event"] == "baseline_converged"]
    assert converged and converged[0]["t"] - failure["at_s"] >= DETECT_MS / 1000
    assert_nothing_left()


def test_interrupted_demo_tears_down_and_keeps_earlier_results(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    earlier = out / "summary.json"
    earlier.write_text('{"mrclab_result": 1, "earlier": true}')  # an earlier mrclab result
    proc = subprocess.Popen(_demo(out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(6)  # set-up done, traffic running
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert earlier.read_text() == '{"mrclab_result": 1, "earlier": true}'
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    assert not list(tmp_path.glob(".demo-*")), "staging folder left behind"
    assert_nothing_left()
