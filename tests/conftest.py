"""Shared test settings: integration tests need root, Mininet and a switch backend (Open vSwitch
for the first-class one). They skip on a laptop without them, but never in CI (CI=true), where a
missing prerequisite is a failure. Tests that build a fabric take `switch_backend` and run once
per backend (ovs, linux)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IN_CI = os.environ.get("CI") == "true"


SWITCH_BACKENDS = ("ovs", "linux")


def _emulation_unavailable(backend: str = "ovs") -> str | None:
    from topologies import preflight, switches

    try:
        switches.check(backend)
    except preflight.PreflightError as exc:
        return str(exc)
    return None


def require_or_skip(reason: str | None) -> None:
    """Skip for `reason` on a laptop; in CI a missing prerequisite is a failure."""
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"integration prerequisites missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def emulation_ready() -> None:
    require_or_skip(_emulation_unavailable())
    # Start from a clean machine: a run killed before this session (OVS keeps bridges in its
    # database across restarts) must not be counted against the tests' "nothing left behind".
    from topologies import preflight, runctx

    try:
        runctx.check_lock_free()
    except preflight.PreflightError as exc:
        require_or_skip(str(exc))
    runctx.clean_all()


@pytest.fixture(params=SWITCH_BACKENDS)
def switch_backend(request: pytest.FixtureRequest, emulation_ready: None) -> str:
    """The switch backend a fabric-building test runs on (the test runs once per backend)."""
    require_backend_or_skip(request.param)
    return request.param


def require_backend_or_skip(backend: str) -> None:
    """`require_or_skip` for one switch backend; a kernel too old for the Linux backend skips
    even in CI (nothing `make setup` could install; `auto` then takes ovs)."""
    from topologies.switches import linux

    reason = _emulation_unavailable(backend)
    if reason is not None and linux.NO_NEXT_CSID in reason:
        pytest.skip(reason)
    require_or_skip(reason)
