"""The writing half of a metric name's ``Family``: its sample buffers.

Why a module of its own: ``family.py`` reads a family (selections, instants,
windows); this module holds the layout those reads rely on and keeps it: rows
added, samples appended (a scrape of every row, or of every k-th, writes one run
of an array row as a slice), the buffer grown or trimmed to the retention, and
rows dropped once empty. The layout itself is described in ``family.py``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from autoscaler.promql.lookup import LabelIndex, runs
from autoscaler.promql.narrow import STALE_NAN_BITS, bits, fits, nan_bits, stale_bits, wide
from autoscaler.promql.symbols import F64, I64, Mask, Symbols
from autoscaler.promql.timelines import Timelines, shift_columns
from autoscaler.types import Labels

_PAD = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min
_INITIAL_CAP = 16
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
    "tl",
    "toff",
)
_ROW_FILL = {"last_drop": _MIN, "last_change": _MIN, "last_t": _MIN}


# Samples (array rows x series) a trim moves at once through numpy's buffer.
_SHIFT_PART = 1 << 18
# Consecutive rows a trim shifts as slices; fewer move in one gather.
_WIDE_RUN = 64
# Rows moved at once by ``Family.drop_empty_rows``.
_MOVE_ROWS = 256


class _Scrape(NamedTuple):
    """What a write through a slice of rows left (``Buffers._remember``)."""

    t: int
    """The newest sample's time, in every row."""
    samples: int
    """Every row's count."""
    lines: I64
    """The timelines of the rows, which hold no other row."""
    had: bool
    """Whether every row holds a value (``had_value``)."""


def _key(at: slice) -> tuple[int, int, int]:
    """A slice of rows (``as_slice``'s: start and stop set) as a key."""
    return int(at.start), int(at.stop), 1 if at.step is None else int(at.step)


def _room_for(samples: int) -> int:
    """A buffer for ``samples`` with a third more to spare (a trim then comes every
    quarter buffer), in whole steps of the initial capacity."""
    return -(-samples * 4 // 3 // _INITIAL_CAP) * _INITIAL_CAP


def is_stale(values: F64) -> Mask:
    """Which values are stale markers."""
    out: Mask = np.ascontiguousarray(values).view(np.uint64) == STALE_NAN_BITS
    return out


def _flat_view(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``arr`` (C-contiguous) as one dimension, a view that writes through; an
    array that cannot be viewed so raises rather than hand back a copy."""
    if not arr.flags.c_contiguous:
        raise ValueError("a family's sample arrays are C-contiguous")
    return arr.reshape(-1)


class Buffers:
    """A family's rows and sample arrays, and every change to them; ``Family``
    adds the reads."""

    def __init__(self, name: str, name_code: int, symbols: Symbols) -> None:
        self.name = name
        self.name_code = name_code
        self.symbols = symbols
        self.position = 0
        """Index in the store's family list (what series refs point at)."""
        self.n = 0
        self.labels: list[Labels] = []
        self.index: dict[Labels, int] = {}
        """Each row's labels -> its series ref (which, unlike the row, stays when
        rows before it are dropped)."""
        self.codes: dict[str, I64] = {}
        self.vals: npt.NDArray[np.floating[Any]] = np.full(
            (_INITIAL_CAP, 0), np.nan, dtype=np.float32
        )
        """The values, float32 while every one written is exactly one
        (``narrow.py``): read them through ``wide``."""
        self.lines = Timelines()
        """The sample times, held once per group of rows scraped together."""
        self.tl: I64 = np.zeros(0, dtype=np.int64)
        """Each row's timeline, where it has samples (0 where it has none)."""
        self.toff: I64 = np.zeros(0, dtype=np.int64)
        """The slot of its timeline where each row's first sample is."""
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
        self._scrapes: dict[tuple[int, int, int], _Scrape] = {}
        """What the last write through each slice of rows left (``_again``),
        forgotten at any other change of the family."""
        self._all: I64 = np.zeros(0, dtype=np.int64)
        """``all_rows``' array, while ``n`` rows are held."""
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
        self._scrapes.clear()
        self._wrote()

    def _wrote(self) -> None:
        """A write changed the rows it wrote and nothing else: what the writes
        through other slices left stands (``_scrapes``)."""
        self._searches.clear()
        self.version += 1

    @property
    def cap(self) -> int:
        """How many samples each row holds at most before a trim or a resize."""
        return int(self.vals.shape[0])

    @property
    def width(self) -> int:
        """How many rows the arrays hold (``n`` and the spare ones after it)."""
        return int(self.vals.shape[1])

    def flat(self, rows: I64, at: I64 | int) -> I64:
        """Flat indices of each row's sample ``at`` (cheaper than 2-D indexing)."""
        out: I64 = at * self.width + rows
        return out

    def times_at(self, rows: I64, at: I64 | int) -> I64:
        """The time of each row's sample ``at`` (rows that hold it: past a row's
        count the answer is any time)."""
        lines = self.lines
        flat = (self.toff[rows] + at) * lines.width + self.tl[rows]
        out: I64 = lines.times.take(flat, mode="clip")
        return out

    def time_block(self, rows: I64, lo: I64, cnt: I64) -> I64:
        """Each row's sample times from ``lo`` on, ``cnt`` of them, as rows x points
        (any time past a row's count), as ``block`` gives the values."""
        offsets = np.arange(int(cnt.max(initial=0)), dtype=np.int64)
        return self.times_at(rows[:, None], lo[:, None] + offsets[None, :])

    def row_times(self, row: int) -> I64:
        """One row's sample times, in order (a contiguous copy)."""
        c = int(self.count[row])
        if c == 0:
            return np.zeros(0, dtype=np.int64)
        o, line = int(self.toff[row]), int(self.tl[row])
        return np.ascontiguousarray(self.lines.times[o : o + c, line])

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
        self.index[labels] = ref
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
        vals = np.empty((cap, rows), dtype=self.vals.dtype)
        bits(vals)[:keep, :n] = bits(self.vals)[:keep, :n]
        vals[keep:, :n] = np.nan
        vals[:, n:] = np.nan
        self.vals = vals
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

    def append(
        self, rows: I64, t: int, values: F64 | None, cutoff: int, at: I64 | slice | None = None
    ) -> int:
        """Appends at time t to distinct rows; ``values`` None writes stale markers.

        Rows whose newest sample is at or after t are skipped. Returns how many
        samples were stored. ``at`` is ``rows`` as ``as_slice`` gives it, where
        the caller has it already.
        """
        # A scrape of the whole family, or of every k-th row (one fault kind of
        # every device), reads and writes the per-row arrays as slices, not
        # gathered and scattered.
        if at is None:
            at = self.as_slice(rows)
        if isinstance(at, slice):
            again = self._again(rows, at, t, values)
            if again is not None:
                return again
        scraped = rows.size
        cnt = self.count[at]
        # last_t holds each row's newest time; it is only meaningful where cnt > 0.
        newest = self.last_t[at]
        if rows.size and int(newest.max()) >= t:
            fresh = (cnt == 0) | (newest < t)
            rows, cnt = rows[fresh], cnt[fresh]
            at = rows
            if values is not None:
                values = values[fresh]
        if rows.size == 0:
            return 0
        c0 = int(cnt[0])
        # Rows appended together at one count (a scrape) write one run of the
        # sample's row of the arrays: a slice of it, or a scatter into it.
        uniform = bool((cnt == c0).all())
        if (c0 if uniform else int(cnt.max())) >= self.cap:
            self.make_room(cutoff)
            cnt = self.count[at]
            c0 = int(cnt[0])
            uniform = bool((cnt == c0).all())
        self._write(rows, at, c0 if uniform else cnt, values)
        whole = self._stamp(rows, at, cnt, c0 if uniform else None, t)
        self._track(rows, at, t, values, self.had_value[at])
        self.count[at] = cnt + 1
        self.had_samples[at] = True
        self._wrote()
        if isinstance(at, slice) and uniform and whole is not None and rows.size == scraped:
            # Only these rows and their own timeline changed (a trim above forgot
            # every slice): what other slices left stands.
            self._remember(rows, at, t, c0 + 1, whole)
        elif self._scrapes:
            self._forget(rows)
        return int(rows.size)

    def _forget(self, rows: I64) -> None:
        """Forgets what writes through slices left where they meet ``rows`` (just
        written): their counts or timelines may have changed. A split or a join
        moves only rows written, so the other slices' stand."""
        for key in list(self._scrapes):
            start, stop, step = key
            inside = (rows >= start) & (rows < stop) & ((rows - start) % step == 0)
            if inside.any():
                del self._scrapes[key]

    def _remember(self, rows: I64, at: slice, t: int, count: int, lines: I64) -> None:
        """Notes that every row of ``at`` now holds ``count`` samples, the newest at
        ``t``, on the timelines ``lines`` which hold no other row: the next scrape
        of the same rows (``_again``) need not read that back."""
        self._forget(rows)
        self._scrapes[_key(at)] = _Scrape(t, count, lines, bool(self.had_value[at].all()))

    def _again(self, rows: I64, at: slice, t: int, values: F64 | None) -> int | None:
        """``append`` of the rows ``at`` where their last write was through the same
        slice and nothing else changed the family since (``_scrapes``): their
        counts, newest time and timelines are known, so none is read back, and a
        value is compared with the previous one as bits (a change of sign of 0
        or of a NaN's payload counts as a change: more windows read in full,
        never fewer). None where it does not apply: ``append`` does it all."""
        key = _key(at)
        memo = self._scrapes.get(key)
        if memo is None or t <= memo.t or memo.samples >= self.cap:
            return None
        if values is not None and not memo.had:  # the first value of some row
            return None
        self._write(rows, at, memo.samples, values)
        self.lines.stamp(memo.lines, t)
        self._track(rows, at, t, values, None)
        self.count[at] = memo.samples + 1
        self._wrote()
        self._scrapes[key] = _Scrape(t, memo.samples + 1, memo.lines, memo.had)
        return int(rows.size)

    def _track(
        self, rows: I64, at: I64 | slice, t: int, values: F64 | None, had: Mask | None
    ) -> None:
        """What the incremental reads go by, for a write at ``t`` to ``rows``
        (``had``: which held a value before; None: all of them): each row's
        newest time, value, last drop and last change (``ranges.unchanged``).
        Stale markers are skipped in windows, so a value is compared with the
        previous one that is not a marker, as a window pairs them. The comparison
        is of the 64 bits: a zero changing sign, or a NaN its payload, counts as
        a change (the window is then read in full: never a wrong answer, only a
        slower one)."""
        self.last_t[at] = t
        if values is None:
            self.nstale[at] += 1
            return
        previous = self.last_value[at]
        with np.errstate(invalid="ignore"):
            dropped = values < previous
        changed = values.view(np.int64) != previous.view(np.int64)
        if had is not None:
            dropped &= had
            changed &= had
        if isinstance(at, slice):  # views: written through
            self.last_drop[at][dropped] = t
            self.last_change[at][changed] = t
        else:
            self.last_drop[rows[dropped]] = t
            self.last_change[rows[changed]] = t
        self.last_value[at] = values
        if had is not None:
            self.had_value[at] = True

    def _write(self, rows: I64, at: I64 | slice, cnt: I64 | int, values: F64 | None) -> None:
        """Sample ``cnt`` of each row (one count for all, or each its own) set to
        ``values`` (stale markers where None); its time is the timelines'."""
        if values is not None and self.vals.dtype == np.float32 and not fits(values):
            self._widen()
        if isinstance(cnt, int):
            if values is None:
                bits(self.vals)[cnt, at] = stale_bits(self.vals)
            else:
                self.vals[cnt, at] = values
            return
        # Assigned through flat views: np.put costs about three times as much.
        flat = self.flat(rows, cnt)
        if values is None:
            _flat_view(bits(self.vals))[flat] = stale_bits(self.vals)
        else:
            _flat_view(self.vals)[flat] = values

    def _widen(self) -> None:
        """The values as float64 from now on: one was written that float32 does not
        hold exactly."""
        self.vals = wide(self.vals)

    def values_at(self, rows: I64, at: I64 | int) -> F64:
        """The value of each row's sample ``at``, as float64."""
        return wide(self.vals.take(self.flat(rows, at)))

    def row_values(self, row: int) -> F64:
        """One row's values, in order, as float64 (a contiguous copy)."""
        c = int(self.count[row])
        return np.ascontiguousarray(wide(self.vals[:c, row]))

    def _stamp(self, rows: I64, at: I64 | slice, cnt: I64, c0: int | None, t: int) -> I64 | None:
        """The time ``t`` of the sample just written to ``rows`` (``cnt``: their
        counts before it; ``c0``: that count if they share it). A scrape of every
        series on one timeline appends one time to it. Returns the timelines
        stamped where the write covered each of them whole (none split, no row
        joined one), else None."""
        lines = self.lines
        if (c0 > 0) if c0 is not None else int(cnt.min()) > 0:
            tl = self.tl[at]
            line = int(tl[0])
            if int(lines.members[line]) == rows.size and bool((tl == line).all()):
                lines.stamp(tl[:1], t)
                return tl[:1].copy()
        old = cnt > 0
        held = rows[old]
        used = np.zeros(0, dtype=np.int64)
        whole = True
        if held.size:
            tl = self.tl[held]
            hits = np.bincount(tl, minlength=lines.width)
            # Timelines only some of whose series this writes: those move to a copy.
            partial = np.flatnonzero((hits > 0) & (hits < lines.members))
            if partial.size:
                whole = False
                remap = np.arange(lines.width, dtype=np.int64)
                remap[partial] = lines.split(partial, hits[partial])
                tl = remap[tl]
                self.tl[held] = tl
            used = np.flatnonzero(np.bincount(tl, minlength=lines.width))
            lines.stamp(used, t)
        new = rows[~old] if held.size else rows
        if new.size:
            # Rows with no sample join a timeline this write reaches, at its head.
            whole = False
            if used.size:
                line = int(used[0])
            else:
                line = int(lines.allocate(1)[0])
                lines.stamp(np.array([line]), t)
            self.tl[new] = line
            self.toff[new] = int(lines.length[line]) - 1
            lines.members[line] += new.size
        return used if whole else None

    def as_slice(self, rows: I64) -> I64 | slice:
        """``rows`` as a slice where they are evenly spaced and increasing (every
        row, or every k-th): per-row arrays then read and write views, not gathers.
        Otherwise ``rows`` itself."""
        size = rows.size
        if rows is self._all and size == self.n:
            return slice(0, size)
        if size == 0 or int(rows[0]) < 0 or int(rows[-1]) >= self.n:
            return rows
        first = int(rows[0])
        if size == 1:
            return slice(first, first + 1)
        step = int(rows[1]) - first
        last = int(rows[-1])
        if step <= 0 or last != first + step * (size - 1):
            return rows
        at = slice(first, last + 1, step)
        if not np.array_equal(rows, np.arange(first, last + 1, step)):
            return rows
        return at

    def label_columns(self) -> dict[str, I64]:
        """Each label's codes of every row: read-only views of the columns (a
        selector of the name alone; a subset of the rows is gathered when read,
        ``vectors.Cols``). The columns are replaced, never rewritten, when rows go
        (``drop_empty_rows``), and a new row writes past every view."""
        n = self.n
        out: dict[str, I64] = {}
        for k, c in self.codes.items():
            view = c[:n]
            view.flags.writeable = False
            out[k] = view
        return out

    def all_rows(self) -> I64:
        """Every row, in order: one read-only array while the rows stay, so that
        a reader recognises it without comparing (``every_row``)."""
        if self._all.size != self.n:
            self._all = np.arange(self.n, dtype=np.int64)
            self._all.flags.writeable = False
        return self._all

    def every_row(self, rows: I64) -> bool:
        """Whether ``rows`` is every row of the family, in order."""
        n = self.n
        if rows is self._all and n == rows.size:
            return True
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
        times = self.row_times(r0)
        first, newest = int(times[0]), int(times[-1])
        if newest <= first:
            return 0
        held = (newest - max(cutoff, _MIN + 1)) * (c0 - 1) // (newest - first) + 2
        return _room_for(held)

    def trim(self, cutoff: int) -> None:
        """Drops the samples older than ``cutoff`` (milliseconds) from every row."""
        n = self.n
        if n == 0:
            return
        held = np.flatnonzero(self.count[:n])
        tl, off = self.tl[held], self.toff[held]
        lines = self.lines
        # How many slots of each timeline go: those older than the cutoff (a
        # search per timeline, not a comparison of the whole matrix: the pass
        # runs every quarter retention), and those before its first series' first
        # sample (a series that began there moved to another timeline, or went).
        older = lines.search(np.arange(lines.width, dtype=np.int64), cutoff, False)
        start = np.full(lines.width, _PAD, dtype=np.int64)
        np.minimum.at(start, tl, off)
        d = np.where(start == _PAD, lines.length, np.maximum(older, start))
        drop = np.zeros(n, dtype=np.int64)
        drop[held] = np.clip(d[tl] - off, 0, None)
        gone = np.flatnonzero(d)
        if gone.size:
            lines.shift(gone, d[gone])
            self.toff[held] = np.maximum(off - d[tl], 0)
        rows = np.flatnonzero(drop)
        if rows.size:
            self._trim_values(rows, drop[rows], cutoff)
            emptied = rows[self.count[rows] == 0]
            if emptied.size:
                # Rows left with no sample leave their timeline; one left with no
                # row had all its slots dropped above.
                np.subtract.at(lines.members, self.tl[emptied], 1)
                self.tl[emptied] = 0
                self.toff[emptied] = 0
        if gone.size or rows.size:
            self._changed()

    def _trim_values(self, rows: I64, shifts: I64, cutoff: int) -> None:
        """Each of ``rows`` (ascending) loses its first ``shifts`` values."""
        raw = bits(self.vals)
        # Runs of consecutive rows that lose the same number of samples: a wide
        # run (rows scraped together since before the cutoff) shifts as slices;
        # the narrow ones (rows added since, at other times) all move in one
        # gather, not a Python step each.
        breaks = np.flatnonzero((np.diff(rows) != 1) | (np.diff(shifts) != 0)) + 1
        starts = np.concatenate(([0], breaks))
        stops = np.concatenate((breaks, [rows.size]))
        wide = stops - starts >= _WIDE_RUN
        for a, b in zip(starts[wide].tolist(), stops[wide].tolist(), strict=True):
            self._shift(int(rows[a]), int(rows[b - 1]) + 1, int(shifts[a]))
        if not wide.all():
            narrow = np.repeat(~wide, stops - starts)
            moved = rows[narrow]
            shift_columns(
                raw, self.count[moved], moved, shifts[narrow], nan_bits(self.vals), _SHIFT_PART
            )
        self.count[rows] -= shifts
        if self.short:
            self.kept_from = max(self.kept_from, cutoff)
        stale_rows = rows[self.nstale[rows] > 0]
        if stale_rows.size:
            self.nstale[stale_rows] = (raw[:, stale_rows] == stale_bits(self.vals)).sum(axis=0)

    def _shift(self, lo: int, hi: int, d: int) -> None:
        """Rows ``[lo, hi)`` up by ``d`` values, as slices. Only the values a row
        holds move: past the fullest row's count every row is padding."""
        raw = bits(self.vals)
        end = int(self.count[lo:hi].max())
        # d at a time where the run is wide: no two parts overlap, so numpy
        # copies each straight rather than through a buffer; a narrower run in
        # parts of up to _SHIFT_PART samples, each through a buffer that size.
        step = max(d, _SHIFT_PART // (hi - lo))
        for k in range(0, end - d, step):
            m = min(step, end - d - k)
            raw[k : k + m, lo:hi] = raw[k + d : k + d + m, lo:hi]
        raw[end - d : end, lo:hi] = nan_bits(self.vals)

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
        raw = bits(self.vals)
        dst = first
        for lo, hi in runs(moved, _MOVE_ROWS):
            if lo != dst:
                raw[:end, dst : dst + hi - lo] = raw[:end, lo:hi]
            dst += hi - lo
        self.vals[:end, k:n] = np.nan
        for name in _ROW_ARRAYS:
            arr: npt.NDArray[Any] = getattr(self, name)
            arr[first:k] = arr[moved]
            arr[k:n] = _ROW_FILL.get(name, 0)
        # New code columns, not the old ones rewritten: a selection of every row
        # reads views of them (``label_columns``), which must not change under it.
        codes: dict[str, I64] = {}
        for name, col in self.codes.items():
            new = col.copy()
            new[first:k] = col[moved]
            new[k:n] = 0
            if new[:k].any():
                codes[name] = new
        self.codes = codes
        for i in np.flatnonzero(~keep).tolist():
            del self.index[self.labels[i]]
        self.labels = self.labels[:first] + [self.labels[i] for i in moved.tolist()]
        self._index.clear()
        self.n = k
        self._changed()
        return removed_refs, self.refs[:k].copy()
