"""Compiled agents: the modules a host agent spends its time in, compiled unchanged by Cython into
C extensions (`python -m endpoints.native build`, run by `make setup`), which an agent loads in
place of their source only while each build matches its source byte for byte.

Why: a Python agent's own work, spread over some forty small functions of the protocol core
and the data loop, is most of what a delivered packet costs (issue 19; docs/experiments.md,
"Compiled agents"). Cython (a well-kept compiler of Python to C, https://cython.org) removes the
interpreter's dispatch without a line of the protocol leaving Python: the same files, no Cython
types, so the sans-IO core, the labs' subclasses and the seeded simulations are unchanged (a test
runs a seeded simulation both ways and compares the results).

Who loads them: an agent started with `MRCLAB_NATIVE=1` in its environment (`agent_argv`, what
every launcher uses, sets it unless the caller's own environment says `MRCLAB_NATIVE=0`, or an
agent profile is asked for, which must see the Python functions). Every other process (the
runner, the simulator, the tests) imports the source. A module whose source changed since the
build, or a machine without a build (no compiler, no Python headers, no Cython), runs the source:
never stale code, never an error.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUILD_DIR = REPO / "build" / "native"
MANIFEST = BUILD_DIR / "manifest.json"
ENV = "MRCLAB_NATIVE"  # "1": this process loads the compiled modules (set for agents only)
PROFILE_ENV = "MRCLAB_AGENT_PROFILE"  # endpoints/host/agent.py's cProfile: Python functions only
# The protocol core and the agent's data path: everything an agent runs per packet.
MODULES = tuple(f"endpoints.protocol.{name}" for name in (
    "config", "congestion", "core", "echoes", "events", "evset", "gobackn", "nicpacer",
    "placement", "portstatus", "prober", "receiver", "recovery", "replaceable", "rtt", "sender",
    "wire")) + tuple(f"endpoints.host.{name}" for name in (
        "dataloop", "goodput", "netio", "paths", "shared"))
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # this interpreter's ABI tag


def source(module: str) -> Path:
    return REPO.joinpath(*module.split(".")).with_suffix(".py")


def extension(module: str) -> Path:
    return BUILD_DIR.joinpath(*module.split(".")).with_name(module.rsplit(".", 1)[1] + SUFFIX)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest() -> dict[str, Any]:
    try:
        data = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("suffix") == SUFFIX else {}


def fresh() -> dict[str, Path]:
    """The compiled modules whose build matches today's source, by module name."""
    built = _manifest().get("modules", {})
    out = {}
    for module in MODULES:
        so = extension(module)
        try:
            if built.get(module) == _digest(source(module)) and so.is_file():
                out[module] = so
        except OSError:
            continue
    return out


def describe() -> str:
    """What an agent started now would run, for a result's record."""
    if os.environ.get(ENV) == "0":
        return f"python ({ENV}=0)"
    got = fresh()
    if not got:
        return "python (no compiled build: `make setup`)"
    return f"compiled by Cython {_manifest().get('cython', '?')}: {len(got)} of {len(MODULES)} modules"


def agent_argv(module_args: Sequence[str]) -> list[str]:
    """The command that starts an agent (`python -m endpoints.host.agent ARGS`), compiled
    modules on unless the caller's environment turns them off or asks for an agent profile."""
    on = os.environ.get(ENV, "1") != "0" and not os.environ.get(PROFILE_ENV)
    return ["env", f"{ENV}={int(on)}", sys.executable, "-m", "endpoints.host.agent", *module_args]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, table: dict[str, Path]) -> None:
        self.table = table

    def find_spec(self, fullname: str, path: object = None, target: object = None) \
            -> importlib.machinery.ModuleSpec | None:
        so = self.table.get(fullname)
        if so is None:
            return None
        return importlib.util.spec_from_file_location(fullname, so)


def install() -> list[str]:
    """Load the fresh compiled modules from now on in this process; their names."""
    table = fresh()
    if table and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(table))
    return sorted(table)


def loaded() -> list[str]:
    """The modules of MODULES this process runs compiled."""
    return sorted(name for name in MODULES
                  if str(getattr(sys.modules.get(name), "__file__", "")).endswith(SUFFIX))


# ----- building -------------------------------------------------------------------------------
def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def _cython_version() -> str | None:
    try:
        import Cython
    except ImportError:
        return None
    return str(Cython.__version__)


def unavailable() -> str | None:
    """Why this machine cannot build, or None."""
    version = _cython_version()
    if version is None:
        return "Cython is not installed (the venv's `pip install -e .`)"
    if int(version.split(".")[0]) < 3:  # 0.29 reads no `from __future__ import annotations`
        return f"Cython {version} is older than 3.0"
    if _compiler() is None:
        return "no C compiler (cc, gcc or clang)"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (python3-dev)"
    return None


def _compile(module: str, work: Path) -> str | None:
    """Build one module into its extension (atomically); None, or the compiler's complaint."""
    c_file = work / (module + ".c")
    steps = ([sys.executable, "-m", "cython", "-3", "-X", "binding=True", "-o", str(c_file),
              str(source(module))],
             [_compiler() or "cc", "-O2", "-shared", "-fPIC", "-fno-strict-aliasing", "-w",
              f"-I{sysconfig.get_paths()['include']}", str(c_file), "-o", str(c_file.with_suffix(SUFFIX))])
    for argv in steps:
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            return f"{module}: {(result.stderr or result.stdout).strip()[-300:]}"
    target = extension(module)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(c_file.with_suffix(SUFFIX), tmp)
    os.replace(tmp, target)
    return None


def build(force: bool = False) -> tuple[bool, str]:
    """Compile every module whose build is missing or older than its source; (ok, what)."""
    why = unavailable()
    if why is not None:
        return False, why
    version = _cython_version()
    manifest = _manifest()
    if manifest.get("cython") != version:
        manifest = {}
    built: dict[str, str] = dict(manifest.get("modules", {})) if not force else {}
    todo = [m for m in MODULES if built.get(m) != _digest(source(m)) or not extension(m).is_file()]
    if not todo:
        return True, f"{len(MODULES)} modules up to date"
    digests = {m: _digest(source(m)) for m in todo}  # as compiled, even if edited meanwhile
    with tempfile.TemporaryDirectory(prefix="mrclab-native-") as tmp, \
            ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        errors = [e for e in pool.map(lambda m: _compile(m, Path(tmp)), todo) if e]
    for module in todo:
        if not any(e.startswith(module + ":") for e in errors):
            built[module] = digests[module]
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp_manifest = MANIFEST.with_name(MANIFEST.name + ".tmp")
    tmp_manifest.write_text(json.dumps({"cython": version, "suffix": SUFFIX,
                                        "modules": built}, indent=1, sort_keys=True))
    os.replace(tmp_manifest, MANIFEST)
    if errors:
        return False, f"{len(errors)} of {len(todo)} modules not compiled (they run as Python): {errors[0]}"
    return True, f"compiled {len(todo)} modules with Cython {version}"


def main(argv: list[str]) -> int:
    if argv[:1] != ["build"] or any(a != "--force" for a in argv[1:]):
        print("usage: python -m endpoints.native build [--force]", file=sys.stderr)
        return 2
    ok, message = build(force="--force" in argv)
    print(f"setup: compiled agents: {message}" if ok else
          f"setup: warning: agents run as Python ({message})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
