"""Which labels a PromQL expression can produce, worked out from its syntax tree.

A rule names its target by labels of the samples its expression returns (``node``;
``node`` and ``device``; ``namespace`` and ``pod``; ``pool``). ``sum by (pool)``
under a rule whose target is ``node`` can never name a node, and the rule would
sit silent forever; the loader says so instead. This module does that reasoning.

It is deliberately conservative. A selector's labels are unknown here: the node
label, ``instance``, ``job`` and whatever relabeling adds arrive at scrape time,
so the catalogue of exporter labels is a floor, not a ceiling. What *is* known is
what PromQL removes: ``by``/``without``, ``on`` in one-to-one matching, the
``le`` of ``histogram_quantile``, and scalars that carry no labels at all. So the
analysis computes an upper bound, either a finite set ("at most these labels") or
a co-finite one ("anything but these"), and a problem is reported only when a
label is definitely outside it.

Semantics follow Prometheus (``promql/engine.go``: ``resultMetric`` keeps only the
``on`` labels in one-to-one matching, even for a filtering comparison; ``group_x``
adds the included labels from the "one" side; ``and``/``unless`` return the left
side; ``or`` either side).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import promql_parser as pp

ValueKind = Literal["scalar", "vector", "matrix", "string"]

# Aggregations that return their input samples (or a subset), labels untouched.
_KEEP_LABELS_AGGREGATIONS = frozenset({"topk", "bottomk", "limitk", "limit_ratio"})


def _kind(t: pp.ValueType) -> ValueKind:
    # The binding's enums have no ``name``; compare members.
    if t == pp.ValueType.Scalar:
        return "scalar"
    if t == pp.ValueType.Matrix:
        return "matrix"
    if t == pp.ValueType.String:
        return "string"
    return "vector"


@dataclass(frozen=True)
class _Bound:
    """An upper bound on a result's label names. ``complement`` False: the labels
    are among ``names``. True: they may be anything except ``names``."""

    names: frozenset[str]
    complement: bool

    def may_have(self, label: str) -> bool:
        return (label in self.names) != self.complement

    def union(self, other: _Bound) -> _Bound:
        if not self.complement and not other.complement:
            return _Bound(self.names | other.names, False)
        if self.complement and other.complement:
            return _Bound(self.names & other.names, True)
        finite, co = (self, other) if not self.complement else (other, self)
        return _Bound(co.names - finite.names, True)

    def keep(self, labels: Iterable[str]) -> _Bound:
        kept = frozenset(labels)
        if self.complement:
            return _Bound(kept - self.names, False)
        return _Bound(self.names & kept, False)

    def drop(self, labels: Iterable[str]) -> _Bound:
        dropped = frozenset(labels)
        if self.complement:
            return _Bound(self.names | dropped, True)
        return _Bound(self.names - dropped, False)


_ANY = _Bound(frozenset(), True)
_NONE = _Bound(frozenset(), False)


def value_type(expr: pp.Expr) -> ValueKind:
    """The PromQL type of an expression's result. A rule needs a vector: each
    sample names one target."""
    if isinstance(expr, pp.NumberLiteral):
        return "scalar"
    if isinstance(expr, pp.StringLiteral):
        return "string"
    if isinstance(expr, (pp.MatrixSelector, pp.SubqueryExpr)):
        return "matrix"
    if isinstance(expr, (pp.ParenExpr, pp.UnaryExpr)):
        return value_type(expr.expr)
    if isinstance(expr, pp.Call):
        return _kind(expr.func.return_type)
    if isinstance(expr, pp.BinaryExpr):
        both_scalar = value_type(expr.lhs) == "scalar" and value_type(expr.rhs) == "scalar"
        return "scalar" if both_scalar else "vector"
    return "vector"


def _bound(expr: pp.Expr) -> _Bound:
    if isinstance(expr, (pp.NumberLiteral, pp.StringLiteral)):
        return _NONE
    if isinstance(expr, (pp.VectorSelector, pp.MatrixSelector)):
        return _ANY
    if isinstance(expr, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        return _bound(expr.expr)
    if isinstance(expr, pp.AggregateExpr):
        return _aggregate(expr)
    if isinstance(expr, pp.Call):
        return _call(expr)
    if isinstance(expr, pp.BinaryExpr):
        return _binary(expr)
    return _ANY


def _aggregate(expr: pp.AggregateExpr) -> _Bound:
    op = str(expr.op)
    inner = _bound(expr.expr)
    if op in _KEEP_LABELS_AGGREGATIONS:
        return inner
    if expr.modifier is None:
        grouped = _NONE
    elif expr.modifier.type == pp.AggModifierType.By:
        grouped = _Bound(frozenset(expr.modifier.labels), False)
    else:
        grouped = inner.drop(expr.modifier.labels)
    if op == "count_values" and isinstance(expr.param, pp.StringLiteral):
        grouped = grouped.union(_Bound(frozenset({expr.param.val}), False))
    return grouped


def _call(expr: pp.Call) -> _Bound:
    name = expr.func.name
    if _kind(expr.func.return_type) == "scalar":
        return _NONE
    if name in ("absent", "absent_over_time"):
        # One series, labelled by the argument selector's equality matchers.
        arg = expr.args[0] if expr.args else None
        if isinstance(arg, pp.MatrixSelector):
            arg = arg.vector_selector
        if not isinstance(arg, pp.VectorSelector):
            return _NONE
        equal = {
            m.name
            for m in arg.matchers.matchers
            if m.op == pp.MatchOp.Equal and m.name != "__name__"
        }
        return _Bound(frozenset(equal), False)
    if name == "vector":
        return _NONE
    vectors = [a for a in expr.args if isinstance(a, pp.Expr) and _is_series(a)]
    inner = _bound(vectors[0]) if vectors else _NONE
    if name in ("label_replace", "label_join") and len(expr.args) > 1:
        dst = expr.args[1]
        if isinstance(dst, pp.StringLiteral):
            return inner.union(_Bound(frozenset({dst.val}), False))
        return _ANY
    if name == "histogram_quantile":
        return inner.drop({"le"})
    return inner


def _is_series(expr: pp.Expr) -> bool:
    return value_type(expr) in ("vector", "matrix")


def _binary(expr: pp.BinaryExpr) -> _Bound:
    lhs_scalar = value_type(expr.lhs) == "scalar"
    rhs_scalar = value_type(expr.rhs) == "scalar"
    if lhs_scalar and rhs_scalar:
        return _NONE
    if rhs_scalar:
        return _bound(expr.lhs)
    if lhs_scalar:
        return _bound(expr.rhs)
    op = str(expr.op)
    lhs, rhs = _bound(expr.lhs), _bound(expr.rhs)
    if op in ("and", "unless"):
        return lhs
    if op == "or":
        return lhs.union(rhs)
    mod = expr.modifier
    card = mod.card if mod is not None else pp.VectorMatchCardinality.OneToOne
    matching = mod.matching if mod is not None else None
    include = frozenset(mod.group_labels or ()) if mod is not None else frozenset()
    if card == pp.VectorMatchCardinality.ManyToOne:
        return lhs.union(_Bound(include, False))
    if card == pp.VectorMatchCardinality.OneToMany:
        return rhs.union(_Bound(include, False))
    if matching is None:
        return lhs
    if matching.type == pp.LabelModifierType.Include:
        return lhs.keep(matching.labels)
    return lhs.drop(matching.labels)


def output_labels(expr: pp.Expr) -> frozenset[str] | None:
    """At most these label names appear on the expression's result; None when that
    cannot be known from the expression alone (a selector's labels come from the
    scrape). ``__name__`` is not tracked."""
    b = _bound(expr)
    return None if b.complement else b.names - {"__name__"}


def missing_labels(expr: pp.Expr, required: Iterable[str]) -> list[str]:
    """The labels in ``required`` that no sample of the result can carry, in the
    given order; empty when they all may be there (or it cannot be known)."""
    b = _bound(expr)
    return [label for label in required if not b.may_have(label)]


__all__ = ["ValueKind", "missing_labels", "output_labels", "value_type"]
