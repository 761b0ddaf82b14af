"""How student code gets into the product, explicitly and only in the checker's own process:

* `load(path)`: the student's file as a module of its own (the lab folders are not packages);
* `replacing(module, name, value)`: for the length of a `with` block, the product module's
  attribute is the student's (the sender's `EvSet`, for instance), then the product's again.

Nothing is installed for other processes: labs whose checks run student code do so over the
simulated network (`experiments.simnet`), in this process.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any


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


@contextmanager
def replacing(module: ModuleType, name: str, value: Any) -> Iterator[None]:
    """`module.name` is `value` inside the block (the product's own again after it)."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


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
