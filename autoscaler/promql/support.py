"""What the built-in evaluator supports, said before a rule ever runs.

The ``scrape`` source evaluates rules without Prometheus, so a rule that uses
PromQL outside the subset must be refused when the rules are loaded, naming each
construct, not fail (or worse, answer differently) at three in the morning. The
subset is PromQL 2.42's instant queries except native histograms: every function
and aggregation, subqueries, ``offset`` and ``@``, string literals where PromQL
takes them, and every binary operator with every matching modifier (the
``.test`` files of Prometheus 2.42 are its acceptance,
``tests/autoscaler/promql/test_conformance.py``). What is left to refuse is what
2.42 itself does not know, which the dialect check (``dialect.py``) reports as a
parse error, ``or`` between label matchers (3.x), regular expressions Python
cannot mean the same way, and a negative ``@`` time. Everything it evaluates agrees
with Prometheus 2.42 (Debian's), which the differential test checks against a
real server.

``required_retention`` tells the store how much history the rules need, and
``retention_by_name`` how much of each metric's.
"""

from __future__ import annotations

from datetime import timedelta

import promql_parser

from autoscaler.promql import instant_functions
from autoscaler.promql.aggregations import AGGREGATIONS
from autoscaler.promql.dialect import NegativeAtError, function_name, parse
from autoscaler.promql.matchers import RegexError, compile_go_regex, literal_alternatives
from autoscaler.promql.over_time import POINT_FUNCTIONS

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
        "absent_over_time",
    }
    | POINT_FUNCTIONS
)
INSTANT_FUNCTIONS = (
    frozenset(
        {
            "absent",
            "time",
            "pi",
            "vector",
            "scalar",
            "timestamp",
            "histogram_quantile",
        }
    )
    | instant_functions.NAMES
)
FUNCTIONS = RANGE_FUNCTIONS | INSTANT_FUNCTIONS
BINARY_OPERATORS = frozenset(
    {
        "+",
        "-",
        "*",
        "/",
        "%",
        "^",
        "atan2",
        "==",
        "!=",
        ">",
        "<",
        ">=",
        "<=",
        "and",
        "or",
        "unless",
    }
)
LOOKBACK_DELTA = 300.0
"""Prometheus's default ``--query.lookback-delta`` (5m), in seconds."""


def parse_error(expr: str) -> str | None:
    """The parser's message if ``expr`` is not valid PromQL, else None."""
    try:
        parse(expr)
    except NegativeAtError:
        return None
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
    except NegativeAtError as e:
        return [str(e)]
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
        if node.param is not None:
            _walk(node.param, out)
        _walk(node.expr, out)
    elif isinstance(node, promql_parser.Call):
        name = function_name(node.func.name)
        if name not in FUNCTIONS:
            out.append(f"function {name} is not supported by the built-in evaluator")
        for arg in node.args:
            _walk(arg, out)
    elif isinstance(node, promql_parser.SubqueryExpr):
        _walk(node.expr, out)
    elif isinstance(node, promql_parser.MatrixSelector):
        _walk(node.vector_selector, out)
    elif isinstance(node, promql_parser.VectorSelector):
        if node.matchers.or_matchers:
            out.append("'or' between label matchers is not supported")
        for m in node.matchers.matchers:
            if m.op in (promql_parser.MatchOp.Re, promql_parser.MatchOp.NotRe):
                if literal_alternatives(m.value) is not None:
                    continue  # plain strings: read as they are, nothing to compile
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
    elif not isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        out.append(f"{type(node).__name__} is not supported")


def required_retention(expr: str, lookback_delta: float = LOOKBACK_DELTA) -> float:
    """Seconds of history ``expr`` reads: its largest range plus offset (a
    subquery's range and offset added to those of what it contains), plus the
    lookback delta. Raises ValueError if ``expr`` does not parse."""
    return max(retention_by_name(expr, lookback_delta).values(), default=lookback_delta)


def retention_by_name(expr: str, lookback_delta: float = LOOKBACK_DELTA) -> dict[str, float]:
    """``required_retention`` for each metric name ``expr`` selects: seconds of
    that name's history it reads. A selector that names no single metric
    (``{__name__=~"a|b"}``, ``{job="x"}``) reads every name: its reach is under
    ``""``. An expression with no selector reads nothing but the lookback, under
    ``""`` too. Raises ValueError if ``expr`` does not parse."""
    out: dict[str, float] = {}
    stack: list[tuple[object, float]] = [(parse(expr), 0.0)]
    while stack:
        n, base = stack.pop()
        if isinstance(n, promql_parser.MatrixSelector):
            reach = _seconds(n.range) + _seconds(n.vector_selector.offset)
            _reach(out, n.vector_selector, base + reach + lookback_delta)
        elif isinstance(n, promql_parser.VectorSelector):
            _reach(out, n, base + _seconds(n.offset) + lookback_delta)
        elif isinstance(n, promql_parser.SubqueryExpr):
            stack.append((n.expr, base + _seconds(n.range) + _seconds(n.offset)))
        elif isinstance(n, promql_parser.AggregateExpr):
            stack.append((n.expr, base))
            if n.param is not None:
                stack.append((n.param, base))
        elif isinstance(n, promql_parser.Call):
            stack.extend((a, base) for a in n.args)
        elif isinstance(n, promql_parser.BinaryExpr):
            stack.extend(((n.lhs, base), (n.rhs, base)))
        elif isinstance(n, promql_parser.UnaryExpr | promql_parser.ParenExpr):
            stack.append((n.expr, base))
    return out or {"": lookback_delta}


def _reach(out: dict[str, float], selector: promql_parser.VectorSelector, seconds: float) -> None:
    """Records that ``selector`` reads ``seconds`` of its metric's history."""
    name = selector.name or next(
        (
            m.value
            for m in selector.matchers.matchers
            if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal
        ),
        "",
    )
    out[name] = max(out.get(name, 0.0), seconds)


def _seconds(d: timedelta | None) -> float:
    return 0.0 if d is None else d.total_seconds()
