"""How student code is loaded: `load(path)`, the student's file as a module of its own (the lab
folders are not packages), and `describe(exc)`, what it raised in one line.

Student code reaches the product only at the product's named override points
(endpoints/protocol/replaceable.py): `replaceable.cores` in this process for the simulated
network, the agents' `replace` setting in an emulation (labs/checker/fabric.py). Nothing is
patched into product modules.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType


class StudentFileError(Exception):
    """The student's file is missing or cannot be imported: the message says which and why."""


def load(path: Path, lab_dir: Path | None = None) -> ModuleType:
    """Import `path` under a private name (`lab_<folder>_<stem>`); a syntax error or an import
    that fails becomes a StudentFileError naming the file and line."""
    if not path.exists():
        raise StudentFileError(f"{path.name} is missing from {path.parent}")
    folder = (lab_dir or path.parent).name.replace("-", "_")
    name = f"lab_{folder}_{'solution_' if path.parent.name == 'solution' else ''}{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise StudentFileError(f"{path.name}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the student's module does at import
        del sys.modules[name]
        raise StudentFileError(f"importing {path.name} failed: {describe(exc, path.parent)}") from None
    return module


def describe(exc: BaseException, student_dir: Path) -> str:
    """One line: the exception, and the innermost line of the student's own files it passed
    through (else the innermost line anywhere, which is then the product's or the checker's)."""
    if isinstance(exc, StudentFileError):
        return str(exc)
    message = str(exc).splitlines()[0] if str(exc) else ""
    what = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    student_dir = student_dir.resolve()
    mine = [f for f in frames if Path(f.filename).resolve().parent == student_dir]
    if mine:
        frame = mine[-1]
        return f"{Path(frame.filename).name}:{frame.lineno}: {what}"
    if frames:
        frame = frames[-1]
        return f"{what} (raised in {Path(frame.filename).name}:{frame.lineno})"
    return what
