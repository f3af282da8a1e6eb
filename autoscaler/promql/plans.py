"""PromQL expressions compiled into small plan nodes for the built-in evaluator.

Why a module of its own: an expression is parsed (``promql-parser``) and checked
against the subset once, then evaluated every cycle; the evaluator walks these
frozen nodes, not the parser's objects, and the binary operators read their
matching modifiers (``on``/``ignoring``, ``group_left``/``group_right``, ``bool``)
from ``Binary`` already normalised.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import promql_parser

from autoscaler.promql.dialect import function_name
from autoscaler.promql.errors import ExprError
from autoscaler.promql.matchers import Matcher, MatchType


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Neg:
    expr: Plan


@dataclass(frozen=True)
class Str:
    value: str


@dataclass(frozen=True)
class At:
    """An ``@`` modifier: a fixed time in milliseconds, or the query's
    ``start()``/``end()`` (both the evaluation time of an instant query)."""

    ms: int | None
    edge: str | None = None


@dataclass(frozen=True)
class Select:
    matchers: tuple[Matcher, ...]
    offset: int
    key: str
    at: At | None = None


@dataclass(frozen=True)
class RangeSelect:
    select: Select
    range: int


@dataclass(frozen=True)
class Subquery:
    expr: Plan
    range: int
    step: int | None
    offset: int
    at: At | None


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Plan, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    expr: Plan
    labels: tuple[str, ...]
    without: bool
    param: Plan | None = None


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: Plan
    rhs: Plan
    return_bool: bool
    card: str
    on: bool
    labels: tuple[str, ...]
    include: tuple[str, ...]


Plan = Num | Str | Neg | Select | RangeSelect | Subquery | Call | Aggregate | Binary


def _ms(d: timedelta | None) -> int:
    return 0 if d is None else d // timedelta(milliseconds=1)


def _at(node: promql_parser.AtModifier | None) -> At | None:
    if node is None:
        return None
    if node.type == promql_parser.AtModifierType.Start:
        return At(None, "start")
    if node.type == promql_parser.AtModifierType.End:
        return At(None, "end")
    # The library's own time attribute panics before 1970 (the dialect check
    # refuses negative @ times); its text has the seconds to the millisecond.
    text = str(node).removeprefix("@").strip()
    return At(round(float(text) * 1000))


def compile_plan(node: object) -> Plan:
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    if isinstance(node, promql_parser.NumberLiteral):
        return Num(float(node.val))
    if isinstance(node, promql_parser.StringLiteral):
        return Str(str(node.val))
    if isinstance(node, promql_parser.SubqueryExpr):
        step = None if node.step is None else _ms(node.step)
        return Subquery(
            compile_plan(node.expr), _ms(node.range), step, _ms(node.offset), _at(node.at)
        )
    if isinstance(node, promql_parser.UnaryExpr):
        return Neg(compile_plan(node.expr))
    if isinstance(node, promql_parser.VectorSelector):
        matchers = [Matcher.from_parser(m) for m in node.matchers.matchers]
        if node.name is not None:
            matchers.insert(0, Matcher.make("__name__", MatchType.EQ, node.name))
        at = _at(node.at)
        return Select(tuple(matchers), _ms(node.offset), f"{node}|{at}", at)
    if isinstance(node, promql_parser.MatrixSelector):
        sel = compile_plan(node.vector_selector)
        assert isinstance(sel, Select)
        return RangeSelect(sel, _ms(node.range))
    if isinstance(node, promql_parser.Call):
        name = function_name(node.func.name)
        return Call(name, tuple(compile_plan(a) for a in node.args))
    if isinstance(node, promql_parser.AggregateExpr):
        return _compile_aggregate(node)
    if isinstance(node, promql_parser.BinaryExpr):
        return _compile_binary(node)
    raise ExprError(f"{type(node).__name__} is not supported")


def _compile_aggregate(node: promql_parser.AggregateExpr) -> Aggregate:
    mod = node.modifier
    without = mod is not None and mod.type == promql_parser.AggModifierType.Without
    labels = tuple(sorted(set(mod.labels))) if mod is not None else ()
    param = None if node.param is None else compile_plan(node.param)
    return Aggregate(str(node.op), compile_plan(node.expr), labels, without, param)


def _compile_binary(node: promql_parser.BinaryExpr) -> Binary:
    mod = node.modifier
    card = "one-to-one"
    on = False
    labels: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    return_bool = False
    if mod is not None:
        return_bool = mod.return_bool
        if mod.card == promql_parser.VectorMatchCardinality.ManyToOne:
            card = "many-to-one"
        elif mod.card == promql_parser.VectorMatchCardinality.OneToMany:
            card = "one-to-many"
        elif mod.card == promql_parser.VectorMatchCardinality.ManyToMany:
            card = "many-to-many"
        if mod.matching is not None:
            on = mod.matching.type == promql_parser.LabelModifierType.Include
            labels = tuple(mod.matching.labels)
        if card in ("many-to-one", "one-to-many"):
            include = tuple(mod.group_labels or ())
    return Binary(
        str(node.op),
        compile_plan(node.lhs),
        compile_plan(node.rhs),
        return_bool,
        card,
        on,
        labels,
        include,
    )


__all__ = [
    "Aggregate",
    "At",
    "Binary",
    "Call",
    "Neg",
    "Num",
    "Plan",
    "RangeSelect",
    "Select",
    "Str",
    "Subquery",
    "compile_plan",
]
