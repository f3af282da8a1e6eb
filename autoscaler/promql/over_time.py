"""PromQL 2.42's range functions that read every point with its timestamp.

Why a module of its own: ``functions.py`` computes the functions rules use most
(``rate``, ``increase``, the plain ``*_over_time``) from a ``Window``, often
without reading the points at all. The functions here need every point and its
time: ``deriv``/``predict_linear`` (least squares), ``irate``/``idelta`` (the last
two points), ``holt_winters``, ``quantile_over_time``,
``stddev``/``stdvar_over_time`` and ``present_over_time``. They take ``Points``:
one row per series, its points left-aligned in a (rows × width) matrix of values
and one of millisecond times, ``count`` of them valid; a subquery's result has
the same shape. Each function is a few numpy operations over all rows at once
(``holt_winters`` one pass over the columns).

Numerics are ``promql/functions.go`` at v2.42.0: ``linearRegression`` returns
slope 0 for a constant series (NaN if it is infinite), and its four sums are
compensated (``kahanSumInc``, Neumaier's variant) point by point as 2.42 adds
them, so ``deriv`` of a gauge near 1e10 agrees beyond the 8th digit; sums that
cancel are recomputed with the same compensation, as 2.42 does for
``sum_over_time`` and ``avg_over_time``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoscaler.promql.errors import EvalError
from autoscaler.promql.symbols import F64, I64, Mask
from autoscaler.promql.windows import Window

POINT_FUNCTIONS = frozenset(
    {
        "deriv",
        "predict_linear",
        "irate",
        "idelta",
        "holt_winters",
        "quantile_over_time",
        "stddev_over_time",
        "stdvar_over_time",
        "present_over_time",
    }
)


@dataclass
class Points:
    """Points of many series (see the module docstring)."""

    values: F64
    times: I64
    count: I64

    def __len__(self) -> int:
        return len(self.count)

    @property
    def valid(self) -> Mask:
        out: Mask = np.arange(self.values.shape[1])[None, :] < self.count[:, None]
        return out

    def window(self, rows: I64) -> Window:
        """The same points as a ``Window`` (for ``functions.range_function``)."""
        i = np.arange(len(self.count))
        last = np.maximum(self.count - 1, 0)
        full = bool((self.count == self.values.shape[1]).all())
        return Window(
            rows=rows,
            count=self.count,
            first_t=self.times[:, 0],
            last_t=self.times[i, last],
            first_v=self.values[:, 0],
            last_v=self.values[i, last],
            values=self.values,
            valid=None if full else self.valid,
            timestamps=self.times,
        )


def point_function(name: str, p: Points, args: list[float], t: int) -> tuple[Mask, F64]:
    """``(which rows have a result, the results)``; ``t`` is the evaluation time
    in milliseconds (``predict_linear`` extrapolates from it)."""
    n = len(p)
    every: Mask = np.ones(n, dtype=np.bool_)
    if n == 0:
        return every, np.zeros(0)
    with np.errstate(all="ignore"):
        if name == "present_over_time":
            return every, np.ones(n)
        if name in ("stddev_over_time", "stdvar_over_time"):
            var = _variance(p)
            return every, np.sqrt(var) if name == "stddev_over_time" else var
        if name == "quantile_over_time":
            return every, quantile_rows(args[0], p)
        two = p.count >= 2
        if name in ("irate", "idelta"):
            return _instant_value(p, is_rate=name == "irate")
        if name == "deriv":
            slope, _ = linear_regression(p, p.times[:, 0])
            return two, slope
        if name == "predict_linear":
            slope, intercept = linear_regression(p, np.full(n, t, dtype=np.int64))
            return two, slope * args[0] + intercept
        if name == "holt_winters":
            return two, _holt_winters(p, args[0], args[1])
    raise ValueError(f"{name} is not a point function")


def _variance(p: Points) -> F64:
    """``funcStdvarOverTime``'s running (Welford) variance with compensated sums,
    one column of points at a time for all rows: overflow turns out as in 2.42
    (NaN where a square overflows)."""
    n = len(p)
    mean, c_mean = np.zeros(n), np.zeros(n)
    aux, c_aux = np.zeros(n), np.zeros(n)
    for j in range(p.values.shape[1]):
        live = j < p.count
        v = p.values[:, j]
        delta = v - (mean + c_mean)
        m2, cm2 = _kahan_inc(delta / (j + 1), mean, c_mean)
        a2, ca2 = _kahan_inc(delta * (v - (m2 + cm2)), aux, c_aux)
        mean, c_mean = np.where(live, m2, mean), np.where(live, cm2, c_mean)
        aux, c_aux = np.where(live, a2, aux), np.where(live, ca2, c_aux)
    out: F64 = (aux + c_aux) / p.count
    return out


def _kahan_inc(inc: F64, total: F64, c: F64) -> tuple[F64, F64]:
    """``kahanSumInc`` (Neumaier's variant) for whole columns."""
    t = total + inc
    c = c + np.where(np.abs(total) >= np.abs(inc), (total - t) + inc, (inc - t) + total)
    return t, c


def quantile_rows(q: float, p: Points) -> F64:
    """``quantile`` of each row's points (NaN sorted first), as 2.42 computes it."""
    n = len(p)
    if math.isnan(q):
        return np.full(n, np.nan)
    if q < 0:
        return np.full(n, -math.inf)
    if q > 1:
        return np.full(n, math.inf)
    valid = p.valid
    nan = np.isnan(p.values) & valid
    # Invalid slots sort last, NaN first, then values.
    key = np.where(valid, np.where(nan, -np.inf, p.values), np.inf)
    rank_key = np.where(~valid, 2, np.where(nan, 0, 1))
    idx = np.lexsort((key, rank_key), axis=1)
    s = np.take_along_axis(p.values, idx, axis=1)
    count = p.count.astype(np.float64)
    rank = q * (count - 1)
    lower = np.maximum(0, np.floor(rank))
    upper = np.minimum(count - 1, lower + 1)
    weight = rank - np.floor(rank)
    rows = np.arange(n)
    lo = s[rows, lower.astype(np.int64)]
    hi = s[rows, upper.astype(np.int64)]
    out: F64 = lo * (1 - weight) + hi * weight
    return out


def _instant_value(p: Points, is_rate: bool) -> tuple[Mask, F64]:
    """``instantValue``: from the last two points."""
    rows = np.arange(len(p))
    last = np.maximum(p.count - 1, 0)
    prev = np.maximum(p.count - 2, 0)
    lv, pv = p.values[rows, last], p.values[rows, prev]
    interval = (p.times[rows, last] - p.times[rows, prev]).astype(np.float64)
    keep: Mask = (p.count >= 2) & (interval != 0)
    out = lv - pv
    if is_rate:
        out = np.where(lv < pv, lv, out) / (interval / 1000)
    return keep, out


def linear_regression(p: Points, intercept_time: I64) -> tuple[F64, F64]:
    """``linearRegression``: slope and intercept of each row's least-squares line,
    x in seconds from ``intercept_time``; a row whose values are all equal has
    slope 0 and its value as intercept (NaN for both if it is infinite)."""
    full = bool((p.count == p.values.shape[1]).all())
    n = p.count.astype(np.float64)
    sum_x, sum_y, sum_xy, sum_x2 = _regression_sums(p, intercept_time)
    cov = sum_xy - sum_x * sum_y / n
    var = sum_x2 - sum_x * sum_x / n
    slope = cov / var
    intercept = sum_y / n - slope * sum_x / n
    # Only a row whose covariance (nearly) cancels can be constant: check those.
    scale = np.abs(sum_xy) + np.abs(sum_x * sum_y / n)
    maybe = np.flatnonzero(np.abs(cov) <= 1e-9 * scale)
    if maybe.size:
        vals = p.values[maybe]
        first = vals[:, :1]
        same = vals == first
        if not full:
            same |= ~p.valid[maybe]
        const = maybe[same.all(axis=1)]
        if const.size:
            c = p.values[const, 0]
            inf = np.isinf(c)
            slope = slope.copy()
            intercept = intercept.copy()
            slope[const] = np.where(inf, np.nan, 0.0)
            intercept[const] = np.where(inf, np.nan, c)
    return slope, intercept


def _regression_sums(p: Points, intercept_time: I64) -> tuple[F64, F64, F64, F64]:
    """The four sums of ``linearRegression``, each compensated (``kahanSumInc``)
    point by point in time order, one column of points at a time for all rows:
    plain sums of values near 1e10 lose the last digits that 2.42 keeps."""
    rows = len(p)
    sums = [np.zeros(rows) for _ in range(4)]
    comps = [np.zeros(rows) for _ in range(4)]
    for j in range(p.values.shape[1]):
        live = j < p.count
        x = (p.times[:, j] - intercept_time) / 1e3
        v = p.values[:, j]
        for k, inc in enumerate((x, v, x * v, x * x)):
            t, c = _kahan_inc(inc, sums[k], comps[k])
            sums[k] = np.where(live, t, sums[k])
            comps[k] = np.where(live, c, comps[k])
    sx, sy, sxy, sx2 = (a + b for a, b in zip(sums, comps, strict=True))
    return sx, sy, sxy, sx2


def _holt_winters(p: Points, sf: float, tf: float) -> F64:
    if not 0 < sf < 1:
        raise EvalError(f"invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:f}")
    if not 0 < tf < 1:
        raise EvalError(f"invalid trend factor. Expected: 0 < tf < 1, got: {tf:f}")
    v = p.values
    s0 = np.zeros(len(p))
    s1 = v[:, 0].copy()
    b = v[:, 1] - v[:, 0] if v.shape[1] > 1 else np.zeros(len(p))
    for i in range(1, v.shape[1]):
        live = i < p.count
        x = sf * v[:, i]
        nb = b if i == 1 else tf * (s1 - s0) + (1 - tf) * b
        y = (1 - sf) * (s1 + nb)
        b = np.where(live, nb, b)
        s0, s1 = np.where(live, s1, s0), np.where(live, x + y, s1)
    return s1


def compensated_sum(values: F64, valid: Mask | None) -> F64:
    """Each row's sum as ``kahanSumInc`` computes it; the plain sum is kept for
    the rows where no cancellation can make the two differ."""
    # Row by row in memory, whatever the window's layout (a store's block is a
    # transposed view): numpy sums a contiguous row pairwise and a strided one in
    # order, and the two can differ in the last bit.
    x = np.ascontiguousarray(values if valid is None else np.where(valid, values, 0.0))
    with np.errstate(all="ignore"):
        plain: F64 = x.sum(axis=1)
        magnitude = np.abs(x).sum(axis=1)
        doubtful = np.flatnonzero(
            np.isfinite(magnitude) & (magnitude > np.abs(plain) * 1e6) & (magnitude > 0)
        )
    if doubtful.size:
        plain = plain.copy()
        plain[doubtful] = _neumaier(x[doubtful])
    return plain


def _neumaier(x: F64) -> F64:
    total = np.zeros(x.shape[0])
    c = np.zeros(x.shape[0])
    for j in range(x.shape[1]):
        total, c = _kahan_inc(x[:, j], total, c)
    out: F64 = np.where(np.isinf(total), total, total + c)
    return out


__all__ = [
    "POINT_FUNCTIONS",
    "Points",
    "compensated_sum",
    "linear_regression",
    "point_function",
    "quantile_rows",
]
