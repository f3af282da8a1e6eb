"""Problems found in rule files, and the one error that carries all of them.

The loader never stops at the first mistake: an operator who fixes one line and
re-runs ``check`` only to meet the next is the habit we want to avoid (promtool
and the descheduler's validation both collect everything first). So a problem is
data, a position and a message, and ``RuleSetError`` is raised once, at the end,
with every problem sorted by file, line and column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.ruleset.model import Position


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a rule file. A position with line 0 means the file as a
    whole (missing, unreadable, a directory without rule files) and prints as
    ``file: message``."""

    position: Position
    message: str

    def __str__(self) -> str:
        if self.position.line <= 0:
            return f"{self.position.file}: {self.message}"
        return f"{self.position}: {self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        p = self.position
        return (p.file, p.line, p.col, self.message)


def whole_file(file: str) -> Position:
    """The position of a problem that is about a file, not a place in it."""
    return Position(file, 0, 0)


def sorted_problems(problems: Iterable[Problem]) -> list[Problem]:
    """Sorted by file, line, column; exact duplicates (an alias read twice) dropped."""
    return sorted(set(problems), key=Problem.sort_key)


class RuleSetError(ValueError):
    """Rule files that cannot be loaded; ``problems`` lists every reason, and ``str()``
    is one ``file:line:col: message`` per line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = sorted_problems(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


__all__ = ["Problem", "RuleSetError", "sorted_problems", "whole_file"]
