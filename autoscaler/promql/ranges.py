"""A range function over some rows of one family of the built-in evaluator's store.

Why a module of its own: the evaluator asks it of whole selections
(``Evaluator._range_call``) and of the rows left after a filter
(``prefilter``: a bound on ``max_over_time``, the rows a join can match), and each
must answer what the whole selection's rows would. Here too are the shortcuts of
``rate``/``increase``/``changes``/``resets`` (``EVENTS``): computed from each row's
first and last points, and from all of them only for the rows that reset (or
changed) in the window; a counter unchanged since before the window answers 0
from one point.
"""

from __future__ import annotations

import numpy as np

from autoscaler.promql.family import Family
from autoscaler.promql.functions import EVENTS, NEEDS_POINTS, range_function
from autoscaler.promql.symbols import F64, I64, Mask
from autoscaler.promql.vectors import Vec, family_vec


def range_rows(name: str, fam: Family, rows: I64, mint: int, maxt: int, range_ms: int) -> Vec:
    """``name`` (a range function) over the window ``[mint, maxt]`` of ``rows`` of
    ``fam``: a sample for each row the function answers for, in the rows' order,
    the metric name dropped (kept by ``last_over_time``)."""
    # Rows with stale markers are windowed apart (``Family.window``), and a row's
    # last reset or change skips them as a window does, so the first-and-last
    # shortcut holds for them too.
    event = EVENTS.get(name)
    if event is not None:
        keep, values, w_rows = _event_function(name, event, fam, rows, mint, maxt, range_ms)
    else:
        w = fam.window(rows, mint, maxt, need_values=name in NEEDS_POINTS)
        keep, values = range_function(name, w, mint, maxt, range_ms)
        w_rows = w.rows
    if not len(w_rows):
        return family_vec(fam, w_rows, np.zeros(0), keep_name=name == "last_over_time")
    return family_vec(fam, w_rows[keep], values[keep], keep_name=name == "last_over_time")


def _event_function(
    name: str, event: str, fam: Family, rows: I64, mint: int, maxt: int, range_ms: int
) -> tuple[Mask, F64, I64]:
    """A function of ``EVENTS`` computed from each row's first and last points, and
    from all of them only for the rows that reset (or changed) since ``mint``."""
    if name in ("rate", "increase") and rows.size:
        still = unchanged(fam, rows, mint, maxt)
        if still.any():
            return _with_unchanged(name, event, fam, rows, still, mint, maxt, range_ms)
    w = fam.window(rows, mint, maxt, need_values=False)
    keep, values = range_function(name, w, mint, maxt, range_ms, quiet=True)
    busy = np.flatnonzero(fam.last_event(event, w.rows) >= mint)
    if busy.size:
        full = fam.window(w.rows[busy], mint, maxt, need_values=True)
        busy_keep, busy_values = range_function(name, full, mint, maxt, range_ms)
        keep = keep.copy()
        values = values.copy()
        keep[busy] = busy_keep
        values[busy] = busy_values
    return keep, values, w.rows


def unchanged(fam: Family, rows: I64, mint: int, maxt: int) -> Mask:
    """The rows whose value has not changed since before ``mint``, is a number, and
    whose points all lie at or before ``maxt``, with no stale marker held: over any
    two of their points in the window, ``rate`` and ``increase`` are exactly 0
    (last - first is 0, and 0 extrapolated is 0)."""
    at = fam.as_slice(rows)
    still: Mask = (
        (fam.last_change[at] < mint)
        & (fam.last_t[at] <= maxt)
        & (fam.nstale[at] == 0)
        & np.isfinite(fam.last_value[at])
    )
    return still


def _with_unchanged(
    name: str,
    event: str,
    fam: Family,
    rows: I64,
    still: Mask,
    mint: int,
    maxt: int,
    range_ms: int,
) -> tuple[Mask, F64, I64]:
    """``_event_function`` where the rows ``still`` marks (``unchanged``) answer 0
    when they have two points in the window (their second newest at ``mint`` or
    later) and nothing otherwise, as ``rate`` and ``increase`` do, read from one
    point each instead of a window; the other rows as before."""
    keep = np.zeros(rows.size, dtype=np.bool_)
    values = np.zeros(rows.size)
    at = np.flatnonzero(still)
    cnt = fam.count[rows[at]]
    second = fam.times_at(rows[at], np.maximum(cnt - 2, 0))
    keep[at] = (cnt >= 2) & (second >= mint)
    other = np.flatnonzero(~still)
    if other.size:
        k, v, w_rows = _event_function(name, event, fam, rows[other], mint, maxt, range_ms)
        # ``w_rows`` are the other rows with a point in the window, in their order.
        where = other[np.isin(rows[other], w_rows, assume_unique=True)]
        keep[where] = k
        values[where] = v
    return keep, values, rows


__all__ = ["range_rows", "unchanged"]
