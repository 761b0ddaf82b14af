"""A pytest plugin for the labs' drift test: the product's own unit tests run with a lab's
class in place of the product's.

    LAB_REPLACE=endpoints.protocol.evset:EvSet=labs/04-ev-state-machine/solution/ev_states.py:LabEvSet \\
        python -m pytest -p labs.checker.pytest_replace tests/unit/endpoints/protocol/test_evset.py

The replacement happens when pytest loads the plugin, before any test module is imported, so
`from endpoints.protocol.evset import EvSet` in a test (or in the sender) gets the lab's class.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from labs.checker.student import load

REPLACED: list[str] = []
for item in filter(None, os.environ.get("LAB_REPLACE", "").split(";")):
    target, source = item.split("=", 1)
    module_name, attr = target.split(":")
    path, name = source.rsplit(":", 1)
    setattr(importlib.import_module(module_name), attr, getattr(load(Path(path)), name))
    REPLACED.append(f"{module_name}.{attr} <- {path}:{name}")


def pytest_report_header() -> list[str]:
    return [f"lab replacement: {r}" for r in REPLACED]
