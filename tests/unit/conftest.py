"""Unit tests do not depend on how busy the machine is while they run: the cores free when a
run starts (`calibration.free_cores`, read live from /proc/stat) are every core here, unless a
test sets them itself."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _every_core_free(monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.analysis import calibration

    monkeypatch.setattr(calibration, "free_cores", lambda window=0.0: float(os.cpu_count() or 1))
