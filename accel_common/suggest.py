"""The one "did you mean" of this project.

Every reader of operator-written input (rule files, rule tests, scenarios, sim
scripts, the web config, action parameters) answers a misspelt key or value the
same way, so the hint is written once: the closest choice by ``difflib``'s ratio
(at least 0.6, its default), or, where asked, the list of what would be accepted.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str], *, or_list: bool = False) -> str:
    """``"; did you mean 'x'?"`` when a choice is close to ``word``. Otherwise
    ``""``, or with ``or_list`` ``"; expected one of a, b, c"`` (for messages that
    would not list the choices anyway)."""
    options = [str(c) for c in choices]
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    if or_list and options:
        return f"; expected one of {', '.join(options)}"
    return ""


__all__ = ["did_you_mean"]
