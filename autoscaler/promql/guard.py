"""The only door to the PromQL parser library: limits checked before it is called.

``promql_parser`` is a native extension whose parser recurses once per nesting
level and once per binary operator. Fed a 20 KB expression nested 12,000 deep or
a sum of 8,000 terms, it overflows its stack and kills the whole process
(SIGSEGV/SIGABRT) -- no Python exception, nothing to catch. A controller that
hot-reloads such a rule file would die, and die again on every start. So every
expression is measured here, lexically and without recursion, before the parser
sees it, and what would reach the parser's limits is refused with a message that
says which limit and by how much.

The limits are far above what a rule needs (the shipped rules nest at most 4
deep and use at most 6 operators) and low enough that the trees the parser
returns are walked by this package's recursive compilers without reaching
Python's recursion limit either.

A Rust panic inside the library surfaces as ``pyo3_runtime.PanicException``,
which derives from ``BaseException``; it is turned into the same ``ExprError``
as any parse error, so that no caller needs to know.
"""

from __future__ import annotations

import re

import promql_parser

from autoscaler.promql.errors import ExprError

MAX_LENGTH = 16_384
"""Characters in one expression."""
MAX_DEPTH = 64
"""Brackets of any kind open at once: parentheses, braces and ranges."""
MAX_OPERATORS = 256
"""Binary and unary operators, counted lexically outside braces and ranges."""

_OPENERS = {"(": ")", "{": "}", "[": "]"}
# The rest of a string literal after its opening quote, up to its closing one.
_STRING_REST = {
    '"': re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL),
    "'": re.compile(r"(?:[^'\\]|\\.)*'", re.DOTALL),
    "`": re.compile(r"[^`]*`"),
}
_SYMBOL_OPERATORS = ("==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "^", ">", "<")
_WORD_OPERATORS = frozenset({"and", "or", "unless", "atan2"})


def _word_end(expr: str, i: int) -> int:
    n = len(expr)
    while i < n and (expr[i].isalnum() or expr[i] in "_:"):
        i += 1
    return i


def limits_problem(expr: str) -> str | None:
    """Why ``expr`` must not reach the parser, or None when it may.

    One pass, no recursion: string literals and comments are skipped, brackets
    are counted for depth, and operators are counted outside ``{...}`` and
    ``[...]`` (where ``=``, ``!=`` and ``-`` are part of matchers and durations).
    A sign inside a number such as ``1e-5`` counts too; that only makes the count
    an upper bound.
    """
    if len(expr) > MAX_LENGTH:
        return (
            f"the expression is {len(expr)} characters long; at most {MAX_LENGTH} are "
            "allowed (split it into recording rules)"
        )
    depth = deepest = operators = 0
    inner = 0  # how many of the open brackets are braces or ranges
    stack: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            # A string literal: skip to its unescaped end (an unterminated one is
            # the parser's to report).
            close = _STRING_REST[c].match(expr, i + 1)
            i = close.end() if close else n
            continue
        if c == "#":
            while i < n and expr[i] != "\n":
                i += 1
            continue
        if c in _OPENERS:
            stack.append(_OPENERS[c])
            depth += 1
            inner += c != "("
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return (
                        f"the expression nests more than {MAX_DEPTH} brackets deep "
                        f"(at character {i + 1}); at most {MAX_DEPTH} are allowed"
                    )
            i += 1
            continue
        if c in ")}]":
            if stack and stack[-1] == c:
                stack.pop()
                depth -= 1
                inner -= c != ")"
            i += 1
            continue
        if inner:
            i += 1
            continue
        if c.isalpha() or c == "_":
            end = _word_end(expr, i)
            if expr[i:end] in _WORD_OPERATORS:
                operators += 1
            i = end
        else:
            for op in _SYMBOL_OPERATORS:
                if expr.startswith(op, i):
                    operators += 1
                    i += len(op)
                    break
            else:
                i += 1
                continue
        if operators > MAX_OPERATORS:
            return (
                f"the expression has more than {MAX_OPERATORS} operators (at character "
                f"{i}); at most {MAX_OPERATORS} are allowed (split it into recording rules)"
            )
    return None


def parse(expr: str) -> promql_parser.Expr:
    """``promql_parser.parse`` behind the limits above.

    Raises ExprError (a ValueError) for an expression over a limit, for a syntax
    error, and for a panic inside the library.
    """
    problem = limits_problem(expr)
    if problem is not None:
        raise ExprError(problem)
    try:
        return promql_parser.parse(expr)
    except (ValueError, TypeError) as e:
        raise ExprError(str(e) or "invalid expression") from None
    except BaseException as e:
        # pyo3 raises a Rust panic as PanicException(BaseException); never let
        # it look like KeyboardInterrupt or SystemExit to the callers.
        if type(e).__name__ != "PanicException":
            raise
        raise ExprError(f"the PromQL parser failed on this expression: {e}") from None


__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_OPERATORS", "limits_problem", "parse"]


def vector_selectors(ast: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    """Every vector selector in a parsed expression, those under a range included.
    An explicit stack, not the library's ``walk``: that takes seconds on a chain of
    a few hundred ``and``."""
    pp = promql_parser
    found: list[pp.VectorSelector] = []
    stack: list[object] = [ast]
    while stack:
        e = stack.pop()
        if isinstance(e, pp.VectorSelector):
            found.append(e)
        elif isinstance(e, pp.MatrixSelector):
            stack.append(e.vector_selector)
        elif isinstance(e, pp.BinaryExpr):
            stack += (e.lhs, e.rhs)
        elif isinstance(e, pp.AggregateExpr):
            stack += (e.expr,) if e.param is None else (e.expr, e.param)
        elif isinstance(e, pp.Call):
            stack += e.args
        elif isinstance(e, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
            stack.append(e.expr)
    return found
