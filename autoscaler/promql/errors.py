"""The built-in evaluator's errors, in a module of their own so that the plan
compiler, the vector operations and every caller share them without importing
the evaluator.
"""

from __future__ import annotations


class EvalError(Exception):
    """An error Prometheus also raises while evaluating (not a syntax error)."""


class ExprError(ValueError):
    """An expression that does not parse or lies outside the supported subset."""


class UnsupportedError(ExprError):
    """A valid expression that uses what the built-in evaluator does not support."""


__all__ = ["EvalError", "ExprError", "UnsupportedError"]
