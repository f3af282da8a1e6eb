"""A family's sample times, held once for the series scraped together:
``Timelines``.

Why a module of its own: series scraped at one moment (every device of a node,
every node of a simulated fleet) share their sample times. Holding one time per
sample of every series made the times half of the store's bytes and half of a
scrape's writes; a timeline holds them once for all the series on it.

The layout: timeline ``l`` is column ``l`` of ``times`` (time-major, like the
values: its slot ``s`` at ``[s, l]``), ``length[l]`` slots of it in use, sorted,
and ``members[l]`` series on it. A series (a row of the family, ``buffers.py``)
on timeline ``tl`` from slot ``toff`` took its sample ``k`` at
``times[toff + k, tl]``. Every series on a timeline is at its head (``toff`` plus
its count is the timeline's length), so a write of all of a timeline's series
appends one time to it; a write of only some moves those onto a copy of the
timeline first (``split``). A timeline no series is on has length 0 and is
reused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler.promql.lookup import time_search
from autoscaler.promql.symbols import I64

PAD = np.iinfo(np.int64).max
"""A slot no time was written to (past a timeline's length)."""
_INITIAL_CAP = 16
# Samples (slots x columns) one gather of ``shift_columns`` moves at most.
_SHIFT_PART = 1 << 18


def shift_columns(arr: npt.NDArray[Any], cnt: I64, cols: I64, d: I64, fill: int, part: int) -> None:
    """Each of ``cols`` of ``arr`` (time-major, ``cnt``: the slots in use of
    each) up by its ``d`` slots, in gathers of about ``part`` elements: slot
    ``k`` takes slot ``k + d``, ``fill`` past what the column holds. ``arr`` may be
    a view of other bits (a float array's bits, as uint64)."""
    cap = int(arr.shape[0])
    step = max(1, part // max(int(cnt.max(initial=0)), 1))
    for i in range(0, cols.size, step):
        c, by, n = cols[i : i + step], d[i : i + step], cnt[i : i + step]
        end = int(n.max())
        src = np.arange(end, dtype=np.int64)[:, None] + by[None, :]
        past = src >= n[None, :]
        np.minimum(src, cap - 1, out=src)
        moved = arr[src, c[None, :]]
        moved[past] = fill
        arr[:end, c] = moved


class Timelines:
    """The sample times of one family's series, one column per group of series
    scraped together (see the module docstring)."""

    def __init__(self) -> None:
        self.times: I64 = np.full((_INITIAL_CAP, 1), PAD, dtype=np.int64)
        self.length: I64 = np.zeros(1, dtype=np.int64)
        self.members: I64 = np.zeros(1, dtype=np.int64)

    @property
    def width(self) -> int:
        """Columns held (timelines in use and free ones)."""
        return int(self.times.shape[1])

    @property
    def cap(self) -> int:
        """Slots each column holds before it grows."""
        return int(self.times.shape[0])

    def in_use(self) -> int:
        """Bytes of the columns that series are on."""
        return 8 * self.cap * int(np.count_nonzero(self.members))

    def _resize(self, cap: int, width: int) -> None:
        old = self.width
        times = np.full((cap, width), PAD, dtype=np.int64)
        times[: min(cap, self.cap), :old] = self.times[:cap]
        self.times = times
        for name in ("length", "members"):
            new = np.zeros(width, dtype=np.int64)
            new[:old] = getattr(self, name)
            setattr(self, name, new)

    def allocate(self, k: int) -> I64:
        """``k`` free timelines (length 0, no members), added if too few are free;
        the caller puts its series on them at once."""
        free = np.flatnonzero(self.members == 0)[:k]
        if free.size < k:
            old = self.width
            self._resize(self.cap, max(old + k - free.size, old + old // 4 + 4))
            more = np.arange(old, old + k - free.size, dtype=np.int64)
            free = np.concatenate((free, more))
        out: I64 = free.astype(np.int64)
        return out

    def stamp(self, lines: I64, t: int) -> None:
        """Appends ``t`` to each of ``lines`` (distinct), growing every column if one
        is full."""
        if lines.size == 1:
            line = int(lines[0])
            slot = int(self.length[line])
            if slot >= self.cap:
                self._grow(slot + 1)
            self.times[slot, line] = t
            self.length[line] = slot + 1
            return
        slots = self.length[lines]
        need = int(slots.max(initial=0)) + 1
        if need > self.cap:
            self._grow(need)
        self.times[slots, lines] = t
        self.length[lines] = slots + 1

    def _grow(self, need: int) -> None:
        """Room for ``need`` slots and a third more, in whole steps of the initial
        capacity (amortised: a column is copied once per third it grows)."""
        cap = max(-(-need * 4 // 3 // _INITIAL_CAP) * _INITIAL_CAP, self.cap + _INITIAL_CAP)
        self._resize(cap, self.width)

    def split(self, lines: I64, moving: I64) -> I64:
        """Copies of ``lines`` for ``moving`` of each one's series (the ones a write
        reaches; the others stay); returns the copies, in order."""
        fresh = self.allocate(lines.size)
        top = int(self.length[lines].max(initial=0))
        self.times[:top, fresh] = self.times[:top, lines]
        self.length[fresh] = self.length[lines]
        self.members[fresh] = moving
        self.members[lines] -= moving
        return fresh

    def search(self, lines: I64, target: int, right: bool) -> I64:
        """For each of ``lines``, how many of its slots are ``<= target`` (right) or
        ``< target`` (left)."""
        return time_search(self.times, self.length[lines], lines, target, right)

    def shift(self, lines: I64, d: I64) -> None:
        """Drops the first ``d`` slots of each of ``lines``."""
        shift_columns(self.times, self.length[lines], lines, d, PAD, _SHIFT_PART)
        self.length[lines] -= d


__all__ = ["PAD", "Timelines", "shift_columns"]
