"""Shared test settings: integration tests need root and Open vSwitch. They skip on a laptop
without them, but never in CI (CI=true), where a missing prerequisite is a failure."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _emulation_unavailable() -> str | None:
    from topologies import preflight

    try:
        preflight.check_all()
    except preflight.PreflightError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def emulation_ready() -> None:
    reason = _emulation_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"integration prerequisites missing in CI: {reason}")
    pytest.skip(reason)
