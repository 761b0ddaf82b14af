"""Files the testbed writes: atomically (readers never see half a file, an interrupted write
leaves the old one) and, for work directories, private to their owner.

Every summary, status file, reference and benchmark result goes through `write_text` or
`write_json`, and is read back by `read_json`; every run's scratch space comes from
`private_dir`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def write_text(path: Path | str, text: str, mode: int = 0o644) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place. `mode`: the
    file's permissions (results are for everyone to read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: Path | str, data: Any, indent: int | None = 2, mode: int = 0o644) -> None:
    """`data` as JSON (a final newline when indented), atomically."""
    text = json.dumps(data, indent=indent)
    write_text(path, text + "\n" if indent is not None else text, mode)


def read_json(path: Path | str) -> dict:
    """The JSON object in `path`; {} when there is none yet: the file is missing, unreadable,
    not JSON or not an object (whoever reads it treats every such case as nothing recorded)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ensure_private(path: Path | str) -> Path:
    """`path` as a directory only its owner can enter: created 0700 if missing (its parents as
    needed). One that exists must already be a private (no access for group or others)
    directory of this user: a symlink, a file, someone else's or a folder open to others is
    refused (OSError), never changed (`--workdir /` must not make the machine root's only)."""
    path = Path(path)
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a directory of this user (a symlink, a file, or someone "
                      f"else's): refusing to work in it")
    if st.st_mode & 0o077:
        raise OSError(f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):04o}): name a "
                      f"new folder (it is created 0700) or a private one")
    return path


def private_dir(prefix: str, parent: Path | str | None = None) -> Path:
    """A new directory only its owner can enter (mode 0700), under `parent` (the system's
    temporary directory by default); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    st = path.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not private to this user")
    return path


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two existing paths of one filesystem in one step (renameat2 RENAME_EXCHANGE): a
    reader of either sees the old or the new, never nothing. Where the filesystem cannot, three
    renames through a side folder beside `b` (an interruption leaves `b`'s old content there)."""
    rc = _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) \
        if hasattr(_libc, "renameat2") else -1
    if rc == 0:
        return
    side = Path(tempfile.mkdtemp(prefix=f".{Path(b).name}-swap-", dir=Path(b).parent))
    os.rename(b, side / "old")
    os.rename(a, b)
    os.rename(side / "old", a)
    side.rmdir()
