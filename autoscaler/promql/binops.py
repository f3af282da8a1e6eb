"""PromQL's binary operators in the built-in evaluator: arithmetic, comparisons
and set operators, between scalars and vectors, with vector matching.

Why a module of its own: vector matching is where PromQL is most subtle and where
the evaluator most needs to agree with Prometheus, so it is kept whole and apart.
It follows ``VectorBinop``: the "one" side must be unique per match group,
one-to-one matching keeps only the ``on`` labels (or drops the ``ignoring``
ones), ``group_left(labels)`` copies labels from the "one" side, and a filtering
comparison keeps the left-hand value. Errors carry Prometheus's messages.
Match groups are integer keys over label code columns (``vectors.combine``),
sorted once and searched, never a loop over series.
"""

from __future__ import annotations

import numpy as np

from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.matchers import format_labels
from autoscaler.promql.plans import Binary
from autoscaler.promql.symbols import F64, I64, Mask, Symbols
from autoscaler.promql.vectors import (
    Vec,
    check_unique,
    combine,
    concat,
    drop_name,
    empty,
    label_key,
    member,
    pick,
)
from autoscaler.types import Labels

_ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^", "atan2"})
# ``shouldDropMetricName``: atan2 keeps the left-hand name.
_DROPS_NAME = _ARITHMETIC - {"atan2"}
_COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
_SET = frozenset({"and", "or", "unless"})


def binary(b: Binary, lhs: float | Vec, rhs: float | Vec, symbols: Symbols) -> float | Vec:
    """``b`` applied to its evaluated operands (``VectorBinop``, ``VectorscalarBinop``,
    ``scalarBinop`` and the set operators)."""
    if b.op in _SET:
        assert isinstance(lhs, Vec) and isinstance(rhs, Vec)
        return _set_operation(b, lhs, rhs)
    if isinstance(lhs, float) and isinstance(rhs, float):
        value, keep = elementwise(b.op, lhs, rhs)
        if b.op in _COMPARISON:
            return 1.0 if bool(keep) else 0.0
        return float(value)
    if isinstance(lhs, Vec) and isinstance(rhs, Vec):
        return _vector_binop(b, lhs, rhs, symbols)
    if isinstance(lhs, Vec):
        assert isinstance(rhs, float)
        return _vector_scalar(b, lhs, rhs, swap=False)
    assert isinstance(rhs, Vec) and isinstance(lhs, float)
    return _vector_scalar(b, rhs, lhs, swap=True)


def elementwise(op: str, lhs: F64 | float, rhs: F64 | float) -> tuple[F64, Mask]:
    """``vectorElemBinop``: the value, and whether a filtering comparison keeps it."""
    a = np.asarray(lhs, dtype=np.float64)
    b = np.asarray(rhs, dtype=np.float64)
    shape = np.broadcast_shapes(a.shape, b.shape)
    with np.errstate(all="ignore"):
        if op in _ARITHMETIC:
            if op == "+":
                v = a + b
            elif op == "-":
                v = a - b
            elif op == "*":
                v = a * b
            elif op == "/":
                v = a / b
            elif op == "%":
                v = np.fmod(a, b)
            elif op == "atan2":
                v = np.arctan2(a, b)
            else:
                v = np.power(a, b)
            return np.broadcast_to(v, shape).astype(np.float64), np.ones(shape, dtype=np.bool_)
        if op == "==":
            keep = a == b
        elif op == "!=":
            keep = a != b
        elif op == ">":
            keep = a > b
        elif op == "<":
            keep = a < b
        elif op == ">=":
            keep = a >= b
        elif op == "<=":
            keep = a <= b
        else:
            raise ExprError(f"operator {op} is not supported")
    return np.broadcast_to(a, shape).astype(np.float64), np.broadcast_to(keep, shape)


def _vector_scalar(b: Binary, vec: Vec, scalar: float, swap: bool) -> Vec:
    if len(vec) == 0:
        return vec
    lv: F64 | float = vec.values
    rv: F64 | float = scalar
    if swap:
        lv, rv = rv, lv
    value, keep = elementwise(b.op, lv, rv)
    if b.op in _COMPARISON and swap:
        value = vec.values
    if b.return_bool:
        value = keep.astype(np.float64)
        out = vec.with_values(value)
    elif keep.all():
        out = vec.with_values(value)
    else:
        out = vec.with_values(value).take(keep)
    if b.op in _DROPS_NAME or b.return_bool:
        out = drop_name(out)
    return out


def signatures(lhs: Vec, rhs: Vec, on: bool, labels: tuple[str, ...]) -> tuple[I64, I64]:
    """Match-group keys for both sides (``signatureFunc``): the ``on`` labels, or
    every label but ``__name__`` and the ``ignoring`` ones."""
    if on:
        names = sorted(set(labels))
    else:
        excluded = set(labels) | {"__name__"}
        names = sorted((set(lhs.cols) | set(rhs.cols)) - excluded)
    nl, nr = len(lhs), len(rhs)
    columns = [
        np.concatenate(
            [
                lhs.cols.get(k, np.zeros(nl, dtype=np.int64)),
                rhs.cols.get(k, np.zeros(nr, dtype=np.int64)),
            ]
        )
        for k in names
        if k in lhs.cols or k in rhs.cols
    ]
    key = combine(columns, nl + nr)
    return key[:nl], key[nl:]


def _set_operation(b: Binary, lhs: Vec, rhs: Vec) -> Vec:
    if b.op == "or":
        if len(lhs) == 0:
            return rhs
        if len(rhs) == 0:
            return lhs
    elif len(lhs) == 0 or len(rhs) == 0:
        return empty() if b.op == "and" else lhs
    lk, rk = signatures(lhs, rhs, b.on, b.labels)
    if b.op == "and":
        return lhs.take(member(lk, rk))
    if b.op == "unless":
        return lhs.take(~member(lk, rk))
    return concat([lhs, rhs.take(~member(rk, lk))])


def _row_labels(vec: Vec, i: int, symbols: Symbols) -> Labels:
    names = sorted(vec.cols)
    values = [symbols.string(int(vec.cols[k][i])) for k in names]
    return tuple((k, v) for k, v in zip(names, values, strict=True) if v)


def _vector_binop(b: Binary, lhs: Vec, rhs: Vec, symbols: Symbols) -> Vec:
    if b.card == "many-to-many":
        raise EvalError("many-to-many only allowed for set operators")
    if len(lhs) == 0 or len(rhs) == 0:
        return empty()
    swapped = b.card == "one-to-many"
    many, one = (rhs, lhs) if swapped else (lhs, rhs)
    many_key, one_key = signatures(many, one, b.on, b.labels)
    order = np.argsort(one_key, kind="stable")
    sorted_keys = one_key[order]
    dup = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
    if dup.size:
        earlier, later = int(order[dup[0]]), int(order[dup[0] + 1])
        _raise_duplicate(b, one, earlier, later, "left" if swapped else "right", symbols)
    pos = np.minimum(np.searchsorted(sorted_keys, many_key), len(sorted_keys) - 1)
    found = sorted_keys[pos] == many_key
    mi = np.flatnonzero(found)
    oi = order[pos[mi]]
    vl = many.values[mi]
    vr = one.values[oi]
    if swapped:
        vl, vr = vr, vl
    value, keep = elementwise(b.op, vl, vr)
    if b.return_bool:
        value = keep.astype(np.float64)
    elif not keep.all():
        mi, oi, value = mi[keep], oi[keep], value[keep]
    # The "many" side's columns at its matched rows, gathered when read.
    names = [k for k in many.cols if k not in b.include]
    if b.op in _DROPS_NAME or b.return_bool:
        names = [k for k in names if k != "__name__"]
    if b.card == "one-to-one":
        names = [k for k in names if (k in b.labels) == b.on]
    copied = {k: c[oi] for k in b.include if (c := one.cols.get(k)) is not None}
    if b.return_bool:
        copied.pop("__name__", None)
    out = Vec(pick(many.cols, mi, names, copied), value)
    matched = many_key[mi]
    if b.card == "one-to-one":
        # The "one" side's keys are unique (checked above), so two rows matched
        # the same key exactly where they matched the same "one" row: a table
        # of those rows, not a sort of the keys.
        hit = np.zeros(len(one), dtype=np.bool_)
        hit[oi] = True
        if int(np.count_nonzero(hit)) != len(oi):
            raise EvalError(
                "multiple matches for labels: many-to-one matching must be explicit "
                "(group_left/group_right)"
            )
    elif len(matched) > 1 and (
        any(name in many.cols for name in b.include) or _names_differ(many, b.op)
    ):
        # The "many" side's label sets are unique (every instant vector's are),
        # and each of its rows is used once: the results can collide only where
        # labels were copied over its own (adding labels it lacks keeps them
        # apart) or a differing ``__name__`` dropped.
        key = combine([matched, label_key(out, sorted(out.cols))], len(matched))
        if len(np.unique(key)) != len(key):
            raise EvalError(
                "multiple matches for labels: grouping labels must ensure unique results"
            )
    if b.on and "__name__" in b.labels:
        check_unique(out)
    return out


def _names_differ(vec: Vec, op: str) -> bool:
    """Whether ``op`` drops a ``__name__`` column that differs between rows."""
    col = vec.cols.get("__name__")
    return op in _DROPS_NAME and col is not None and len(col) > 1 and col.min() != col.max()


def _raise_duplicate(
    b: Binary, one: Vec, earlier: int, later: int, side: str, symbols: Symbols
) -> None:
    names = sorted(one.cols)
    if b.on:
        group = [k for k in names if k in b.labels]
    else:
        group = [k for k in names if k not in b.labels and k != "__name__"]
    later_labels = _row_labels(one, later, symbols)
    earlier_labels = _row_labels(one, earlier, symbols)
    matched = tuple((k, v) for k, v in later_labels if k in group)
    raise EvalError(
        f"found duplicate series for the match group {format_labels(matched)} on the {side} "
        f"hand-side of the operation: [{format_labels(later_labels)}, "
        f"{format_labels(earlier_labels)}];many-to-many matching not allowed: matching labels "
        "must be unique on one side"
    )


__all__ = [
    "binary",
    "elementwise",
    "signatures",
]
