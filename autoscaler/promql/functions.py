"""Range-vector functions, computed for many series at once.

Each function receives a ``Window`` (the points of many series inside one range,
one row per series) and reduces along the rows with numpy, following
Prometheus 2.42's ``promql/functions.go`` step for step:

* ``rate``/``increase``/``delta`` are ``extrapolatedRate``: the difference between
  the last and first point plus, for counters, the value before each reset; then
  extrapolation towards the range's ends when the first/last point is closer to
  them than 1.1 times the average interval between points (else half an interval),
  never extrapolating a counter below zero. Fewer than two points: no result.
  The float operations run in 2.42's order (resets added one by one, one factor
  ``extrapolated / sampled / range``, one multiplication), so the answers are
  bit-identical to Prometheus's, not merely close.
* ``*_over_time`` reduce the points; ``min``/``max`` skip NaN unless every point is
  NaN (``v < min || isNaN(min)``). ``changes`` counts neighbours that differ (NaN
  equals NaN), ``resets`` neighbours that decrease.

``sum_over_time`` is compensated (Neumaier) where cancellation could make it
differ from 2.42's ``kahanSum``; ``avg_over_time`` is that sum over the count,
and 2.42's running mean where the sum overflows or meets infinities.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autoscaler.promql.aggregations import incremental_mean
from autoscaler.promql.over_time import compensated_sum
from autoscaler.promql.symbols import F64
from autoscaler.promql.windows import Window

Mask = npt.NDArray[np.bool_]

NEEDS_POINTS = frozenset(
    {
        "rate",
        "increase",
        "changes",
        "resets",
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "sum_over_time",
    }
)
"""Functions that read every point; the others read only the first and last."""


def _filled(w: Window, fill: float) -> F64:
    assert w.values is not None
    if w.valid is None:
        return w.values
    return np.where(w.valid, w.values, fill)


def _row_reduce(ufunc: np.ufunc, x: F64) -> F64:
    """``ufunc.reduce`` over each row of ``x``, along the axis its memory runs: a
    store's block is a transposed view of time-major arrays (``family.py``), whose
    rows are strided, and numpy reduces a strided row several times slower."""
    if x.ndim == 2 and x.strides[0] < x.strides[1]:
        out: F64 = ufunc.reduce(x.T, axis=0)
    else:
        out = ufunc.reduce(x, axis=1)
    return out


def _neighbours(w: Window) -> tuple[F64, F64, Mask | None]:
    assert w.values is not None
    prev = w.values[:, :-1]
    cur = w.values[:, 1:]
    pairs = None if w.valid is None else w.valid[:, 1:]
    return prev, cur, pairs


EVENTS = {"rate": "drop", "increase": "drop", "resets": "drop", "changes": "change"}
"""Functions that only need every point where a row reset (or changed) in the
window; elsewhere the first and last points suffice (``Family.last_event``)."""


def range_function(
    name: str, w: Window, range_start: int, range_end: int, range_ms: int, quiet: bool = False
) -> tuple[Mask, F64]:
    """``(which rows have a result, the results)`` of ``name`` over the window.

    ``range_start``/``range_end`` are the window's bounds in milliseconds (after
    the offset); ``range_ms`` is the selector's range. ``quiet`` says no row has a
    reset or change (``EVENTS``) in the window, so the points are not read.
    """
    if w.parts is not None:
        keep: Mask = np.ones(len(w.rows), dtype=np.bool_)
        out: F64 = np.zeros(len(w.rows))
        for part in w.parts:
            assert part.positions is not None
            k, v = range_function(name, part, range_start, range_end, range_ms, quiet)
            keep[part.positions] = k
            out[part.positions] = v
        return keep, out
    n = len(w.rows)
    every: Mask = np.ones(n, dtype=np.bool_)
    if n == 0:
        return every, np.zeros(0)
    with np.errstate(all="ignore"):
        if name == "count_over_time":
            return every, w.count.astype(np.float64)
        if name == "last_over_time":
            return every, w.last_v
        if name == "sum_over_time":
            assert w.values is not None
            return every, compensated_sum(w.values, w.valid)
        if name == "avg_over_time":
            return every, _avg_over_time(w)
        if name == "min_over_time":
            return every, _row_reduce(np.fmin, _filled(w, np.nan))
        if name == "max_over_time":
            return every, _row_reduce(np.fmax, _filled(w, np.nan))
        if quiet and name in ("changes", "resets"):
            return every, np.zeros(n)
        if name == "changes":
            prev, cur, pairs = _neighbours(w)
            changed = (cur != prev) & ~(np.isnan(cur) & np.isnan(prev))
            if pairs is not None:
                changed &= pairs
            return every, changed.sum(axis=1).astype(np.float64)
        if name == "resets":
            prev, cur, pairs = _neighbours(w)
            dropped = cur < prev
            if pairs is not None:
                dropped &= pairs
            return every, dropped.sum(axis=1).astype(np.float64)
        if name in ("rate", "increase", "delta"):
            return _extrapolated_rate(
                w,
                range_start,
                range_end,
                range_ms,
                is_counter=name != "delta",
                is_rate=name == "rate",
                resets=not quiet,
            )
    raise ValueError(f"{name} is not a range function")


def _avg_over_time(w: Window) -> F64:
    """The compensated sum over the count; rows where that overflows (values near
    ±1e308) or meets infinities take 2.42's running mean instead."""
    assert w.values is not None
    out: F64 = compensated_sum(w.values, w.valid) / w.count
    bad = np.flatnonzero(~np.isfinite(out))
    for i in bad.tolist():
        out[i] = incremental_mean(w.values[i, : int(w.count[i])].tolist())
    return out


def _extrapolated_rate(
    w: Window,
    range_start: int,
    range_end: int,
    range_ms: int,
    is_counter: bool,
    is_rate: bool,
    resets: bool,
) -> tuple[Mask, F64]:
    keep: Mask = w.count >= 2
    result = w.last_v - w.first_v
    if is_counter and resets:
        prev, cur, pairs = _neighbours(w)
        reset = cur < prev
        if pairs is not None:
            reset &= pairs
        # Resets are rare: add the value before each only where a row has any,
        # one at a time and in order as 2.42 does, so that the sum rounds as its.
        some = np.flatnonzero(reset.any(axis=1))
        if some.size:
            result = result.copy()
            for row in some.tolist():
                total = float(result[row])
                for before in prev[row][reset[row]].tolist():
                    total += before
                result[row] = total
    duration_to_start = (w.first_t - range_start) / 1000
    duration_to_end = (range_end - w.last_t) / 1000
    sampled = (w.last_t - w.first_t) / 1000
    average = sampled / (w.count - 1).astype(np.float64)
    if is_counter:
        climbs = (result > 0) & (w.first_v >= 0)
        duration_to_zero = sampled * (w.first_v / result)
        duration_to_start = np.where(
            climbs & (duration_to_zero < duration_to_start), duration_to_zero, duration_to_start
        )
    threshold = average * 1.1
    half = average / 2
    extrapolate_to = sampled + np.where(duration_to_start < threshold, duration_to_start, half)
    extrapolate_to = extrapolate_to + np.where(duration_to_end < threshold, duration_to_end, half)
    # 2.42 builds one factor and multiplies once: (extrapolated / sampled), over
    # the range for rate. Multiplying in another order rounds the last bit
    # differently, and histogram_quantile over a rate that lands exactly on a
    # bucket's count then picks the next bucket.
    factor = extrapolate_to / sampled
    if is_rate:
        factor = factor / range_seconds(range_ms)
    return keep, result * factor


def range_seconds(range_ms: int) -> float:
    """``time.Duration.Seconds()`` of the range: whole seconds plus the
    nanoseconds over 1e9, two roundings as Go does them (not ``ms / 1000``)."""
    whole, rest_ms = divmod(range_ms, 1000)
    return float(whole) + float(rest_ms * 1_000_000) / 1e9
