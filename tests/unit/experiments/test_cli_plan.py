"""`mrclab plan`: figures on stdout, bad values one line on stderr and exit 2."""

from __future__ import annotations

import json
import signal

import pytest

from experiments import cli


@pytest.fixture(autouse=True)
def _keep_signal_handlers():
    """cli.main installs its own SIGINT/SIGTERM handlers: put pytest's back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_plan_prints_the_papers_fabric(capsys):
    assert cli.main(["plan", "--planes", "8", "--radix", "512"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("131,072 GPUs") and "3/5 (0.600)" in out and "12.5%" in out


def test_plan_json(capsys):
    assert cli.main(["plan", "--gpus", "65536", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 65536 and data["multi_plane"]["tiers"] == 2
    assert [s["tiers"] for s in data["single_plane"]] == [3]


@pytest.mark.parametrize("argv", [
    ["--radix", "51.2"], ["--radix", "511"], ["--planes", "0"], ["--planes", "x"],
    ["--gpus", "131073"], ["--gpus", "-1"], ["--nic-ports", "12"], ["--radix", "16"],
    ["--bogus"],
])
def test_plan_bad_values_exit_2_with_one_line(argv, capsys):
    assert cli.main(["plan", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mrclab: error: ")
