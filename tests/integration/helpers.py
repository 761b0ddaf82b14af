from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assert_nothing_left() -> None:
    """Nothing of a run survives it: no switch backend's leftovers (OVS bridges, ...), no
    emulated interface, no host shell (topologies.cleanup.leftovers knows every kind)."""
    from topologies import cleanup

    left = {kind: items[:10] for kind, items in cleanup.leftovers().items() if items}
    assert not left, f"left behind: {left}"
