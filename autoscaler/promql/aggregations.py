"""PromQL 2.42's aggregation operators over label code columns.

Why a module of its own: aggregations are most of what rules compute, and each
one here is a handful of numpy calls over the whole vector: the groups are the
distinct keys of the grouping labels' code columns (``np.unique``), sums and
counts are ``bincount``, minima and maxima ``ufunc.at``, and the order-based ones
(``topk``/``bottomk``/``quantile``) one ``lexsort`` by group and value.

Semantics follow ``aggregation()`` in ``promql/engine.go`` at v2.42.0:

* ``avg`` is Prometheus's incremental mean, which does not overflow near
  ±1e308 and keeps an infinite mean when finite values follow; the plain sum
  divided by the count is used wherever it is finite (it agrees to the last
  bits), the incremental loop only for the groups where it is not.
* ``stddev``/``stdvar`` are the population deviation/variance.
* ``topk``/``bottomk`` keep whole samples (names included), ordered within each
  group (largest first for ``topk``, smallest first for ``bottomk``), groups in
  order of first appearance; ``k < 1`` gives nothing. Where a group has equal
  values or NaN, 2.42's heap decides which stay and in what order (``goorder``).
* ``quantile`` interpolates between the closest ranks, NaN sorted first,
  φ < 0 gives -Inf and φ > 1 +Inf.
* ``count_values`` counts each value written as Go's ``FormatFloat(v, 'f', -1)``.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autoscaler.promql.errors import EvalError
from autoscaler.promql.goorder import needs_heap, top_one, top_rows
from autoscaler.promql.plans import Aggregate
from autoscaler.promql.symbols import F64, I64, Symbols
from autoscaler.promql.vectors import Vec, empty, groups_of, label_key

AGGREGATIONS = frozenset(
    {
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    }
)
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def aggregate(agg: Aggregate, vec: Vec, param: float | str | None, symbols: Symbols) -> Vec:
    """``agg`` over ``vec``; ``param`` is its evaluated parameter, if it has one."""
    if agg.op == "count_values":
        assert isinstance(param, str)
        if not _LABEL_NAME.match(param):
            raise EvalError(f"invalid label name {param!r}")
        vec = _with_value_label(vec, param, symbols)
    if not len(vec):
        return empty()
    if agg.without:
        dropped = set(agg.labels) | {"__name__"}
        names = sorted(k for k in vec.cols if k not in dropped)
    else:
        wanted = set(agg.labels)
        if agg.op == "count_values":
            assert isinstance(param, str)
            wanted.add(param)
        names = sorted(k for k in wanted if k in vec.cols)
    key = label_key(vec, names)
    if agg.op in ("topk", "bottomk"):
        assert isinstance(param, float)
        return _top(vec, key, param, bottom=agg.op == "bottomk")
    first, group = groups_of(key)
    groups = len(first)
    v = vec.values
    with np.errstate(all="ignore"):
        out = _reduce(agg.op, v, group, groups, param)
    cols = {k: vec.cols[k][first] for k in names}
    # Groups in order of first appearance, as Prometheus appends them.
    order = np.argsort(first, kind="stable")
    return Vec({k: c[order] for k, c in cols.items()}, out[order])


def _reduce(op: str, v: F64, group: I64, groups: int, param: float | str | None) -> F64:
    count = np.bincount(group, minlength=groups).astype(np.float64)
    if op in ("count", "count_values"):
        return count
    if op == "group":
        return np.ones(groups)
    if op == "sum":
        return np.bincount(group, weights=v, minlength=groups).astype(np.float64)
    if op == "avg":
        return _avg(v, group, groups, count)
    if op in ("min", "max"):
        out: F64 = np.full(groups, np.nan)
        (np.fmin if op == "min" else np.fmax).at(out, group, v)
        return out
    if op in ("stddev", "stdvar"):
        mean = np.bincount(group, weights=v, minlength=groups) / count
        dev = v - mean[group]
        var: F64 = np.bincount(group, weights=dev * dev, minlength=groups) / count
        # Welford's update (2.42's) is exactly 0 for equal values; the two-pass
        # form can leave a rounding residue.
        lo, hi = np.full(groups, np.inf), np.full(groups, -np.inf)
        np.minimum.at(lo, group, v)
        np.maximum.at(hi, group, v)
        var = np.where((lo == hi) & np.isfinite(lo), 0.0, var)
        return np.sqrt(var) if op == "stddev" else var
    if op == "quantile":
        assert isinstance(param, float)
        return _quantile(param, v, group, groups, count)
    raise ValueError(f"{op} is not an aggregation")


def _avg(v: F64, group: I64, groups: int, count: F64) -> F64:
    out: F64 = np.bincount(group, weights=v, minlength=groups) / count
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        for g in bad.tolist():
            out[g] = incremental_mean(v[group == g].tolist())
    return out


def incremental_mean(values: list[float]) -> float:
    """The running mean of ``aggregation()``'s ``AVG`` (and ``funcAvgOverTime``)."""
    mean = values[0]
    for n, x in enumerate(values[1:], start=2):
        if math.isinf(mean):
            if math.isinf(x) and (mean > 0) == (x > 0):
                continue
            if not math.isinf(x) and not math.isnan(x):
                continue
        mean += x / n - mean / n
    return mean


def _quantile(q: float, v: F64, group: I64, groups: int, count: F64) -> F64:
    if math.isnan(q):
        return np.full(groups, math.nan)
    if q < 0:
        return np.full(groups, -math.inf)
    if q > 1:
        return np.full(groups, math.inf)
    nan = np.isnan(v)
    # Sorted by group, then NaN first, then value (``vectorByValueHeap``).
    order = np.lexsort((np.where(nan, -np.inf, v), ~nan, group))
    starts = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    rank = q * (count - 1)
    lower = np.maximum(0, np.floor(rank))
    upper = np.minimum(count - 1, lower + 1)
    weight = rank - np.floor(rank)
    sorted_v = v[order]
    lo_v = sorted_v[starts + lower.astype(np.int64)]
    hi_v = sorted_v[starts + upper.astype(np.int64)]
    out: F64 = lo_v * (1 - weight) + hi_v * weight
    return out


def _top(vec: Vec, key: I64, k: float, bottom: bool) -> Vec:
    if math.isnan(k) or k < 1:
        return empty()
    limit = int(min(k, 2**62))
    first, group = groups_of(key)
    v = vec.values
    if limit == 1:
        return vec.take(top_one(v, group, first, bottom))
    if needs_heap(v, group):
        # Ties or NaN: which sample stays and which comes first follow 2.42's heap.
        return vec.take(np.asarray(top_rows(v, group, limit, bottom), dtype=np.int64))
    nan = np.isnan(v)
    # Within a group: best first, NaN last; groups in order of first appearance.
    value_key = np.where(nan, 0.0, v if bottom else -v)
    appearance = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    order = np.lexsort((value_key, nan, appearance[group]))
    g_sorted = group[order]
    # Rank of each row within its group after sorting.
    boundaries = np.r_[True, g_sorted[1:] != g_sorted[:-1]]
    run_start = np.maximum.accumulate(np.where(boundaries, np.arange(len(order)), 0))
    rank = np.arange(len(order)) - run_start
    return vec.take(order[rank < limit])


def _with_value_label(vec: Vec, label: str, symbols: Symbols) -> Vec:
    """``vec`` with ``label`` set to each sample's value as Go formats it."""
    if not len(vec):
        return vec
    distinct, back = np.unique(vec.values, return_inverse=True)
    codes = np.fromiter(
        (symbols.intern(format_float(x)) for x in distinct.tolist()),
        dtype=np.int64,
        count=len(distinct),
    )
    cols = dict(vec.cols)
    cols[label] = codes[back.reshape(-1)]
    return Vec(cols, vec.values)


def format_float(x: float) -> str:
    """Go's ``strconv.FormatFloat(x, 'f', -1, 64)``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(np.format_float_positional(x, unique=True, trim="-"))


__all__ = ["AGGREGATIONS", "aggregate", "format_float", "incremental_mean"]
