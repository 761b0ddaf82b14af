"""endpoints/native.py: the compiled agents load a module's build only while it matches the
source, a seeded simulation gives the same result compiled or not, and the launch command
turns the build on for agents unless told otherwise."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from endpoints import native

NO_BUILD = native.unavailable()
needs_build = pytest.mark.skipif(NO_BUILD is not None, reason=f"cannot compile here: {NO_BUILD}")

# A seeded incast in the simulator (the same sender, receiver and EV code the agents run),
# printed as a digest of every flow's counters and delivered bytes, and the modules compiled.
SIM = """
import hashlib, json, sys
import experiments.sim.simclos as sc
from endpoints import native
from topologies.model import FabricParams
model = sc.ClosModel(params=FabricParams(planes=2, leaves=2, spines=5, hosts_per_leaf=5, link_mbps=20.0))
res = sc.incast(model, 7, seed=2, duration=2.5, start=1.0)
run = res.pop("run")
state = [(sorted(f.snd.stats.items()), f.rcv.bytes_delivered) for f in run.flows]
digest = hashlib.sha256(repr((sorted(res.items()), state)).encode()).hexdigest()
print(json.dumps({"digest": digest, "loaded": native.loaded(), "victim": res["victim_fraction"]}))
"""


def _sim(flag: str) -> dict:
    env = {**os.environ, native.ENV: flag}
    out = subprocess.run([sys.executable, "-c", SIM], capture_output=True, text=True, env=env,
                         cwd=native.REPO, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_machine_that_can_compile_has_every_module_built_and_fresh():
    if NO_BUILD is not None:
        pytest.skip(f"cannot compile here: {NO_BUILD}")
    missing = sorted(set(native.MODULES) - set(native.fresh()))
    assert not missing, f"compiled build missing or stale for {missing}: run `make setup`"


@needs_build
def test_a_seeded_simulation_is_identical_compiled_and_as_python():
    python, compiled = _sim("0"), _sim("1")
    assert python["loaded"] == [] and set(compiled["loaded"]) <= set(native.fresh())
    assert {"endpoints.protocol.sender", "endpoints.protocol.receiver"} <= set(compiled["loaded"])
    assert compiled["digest"] == python["digest"] and 0 < python["victim"] <= 1


@needs_build
def test_a_build_is_used_only_while_it_matches_its_source(tmp_path, monkeypatch):
    pkg = tmp_path / "demo_native"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    src = pkg / "mod.py"
    src.write_text("from __future__ import annotations\n\ndef twice(x: int) -> int:\n    return 2 * x\n")
    monkeypatch.setattr(native, "REPO", tmp_path)
    monkeypatch.setattr(native, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "build" / "manifest.json")
    monkeypatch.setattr(native, "MODULES", ("demo_native.mod",))
    ok, message = native.build()
    assert ok, message
    table = native.fresh()
    assert list(table) == ["demo_native.mod"] and table["demo_native.mod"].suffix == ".so"
    spec = native._Finder(table).find_spec("demo_native.mod")
    assert spec is not None and spec.origin == str(table["demo_native.mod"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert module.twice(21) == 42 and module.__file__.endswith(native.SUFFIX)
    assert native.build() == (True, "1 modules up to date")
    src.write_text(src.read_text().replace("2 * x", "3 * x"))  # edited after the build
    assert native.fresh() == {} and native._Finder(native.fresh()).find_spec("demo_native.mod") is None
    ok, message = native.build()
    assert ok and "compiled 1 modules" in message and list(native.fresh()) == ["demo_native.mod"]


def test_a_module_that_does_not_compile_runs_as_python_and_is_named(tmp_path, monkeypatch):
    if NO_BUILD is not None:
        pytest.skip(f"cannot compile here: {NO_BUILD}")
    pkg = tmp_path / "demo_bad"
    pkg.mkdir()
    (pkg / "broken.py").write_text("def f(:\n")
    monkeypatch.setattr(native, "REPO", tmp_path)
    monkeypatch.setattr(native, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "build" / "manifest.json")
    monkeypatch.setattr(native, "MODULES", ("demo_bad.broken",))
    ok, message = native.build()
    assert not ok and "demo_bad.broken" in message and native.fresh() == {}


def test_agents_launch_compiled_unless_the_environment_or_a_profile_says_not(monkeypatch):
    monkeypatch.delenv(native.ENV, raising=False)
    monkeypatch.delenv(native.PROFILE_ENV, raising=False)
    argv = native.agent_argv(["--config", "a.json"])
    assert argv[:2] == ["env", f"{native.ENV}=1"]
    assert argv[2:] == [sys.executable, "-m", "endpoints.host.agent", "--config", "a.json"]
    monkeypatch.setenv(native.ENV, "0")
    assert native.agent_argv([])[1] == f"{native.ENV}=0"
    assert native.describe() == f"python ({native.ENV}=0)"
    monkeypatch.setenv(native.ENV, "1")
    monkeypatch.setenv(native.PROFILE_ENV, "/tmp/prof")
    assert native.agent_argv([])[1] == f"{native.ENV}=0"  # cProfile sees Python functions only


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert native.main([]) == 2 and native.main(["build", "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["usage: python -m endpoints.native build [--force]"] * 2
