"""The built-in PromQL evaluator: instant queries over a ``SeriesStore``.

Why it exists: the ``scrape`` source runs the controller with no Prometheus at all,
and the rules it evaluates must mean exactly what they mean in Prometheus. Every
rule of the shipped sets is one PromQL expression, so the evaluator implements
PromQL 2.42's instant queries (all but native histograms; ``support.py`` names what
it refuses) with Prometheus 2.42's semantics (Debian's version, which
``tests/integration/test_promql_differential.py`` queries side by side, and whose
own ``.test`` files ``tests/autoscaler/promql/test_conformance.py`` runs):

* Instant selectors take each series' latest sample in ``[t - 5m, t]`` unless it is
  a stale marker; range selectors take the points in ``[t - range, t]`` (both ends
  included in 2.x; 3.x excludes the start), after ``offset``.
* ``__name__`` is dropped by functions (except ``last_over_time``), arithmetic,
  ``bool`` comparisons and aggregations (unless grouped ``by`` it), and kept by
  filtering comparisons and set operators. A result with two series of the same
  label set is an error, as are ambiguous matches (``EvalError``, with
  Prometheus's messages).
* Vector matching follows ``VectorBinop``: the "one" side must be unique per match
  group, one-to-one matching keeps only the ``on`` labels (or drops the
  ``ignoring`` ones), ``group_left(labels)`` copies labels from the "one" side, and
  a filtering comparison keeps the left-hand value.

Why it is built this way: one cycle evaluates about twenty rules over 80,000
series per metric on one core in well under a second, so nothing iterates over
series in Python. An instant vector is a ``Vec`` of label code columns
(``vectors.py``); aggregations are ``bincount``/``ufunc.at``/``lexsort``
(``aggregations.py``); range functions run on whole windows (``functions.py``,
``over_time.py``), and a subquery evaluates its expression once per step over all
series (``subquery.py``); binary operators and vector matching are ``binops.py``.
``@`` fixes the time a selector or subquery is evaluated at (``start()``/``end()``
are the query's time). Labels become strings only in the result handed back.

Expressions are parsed (``promql-parser``), checked against the subset and compiled
into small plan nodes once per expression (``plans.py``); selections, and range
functions over a selector, are cached per evaluation time until the store
changes, since rules evaluated together share selectors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from autoscaler.promql import prefilter, reads, subquery
from autoscaler.promql.aggregations import aggregate
from autoscaler.promql.binops import binary, elementwise
from autoscaler.promql.dialect import NegativeAtError, parse
from autoscaler.promql.errors import ExprError, UnsupportedError
from autoscaler.promql.family import Family
from autoscaler.promql.functions import range_function
from autoscaler.promql.histogram import histogram_quantile
from autoscaler.promql.instant_functions import DATE_FUNCTIONS, vector_function
from autoscaler.promql.matchers import MatchType
from autoscaler.promql.memo import Interner, Memo, Names, select_name
from autoscaler.promql.over_time import POINT_FUNCTIONS, point_function
from autoscaler.promql.plans import (
    Aggregate,
    Binary,
    Call,
    Neg,
    Num,
    Plan,
    RangeSelect,
    Select,
    Str,
    Subquery,
    compile_plan,
)
from autoscaler.promql.ranges import range_rows, unchanged
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import (
    FUNCTIONS,
    LOOKBACK_DELTA,
    RANGE_FUNCTIONS,
    unsupported_in,
)
from autoscaler.promql.symbols import F64, I64, Symbols
from autoscaler.promql.vectors import (
    Vec,
    check_unique,
    combine,
    concat,
    drop_name,
    empty,
    family_vec,
    label_key,
    member,
)
from autoscaler.types import Labels, Matrix, Sample, Scalar, Series, Vector

# Label names, and the value tuples of those names a result is cut down to.
TargetFilter = tuple[tuple[str, ...], Iterable[tuple[str, ...]]]

_MAX_PLANS = 4096
# Memo entries at most (selections, range calls and shared results, by time).
_MAX_MEMO = 4 * _MAX_PLANS


def prometheus_time_ms(t: float) -> int:
    """Milliseconds for an evaluation time in seconds, as Prometheus's HTTP API
    derives them (``parseTime``: the fraction rounded to milliseconds, then
    nanoseconds truncated; ``timeMilliseconds``: truncating division)."""
    frac, whole = math.modf(t)
    scaled = frac * 1000
    rounded = math.floor(abs(scaled))
    if abs(scaled) - rounded >= 0.5:
        rounded += 1
    frac = math.copysign(rounded, scaled) / 1000
    nanos = int(whole) * 1_000_000_000 + int(frac * 1e9)
    ms = abs(nanos) // 1_000_000
    return ms if nanos >= 0 else -ms


@dataclass(frozen=True)
class Columns:
    """An instant vector's code columns of some label names (``Evaluator.columns``;
    0: the row lacks the label), its values, and the symbols that decode codes."""

    codes: tuple[I64, ...]
    values: F64
    symbols: Symbols


class Evaluator:
    """Evaluates instant queries over a ``SeriesStore``.

    ``instant(expr, t)`` returns a ``Vector``, a ``Scalar``, or a ``Matrix`` for a
    bare range selector (as Prometheus's instant query does). It raises
    ``ExprError`` for an expression that does not parse or is outside the subset
    (the message lists every unsupported construct) and ``EvalError`` for the
    runtime errors Prometheus raises.
    """

    def __init__(self, store: SeriesStore, lookback_delta: float = LOOKBACK_DELTA) -> None:
        self.store = store
        self.lookback_delta = lookback_delta
        self._plans: dict[str, Plan] = {}
        # Selections, range functions over a selector (rules asked together
        # repeat a quarter of llama3's) and shared subexpressions, by time, kept
        # while the families they read are unchanged (``memo.py``).
        self._interner = Interner()
        self._memo = Memo(store, _MAX_MEMO)
        self._query_t = 0

    @property
    def _lookback_ms(self) -> int:
        return round(self.lookback_delta * 1000)

    def check(self, expr: str) -> None:
        """Raises ExprError if ``expr`` does not parse or is outside the subset;
        what passes is compiled and kept for ``instant``."""
        self._plan(expr)

    def _plan(self, expr: str) -> Plan:
        """Parses, checks and compiles ``expr`` (cached)."""
        plan = self._plans.get(expr)
        if plan is not None:
            return plan
        try:
            node = parse(expr)
        except NegativeAtError as e:
            raise UnsupportedError(str(e)) from None
        except (ValueError, TypeError) as e:
            raise ExprError(f"parse error: {e}") from None
        problems = unsupported_in(node)
        if problems:
            raise UnsupportedError("; ".join(problems))
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
            self._interner.clear()
            self._memo.clear()
        plan = self._interner.intern(compile_plan(node))
        self._plans[expr] = plan
        return plan

    def instant(
        self, expr: str, t: float, *, only: TargetFilter | None = None
    ) -> Vector | Scalar | Matrix:
        """Evaluates ``expr`` at ``t`` (unix seconds, taken to the millisecond as
        Prometheus's API does); sample timestamps in the result are ``t``.

        ``only`` (label names, and the wanted value tuples of those names) leaves out
        of a vector result the samples that match none of the tuples, before they
        are decoded: the evaluation is the same, but a caller that reads a result
        for a few targets (a rule's recover condition, for its active targets) does
        not pay for turning thousands of rows into ``Sample`` objects."""
        plan, t_ms = self._start(expr, t)
        if isinstance(plan, RangeSelect) and plan.select.at is None:
            return self._matrix(plan, t_ms)
        if isinstance(plan, RangeSelect | Subquery):
            return self._points_matrix(self._range_arg(plan, t_ms))
        result = self._eval(plan, t_ms)
        if isinstance(result, str):
            raise ExprError("a string literal is not a query result the evaluator returns")
        if isinstance(result, float):
            return Scalar(result, t_ms / 1000)
        if only is not None:
            result = self._restrict(result, only)
        return self._vector(result, t_ms / 1000)

    def columns(self, expr: str, t: float, names: tuple[str, ...]) -> Columns:
        """``instant`` for a reader that keys thousands of rows by a few labels (the
        rhythm learner, every cycle): the result's code columns of ``names`` (0
        where a row lacks the label) and its values, with the symbols that decode
        them, and no ``Sample`` built. ExprError unless the result is an instant
        vector."""
        plan, t_ms = self._start(expr, t)
        result = None if isinstance(plan, RangeSelect | Subquery) else self._eval(plan, t_ms)
        if not isinstance(result, Vec):
            raise ExprError("expected an instant vector")
        absent = np.zeros(len(result), dtype=np.int64)
        codes = tuple(result.cols.get(n, absent) for n in names)
        return Columns(codes, result.values, self.store.symbols)

    def _start(self, expr: str, t: float) -> tuple[Plan, int]:
        """The plan of ``expr`` and the evaluation time in milliseconds, with the
        memo checked against the store (what an evaluation starts with)."""
        plan = self._plan(expr)
        t_ms = prometheus_time_ms(t)
        self._memo.check()
        self._query_t = t_ms
        return plan, t_ms

    def _restrict(self, vec: Vec, only: TargetFilter) -> Vec:
        names, wanted = only
        if not len(vec):
            return vec
        n = len(vec)
        # A label no row has reads as "" (code 0) in every row, as the samples'
        # own filter in ``engine/cycle.py`` reads it.
        absent = np.zeros(n, dtype=np.int64)
        cols = [vec.cols.get(name, absent) for name in names]
        code = self.store.symbols.code
        # A value no series ever had (code -1) matches no row.
        asked = [a for a in (tuple(code(v) for v in values) for values in wanted) if -1 not in a]
        if not asked:
            return vec.take(np.zeros(n, dtype=np.bool_))
        # The rows' codes and the wanted ones keyed together, so that equal label
        # values get equal keys; then a lookup, not a Python test per row.
        both = [
            np.concatenate((c, np.array([a[i] for a in asked], dtype=np.int64)))
            for i, c in enumerate(cols)
        ]
        key = combine(both, n + len(asked))
        return vec.take(member(key[:n], key[n:]))

    # -- results ---------------------------------------------------------------

    def _decode(self, vec: Vec) -> list[Labels]:
        n = len(vec)
        names = sorted(k for k, c in vec.cols.items() if c.any())
        if not names:
            return [()] * n
        decoded = [self.store.symbols.decode(vec.cols[k]) for k in names]
        if all(vec.cols[k].all() for k in names):
            # Every row has every label: build the pairs and tuples in C.
            pairs = [
                zip(repeat(k), values, strict=False)
                for k, values in zip(names, decoded, strict=True)
            ]
            return list(zip(*pairs, strict=True))
        return [
            tuple((k, v) for k, v in zip(names, row, strict=True) if v)
            for row in zip(*decoded, strict=True)
        ]

    def _vector(self, vec: Vec, t: float) -> Vector:
        labels = self._decode(vec)
        values = vec.values.tolist()
        return Vector(tuple(map(Sample, labels, values, repeat(t))))

    def _matrix(self, plan: RangeSelect, t: int) -> Matrix:
        maxt = t - plan.select.offset
        mint = maxt - plan.range
        series: list[Series] = []
        for fam, rows in self.store.select(plan.select.matchers):
            for row in rows.tolist():
                points = reads.points(fam, row, mint, maxt)
                if points:
                    series.append(
                        Series(fam.labels[row], tuple((ts / 1000, v) for ts, v in points))
                    )
        return Matrix(tuple(series))

    def _points_matrix(self, arg: subquery.RangeArg) -> Matrix:
        series: list[Series] = []
        for part in arg.parts:
            labels = self._decode(part.labels)
            p = part.points
            for i, ls in enumerate(labels):
                c = int(p.count[i])
                pts = zip((p.times[i, :c] / 1000).tolist(), p.values[i, :c].tolist(), strict=True)
                series.append(Series(ls, tuple(pts)))
        return Matrix(tuple(series))

    # -- evaluation --------------------------------------------------------------

    def _eval(self, plan: Plan, t: int) -> float | str | Vec:
        if not self._interner.keeps(plan):
            return self._eval_node(plan, t)
        key = ("eval", id(plan), t)
        names = self._interner.names(plan)
        hit: float | str | Vec | None = self._memo.get(key, names)
        if hit is None:
            hit = self._eval_node(plan, t)
            self._memo.put(key, names, hit)
        return hit

    def _eval_node(self, plan: Plan, t: int) -> float | str | Vec:
        if isinstance(plan, Num):
            return plan.value
        if isinstance(plan, Str):
            return plan.value
        if isinstance(plan, Neg):
            inner = self._vector_or_scalar(plan.expr, t)
            if isinstance(inner, float):
                return -inner
            return drop_name(inner).with_values(-inner.values)
        if isinstance(plan, Select):
            return self._instant_vector(plan, t)
        if isinstance(plan, Call):
            return self._call(plan, t)
        if isinstance(plan, Aggregate):
            return self._aggregate(plan, t)
        if isinstance(plan, Binary):
            return self._binary(plan, t)
        raise ExprError("a range vector is only allowed as a function argument or on its own")

    def _vector_or_scalar(self, plan: Plan, t: int) -> float | Vec:
        out = self._eval(plan, t)
        if isinstance(out, str):
            raise ExprError("a string literal is only allowed as a function argument")
        return out

    def _vec(self, plan: Plan, t: int) -> Vec:
        out = self._eval(plan, t)
        if not isinstance(out, Vec):
            raise ExprError("expected an instant vector")
        return out

    def _selection(self, sel: Select, t: int) -> list[tuple[Family, I64, F64]]:
        ref = subquery.at_time(sel.at, t, self._query_t) - sel.offset
        key = ("select", sel.key, ref)
        names = _names(sel)
        hit: list[tuple[Family, I64, F64]] | None = self._memo.get(key, names)
        if hit is not None:
            return hit
        out: list[tuple[Family, I64, F64]] = []
        for fam, rows in self.store.select(sel.matchers):
            kept, values = fam.instant(rows, ref, self._lookback_ms)
            if kept.size:
                out.append((fam, kept, values))
        self._memo.put(key, names, out)
        return out

    def _instant_vector(self, sel: Select, t: int) -> Vec:
        parts = [
            family_vec(fam, rows, values, keep_name=True)
            for fam, rows, values in self._selection(sel, t)
        ]
        return concat(parts)

    def _call(self, call: Call, t: int) -> float | Vec:
        name = call.name
        if name not in FUNCTIONS:
            raise UnsupportedError(f"function {name} is not supported by the built-in evaluator")
        if name == "time":
            return t / 1000
        if name == "pi":
            return math.pi
        if name in RANGE_FUNCTIONS:
            return self._range_function(call, t)
        if name in DATE_FUNCTIONS and not call.args:
            return vector_function(name, Vec({}, np.array([t / 1000])), [], self.store.symbols)
        args = [self._eval(a, t) for a in call.args[1:]]
        scalars = [a for a in args if not isinstance(a, Vec)]
        if name == "vector":
            value = self._vector_or_scalar(call.args[0], t)
            assert isinstance(value, float)
            return Vec({}, np.array([value]))
        if name == "histogram_quantile":
            phi = self._vector_or_scalar(call.args[0], t)
            assert isinstance(phi, float) and isinstance(args[0], Vec)
            return histogram_quantile(phi, args[0], self.store.symbols)
        vec = self._vec(call.args[0], t)
        if name == "scalar":
            return float(vec.values[0]) if len(vec) == 1 else math.nan
        if name == "absent":
            return empty() if len(vec) else self._absent_labels(call.args[0])
        if name == "timestamp":
            return self._timestamp(call.args[0], vec, t)
        return vector_function(name, vec, scalars, self.store.symbols)

    def _timestamp(self, arg: Plan, vec: Vec, t: int) -> Vec:
        """``funcTimestamp``: a selector's samples keep their own times; anything
        else is stamped with the evaluation time."""
        if isinstance(arg, Select):
            times = [
                reads.instant_times(
                    fam, rows, subquery.at_time(arg.at, t, self._query_t) - arg.offset
                )
                for fam, rows, _ in self._selection(arg, t)
            ]
            stamps = np.concatenate(times) if times else np.zeros(0, dtype=np.int64)
            return drop_name(vec).with_values(stamps / 1000)
        return drop_name(vec).with_values(np.full(len(vec), t / 1000))

    def _range_arg(self, arg: Plan, t: int) -> subquery.RangeArg:
        if isinstance(arg, RangeSelect):
            return subquery.stored(self.store, arg, t, self._query_t)
        if isinstance(arg, Subquery):
            return subquery.evaluated(arg, t, self._query_t, self._eval)
        raise ExprError("expected a range vector (a range selector or a subquery)")

    def _range_function(self, call: Call, t: int) -> Vec:
        name = call.name
        # quantile_over_time(φ, range) takes its scalar first.
        if name == "quantile_over_time":
            arg, extras = call.args[1], call.args[:1]
        else:
            arg, extras = call.args[0], call.args[1:]
        if (
            isinstance(arg, RangeSelect)
            and arg.select.at is None
            and name not in POINT_FUNCTIONS
            and name != "absent_over_time"
        ):
            return self._range_call(name, arg, t)
        scalars: list[float] = []
        for extra in extras:
            value = self._vector_or_scalar(extra, t)
            if not isinstance(value, float):
                raise ExprError(f"{name} takes scalar parameters")
            scalars.append(value)
        ranged = self._range_arg(arg, t)
        if name == "absent_over_time":
            if any(len(p.points) for p in ranged.parts):
                return empty()
            return self._absent_labels(arg)
        parts: list[Vec] = []
        for part in ranged.parts:
            p = part.points
            if name in POINT_FUNCTIONS:
                keep, values = point_function(name, p, scalars, t)
            else:
                rows = np.arange(len(p))
                keep, values = range_function(
                    name, p.window(rows), ranged.mint, ranged.maxt, ranged.range
                )
            labels = part.labels.take(keep).with_values(values[keep])
            parts.append(labels if name == "last_over_time" else drop_name(labels))
        out = concat(parts)
        # One family's series differ in more than their name; a subquery's
        # series may not once the name is dropped.
        if len(parts) > 1 or (isinstance(arg, Subquery) and name != "last_over_time"):
            check_unique(out)
        return out

    def _absent_labels(self, arg: Plan) -> Vec:
        """``createLabelsForAbsentFunction``: labels from the equality matchers of
        a selector, except those whose name is also matched otherwise."""
        labels: dict[str, str] = {}
        if isinstance(arg, RangeSelect):
            arg = arg.select
        if isinstance(arg, Select):
            others: list[str] = []
            for m in arg.matchers:
                if m.name == "__name__":
                    continue
                if m.type is MatchType.EQ and m.name not in labels:
                    labels[m.name] = m.value
                else:
                    others.append(m.name)
            for name in others:
                labels.pop(name, None)
        symbols = self.store.symbols
        cols = {k: np.array([symbols.intern(v)], dtype=np.int64) for k, v in labels.items() if v}
        return Vec(cols, np.ones(1))

    def _range_call(self, name: str, arg: RangeSelect, t: int) -> Vec:
        key = ("range", name, arg.select.key, arg.range, t)
        names = _names(arg.select)
        hit: Vec | None = self._memo.get(key, names)
        if hit is None:
            hit = self._range_call_uncached(name, arg, t)
            self._memo.put(key, names, hit)
        return hit

    def _range_call_uncached(self, name: str, arg: RangeSelect, t: int) -> Vec:
        maxt = t - arg.select.offset
        mint = maxt - arg.range
        parts: list[Vec] = []
        for fam, rows in self.store.select(arg.select.matchers):
            vec = range_rows(name, fam, rows, mint, maxt, arg.range)
            if len(vec):
                parts.append(vec)
        out = concat(parts)
        if len(parts) > 1 and name != "last_over_time":
            check_unique(out)
        return out

    # -- aggregation -------------------------------------------------------------

    def _aggregate(self, agg: Aggregate, t: int) -> Vec:
        vec = self._vec(agg.expr, t)
        param: float | str | None = None
        if agg.param is not None:
            value = self._eval(agg.param, t)
            if isinstance(value, Vec):
                raise ExprError(f"the parameter of {agg.op} must be a scalar or a string")
            param = value
        return aggregate(agg, vec, param, self.store.symbols)

    # -- binary operators --------------------------------------------------------

    def _binary(self, b: Binary, t: int) -> float | Vec:
        if prefilter.filters_extremes(b):
            return self._filtered_extremes(b, t)
        sel = prefilter.filters_selection(b)
        if sel is not None:
            return self._filtered_selection(b, sel, t)
        window = prefilter.bounds_window(b)
        if window is not None:
            return self._bounded_window(b, *window, t)
        if b.op not in ("or", "unless") and self._holds_nothing(b.rhs):
            # Every operator but ``or`` and ``unless`` gives no sample where its
            # right is an instant selector of a metric the store has no series
            # of, so the left is not evaluated: the rhythm learner's join of every
            # job's age to ``accel_gang_info`` costs nothing on a fleet of no gangs.
            return empty()
        lhs = self._vector_or_scalar(b.lhs, t)
        # Every operator but ``or`` gives no sample for an instant vector with none
        # on its left, whatever the right holds, so the right is not evaluated: a
        # rule that puts a cheap selector before an expensive join (the stall
        # rules' ``accel_gang_info * on (...) (...)``) costs nothing where that
        # selector is empty, e.g. on a fleet that runs no gangs.
        if isinstance(lhs, Vec) and not len(lhs) and b.op != "or":
            return empty()
        narrowed = self._narrowed_side(b, lhs, t) if isinstance(lhs, Vec) else None
        rhs = self._vector_or_scalar(b.rhs, t) if narrowed is None else narrowed
        return binary(b, lhs, rhs, self.store.symbols)

    def _holds_nothing(self, plan: Plan) -> bool:
        """Whether ``plan`` is an instant selector of one metric name that the store
        holds no series of: its answer is empty at any time, known without a look."""
        if not isinstance(plan, Select):
            return False
        name = select_name(plan)
        if name is None:
            return False
        fam = self.store.families.get(name)
        return fam is None or fam.n == 0

    def _filtered_extremes(self, b: Binary, t: int) -> float | Vec:
        """``max by (...) (X) > c`` (``prefilter.filters_extremes``): a group's maximum passes
        only where one of its samples does, and is then the maximum of those that
        pass (NaN passes no comparison and no maximum keeps it beside a number), so
        X is filtered before it is grouped; a ``sum`` drops the samples of 0. The
        fault rules' maxima and sums over every counter of the fleet then group the
        few that moved, not tens of thousands. The
        same samples and values in the same order: groups in the order of their
        first sample in X, as Prometheus appends them (found per group, for a few
        groups; with more, X is grouped whole as before)."""
        agg = b.lhs
        assert isinstance(agg, Aggregate) and isinstance(b.rhs, Num)
        symbols = self.store.symbols
        rise = prefilter.rising(b)
        found = None if rise is None else self._one_family(*rise, t)
        if rise is not None and found is not None:
            # Only the counters that changed can pass (``prefilter``): where none
            # of them does, nothing does, in any order.
            fam, rows, mint, maxt = found
            moved = rows[~unchanged(fam, rows, mint, maxt)]
            some = range_rows(rise[0], fam, moved, mint, maxt, rise[1].range)
            keep = prefilter.kept_extremes(b, some.values)
            if not keep.any():
                grouped = aggregate(agg, some.take(keep), None, symbols)
                return binary(b, grouped, b.rhs.value, symbols)
        inner = self._vec(agg.expr, t)
        keep = prefilter.kept_extremes(b, inner.values)
        grouped = aggregate(agg, inner.take(keep), None, symbols)
        if len(grouped) > prefilter.FEW_GROUPS:
            grouped = aggregate(agg, inner, None, symbols)
        elif len(grouped) > 1:
            order = prefilter.first_rows(grouped, inner)
            grouped = grouped.take(np.argsort(order, kind="stable"))
        return binary(b, grouped, b.rhs.value, symbols)

    def _filtered_selection(self, b: Binary, sel: Select, t: int) -> float | Vec:
        """``X <op> c`` for an instant selector X (``prefilter``): the label columns
        gathered only for the rows whose value passes, then compared as before."""
        assert isinstance(b.rhs, Num)
        c = b.rhs.value
        kept = self._selected(self._selection(sel, t), b)
        return binary(b, kept, c, self.store.symbols)

    def _selected(
        self,
        selection: list[tuple[Family, I64, F64]],
        compare: Binary | None,
        lhs: Vec | None = None,
        labels: tuple[str, ...] = (),
    ) -> Vec:
        """The rows of ``selection`` that pass ``compare`` (``X <op> c``) and, with
        ``lhs``, have the ``on (labels)`` of one of its samples, as one vector with
        the metric name: label columns are gathered only for those rows."""
        parts: list[Vec] = []
        for fam, rows, values in selection:
            passed = np.ones(rows.size, dtype=np.bool_)
            if lhs is not None:
                left, right = prefilter.join_keys(fam, rows, lhs, labels)
                passed = member(right, left)
            if compare is not None:
                assert isinstance(compare.rhs, Num)
                passed &= elementwise(compare.op, values, compare.rhs.value)[1]
            if passed.any():
                parts.append(family_vec(fam, rows[passed], values[passed], keep_name=True))
        return concat(parts)

    def _bounded_window(self, b: Binary, name: str, arg: RangeSelect, t: int) -> float | Vec:
        """``max_over_time(X[r]) <= c`` and its kin (``prefilter``): the windows of
        the rows whose newest number cannot pass are not read, unless the whole
        answer is already known at ``t``."""
        assert isinstance(b.rhs, Num)
        c = b.rhs.value
        found = self._one_family(name, arg, t)
        if found is None:
            return binary(b, self._range_call(name, arg, t), c, self.store.symbols)
        fam, rows, mint, maxt = found
        rows = rows[~prefilter.cannot_pass(fam, rows, name, b.op, c, mint, maxt)]
        vec = range_rows(name, fam, rows, mint, maxt, arg.range)
        return binary(b, vec, c, self.store.symbols)

    def _narrowed_side(self, b: Binary, lhs: Vec, t: int) -> Vec | None:
        """The right of a join or set operator whose left ``lhs`` has few samples,
        computed only for the series that can match them (``prefilter``); None
        where it is computed whole."""
        sel = prefilter.narrows_set(b)
        if sel is None:
            return self._narrowed_right(b, lhs, t)
        selection = self._selection(sel, t)
        if len(lhs) * prefilter.NARROW_SHARE > sum(rows.size for _, rows, _ in selection):
            return None
        compare = b.rhs if isinstance(b.rhs, Binary) else None
        return self._selected(selection, compare, lhs, b.labels)

    def _narrowed_right(self, b: Binary, lhs: Vec, t: int) -> Vec | None:
        """The right of ``A * on (labels) group_left f(X[r])`` (``prefilter``)
        computed only for the series of X that a sample of A matches, where A has
        few samples; None where it is computed whole: A matches many, X spans
        families, the whole is known at ``t``, or two of X's answers share their
        labels (the whole then raises Prometheus's error)."""
        found = prefilter.narrows_join(b)
        if found is None:
            return None
        call, agg = found
        arg = call.args[0]
        assert isinstance(arg, RangeSelect)
        one = self._one_family(call.name, arg, t)
        if one is None or len(lhs) * prefilter.NARROW_SHARE > one[1].size:
            return None
        fam, rows, mint, maxt = one
        left, right = prefilter.join_keys(fam, rows, lhs, b.labels)
        shared = prefilter.shared_keys(right)
        if agg is None and shared.any():
            twins = range_rows(call.name, fam, rows[shared], mint, maxt, arg.range)
            if prefilter.shared_keys(label_key(twins, sorted(set(b.labels)))).any():
                return None
        out = range_rows(call.name, fam, rows[member(right, left)], mint, maxt, arg.range)
        return out if agg is None else aggregate(agg, out, None, self.store.symbols)

    def _one_family(
        self, name: str, arg: RangeSelect, t: int
    ) -> tuple[Family, I64, int, int] | None:
        """The family ``name(arg)`` reads at ``t``, its rows and its window's ends
        (``mint``, ``maxt``), for a filter to compute it for some of the rows; None
        where it reads several families or its whole answer is known already."""
        known = self._memo.get(("range", name, arg.select.key, arg.range, t), _names(arg.select))
        if known is not None:
            return None
        selected = self.store.select(arg.select.matchers)
        if len(selected) != 1:
            return None
        fam, rows = selected[0]
        maxt = t - arg.select.offset
        return fam, rows, maxt - arg.range, maxt


def _names(sel: Select) -> Names:
    name = select_name(sel)
    return None if name is None else (name,)


__all__ = ["Columns", "Evaluator", "TargetFilter", "prometheus_time_ms"]
