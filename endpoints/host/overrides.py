"""Replacements from files: what a run's configuration says to put at the product's named
override points (endpoints/protocol/replaceable.py), checked, loaded and fingerprinted.

A replacement is `POINT=FILE:NAME` (`evset=labs/04-ev-state-machine/ev_states.py:LabEvSet`):
attribute NAME of the Python file FILE takes point POINT's place. It travels explicitly, in the
agent's settings (`replace`, written by the runner or the Testbed from the run's options), never
through the environment: no other process inherits it. Every run that uses one records it,
with the file's SHA-256, in its summary (`provenance`), so a result produced with other code
than the product's says so.
"""

from __future__ import annotations

import hashlib
import importlib.util
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from endpoints.protocol.replaceable import POINTS, ReplacementError, check_object, point

OverrideError = ReplacementError  # one line: what is wrong and the fix


@dataclass(frozen=True)
class Replacement:
    point: str  # one of replaceable.POINTS
    file: str  # an existing regular .py file, absolute once checked
    name: str  # the attribute of that file's module to use

    def text(self) -> str:
        return f"{self.point}={self.file}:{self.name}"


def parse(text: str) -> Replacement:
    """`POINT=FILE:NAME` (the command line's form), checked."""
    head, eq, rest = text.partition("=")
    file, colon, name = rest.rpartition(":")
    if not eq or not colon or not head or not file or not name:
        raise OverrideError(f"a replacement is POINT=FILE:NAME like evset=my_evset.py:MyEvSet, "
                            f"got {text!r}")
    return check_one(Replacement(head.strip(), file.strip(), name.strip()))


def check_one(rep: Replacement) -> Replacement:
    """The replacement with its file made absolute; OverrideError (one line) for a point not
    on the whitelist, a file that is missing or not a regular .py file, a bad name."""
    point(rep.point)
    path = Path(rep.file).expanduser()
    try:
        mode = path.stat().st_mode
    except OSError:
        raise OverrideError(f"{rep.point}: {rep.file} does not exist") from None
    if not stat.S_ISREG(mode) or path.suffix != ".py":
        raise OverrideError(f"{rep.point}: {rep.file} is not a regular .py file")
    if not rep.name.isidentifier():
        raise OverrideError(f"{rep.point}: {rep.name!r} is not a Python name")
    return Replacement(rep.point, str(path.resolve()), rep.name)


def check(reps: Iterable[Replacement]) -> tuple[Replacement, ...]:
    """Every replacement checked, each point at most once."""
    out = tuple(check_one(r) for r in reps)
    seen: set[str] = set()
    for r in out:
        if r.point in seen:
            raise OverrideError(f"{r.point} is replaced twice: name it once")
        seen.add(r.point)
    return out


def as_settings(reps: Iterable[Replacement]) -> list[dict[str, str]]:
    return [{"point": r.point, "file": r.file, "name": r.name} for r in reps]


def from_settings(value: object) -> tuple[Replacement, ...]:
    """The agent's `replace` setting (a list of {point, file, name}), checked."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
            isinstance(v, dict) and set(v) == {"point", "file", "name"}
            and all(isinstance(x, str) for x in v.values()) for v in value):
        raise OverrideError("the replace setting must be a list of {point, file, name}")
    return check(Replacement(v["point"], v["file"], v["name"]) for v in value)


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def provenance(reps: Iterable[Replacement]) -> dict[str, dict[str, str]]:
    """{point: {file, name, sha256}}: what a summary records of the code a run replaced."""
    return {r.point: {"file": r.file, "name": r.name, "sha256": sha256(r.file)} for r in reps}


def load(reps: Iterable[Replacement]) -> dict[str, Any]:
    """{point: the object}: each file imported under a private module name (a file is imported
    once, however many points it serves), each object checked against its point's contract.
    An import that fails is an OverrideError naming the file and the exception."""
    modules: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for r in check(reps):
        if r.file not in modules:
            modules[r.file] = _import(r.file, len(modules))
        obj = getattr(modules[r.file], r.name, None)
        if obj is None:
            raise OverrideError(f"{r.point}: {Path(r.file).name} has no {r.name}")
        check_object(r.point, obj, f"{Path(r.file).name}:{r.name}")
        out[r.point] = obj
    return out


def _import(file: str, n: int) -> Any:
    name = f"mrclab_replacement_{n}_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the file does at import: one line
        del sys.modules[name]
        message = str(exc).splitlines()[0] if str(exc) else ""
        raise OverrideError(f"importing {file} failed: {type(exc).__name__}: {message}") from None
    return module


__all__ = ["POINTS", "OverrideError", "Replacement", "as_settings", "check", "from_settings",
           "load", "parse", "provenance"]
