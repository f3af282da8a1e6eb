"""Range-vector arguments as ``Points``: range selectors and subqueries.

Why a module of its own: a function over a range reads either stored points
(``x[5m]``) or the results of evaluating an expression at every step of a
subquery (``max_over_time(rate(x[1m])[10m:30s])``). Both become the same shape,
``over_time.Points`` with the label columns of each series, so every range
function works on both. The stored case slices the columnar store
(``Family.dense``); the subquery case evaluates its inner expression once per
step over all series together and lines the results up per series with one sort.

Times follow ``promql/engine.go`` at v2.42.0: a subquery's steps are the
multiples of its step (default: the 1m evaluation interval) from the first at or
after ``end - range`` to ``end`` (both ends included), where ``end`` is the
evaluation time, or its ``@`` time, less its ``offset``. ``@ start()`` and
``@ end()`` are the query's own time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoscaler.promql import reads
from autoscaler.promql.over_time import Points
from autoscaler.promql.plans import At, Plan, RangeSelect, Subquery
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.vectors import Vec, concat, family_vec, groups_of, label_key

DEFAULT_SUBQUERY_STEP = 60_000
"""Prometheus's global evaluation interval (1m), a subquery's step by default."""

Evaluate = Callable[[Plan, int], "float | str | Vec"]


@dataclass
class Part:
    """Some series of a range argument: their labels (``labels.values`` unused)
    and their points."""

    labels: Vec
    points: Points


@dataclass
class RangeArg:
    parts: list[Part]
    mint: int
    maxt: int
    range: int


def at_time(at: At | None, t: int, query_t: int) -> int:
    """The time a selector or subquery is evaluated at: its ``@`` time, if any."""
    if at is None:
        return t
    if at.ms is None:
        return query_t
    return at.ms


def stored(store: SeriesStore, arg: RangeSelect, t: int, query_t: int) -> RangeArg:
    """The points of a range selector."""
    maxt = at_time(arg.select.at, t, query_t) - arg.select.offset
    mint = maxt - arg.range
    parts: list[Part] = []
    for fam, rows in store.select(arg.select.matchers):
        rows, values, times, count = reads.dense(fam, rows, mint, maxt)
        if rows.size:
            labels = family_vec(fam, rows, np.zeros(rows.size), keep_name=True)
            parts.append(Part(labels, Points(values, times, count)))
    return RangeArg(parts, mint, maxt, arg.range)


def steps(sq: Subquery, t: int, query_t: int) -> list[int]:
    """The evaluation times of a subquery at ``t``."""
    end = at_time(sq.at, t, query_t) - sq.offset
    step = sq.step or DEFAULT_SUBQUERY_STEP
    lowest = end - sq.range
    # Go's integer division truncates towards zero.
    start = step * (-((-lowest) // step) if lowest < 0 else lowest // step)
    if start < lowest:
        start += step
    return list(range(start, end + 1, step))


def evaluated(sq: Subquery, t: int, query_t: int, evaluate: Evaluate) -> RangeArg:
    """The points of a subquery: its expression at each step, per series."""
    times = steps(sq, t, query_t)
    end = at_time(sq.at, t, query_t) - sq.offset
    results: list[Vec] = []
    which: list[np.ndarray] = []
    for i, ts in enumerate(times):
        value = evaluate(sq.expr, ts)
        if isinstance(value, str):
            continue
        vec = Vec({}, np.array([value])) if isinstance(value, float) else value
        if len(vec):
            results.append(vec)
            which.append(np.full(len(vec), i, dtype=np.int64))
    if not results:
        return RangeArg([], end - sq.range, end, sq.range)
    everything = concat(results)
    step_of = np.concatenate(which)
    key = label_key(everything, sorted(everything.cols))
    first, series = groups_of(key)
    order = np.lexsort((step_of, series))
    s_sorted = series[order]
    count = np.bincount(series, minlength=len(first)).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    position = np.arange(len(order)) - starts[s_sorted]
    width = int(count.max())
    values = np.zeros((len(first), width))
    stamps = np.zeros((len(first), width), dtype=np.int64)
    values[s_sorted, position] = everything.values[order]
    stamps[s_sorted, position] = np.asarray(times, dtype=np.int64)[step_of[order]]
    labels = everything.take(first)
    return RangeArg([Part(labels, Points(values, stamps, count))], end - sq.range, end, sq.range)


__all__ = [
    "DEFAULT_SUBQUERY_STEP",
    "Part",
    "RangeArg",
    "at_time",
    "evaluated",
    "steps",
    "stored",
]
