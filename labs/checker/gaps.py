"""The TODO gaps of a student file: a gap opens with a comment line `# TODO N: what to do`
(continued on further comment lines) and closes with `# END TODO N`; the student writes between
them. The skeleton and the solution are the same file but for what lies inside the gaps, which
the drift test checks with `fill`.
"""

from __future__ import annotations

import re

_GAP = re.compile(
    r"(?P<head>^[ \t]*# TODO (?P<n>\d+):.*\n(?:[ \t]*#(?! END TODO).*\n)*)"
    r"(?P<body>(?:.*\n)*?)"
    r"(?P<tail>[ \t]*# END TODO (?P=n)[ \t]*\n)", re.M)


def gaps(text: str) -> dict[int, str]:
    """{N: the code inside gap N}."""
    out: dict[int, str] = {}
    for m in _GAP.finditer(text):
        n = int(m.group("n"))
        if n in out:
            raise ValueError(f"gap {n} appears twice")
        out[n] = m.group("body")
    return out


def fill(skeleton: str, bodies: dict[int, str]) -> str:
    """`skeleton` with gap N's code replaced by bodies[N] (the solution's, in the drift test)."""
    return _GAP.sub(lambda m: m.group("head") + bodies[int(m.group("n"))] + m.group("tail"), skeleton)
