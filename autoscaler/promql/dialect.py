"""PromQL 2.42's grammar where the parser library speaks a later one.

Why it exists: ``promql-parser`` follows Prometheus 3.x, and a rule must mean
what it means in Prometheus 2.42 (the version the differential test runs). Three
differences are settled here, on the expression's text before it is parsed
(through ``guard.parse``, the only way to the library):

* a bare number as a range or subquery step (``x[600]``) is a syntax error in
  2.42, which wants a unit;
* ``holt_winters`` is 2.42's name for what 3.x calls
  ``double_exponential_smoothing`` (so the text is parsed with the new name and
  the plan calls it ``holt_winters``), and the functions and aggregations added
  after 2.42 are unknown to it;
* a negative ``@`` time, which the library cannot hand back (it reads it as 0),
  is refused rather than answered wrongly.

String literals and comments are skipped, so a label value may say anything.
"""

from __future__ import annotations

import re

import promql_parser

from autoscaler.promql.guard import parse as guarded_parse

RENAMED = {"holt_winters": "double_exponential_smoothing"}
"""2.42's function names that the library knows by a later name."""

AFTER_2_42 = frozenset(
    {
        "double_exponential_smoothing",
        "info",
        "sort_by_label",
        "sort_by_label_desc",
        "mad_over_time",
        "limitk",
        "limit_ratio",
        "first_over_time",
        "ts_of_max_over_time",
        "ts_of_min_over_time",
        "ts_of_last_over_time",
        "ts_of_first_over_time",
    }
)
"""Functions and aggregations the library parses that 2.42 does not know."""

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<comment>\#[^\n]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<range>\[[^\]\[]*\])
  | (?P<at>@\s*-)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_BARE_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


class NegativeAtError(ValueError):
    """A negative ``@`` time, valid PromQL the evaluator does not take."""


def rewrite(expr: str) -> str:
    """``expr`` in the library's spelling; raises ValueError where 2.42 would
    not parse it, and ``NegativeAtError`` for a negative ``@`` time."""
    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(expr):
        kind = m.lastgroup
        text = m.group(0)
        if kind == "ident":
            rest = expr[m.end() :].lstrip()
            called = rest.startswith("(") or rest.startswith("by") or rest.startswith("without")
            if called and text in AFTER_2_42:
                raise ValueError(f"unknown function with name {text!r} (not in PromQL 2.42)")
            if called and text in RENAMED:
                out.append(expr[pos : m.start()] + RENAMED[text])
                pos = m.end()
        elif kind == "range":
            for part in text[1:-1].split(":"):
                if part.strip() and _BARE_NUMBER.match(part):
                    raise ValueError(
                        f"bad duration {part.strip()!r} in {text}: PromQL 2.42 wants a unit, "
                        f"e.g. {part.strip()}s"
                    )
        elif kind == "at":
            raise NegativeAtError("a negative @ time is not supported by the built-in evaluator")
    out.append(expr[pos:])
    return "".join(out)


def parse(expr: str) -> promql_parser.Expr:
    """``expr`` parsed as PromQL 2.42; raises ValueError (or TypeError, from the
    library) where it is not."""
    return guarded_parse(rewrite(expr))


def function_name(name: str) -> str:
    """A parsed function's 2.42 name."""
    for old, new in RENAMED.items():
        if name == new:
            return old
    return name


__all__ = ["AFTER_2_42", "RENAMED", "NegativeAtError", "function_name", "parse", "rewrite"]
