"""A figure's words, read back as it is saved: what the plots tests assert on."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def figure_texts(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """File name -> every text of the figure saved there (titles, labels, notes), one per line;
    the figure is still written."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    saved: dict[str, str] = {}
    original = Figure.savefig

    def savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
        saved[Path(str(fname)).name] = "\n".join(t.get_text() for t in self.findobj(Text))
        original(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved
