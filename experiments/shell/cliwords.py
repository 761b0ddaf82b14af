"""What the `mrclab` command says (experiments/cli.py parses and dispatches): every option's
default in `--help`, each scenario's defaults from the registry, a pointer to the right `--help`
(and the nearest option) on a mistake, probabilities read as the console reads them, and
`mrclab clean`'s summary in words.
"""

from __future__ import annotations

import argparse
import difflib
from typing import NoReturn


class CliError(Exception):
    """A user error detected by the CLI itself."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """`--help` shows every option's default; an option whose default is None (the scenario's
    own applies) or a flag says so in its own words instead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class ArgParser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other user error
        raise CliError(f"{message} (see `mrclab {self.prog.split()[-1]} --help`)"
                       if " " in self.prog else f"{message} (see `mrclab --help`)")

    def parse_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - argparse's
        """An option the command does not take names the command's `--help`, and the closest
        option it does take."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(ns, "command", None) or "")
            if command is None:
                self.error(f"unrecognized arguments: {' '.join(extra)}")
            known = [o for a in command._actions for o in a.option_strings]
            near = difflib.get_close_matches(extra[0].split("=")[0], known, n=1, cutoff=0.75)
            hint = f"; did you mean {near[0]}?" if near and extra[0].startswith("-") else ""
            raise CliError(f"unrecognized arguments: {' '.join(extra)}{hint} (see `{command.prog} "
                           f"--help` for the options it takes)")
        return ns


def probability(text: str) -> float:
    """`--loss`: 0.2 or 20%, read as the console's `loss LINK P` reads it (one parser)."""
    from experiments.shell.text import Usage, parse_probability

    try:
        return parse_probability(text)
    except Usage as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def scenario_defaults(scenarios: dict) -> str:
    """`mrclab run --help`'s epilog: each scenario's defaults, from the registry."""
    lines = ["defaults per scenario (planes x leaves x spines x hosts per leaf, link rate, seconds "
             "per transport, fault window):"]
    for name, sc in scenarios.items():
        p = sc.fabric
        when = "" if sc.fault_at is None else \
            f", fault at {sc.fault_at:g} s" + ("" if sc.fault_end is None else f" to {sc.fault_end:g} s")
        length = f", {sc.duration:g} s" if sc.kind.timed else ""
        lines.append(f"  {name}: {p.planes}x{p.leaves}x{p.spines}x{p.hosts_per_leaf}, "
                     f"{p.link_mbps:g} Mbit/s{length}{when}")
    return "\n".join(lines)


def clean_text(removed: dict[str, int], left: dict[str, list]) -> str:
    """What `mrclab clean` did, in words: what it removed, what is still there and why."""
    done = [f"{n} {kind.replace('_', ' ')}" for kind, n in removed.items() if n]
    lines = ["removed: " + ", ".join(done) if done else "nothing to remove: no run left anything behind"]
    for kind, items in left.items():
        shown = ", ".join(str(i) for i in items[:5]) + \
            (f" and {len(items) - 5} more" if len(items) > 5 else "")
        lines.append(f"still there: {kind.replace('_', ' ')}: {shown}")
    if "lock" in left:
        lines.append("a live run holds the lock: let it finish (or stop it), then run `mrclab clean` again")
    elif left:
        lines.append("could not remove everything: see the items above (`mrclab clean --json` lists them)")
    return "\n".join(lines)
