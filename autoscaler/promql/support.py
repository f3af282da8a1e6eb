"""What the built-in evaluator supports, said before a rule ever runs.

The ``scrape`` source evaluates rules without Prometheus, so a rule that uses
PromQL outside the subset must be refused when the rules are loaded, naming each
construct, not fail (or worse, answer differently) at three in the morning. The
subset is what remediation rules need: selectors with all four matcher kinds and
``offset``; the range functions over counters and gauges; ``abs``, ``clamp*``,
``absent`` and ``time``; ``sum``/``avg``/``min``/``max``/``count`` with ``by`` or
``without``; arithmetic, comparisons (with ``bool``) and ``and``/``or``/``unless``
with every matching modifier. Everything in it agrees with Prometheus 2.42
(Debian's), which the differential test checks against a real server.

``required_retention`` tells the store how much history the rules need.
"""

from __future__ import annotations

from datetime import timedelta

import promql_parser

from autoscaler.promql.guard import parse
from autoscaler.promql.matchers import RegexError, compile_go_regex

RANGE_FUNCTIONS = frozenset(
    {
        "rate",
        "increase",
        "delta",
        "changes",
        "resets",
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "sum_over_time",
        "count_over_time",
        "last_over_time",
    }
)
INSTANT_FUNCTIONS = frozenset({"absent", "time", "clamp", "clamp_min", "clamp_max", "abs"})
FUNCTIONS = RANGE_FUNCTIONS | INSTANT_FUNCTIONS
AGGREGATIONS = frozenset({"sum", "avg", "min", "max", "count"})
BINARY_OPERATORS = frozenset(
    {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"}
)
LOOKBACK_DELTA = 300.0
"""Prometheus's default ``--query.lookback-delta`` (5m), in seconds."""


def parse_error(expr: str) -> str | None:
    """The parser's message if ``expr`` is not valid PromQL, else None."""
    try:
        parse(expr)
    except (ValueError, TypeError) as e:
        return str(e) or "invalid expression"
    return None


def unsupported(expr: str) -> list[str]:
    """One message per construct outside the supported subset; empty if none.

    An expression that does not parse is not in the subset either: the result is
    then the parse error, prefixed ``parse error: ``.
    """
    try:
        node = parse(expr)
    except (ValueError, TypeError) as e:
        return [f"parse error: {e}"]
    return unsupported_in(node)


def unsupported_in(node: promql_parser.Expr) -> list[str]:
    """``unsupported`` for an already parsed expression."""
    out: list[str] = []
    _walk(node, out)
    return list(dict.fromkeys(out))


def _walk(node: object, out: list[str]) -> None:
    if isinstance(node, promql_parser.AggregateExpr):
        op = str(node.op)
        if op not in AGGREGATIONS:
            out.append(f"{op} is not supported")
        _walk(node.expr, out)
    elif isinstance(node, promql_parser.Call):
        name = node.func.name
        if name not in FUNCTIONS:
            out.append(f"function {name} is not supported by the built-in evaluator")
        for arg in node.args:
            if not isinstance(arg, promql_parser.StringLiteral) or name in FUNCTIONS:
                _walk(arg, out)
    elif isinstance(node, promql_parser.SubqueryExpr):
        out.append("subqueries are not supported")
        _walk(node.expr, out)
    elif isinstance(node, promql_parser.MatrixSelector):
        _walk(node.vector_selector, out)
    elif isinstance(node, promql_parser.VectorSelector):
        if node.at is not None:
            out.append("@ modifier is not supported")
        if node.matchers.or_matchers:
            out.append("'or' between label matchers is not supported")
        for m in node.matchers.matchers:
            if m.op in (promql_parser.MatchOp.Re, promql_parser.MatchOp.NotRe):
                try:
                    compile_go_regex(m.value)
                except RegexError as e:
                    out.append(str(e))
    elif isinstance(node, promql_parser.BinaryExpr):
        op = str(node.op)
        if op not in BINARY_OPERATORS:
            out.append(f"operator {op} is not supported")
        mod = node.modifier
        if mod is not None and (mod.fill_values.lhs is not None or mod.fill_values.rhs is not None):
            out.append("fill modifiers are not supported")
        _walk(node.lhs, out)
        _walk(node.rhs, out)
    elif isinstance(node, promql_parser.UnaryExpr | promql_parser.ParenExpr):
        _walk(node.expr, out)
    elif isinstance(node, promql_parser.StringLiteral):
        out.append("string literals are not supported")
    elif not isinstance(node, promql_parser.NumberLiteral):
        out.append(f"{type(node).__name__} is not supported")


def required_retention(expr: str, lookback_delta: float = LOOKBACK_DELTA) -> float:
    """Seconds of history ``expr`` reads: its largest range plus offset, plus the
    lookback delta. Raises ValueError if ``expr`` does not parse."""
    node = parse(expr)
    longest = 0.0
    stack: list[object] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, promql_parser.MatrixSelector):
            reach = _seconds(n.range) + _seconds(n.vector_selector.offset)
            longest = max(longest, reach)
        elif isinstance(n, promql_parser.VectorSelector):
            longest = max(longest, _seconds(n.offset))
        elif isinstance(n, promql_parser.SubqueryExpr):
            longest = max(longest, _seconds(n.range) + _seconds(n.offset))
            stack.append(n.expr)
        elif isinstance(n, promql_parser.AggregateExpr):
            stack.append(n.expr)
        elif isinstance(n, promql_parser.Call):
            stack.extend(n.args)
        elif isinstance(n, promql_parser.BinaryExpr):
            stack.extend((n.lhs, n.rhs))
        elif isinstance(n, promql_parser.UnaryExpr | promql_parser.ParenExpr):
            stack.append(n.expr)
    return longest + lookback_delta


def _seconds(d: timedelta | None) -> float:
    return 0.0 if d is None else d.total_seconds()
