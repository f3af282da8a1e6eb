"""One metric name's series as a columnar ring buffer: the ``Family``.

Why this shape: the rules read a handful of metric names, each with up to 80,000
series (10,000 nodes x 8 devices), and every cycle asks the same question of all
of them: "the last sample at or before t" or "the samples in [t-r, t]". Python
objects per series or per sample would make one cycle take seconds, so:

* A family holds its values in a 2-D array, time-major: sample ``k`` of series
  (row) ``r`` is at ``[k, r]``, each series' samples sorted by time from
  ``k = 0``, padding after them. Series scraped together stay aligned, so a
  scrape writes one run of array row ``k``, a window of 80,000 series is one
  block of a few array rows (handed to the range functions transposed, as rows x
  points), and a trim moves whole array rows (one array row per series made a
  scrape's writes a cache miss apiece). The values are float32 while every one
  is exactly a float32, float64 after (``narrow.py``; reads are float64 either
  way). The times (int64 milliseconds, like Prometheus) are held once per group
  of series scraped together (``timelines.py``). Label values are codes of the
  store's ``Symbols``, one int64 column per label name.
* Finding each row's window is a vectorised binary search of each timeline, less
  the slots before the row's first sample; timelines aligned with the fullest
  one are answered from it and verified with two gathers, and the answers are
  cached until the family changes. Targets
  scraped at different moments give windows of a few different shapes (start and
  length); the rows are cut into one uniform block per shape rather than gathered
  into a padded matrix, which is several times slower.
* Each row remembers when it last decreased (a counter reset) and last changed,
  so ``rate``/``increase``/``resets``/``changes`` read every point only of the few
  rows that reset or changed inside the window, and the first and last point of
  all the others.
* Retention is kept by trimming: when a row's buffer fills, samples older than
  ``newest - retention`` are shifted out of every row of the family, and the
  buffer grows only if more than three quarters of it is still needed: then at
  once to what the retention will hold at the fullest row's pace (a third more),
  so that a family of 16,384 rows filling a 6-hour retention is copied once or
  twice, not at every third more (amortised doubling where the pace says nothing).
* Rows that hold stale markers (a node that went down) are windowed apart from
  the others, so one lost node does not turn every row's window into a gather.
* A stale marker is the special NaN ``0x7ff0000000000002``, stored as a sample.
  An instant lookup whose latest sample is a stale marker returns nothing, and
  windows skip stale markers (``engine.go``: ``vectorSelectorSingle``,
  ``matrixIterSlice``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler.promql.buffers import Buffers, is_stale
from autoscaler.promql.errors import HistoryNotKept
from autoscaler.promql.matchers import Matcher, MatchType
from autoscaler.promql.narrow import STALE_NAN_BITS, wide
from autoscaler.promql.symbols import F64, I64, Mask
from autoscaler.promql.windows import Window, joined

_MIN = np.iinfo(np.int64).min
# A family of this many rows or more selects by a label's index (``select``).
_INDEXED_ROWS = 1024
_MAX_PARTS = 32


def kept_first(rows: I64, keep: Mask, values: F64, times: I64) -> tuple[I64, F64, I64, I64]:
    """Each row's points that ``keep`` marks moved to its front, in order, and
    how many it kept; rows that keep none left out."""
    order = np.argsort(~keep, axis=1, kind="stable")
    values = np.take_along_axis(values, order, axis=1)
    times = np.take_along_axis(times, order, axis=1)
    count = keep.sum(axis=1).astype(np.int64)
    some = count > 0
    return rows[some], values[some], times[some], count[some]


class Family(Buffers):
    """All series of one metric name; see the module docstring for the layout,
    and ``buffers.py`` for how it is written and trimmed."""

    # -- reading ----------------------------------------------------------------

    def require(self, t: int) -> None:
        """Raises ``HistoryNotKept`` if samples at or after ``t`` (milliseconds)
        may have been trimmed: the family kept less than the read asks."""
        if t < self.kept_from:
            raise HistoryNotKept(
                f"{self.name}: the query reads from {t / 1000:.3f} but the store keeps "
                f"this metric's samples from {self.kept_from / 1000:.3f} on; a source "
                "keeps the history of the expressions it was told of (the rules', "
                "their actions' and the rhythm learner's)"
            )

    def select(self, matchers: Sequence[Matcher]) -> I64:
        """Rows whose labels satisfy every matcher (``__name__`` matchers excluded).

        In a large family, a matcher that names its values (``=``, or ``=~`` of
        plain strings: ``node=~"n1|n2"``) takes its rows from the label's sorted
        index, and the other matchers test only those rows."""
        n = self.n
        rows: I64 | None = None
        if n >= _INDEXED_ROWS:
            for m in matchers:
                if m.name in self.codes and m.type is not MatchType.NRE:
                    named = self.symbols.named_codes(m)
                    if named is None:
                        continue
                    rows = self._index.rows(m.name, self.codes[m.name][:n], named)
                    break  # None: not indexed yet, scanned below
        mask: Mask | None = None
        for m in matchers:
            col = self.codes.get(m.name)
            if col is None:
                if m.matches(""):
                    continue
                return np.zeros(0, dtype=np.int64)
            hit = self.symbols.match(m, col[:n] if rows is None else col[rows])
            mask = hit if mask is None else mask & hit
        if rows is not None:
            return rows if mask is None else rows[mask]
        if mask is None:
            return self.all_rows()
        return np.flatnonzero(mask).astype(np.int64)

    def search(self, target: int, right: bool) -> I64:
        """For every row, how many of its samples are ``<= target`` (right) or
        ``< target`` (left): the index where ``target`` would be inserted."""
        key = (target, right)
        hit = self._searches.get(key)
        if hit is not None:
            return hit
        n = self.n
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        found = self._search(np.arange(n, dtype=np.int64), target, right)
        self._searches[key] = found
        return found

    def search_rows(self, rows: I64, target: int, right: bool) -> I64:
        """``search(target, right)[rows]``; for a few rows of a large family (a
        selector that names some nodes) only theirs are searched."""
        hit = self._searches.get((target, right))
        if hit is None and rows.size * 8 < self.n:
            return self._search(rows, target, right)
        return self.search(target, right)[rows]

    def _search(self, rows: I64, target: int, right: bool) -> I64:
        # Each timeline is searched once (or only the rows' own, for a few rows),
        # and each row's answer is its timeline's less the slots before its first.
        lines = self.lines
        at: I64 | slice = slice(0, self.n) if self.every_row(rows) else rows
        if rows.size > lines.width:
            found = lines.search(np.arange(lines.width, dtype=np.int64), target, right)
            slot = found.take(self.tl[at])
        else:
            tl = self.tl[at]
            slot = lines.search(tl, target, right)
        slot -= self.toff[at]
        out: I64 = np.clip(slot, 0, self.count[at], out=slot)
        return out

    def instant(self, rows: I64, ref: int, lookback: int) -> tuple[I64, F64]:
        """Rows with a sample in [ref - lookback, ref] whose latest is not stale,
        and that sample's value (Prometheus 2.x: both ends included)."""
        if rows.size == 0:
            return rows, np.zeros(0)
        self.require(ref - lookback)
        # Every row (a selector with no matcher but the name, over a family of
        # 32,816 link series): the per-row arrays are read as slices, not gathered.
        every = self.every_row(rows)
        at: I64 | slice = slice(0, self.n) if every else rows
        cnt = self.count[at]
        some = cnt > 0
        newest = self.last_t[at]
        if int(np.max(newest, where=some, initial=_MIN)) <= ref:
            # Every row's newest sample is at or before ``ref`` (the usual instant:
            # now): it is the one, without a search, and its value is the row's
            # last value, read from the per-row arrays instead of a gather over
            # the matrix. Only a row that holds stale markers is read there, to
            # leave it out if its newest sample is one (a node that went down).
            ok = some & (newest >= ref - lookback)
            marked = np.flatnonzero(self.nstale[at] > 0)
            if marked.size:
                last = self.values_at(rows[marked], np.maximum(cnt[marked] - 1, 0))
                ok[marked] &= ~is_stale(last)
            if every and bool(ok.all()):
                return rows, self.last_value[: self.n].copy()
            return rows[ok], self.last_value[rows[ok]]
        idx = self.search_rows(rows, ref, True) - 1
        ok = idx >= 0
        # One flat gather per array: cheaper than numpy's 2-D fancy indexing.
        at = np.maximum(idx, 0)
        t = self.times_at(rows, at)
        v = self.values_at(rows, at)
        ok &= t >= ref - lookback
        if self.nstale[rows].any():
            ok &= ~is_stale(v)
        return rows[ok], v[ok]

    def last_event(self, kind: str, rows: I64) -> I64:
        """When each row last reset (``"drop"``) or changed (``"change"``); a window
        starting after that time has no such event in it."""
        out: I64 = (self.last_drop if kind == "drop" else self.last_change)[rows]
        return out

    def span(self, rows: I64, mint: int, maxt: int) -> tuple[I64, I64, bool]:
        """Where each row's samples in ``[mint, maxt]`` start (``lo``) and end
        (``hi``, exclusive), and whether every row's newest sample is at or before
        ``maxt`` (a window ending now: each row's points end at its last, without a
        search). Refuses a read before what the family kept (``require``)."""
        self.require(mint)
        lo = self.search_rows(rows, mint, False)
        total = self.count[rows]
        at_end = int(np.max(self.last_t[rows], where=total > 0, initial=_MIN)) <= maxt
        hi = total if at_end else self.search_rows(rows, maxt, True)
        return lo, hi, at_end

    def window(self, rows: I64, mint: int, maxt: int, need_values: bool) -> Window:
        """The non-stale points of each row with ``mint <= t <= maxt``; rows with
        none are left out. ``need_values`` builds the point matrix."""
        lo, hi, at_end = self.span(rows, mint, maxt)
        cnt = hi - lo
        some = cnt > 0
        if not some.all():
            rows, lo, hi, cnt = rows[some], lo[some], hi[some], cnt[some]
        if rows.size == 0:
            return self._ends(rows, lo, hi, cnt)
        marked = self.nstale[rows] > 0
        if not marked.any():
            return self._clean_window(rows, lo, hi, cnt, need_values, at_end)
        if marked.all():
            return self._marked_window(rows, lo, hi, cnt)
        # A few rows hold stale markers (a node that went down): only theirs are
        # gathered point by point; the others keep the aligned slices.
        at = np.flatnonzero(~marked)
        clean = self._clean_window(rows[at], lo[at], hi[at], cnt[at], need_values)
        at_marked = np.flatnonzero(marked)
        dirty = self._marked_window(rows[at_marked], lo[at_marked], hi[at_marked], cnt[at_marked])
        if dirty.rows.size < at_marked.size:  # rows with only stale markers in range
            at_marked = at_marked[np.isin(rows[at_marked], dirty.rows)]
        return joined(clean, at, dirty, at_marked)

    def _clean_window(
        self, rows: I64, lo: I64, hi: I64, cnt: I64, need_values: bool, at_end: bool = False
    ) -> Window:
        """``window`` of rows with no stale marker; ``at_end``: each row's points end
        at its newest sample, whose time and value the per-row arrays hold."""
        if not at_end:
            w = self._ends(rows, lo, hi, cnt)
        else:
            last_t, last_v = self.last_t[rows], self.last_value[rows]
            if (cnt == 1).all():
                # One point a row (a [1m] window over 1-minute scrapes): no gather.
                w = Window(rows, cnt, last_t, last_t, last_v, last_v)
                if need_values:
                    w.values = last_v[:, None]
                return w
            w = Window(rows, cnt, self.times_at(rows, lo), last_t, self.values_at(rows, lo), last_v)
        if not need_values:
            return w
        parts = self._uniform_parts(rows, lo, cnt)
        if parts is None:
            w.values, w.valid = self.value_block(rows, lo, cnt)
        elif len(parts) == 1:
            w.values = parts[0][1]
        else:
            w.parts = [w.part(pos, block) for pos, block in parts]
        return w

    def _marked_window(self, rows: I64, lo: I64, hi: I64, cnt: I64) -> Window:
        """``window`` of rows that hold stale markers (maybe not in this range)."""
        values, valid = self.value_block(rows, lo, cnt)
        stale = is_stale(values)
        if valid is not None:
            stale &= valid
        if stale.any():
            return self._drop_stale(rows, lo, cnt, values, valid, stale)
        w = self._ends(rows, lo, hi, cnt)
        w.values, w.valid = values, valid
        return w

    def _uniform_parts(self, rows: I64, lo: I64, cnt: I64) -> list[tuple[I64, F64]] | None:
        """The rows cut into groups that share their window's start and length, each
        with its points as one slice per row; None if that takes too many groups
        (the caller then gathers a padded matrix instead)."""
        lo0 = int(lo[0])
        c0 = int(cnt[0])
        if (lo == lo0).all() and (cnt == c0).all():
            if rows.size == self.n and int(rows[0]) == 0 and int(rows[-1]) == self.n - 1:
                return [(np.arange(rows.size), wide(self.vals[lo0 : lo0 + c0, : self.n].T))]
            return [(np.arange(rows.size), wide(self.vals[lo0 : lo0 + c0, rows].T))]
        key = lo * (self.cap + 1) + cnt
        # Usually most rows share the first row's shape (scraped together) and a
        # few do not: only those few are sorted into their shapes.
        same = key == key[0]
        groups: list[I64] = []
        if 2 * int(np.count_nonzero(same)) > key.size:
            groups.append(np.flatnonzero(same))
            others = np.flatnonzero(~same)
        else:
            others = np.arange(key.size)
        shapes, which = np.unique(key[others], return_inverse=True)
        if len(shapes) + len(groups) > _MAX_PARTS:
            return None
        order = np.argsort(which, kind="stable")
        bounds = np.flatnonzero(np.diff(which[order])) + 1
        if others.size:
            groups.extend(np.split(others[order], bounds))
        parts: list[tuple[I64, F64]] = []
        for positions in groups:
            start = int(lo[positions[0]])
            width = int(cnt[positions[0]])
            parts.append((positions, wide(self.vals[start : start + width, rows[positions]].T)))
        return parts

    def _ends(self, rows: I64, lo: I64, hi: I64, cnt: I64) -> Window:
        first = self.flat(rows, lo)
        last = self.flat(rows, hi - 1)
        lines = self.lines
        # Each row's timeline slot 0 as a flat index: both ends from it.
        base = self.toff[rows] * lines.width + self.tl[rows]
        return Window(
            rows=rows,
            count=cnt,
            first_t=lines.times.take(base + lo * lines.width, mode="clip"),
            last_t=lines.times.take(base + (hi - 1) * lines.width, mode="clip"),
            first_v=wide(self.vals.take(first)),
            last_v=wide(self.vals.take(last)),
        )

    def block(
        self, src: npt.NDArray[Any], rows: I64, lo: I64, cnt: I64
    ) -> tuple[npt.NDArray[Any], Mask | None]:
        """Each row's points from ``lo`` on, ``cnt`` of them: a slice when the rows
        are aligned, else a gather padded past each row's count."""
        lo0 = int(lo[0])
        c0 = int(cnt[0])
        if (lo == lo0).all() and (cnt == c0).all():
            if rows.size == self.n and int(rows[0]) == 0 and int(rows[-1]) == self.n - 1:
                block = src[lo0 : lo0 + c0, : self.n].T
            else:
                block = src[lo0 : lo0 + c0, rows].T
            return block, None
        width = int(cnt.max())
        offsets = np.arange(width)
        valid = offsets[None, :] < cnt[:, None]
        idx = np.minimum(lo[:, None] + offsets[None, :], self.cap - 1)
        block = src.take(self.flat(rows[:, None], idx))
        return block, valid

    def value_block(self, rows: I64, lo: I64, cnt: I64) -> tuple[F64, Mask | None]:
        """``block`` of the values, as float64."""
        values, valid = self.block(self.vals, rows, lo, cnt)
        return wide(values), valid

    def _drop_stale(
        self, rows: I64, lo: I64, cnt: I64, values: F64, valid: Mask | None, stale: Mask
    ) -> Window:
        times = self.time_block(rows, lo, cnt)
        keep = ~stale if valid is None else valid & ~stale
        rows, values, times, count = kept_first(rows, keep, values, times)
        width = int(count.max()) if count.size else 0
        values, times = values[:, :width], times[:, :width]
        valid2 = np.arange(width)[None, :] < count[:, None]
        i = np.arange(len(rows))
        last = np.maximum(count - 1, 0)
        return Window(
            rows=rows,
            count=count,
            first_t=times[:, 0] if width else np.zeros(0, dtype=np.int64),
            last_t=times[i, last],
            first_v=values[:, 0] if width else np.zeros(0),
            last_v=values[i, last],
            values=values,
            valid=valid2,
            timestamps=times,
        )


__all__ = ["STALE_NAN_BITS", "Family", "is_stale", "kept_first"]
