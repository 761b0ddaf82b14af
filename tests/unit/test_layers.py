"""The layering rule, read from every product file's own imports (ast), so it cannot rot:

    floor 1  endpoints/            protocol/ (pure) and host/ (the agent process)
    floor 2  topologies/           the fabric model and the emulator
    floor 3  controller/
    floor 4  experiments/          the `mrclab` command, scenarios, tools

A file imports only its own floor or floors below; no files import each other in a circle;
the pure layers import nothing that does I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("topologies", "endpoints", "controller", "experiments")
# The agents get their path tables as data (topologies/pathtables.py): endpoints/ imports
# nothing of topologies/, the fabric model included.
FLOORS = (("endpoints/", 1), ("topologies/", 2), ("controller/", 3), ("experiments/", 4))
# Pure layers: no sockets, clocks, processes or files.
PURE = ("topologies/model.py", "topologies/numbering.py", "topologies/pathtables.py", "endpoints/protocol/",
        "endpoints/numbercheck.py", "endpoints/evnumber.py", "controller/tables.py",
        "controller/kernel_tables.py", "controller/routing.py", "experiments/api/traffic.py",
        "experiments/analysis/metrics.py", "experiments/sim/simnet.py", "experiments/shell/text.py",
        "experiments/analysis/capacity.py", "experiments/analysis/transports.py",
        "experiments/scenarios/schema.py",
        "topologies/dataplane/reference.py", "topologies/dataplane/ports.py",
        "topologies/scale.py", "topologies/placement.py")
IMPURE_MODULES = {"os", "socket", "time", "subprocess", "selectors", "select", "threading", "shutil",
                  "tempfile", "ctypes", "pathlib", "signal"}
# The Python API drives the emulator through its narrow face; of the rest of topologies/ it
# imports only the pure model, the run context and the emulator's error types.
API = "experiments/api/"
API_TOPOLOGIES = ("topologies/__init__.py", "topologies/face.py", "topologies/model.py",
                  "topologies/runctx.py", "topologies/preflight.py")
# Floors inside a folder: the protocol below the host part; what measurements mean below the API
# that takes them.
SUBFLOORS = ((("endpoints/protocol/", 0), ("endpoints/host/", 1)),
             (("experiments/analysis/", 0), ("experiments/api/", 1)))


def _files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _module_file(module: str) -> str | None:
    """The product file a dotted module name is, or None for anything else (stdlib, packages)."""
    parts = module.split(".")
    if parts[0] not in PRODUCT:
        return None
    for candidate in (Path(*parts).with_suffix(".py"), Path(*parts) / "__init__.py"):
        if (ROOT / candidate).exists():
            return candidate.as_posix()
    return None


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) for every import in the file, function-level ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            # `from package import module` names a module, not only a package.
            out += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names
                    if _module_file(f"{node.module}.{alias.name}")]
    return out


def _floor(rel: str, floors: tuple[tuple[str, int], ...] = FLOORS) -> int | None:
    return next((f for prefix, f in floors if rel == prefix or rel.startswith(prefix)), None)


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _files():
        rel = _rel(path)
        targets = {t for module, _ in _imports(path) if (t := _module_file(module))}
        targets.discard(rel)
        # A module's package __init__ runs on import but is no dependency of its own.
        graph[rel] = {t for t in targets if not (t.endswith("__init__.py") and
                                                  rel.startswith(t.removesuffix("__init__.py")))}
    return graph


def test_no_import_goes_up_a_floor():
    upward = []
    for path in _files():
        rel = _rel(path)
        for module, line in _imports(path):
            target = _module_file(module)
            if target is None:
                continue
            if _floor(target) > _floor(rel):
                upward.append(f"{rel}:{line} imports {module} (floor {_floor(target)} > {_floor(rel)})")
            for inner in SUBFLOORS:
                sub, target_sub = _floor(rel, inner), _floor(target, inner)
                if sub is not None and target_sub is not None and target_sub > sub:
                    upward.append(f"{rel}:{line} imports {module} ({inner[1][0]} from {inner[0][0]})")
    assert not upward, "\n".join(upward)


def test_no_circle_of_imports():
    graph = _edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            pytest.fail("import circle: " + " -> ".join(cycle))


def test_the_api_reaches_the_emulator_only_through_its_face():
    found = []
    for path in _files():
        rel = _rel(path)
        if not rel.startswith(API):
            continue
        for module, line in _imports(path):
            target = _module_file(module)
            if target is not None and target.startswith("topologies/") and target not in API_TOPOLOGIES:
                found.append(f"{rel}:{line} imports {module}: use topologies/face.py")
    assert not found, "\n".join(found)


def test_pure_layers_do_no_io():
    found = []
    for path in _files():
        rel = _rel(path)
        if not any(rel == p or rel.startswith(p) for p in PURE):
            continue
        for module, line in _imports(path):
            if module.split(".")[0] in IMPURE_MODULES:
                found.append(f"{rel}:{line} imports {module}")
    assert not found, "\n".join(found)


def test_the_rule_sees_real_imports():
    """The graph is not empty by accident: known arrows are found."""
    graph = _edges()
    assert "topologies/model.py" in graph["controller/tables.py"]
    assert "endpoints/protocol/wire.py" in graph["topologies/dataplane/build.py"]
    assert "endpoints/numbercheck.py" in graph["topologies/model.py"]
    assert "topologies/model.py" in graph["topologies/pathtables.py"]
    assert "topologies/face.py" in graph["experiments/api/testbed.py"]
    assert _floor("topologies/model.py") == 2 and _floor("endpoints/host/agent.py") == 1
