"""README's commands as a newcomer types them: `mrclab` on the PATH from a fresh shell (what
`make setup` installs), and make's targets for scenarios and labs naming what was wrong. The
make targets run with `-o setup` (setup installs packages) and touch no emulation."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _readme_subcommands() -> set[str]:
    inline = re.findall(r"`(?:sudo )?mrclab ([a-z][a-z-]*)", README)
    blocks = re.findall(r"^ +(?:sudo )?mrclab ([a-z][a-z-]*)", README, re.M)
    return set(inline) | set(blocks)


def _fresh_shell(bindir: Path, command: str) -> subprocess.CompletedProcess:
    """`command` in a new sh with nothing inherited but a system PATH and the installed bin."""
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(bindir.parent)}
    return subprocess.run(["/bin/sh", "-c", f"cd / && {command}"], env=env, capture_output=True,
                          text=True, timeout=120)


def test_setup_puts_mrclab_on_the_path():
    assert "scripts/install-command.sh" in (ROOT / "scripts" / "setup.sh").read_text()
    assert "/usr/local/bin/mrclab" in README


def test_readmes_commands_run_from_a_fresh_shell(tmp_path):
    from experiments.cli import make_parser

    bindir = tmp_path / "bin"
    subprocess.run([str(ROOT / "scripts" / "install-command.sh"), str(bindir)], check=True)
    words = _readme_subcommands()
    known = set(make_parser().commands)
    assert words <= known, f"README names commands mrclab lacks: {sorted(words - known)}"
    assert {"demo", "run", "cli", "check-fabric", "clean"} <= words
    script = " && ".join(f"mrclab {w} --help >/dev/null" for w in ["", *sorted(words)])
    done = _fresh_shell(bindir, script + " && echo all-ok")
    assert done.returncode == 0 and done.stdout.strip() == "all-ok", done.stderr[-2000:]


def test_the_lab_banners_commands_parse():
    """`make lab` prints `mrclab cli ARGS` for the labs that use the fabric: ARGS must parse."""
    import ast

    from experiments.cli import make_parser

    parsed = 0
    for check in sorted((ROOT / "labs").glob("[0-9]*/check.py")):
        found = re.search(r"^ENVIRONMENT = (\(.*?\))$", check.read_text(), re.M | re.S)
        env = ast.literal_eval(found.group(1)) if found else ()
        if env and env[0] == "cli":
            make_parser().parse_args(list(env))
            parsed += 1
    assert parsed


def test_install_leaves_an_mrclab_it_did_not_write(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mrclab").write_text("#!/bin/sh\necho theirs\n")
    done = subprocess.run([str(ROOT / "scripts" / "install-command.sh"), str(bindir)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "left alone" in done.stderr
    assert (bindir / "mrclab").read_text() == "#!/bin/sh\necho theirs\n"


def _make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-s", "-o", "setup", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


def test_make_lab_without_n_says_so_and_lists_the_labs():
    for target in ("lab", "check-lab"):
        done = _make(target)
        assert done.returncode == 2
        assert f"make {target}: N is missing: make {target} N=NUMBER" in done.stderr
        assert "01-paths-usids" in done.stderr


def test_check_lab_passes_the_checkers_status_through_make():
    bad = _make("check-lab", "N=99")
    assert bad.returncode == 2 and "no lab '99'" in bad.stderr
    assert "the checker exited 2" in bad.stderr and "Error 2" in bad.stderr
    failing = _make("check-lab", "N=1", "ARGS=--no-emulation")  # the lab's files as handed out
    assert failing.returncode == 2, failing.stderr
    assert "the checker exited 1" in failing.stderr and "Error 1" in failing.stderr


def test_every_registry_scenario_has_its_make_target_and_a_typo_lists_them():
    from experiments.scenarios import SCENARIOS

    for name in SCENARIOS:
        dry = _make("-n", f"experiment-{name}")
        assert dry.returncode == 0 and f"experiments.cli run {name}" in dry.stdout, dry.stderr
    typo = _make("experiment-link-falure")
    assert typo.returncode == 2
    assert "invalid choice: 'link-falure'" in typo.stderr
    assert all(f"'{name}'" in typo.stderr for name in SCENARIOS)  # ecn-balance included


@pytest.mark.parametrize("seeds, expected", [(None, "-m experiments.sweep"),
                                             ("1 2 3", '-m experiments.sweep --seeds "1 2 3"')])
def test_make_experiment_runs_the_registrys_sweep(seeds, expected):
    dry = _make("-n", "experiment", *([f"SEEDS={seeds}"] if seeds else []))
    assert dry.returncode == 0 and expected in dry.stdout
    assert "experiments.cli report" in dry.stdout


@pytest.mark.parametrize("target,calibrates", [("lint", False), ("unit", False), ("docs", False),
                                               ("report", False), ("test", True), ("paper", True),
                                               ("demo", True), ("validate", True)])
def test_only_targets_that_run_emulations_calibrate_the_machine(target, calibrates):
    """A stale calibration is measured by `make setup`, which runs emulations: a target that runs
    none must not start one (`make lint` during a long `make paper` took the emulation from the
    paper's next run, which stopped it)."""
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    setup = [line for line in done.stdout.splitlines() if line.startswith("scripts/setup.sh")]
    assert setup == ["scripts/setup.sh" if calibrates else "scripts/setup.sh --no-calibration"]
