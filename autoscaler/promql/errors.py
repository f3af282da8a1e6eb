"""The built-in evaluator's errors, in a module of their own so that the plan
compiler, the vector operations and every caller share them without importing
the evaluator.
"""

from __future__ import annotations


class EvalError(Exception):
    """An error Prometheus also raises while evaluating (not a syntax error)."""


class HistoryNotKept(EvalError):
    """A read that reaches before the samples its family still keeps: the window
    would be answered from part of itself. The store keeps what the expressions it
    was told of need (``SeriesStore.kept_by_name``); an expression it was not told
    of is answered *unknown* rather than from a trimmed window."""


class ExprError(ValueError):
    """An expression that does not parse or lies outside the supported subset."""


class UnsupportedError(ExprError):
    """A valid expression that uses what the built-in evaluator does not support."""


__all__ = ["EvalError", "ExprError", "HistoryNotKept", "UnsupportedError"]
