"""Reads of a family in the shapes other than a rule's window (``Family.window``):
a subquery's points left-aligned (``dense``), one series' points for a range
vector result (``points``), and each sample's own time (``instant_times``, for
``timestamp()``). Each refuses a read before what the family kept, as the window
does (``Family.require``)."""

from __future__ import annotations

import numpy as np

from autoscaler.promql.family import Family, is_stale, kept_first
from autoscaler.promql.symbols import F64, I64


def dense(fam: Family, rows: I64, mint: int, maxt: int) -> tuple[I64, F64, I64, I64]:
    """``(rows, values, times, count)``: each row's non-stale points in
    [mint, maxt] left-aligned, with their times; rows with none left out."""
    lo, hi, _ = fam.span(rows, mint, maxt)
    cnt = hi - lo
    some = cnt > 0
    rows, lo, cnt = rows[some], lo[some], cnt[some]
    if rows.size == 0:
        return rows, np.zeros((0, 0)), np.zeros((0, 0), dtype=np.int64), cnt
    values, valid = fam.value_block(rows, lo, cnt)
    times = fam.time_block(rows, lo, cnt)
    if not fam.nstale[rows].any():
        return rows, values, times, cnt
    keep = ~is_stale(values)
    if valid is not None:
        keep &= valid
    if not keep.all():
        rows, values, times, cnt = kept_first(rows, keep, values, times)
    return rows, values, times, cnt


def instant_times(fam: Family, rows: I64, ref: int) -> I64:
    """The time of each row's latest sample at or before ``ref`` (rows that an
    instant read at ``ref`` found: ``Family.instant`` checked what it reads)."""
    idx = np.maximum(fam.search_rows(rows, ref, True) - 1, 0)
    return fam.times_at(rows, idx)


def points(fam: Family, row: int, mint: int, maxt: int) -> list[tuple[int, float]]:
    """One row's non-stale points in [mint, maxt] (for range-vector results)."""
    fam.require(mint)
    ts = fam.row_times(row)
    lo = int(np.searchsorted(ts, mint, side="left"))
    hi = int(np.searchsorted(ts, maxt, side="right"))
    vals = fam.row_values(row)[lo:hi]
    keep = ~is_stale(vals)
    return list(zip(ts[lo:hi][keep].tolist(), vals[keep].tolist(), strict=True))


__all__ = ["dense", "instant_times", "points"]
