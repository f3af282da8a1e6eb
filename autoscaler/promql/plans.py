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

from autoscaler.promql.errors import ExprError
from autoscaler.promql.matchers import Matcher, MatchType


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Neg:
    expr: Plan


@dataclass(frozen=True)
class Select:
    matchers: tuple[Matcher, ...]
    offset: int
    key: str


@dataclass(frozen=True)
class RangeSelect:
    select: Select
    range: int


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


Plan = Num | Neg | Select | RangeSelect | Call | Aggregate | Binary


def _ms(d: timedelta | None) -> int:
    return 0 if d is None else d // timedelta(milliseconds=1)


def compile_plan(node: object) -> Plan:
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    if isinstance(node, promql_parser.NumberLiteral):
        return Num(float(node.val))
    if isinstance(node, promql_parser.UnaryExpr):
        return Neg(compile_plan(node.expr))
    if isinstance(node, promql_parser.VectorSelector):
        matchers = [Matcher.from_parser(m) for m in node.matchers.matchers]
        if node.name is not None:
            matchers.insert(0, Matcher.make("__name__", MatchType.EQ, node.name))
        return Select(tuple(matchers), _ms(node.offset), str(node))
    if isinstance(node, promql_parser.MatrixSelector):
        sel = compile_plan(node.vector_selector)
        assert isinstance(sel, Select)
        return RangeSelect(sel, _ms(node.range))
    if isinstance(node, promql_parser.Call):
        return Call(node.func.name, tuple(compile_plan(a) for a in node.args))
    if isinstance(node, promql_parser.AggregateExpr):
        return _compile_aggregate(node)
    if isinstance(node, promql_parser.BinaryExpr):
        return _compile_binary(node)
    raise ExprError(f"{type(node).__name__} is not supported")


def _compile_aggregate(node: promql_parser.AggregateExpr) -> Aggregate:
    mod = node.modifier
    without = mod is not None and mod.type == promql_parser.AggModifierType.Without
    labels = tuple(sorted(set(mod.labels))) if mod is not None else ()
    return Aggregate(str(node.op), compile_plan(node.expr), labels, without)


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
    "Binary",
    "Call",
    "Neg",
    "Num",
    "Plan",
    "RangeSelect",
    "Select",
    "compile_plan",
]
