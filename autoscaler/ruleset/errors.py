"""The one error that carries every problem found in rule files.

The loader never stops at the first mistake: an operator who fixes one line and
re-runs ``check`` only to meet the next is the habit we want to avoid (promtool
and the descheduler's validation both collect everything first). So a problem is
data, a position and a message (``accel_common.yamlread.Problem``, shared with
every other file format), and ``RuleSetError`` is raised once, at the end, with
every problem sorted by file, line and column.
"""

from __future__ import annotations

from accel_common.yamlread import Problem, ProblemsError, sorted_problems, whole_file


class RuleSetError(ProblemsError):
    """Rule files that cannot be loaded; ``problems`` lists every reason, and ``str()``
    is one ``file:line:col: message`` per line."""


__all__ = ["Problem", "RuleSetError", "sorted_problems", "whole_file"]
