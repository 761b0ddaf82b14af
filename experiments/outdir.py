"""Where a run's results go (`--out`): checked before anything starts, replaced only when it is
an earlier mrclab result, and then in one step.

A folder is an mrclab result when it is a real directory (not a symlink) whose summary.json is
a JSON object carrying `RESULT_MARKER` (every summary written since) or, for results written
before the marker existed, the fields every summary has. Anything else (a folder of the user's,
the checkout, `/`, a parent of the repository, an empty name) is refused with one line: mrclab
deletes only what it made.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from topologies import files

RESULT_MARKER = "mrclab_result"  # summary.json field: this folder is an mrclab result (format 1)
RESULT_FORMAT = 1
_LEGACY_FIELDS = {"scenario", "fabric", "transports", "fidelity", "software"}
REPO = Path(__file__).resolve().parent.parent  # the checkout: the one home of this fact
RESULTS = REPO / "results"  # every output's root (`mrclab clean` and .gitignore know it)


class OutDirError(ValueError):
    """The --out folder cannot be used; the message says why and what to do."""


def is_result(path: Path) -> bool:
    """True when `path` is a directory mrclab wrote (see the module docstring)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict):
        return False
    return summary.get(RESULT_MARKER) == RESULT_FORMAT or _LEGACY_FIELDS <= set(summary)


def check_name(out: Path | str) -> Path:
    """`out` as a Path, unless it is empty, `/`, the repository or a parent of it."""
    text = str(out)
    if not text.strip():
        raise OutDirError("--out is empty: name a folder for the results, like results/mine")
    path = Path(text)
    where = path.resolve()
    what = "/" if where == Path(where.anchor) else \
        "the repository or a parent of it" if REPO.is_relative_to(where) else None
    if what:
        raise OutDirError(f"--out {text} is {what}: name a folder of its own for the results, "
                          f"like results/mine")
    return path


def check(out: Path | str) -> Path:
    """`out` if results may be written there (absent, or an earlier result); OutDirError else."""
    path = check_name(out)
    if os.path.lexists(path) and not is_result(path):
        raise OutDirError(f"--out {out} exists and is not an mrclab result: choose another folder "
                          f"(mrclab replaces only its own results)")
    return path


def replace(staging: Path, out: Path) -> None:
    """Put the complete results in `staging` at `out`: a new folder is renamed into place; an
    earlier result is exchanged with it in one step (renameat2), then removed. `out` is
    checked again first: what is there may have changed during the run."""
    check(out)
    if not os.path.lexists(out):
        os.rename(staging, out)
        return
    files.exchange(staging, out)
    shutil.rmtree(staging, ignore_errors=True)  # the earlier result, now at the staging name


def check_collection(out: Path | str, index: str = "validate.json") -> Path:
    """A folder that holds several results and an `index` file (`mrclab validate --out`):
    absent, or a directory with nothing but mrclab results and that file."""
    path = check_name(out)
    if os.path.lexists(path):
        if not stat.S_ISDIR(os.lstat(path).st_mode) or \
                any(not (e.name == index or is_result(e)) for e in path.iterdir()):
            raise OutDirError(f"--out {out} exists and holds more than mrclab results: choose "
                              f"another folder (mrclab replaces only its own results)")
    return path
