"""Everything a command or a documented example writes goes under results/ (or the folder the
user names): nothing lands in the current folder, where `git status` would show it."""

from __future__ import annotations

import re
from pathlib import Path

from experiments.analysis import plots
from experiments.api import testbed
from topologies.model import build

ROOT = Path(__file__).resolve().parents[3]
WRITES = re.compile(r"""\.(?:plot|capture)\((?:"[^"]*",\s*)?["']([^"']+)["']""")


def test_documented_examples_write_under_results():
    found = []
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.py")]:
        for path in WRITES.findall(doc.read_text()):
            found.append(path)
            assert path.startswith("results/"), f"{doc.name} writes {path} outside results/"
    assert "results/api/session.png" in found


def test_a_plot_makes_its_folder(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "plot_session", lambda path, *a: drawn.append(path))

    class _Flow:
        number, transport, src, dst = 1, "tcp", "h0", "h1"

        def goodput(self):
            return {}

    bed = testbed.Testbed(build(planes=1, leaves=2, spines=1, hosts_per_leaf=1), tmp_path)
    bed.flows.append(_Flow())  # type: ignore[arg-type]
    out = tmp_path / "results" / "api" / "session.png"
    assert bed.plot(out) == out and drawn == [out] and out.parent.is_dir()
