"""Plausible wrong answers, kept to prove each checker can tell right from almost right.

Each lab keeps its in `labs/NN-name/mutants.toml`: one `[[mutant]]` table per wrong answer, the
code a student might write in one TODO gap of the solution, and the mistake it stands for:

    [[mutant]]
    todo = 1
    name = "plane-not-plus-one"
    mistake = "the plane field holds the plane, not plane+1"
    code = '''
        return (plane << 12) | (role << 10) | index
    '''

A mutant is the reference solution with that one gap's code replaced (`labs.checker.gaps`);
`file` names the student file when a lab has several. CI (tests/unit/labs/test_mutants.py) runs
each lab's checker on every mutant, without the emulation: at least one check must fail, with a
hint or a line that names the mutant's TODO (`todos_named`). `python -m labs.checker mutants N`
shows which check catches each of lab N's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

from labs.checker import gaps
from labs.checker.core import Lab

_TODOS = re.compile(r"TODOs?\s+(\d+(?:\s*(?:,|-|and|TODO)\s*\d+)*)")


@dataclass(frozen=True)
class Mutant:
    todo: int  # the gap it replaces
    name: str  # short, unique within the lab
    mistake: str  # what a student got wrong, in words
    code: str  # the gap's code
    file: str  # the student file it changes

    def text(self, lab: Lab) -> str:
        """The student file: the solution's with this gap's code replaced."""
        solution = (lab.folder / "solution" / self.file).read_text()
        bodies = gaps.gaps(solution)
        if self.todo not in bodies:
            raise ValueError(f"mutant {self.name}: {self.file} has no TODO {self.todo}")
        return gaps.fill(solution, {**bodies, self.todo: self.code})

    def write(self, lab: Lab, folder: Path) -> Path:
        """The lab's student files in `folder`, the solution's but this mutant's one; `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        for name in lab.files:
            text = self.text(lab) if name == self.file else (lab.folder / "solution" / name).read_text()
            (folder / name).write_text(text)
        return folder


def load(lab: Lab) -> list[Mutant]:
    """Lab `lab`'s mutants, in the order its mutants.toml lists them (none without one)."""
    path = lab.folder / "mutants.toml"
    if not path.exists():
        return []
    out = []
    for entry in tomllib.loads(path.read_text())["mutant"]:
        code = entry["code"] if entry["code"].endswith("\n") else entry["code"] + "\n"
        out.append(Mutant(int(entry["todo"]), entry["name"], entry["mistake"], code,
                          entry.get("file", lab.files[0])))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: two mutants share a name")
    return out


def todos_named(text: str) -> set[int]:
    """The TODO numbers a hint names: "TODO 2", "TODOs 1, 3, 4", "TODOs 2-4", "TODO 2 and TODO 3"."""
    out: set[int] = set()
    for group in _TODOS.findall(text):
        for part in re.split(r"\s*(?:,|and|TODO)\s*", group):
            if "-" in part:
                low, high = (int(x) for x in part.split("-"))
                out.update(range(low, high + 1))
            elif part.strip():
                out.add(int(part))
    return out
