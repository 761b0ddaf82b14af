"""Docs that cannot drift: the examples in README.md and docs/*.md and in the product modules'
docstrings run as doctests; every generated block equals what `mrclab docs` makes of the
committed reference; docs/architecture.md gives every product file a job."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from experiments import docs_gen

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PRODUCT = ("topologies", "endpoints", "controller", "experiments")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _run(name: str, text: str) -> doctest.TestResults:
    test = doctest.DocTestParser().get_doctest(text, {}, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_document_examples_run(path):
    """`>>>` examples in fenced blocks, and in the prose itself, of one document, in order,
    sharing their names as a reader's session would."""
    text = path.read_text()
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    examples = "\n\n".join(blocks + [prose])
    result = _run(path.name, examples)
    assert result.failed == 0


def _modules_with_examples() -> list[str]:
    out = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ">>> " in path.read_text():
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                out.append(module.removesuffix(".__init__"))
    return out


@pytest.mark.parametrize("module", _modules_with_examples())
def test_module_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("path", docs_gen.DOCUMENTS, ids=lambda p: p.name)
def test_generated_blocks_match_the_committed_sources(path):
    """Run `mrclab docs` after changing experiments/reference/full.json or config.py."""
    text = path.read_text()
    assert "<!-- generated:" in text
    assert docs_gen.render(text, docs_gen.load_reference()) == text


def test_architecture_gives_every_product_file_a_job():
    listed = re.findall(r"^\| `([^`]+)` \| ", (ROOT / "docs" / "architecture.md").read_text(), re.M)
    files = {p.relative_to(ROOT).as_posix() for top in PRODUCT for p in (ROOT / top).rglob("*")
             if p.is_file() and p.suffix in (".py", ".c", ".json", ".lua") and p.name != "__init__.py"
             and "__pycache__" not in p.parts}
    assert sorted(listed) == sorted(set(listed)), "a file is listed twice"
    assert set(listed) == files
