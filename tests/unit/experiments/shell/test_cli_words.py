"""What the `mrclab` command says before anything starts (no root): the same default fabric
for demo, cli and check-fabric as README's, every default in `--help`, a mistake pointing at
the right `--help`, `--loss 20%` read as the console reads it, `mrclab clean` in words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments import cli
from experiments.scenarios.base import DEFAULT_FABRIC
from experiments.shell.cliwords import CliError, clean_text
from topologies.model import FabricParams

README = Path(__file__).resolve().parents[4] / "README.md"


def _fabric(argv: list[str]) -> FabricParams:
    return cli._params(cli.make_parser().parse_args(argv))


@pytest.mark.parametrize("command", ["demo", "cli", "check-fabric"])
def test_every_command_that_starts_a_fabric_starts_the_same_default_one(command):
    assert _fabric([command]) == DEFAULT_FABRIC


def test_readme_names_that_default_fabric():
    text = " ".join(README.read_text().split())
    m = re.search(r"Default fabric: \*\*(\d+) planes x (\d+) leaves \(T0\) x (\d+) spines \(T1\) per "
                  r"plane, (\d+) hosts? per leaf, (\d+) Mbit/s links", text)
    assert m, "README lost its default-fabric sentence"
    p = DEFAULT_FABRIC
    assert tuple(int(x) for x in m.groups()) == (p.planes, p.leaves, p.spines, p.hosts_per_leaf,
                                                 int(p.link_mbps))


@pytest.mark.parametrize("command", ["demo", "cli", "check-fabric"])
def test_help_shows_every_default(command, capsys):
    with pytest.raises(SystemExit):
        cli.make_parser().parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    p = DEFAULT_FABRIC
    for flag, value in (("--planes", p.planes), ("--spines", p.spines), ("--leaves", p.leaves),
                        ("--hosts-per-leaf", p.hosts_per_leaf), ("--link-mbps", p.link_mbps)):
        assert re.search(rf"{flag} \S+ [^-]*\(default: {value}\)", text), (flag, text)
    assert "(default: 1)" in text  # --seed
    assert "(default: None)" not in text


def test_run_help_lists_every_scenarios_defaults(capsys):
    from experiments.scenarios import SCENARIOS

    with pytest.raises(SystemExit):
        cli.make_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    for name, sc in SCENARIOS.items():
        p = sc.fabric
        assert f"  {name}: {p.planes}x{p.leaves}x{p.spines}x{p.hosts_per_leaf}, {p.link_mbps:g} Mbit/s" in out
    assert "(default: None)" not in out


def test_an_unknown_option_points_at_the_commands_help(capsys):
    assert cli.main(["demo", "--rate", "10"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --rate 10" in err and "`mrclab demo --help`" in err
    assert cli.main(["demo", "--link-mpbs", "10"]) == 2
    assert "did you mean --link-mbps?" in capsys.readouterr().err
    with pytest.raises(CliError, match=r"see `mrclab run --help`"):
        cli.make_parser().parse_args(["run", "lossy-link", "--lossy", "0.1"])


def test_loss_takes_a_percentage_as_the_console_does():
    from experiments.shell.text import parse_probability

    for text in ("20%", "0.2", "5%"):
        args = cli.make_parser().parse_args(["run", "lossy-link", "--loss", text])
        assert cli.run_options(args).loss == pytest.approx(parse_probability(text))
    with pytest.raises(CliError, match="bad probability '120%'"):
        cli.make_parser().parse_args(["run", "lossy-link", "--loss", "120%"])


def test_clean_says_what_it_did_in_words():
    assert clean_text({"processes": 0, "veths": 0}, {}) == \
        "nothing to remove: no run left anything behind"
    text = clean_text({"processes": 3, "ovs_instances": 2, "veths": 0}, {})
    assert text == "removed: 3 processes, 2 ovs instances"
    text = clean_text({}, {"lock": ["/run/mrclab/lock"]})
    assert "still there: lock: /run/mrclab/lock" in text and "a live run holds the lock" in text
    assert "{" not in text
    args = cli.make_parser().parse_args(["clean", "--json"])
    assert args.json


def test_run_takes_transport_parameters_as_the_console_does():
    args = cli.make_parser().parse_args(["run", "ev-loss", "--link-mbps", "10", "--param",
                                         "active_fraction=0.5", "--param", "backup_min_paths=2"])
    opts = cli.run_options(args)
    assert opts.params == (("active_fraction", 0.5), ("backup_min_paths", 2))
    assert (opts.transport().active_fraction, opts.transport().backup_min_paths) == (0.5, 2)
    bad = cli.make_parser().parse_args(["run", "ev-loss", "--link-mbps", "10",
                                        "--param", "backup_min_paths=two"])
    with pytest.raises(CliError, match="--param 'backup_min_paths=two': backup_min_paths takes a whole"):
        cli.run_options(bad)
