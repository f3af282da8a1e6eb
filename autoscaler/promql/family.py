"""One metric name's series as a columnar ring buffer: the ``Family``.

Why this shape: the rules read a handful of metric names, each with up to 80,000
series (10,000 nodes x 8 devices), and every cycle asks the same question of all
of them: "the last sample at or before t" or "the samples in [t-r, t]". Python
objects per series or per sample would make one cycle take seconds, so:

* A family holds two 2-D arrays, timestamps (int64 milliseconds, like Prometheus)
  and values (float64), time-major: sample ``k`` of series (row) ``r`` is at
  ``[k, r]``, each series' samples sorted by time from ``k = 0``, padding after
  them. Series scraped together stay aligned, so a scrape writes one run of
  array row ``k``, a window of 80,000 series is one block of a few array rows
  (handed to the range functions transposed, as rows x points, a view), and a
  trim moves whole array rows (one array row per series made a scrape's writes
  a cache miss apiece). Label values are codes of the store's ``Symbols``, one
  int64 column per label name.
* Finding each row's window is a vectorised binary search; rows that are aligned
  with the family's fullest row are answered from that one row and verified with
  two gathers, and the answers are cached until the family changes. Targets
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

from autoscaler.promql.errors import HistoryNotKept
from autoscaler.promql.lookup import LabelIndex, runs, time_search
from autoscaler.promql.matchers import Matcher, MatchType
from autoscaler.promql.symbols import F64, I64, Mask, Symbols
from autoscaler.promql.windows import Window, joined
from autoscaler.types import Labels

STALE_NAN_BITS = 0x7FF0000000000002
"""Prometheus's stale marker (``value.StaleNaN``), a NaN no arithmetic produces."""

_PAD = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min
_INITIAL_CAP = 16
# A family of this many rows or more selects by a label's index (``select``).
_INDEXED_ROWS = 1024
_MAX_PARTS = 32
_MAX_PROJECTION = 32
"""How many times the grown buffer a projection from the cadence may ask for:
past it the cadence is taken as not yet known and the buffer doubles."""
_ROW_ARRAYS = (
    "count",
    "nstale",
    "refs",
    "had_samples",
    "last_value",
    "had_value",
    "last_drop",
    "last_change",
    "last_t",
)
_ROW_FILL = {"last_drop": _MIN, "last_change": _MIN, "last_t": _MIN}


# Rows moved at once by ``Family.drop_empty_rows``.
_MOVE_ROWS = 256


def _room_for(samples: int) -> int:
    """A buffer for ``samples`` with a third more to spare (a trim then comes every
    quarter buffer), in whole steps of the initial capacity."""
    return -(-samples * 4 // 3 // _INITIAL_CAP) * _INITIAL_CAP


def is_stale(values: F64) -> Mask:
    """Which values are stale markers."""
    out: Mask = np.ascontiguousarray(values).view(np.uint64) == STALE_NAN_BITS
    return out


def kept_first(rows: I64, keep: Mask, values: F64, times: I64) -> tuple[I64, F64, I64, I64]:
    """Each row's points that ``keep`` marks moved to its front, in order, and
    how many it kept; rows that keep none left out."""
    order = np.argsort(~keep, axis=1, kind="stable")
    values = np.take_along_axis(values, order, axis=1)
    times = np.take_along_axis(times, order, axis=1)
    count = keep.sum(axis=1).astype(np.int64)
    some = count > 0
    return rows[some], values[some], times[some], count[some]


class Family:
    """All series of one metric name; see the module docstring for the layout."""

    def __init__(self, name: str, name_code: int, symbols: Symbols) -> None:
        self.name = name
        self.name_code = name_code
        self.symbols = symbols
        self.position = 0
        """Index in the store's family list (what series refs point at)."""
        self.n = 0
        self.labels: list[Labels] = []
        self.index: dict[Labels, int] = {}
        self.codes: dict[str, I64] = {}
        self.ts: I64 = np.full((_INITIAL_CAP, 0), _PAD, dtype=np.int64)
        self.vals: F64 = np.full((_INITIAL_CAP, 0), np.nan)
        self.count: I64 = np.zeros(0, dtype=np.int64)
        self.nstale: I64 = np.zeros(0, dtype=np.int64)
        self.refs: I64 = np.zeros(0, dtype=np.int64)
        self.had_samples: Mask = np.zeros(0, dtype=np.bool_)
        """Rows appended to at least once: only those are dropped when emptied, so
        a ref taken before its first sample stays valid."""
        self.last_value: F64 = np.zeros(0)
        """Each row's newest value that is not a stale marker (if ``had_value``)."""
        self.had_value: Mask = np.zeros(0, dtype=np.bool_)
        self.last_drop: I64 = np.zeros(0, dtype=np.int64)
        """When each row last fell below its previous value (a counter reset)."""
        self.last_change: I64 = np.zeros(0, dtype=np.int64)
        """When each row last differed from its previous value."""
        self.last_t: I64 = np.zeros(0, dtype=np.int64)
        """The time of each row's newest sample (stale markers too), where it has
        any (``count > 0``): ``append``'s order check without a gather."""
        self._searches: dict[tuple[int, bool], I64] = {}
        self._index = LabelIndex()
        """``select``'s index by label, forgotten when the rows change."""
        self.version = 0
        """Counts every change of the rows or their samples (``memo.py``)."""
        self.short = False
        """Whether the family keeps less history than the store's retention
        (``SeriesStore.kept_by_name``); only then is a read before ``kept_from``
        refused (``require``): past the retention, as past Prometheus's, a
        window holds what is left."""
        self.kept_from = _MIN
        """The latest cutoff a trim of a ``short`` family dropped samples before."""

    def _changed(self) -> None:
        self._searches.clear()
        self.version += 1

    @property
    def cap(self) -> int:
        """How many samples each row holds at most before a trim or a resize."""
        return int(self.ts.shape[0])

    @property
    def width(self) -> int:
        """How many rows the arrays hold (``n`` and the spare ones after it)."""
        return int(self.ts.shape[1])

    def flat(self, rows: I64, at: I64 | int) -> I64:
        """Flat indices of each row's sample ``at`` (cheaper than 2-D indexing)."""
        out: I64 = at * self.width + rows
        return out

    # -- rows -------------------------------------------------------------------

    def add_row(self, labels: Labels, ref: int) -> int:
        row = self.n
        if row == self.width:
            self._resize(max(16, row + row // 4), self.cap)
        # Rows past ``n`` are padding already (``_resize``, ``drop_empty_rows``).
        for k, v in labels:
            if k == "__name__":
                continue
            col = self.codes.get(k)
            if col is None:
                col = self.codes[k] = np.zeros(self.width, dtype=np.int64)
            col[row] = self.symbols.intern(v)
        self.labels.append(labels)
        self.index[labels] = row
        self._index.clear()
        self.refs[row] = ref
        self.n += 1
        self._changed()
        return row

    def _resize(self, rows: int, cap: int) -> None:
        """New arrays of ``cap`` samples x ``rows`` rows: the first ``n`` rows'
        samples copied, everything else padding, each element written once (a fill
        and then a copy wrote the kept part twice)."""
        n = self.n
        keep = min(cap, self.cap)
        ts = np.empty((cap, rows), dtype=np.int64)
        vals = np.empty((cap, rows))
        ts[:keep, :n] = self.ts[:keep, :n]
        ts[keep:, :n] = _PAD
        ts[:, n:] = _PAD
        vals.view(np.uint64)[:keep, :n] = self.vals.view(np.uint64)[:keep, :n]
        vals[keep:, :n] = np.nan
        vals[:, n:] = np.nan
        self.ts, self.vals = ts, vals
        for name in _ROW_ARRAYS:
            old: npt.NDArray[Any] = getattr(self, name)
            new = np.full(rows, _ROW_FILL.get(name, 0), dtype=old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)
        for k, col in self.codes.items():
            new = np.zeros(rows, dtype=np.int64)
            new[:n] = col[:n]
            self.codes[k] = new

    # -- writing ----------------------------------------------------------------

    def append(self, rows: I64, t: int, values: F64 | None, cutoff: int) -> int:
        """Appends at time t to distinct rows; ``values`` None writes stale markers.

        Rows whose newest sample is at or after t are skipped. Returns how many
        samples were stored.
        """
        # A scrape of the whole family writes every row in order: the per-row
        # arrays are then read and written as slices, not gathered and scattered.
        at: I64 | slice = slice(0, self.n) if self._every_row(rows) else rows
        cnt = self.count[at]
        # last_t holds each row's newest time; it is only meaningful where cnt > 0.
        fresh = (cnt == 0) | (self.last_t[at] < t)
        if not fresh.all():
            rows, cnt = rows[fresh], cnt[fresh]
            at = rows
            if values is not None:
                values = values[fresh]
        if rows.size == 0:
            return 0
        if int(cnt.max()) >= self.cap:
            self.make_room(cutoff)
            cnt = self.count[at]
        # Rows appended together at one count (a scrape) write one run of the
        # sample's row of the arrays.
        flat = self.flat(rows, cnt)
        np.put(self.ts, flat, t)
        if values is None:
            np.put(self.vals.view(np.uint64), flat, STALE_NAN_BITS)
            self.nstale[at] += 1
        else:
            np.put(self.vals, flat, values)
            # Stale markers are skipped in windows, so each value is compared with
            # the previous one that is not a marker, as a window would pair them.
            previous = self.last_value[at]
            had = self.had_value[at]
            with np.errstate(invalid="ignore"):
                dropped = had & (values < previous)
                changed = had & (values != previous) & ~(np.isnan(values) & np.isnan(previous))
            self.last_drop[rows[dropped]] = t
            self.last_change[rows[changed]] = t
            self.last_value[at] = values
            self.had_value[at] = True
        self.count[at] = cnt + 1
        self.last_t[at] = t
        self.had_samples[at] = True
        self._changed()
        return int(rows.size)

    def _every_row(self, rows: I64) -> bool:
        """Whether ``rows`` is every row of the family, in order."""
        n = self.n
        return (
            rows.size == n
            and n > 0
            and int(rows[0]) == 0
            and int(rows[-1]) == n - 1
            and bool(np.array_equal(rows, np.arange(n)))
        )

    def make_room(self, cutoff: int) -> None:
        """Trims samples before ``cutoff``; grows the buffer if it stays 3/4 full,
        at once to what the retention will hold at the fullest row's cadence when
        that is known (``_projected``), so that a family is copied once or twice
        while it fills rather than at every third more."""
        self.trim(cutoff)
        need = int(self.count[: self.n].max()) if self.n else 0
        if need + 1 > self.cap * 3 // 4:
            cap = max(_room_for(need + 1), self.cap + _INITIAL_CAP)
            projected = self._projected(cutoff)
            if projected <= _MAX_PROJECTION * cap:
                cap = max(cap, projected)
            else:
                # No cadence to go by, or a retention far longer than what has
                # come so far (math.inf keeps everything): amortised doubling.
                cap = max(cap, 2 * self.cap)
            # An eighth more rows to spare (their samples' room is written): a
            # family as wide as the fleet would otherwise be copied whole, at its
            # new length, for the first node a scale-up adds.
            self._resize(max(self.width, self.n + self.n // 8 + _INITIAL_CAP), cap)

    def _projected(self, cutoff: int) -> int:
        """The buffer that holds, with a quarter to spare, what the fullest row
        will keep in ``[cutoff, newest]`` at the pace of the samples it has; 0 if
        it has fewer than two samples or they share one time."""
        n = self.n
        if n == 0:
            return 0
        r0 = int(np.argmax(self.count[:n]))
        c0 = int(self.count[r0])
        if c0 < 2:
            return 0
        first, newest = int(self.ts[0, r0]), int(self.ts[c0 - 1, r0])
        if newest <= first:
            return 0
        held = (newest - max(cutoff, _MIN + 1)) * (c0 - 1) // (newest - first) + 2
        return _room_for(held)

    def trim(self, cutoff: int) -> None:
        """Drops the samples older than ``cutoff`` (milliseconds) from every row."""
        n = self.n
        if n == 0:
            return
        # How many samples of each row are older (a search per row, not a
        # comparison of the whole matrix: the pass runs every quarter retention).
        drop = time_search(self.ts, self.count[:n], np.arange(n), cutoff, False)
        rows = np.flatnonzero(drop)
        if rows.size == 0:
            return
        bits = self.vals.view(np.uint64)
        nan_bits = np.float64(np.nan).view(np.uint64)
        # Rows that lose the same number of samples shift together, as slices;
        # rows scraped together are trimmed together, so there are few groups.
        # Only the samples a row holds move: past the fullest row's count every
        # row is padding already.
        shifts = drop[rows]
        for d in np.unique(shifts).tolist():
            group = rows[shifts == d]
            # Whole runs of consecutive rows: each array row's part is contiguous.
            for lo, hi in runs(group, n):
                end = int(self.count[lo:hi].max())
                # Up by d samples, d at a time: no two parts overlap, so numpy
                # copies each straight rather than through a buffer.
                for k in range(0, end - d, d):
                    m = min(d, end - d - k)
                    self.ts[k : k + m, lo:hi] = self.ts[k + d : k + d + m, lo:hi]
                    bits[k : k + m, lo:hi] = bits[k + d : k + d + m, lo:hi]
                self.ts[end - d : end, lo:hi] = _PAD
                bits[end - d : end, lo:hi] = nan_bits
        self.count[rows] -= shifts
        if self.short:
            self.kept_from = max(self.kept_from, cutoff)
        stale_rows = rows[self.nstale[rows] > 0]
        if stale_rows.size:
            self.nstale[stale_rows] = (bits[:, stale_rows] == STALE_NAN_BITS).sum(axis=0)
        self._changed()

    def drop_empty_rows(self, before: int = _PAD) -> tuple[I64, I64]:
        """Removes series with no samples whose newest was before ``before`` (a
        ``short`` family's rows live as long as the retention would keep them:
        their refs stay valid as long); returns (removed refs, kept refs)."""
        n = self.n
        keep = (self.count[:n] > 0) | ~self.had_samples[:n] | (self.last_t[:n] >= before)
        if keep.all():
            return np.zeros(0, dtype=np.int64), self.refs[:n].copy()
        kept = np.flatnonzero(keep)
        removed_refs = self.refs[:n][~keep].copy()
        k = len(kept)
        # The rows before the first one removed stay where they are; the others
        # move up in runs of consecutive rows, as slices, and only the columns
        # that hold samples (past a row's count is padding, in every row).
        first = int(np.argmin(keep))
        moved = kept[first:]
        end = int(self.count[moved].max(initial=0))
        bits = self.vals.view(np.uint64)
        dst = first
        for lo, hi in runs(moved, _MOVE_ROWS):
            if lo != dst:
                self.ts[:end, dst : dst + hi - lo] = self.ts[:end, lo:hi]
                bits[:end, dst : dst + hi - lo] = bits[:end, lo:hi]
            dst += hi - lo
        self.ts[:end, k:n] = _PAD
        self.vals[:end, k:n] = np.nan
        for name in _ROW_ARRAYS:
            arr: npt.NDArray[Any] = getattr(self, name)
            arr[first:k] = arr[moved]
            arr[k:n] = _ROW_FILL.get(name, 0)
        for col in self.codes.values():
            col[first:k] = col[moved]
            col[k:n] = 0
        self.codes = {name: col for name, col in self.codes.items() if col[:k].any()}
        for i in np.flatnonzero(~keep).tolist():
            del self.index[self.labels[i]]
        self.labels = self.labels[:first] + [self.labels[i] for i in moved.tolist()]
        for i in range(first, k):
            self.index[self.labels[i]] = i
        self._index.clear()
        self.n = k
        self._changed()
        return removed_refs, self.refs[:k].copy()

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
            return np.arange(n, dtype=np.int64)
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
        return time_search(self.ts, self.count[rows], rows, target, right)

    def instant(self, rows: I64, ref: int, lookback: int) -> tuple[I64, F64]:
        """Rows with a sample in [ref - lookback, ref] whose latest is not stale,
        and that sample's value (Prometheus 2.x: both ends included)."""
        if rows.size == 0:
            return rows, np.zeros(0)
        self.require(ref - lookback)
        # Every row (a selector with no matcher but the name, over a family of
        # 32,816 link series): the per-row arrays are read as slices, not gathered.
        every = self._every_row(rows)
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
                flat = self.flat(rows[marked], np.maximum(cnt[marked] - 1, 0))
                ok[marked] &= ~is_stale(np.take(self.vals, flat))
            if every and bool(ok.all()):
                return rows, self.last_value[: self.n].copy()
            return rows[ok], self.last_value[rows[ok]]
        idx = self.search_rows(rows, ref, True) - 1
        ok = idx >= 0
        # One flat gather per array: cheaper than numpy's 2-D fancy indexing.
        flat = self.flat(rows, np.maximum(idx, 0))
        t = np.take(self.ts, flat)
        v = np.take(self.vals, flat)
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
            first = self.flat(rows, lo)
            w = Window(
                rows, cnt, np.take(self.ts, first), last_t, np.take(self.vals, first), last_v
            )
        if not need_values:
            return w
        parts = self._uniform_parts(rows, lo, cnt)
        if parts is None:
            w.values, w.valid = self.block(self.vals, rows, lo, cnt)
        elif len(parts) == 1:
            w.values = parts[0][1]
        else:
            w.parts = [w.part(pos, block) for pos, block in parts]
        return w

    def _marked_window(self, rows: I64, lo: I64, hi: I64, cnt: I64) -> Window:
        """``window`` of rows that hold stale markers (maybe not in this range)."""
        values, valid = self.block(self.vals, rows, lo, cnt)
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
                return [(np.arange(rows.size), self.vals[lo0 : lo0 + c0, : self.n].T)]
            return [(np.arange(rows.size), self.vals[lo0 : lo0 + c0, rows].T)]
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
            parts.append((positions, self.vals[start : start + width, rows[positions]].T))
        return parts

    def _ends(self, rows: I64, lo: I64, hi: I64, cnt: I64) -> Window:
        first = self.flat(rows, lo)
        last = self.flat(rows, hi - 1)
        return Window(
            rows=rows,
            count=cnt,
            first_t=np.take(self.ts, first),
            last_t=np.take(self.ts, last),
            first_v=np.take(self.vals, first),
            last_v=np.take(self.vals, last),
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
        block = np.take(src, self.flat(rows[:, None], idx))
        return block, valid

    def _drop_stale(
        self, rows: I64, lo: I64, cnt: I64, values: F64, valid: Mask | None, stale: Mask
    ) -> Window:
        times, _ = self.block(self.ts, rows, lo, cnt)
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
