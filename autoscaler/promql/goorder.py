"""The order in which Prometheus 2.42 returns ``sort``, ``sort_desc``, ``topk`` and
``bottomk``, ties and NaN included.

Why a module of its own: a stable sort by value is what a reader expects, and it
is not what Prometheus does. ``topk``/``bottomk`` keep each group's samples in a
``container/heap`` (``aggregation()`` in ``promql/engine.go``): a sample enters
when the heap is short or beats its root, the root is popped to make room, and
the heap is finally sorted with ``sort.Sort(sort.Reverse(heap))``. Which of two
equal samples stays in, and which comes first, follows the heap's layout, not the
input order; on a fleet where most counters sit at 0, most ``topk`` answers have
such ties. ``sort``/``sort_desc`` are ``sort.Sort`` over the input
(``funcSort``/``funcSortDesc`` in ``promql/functions.go``), whose comparison puts
NaN first before the reversal, so NaNs come out last and in reverse order.

Go's ``sort.Sort`` sorts 12 elements or fewer by insertion, which is stable for
its comparison and reproduced here. Longer inputs go through pattern-defeating
quicksort, whose order among equal elements is not reproduced: there the result
is ordered by value (exactly as Prometheus) and equal values keep input order.

The heap is walked in Python, one sample at a time, so callers use it only where
the order is not already fixed by distinct values (``needs_heap``); ``k = 1``,
which the shipped stall rules use, has a closed form (``top_one``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cmp_to_key

import numpy as np

from autoscaler.promql.symbols import F64, I64

Less = Callable[[float, float], bool]

INSERTION_MAX = 12
"""Go's ``sort.Sort`` sorts this many elements or fewer by insertion."""


def value_less(a: float, b: float) -> bool:
    """``vectorByValueHeap.Less``: NaN is below everything, itself included."""
    return math.isnan(a) or a < b


def reverse_value_less(a: float, b: float) -> bool:
    """``vectorByReverseValueHeap.Less``: NaN first, then larger before smaller."""
    return math.isnan(a) or a > b


def reverse_sort(values: Sequence[float], less: Less) -> list[int]:
    """The positions of ``values`` in the order ``sort.Sort(sort.Reverse(x))``
    leaves them, for a type ``x`` whose ``Less`` is ``less``."""

    def reversed_less(i: int, j: int) -> bool:
        return less(values[j], values[i])

    order = list(range(len(values)))
    if len(order) <= INSERTION_MAX:
        # Go's insertionSort: move each element left while it is less than its
        # left neighbour.
        for i in range(1, len(order)):
            j = i
            while j > 0 and reversed_less(order[j], order[j - 1]):
                order[j], order[j - 1] = order[j - 1], order[j]
                j -= 1
        return order

    def compare(i: int, j: int) -> int:
        if reversed_less(i, j):
            return -1
        return 1 if reversed_less(j, i) else 0

    return sorted(order, key=cmp_to_key(compare))


def _up(h: list[int], j: int, less: Callable[[int, int], bool]) -> None:
    while j > 0:
        parent = (j - 1) // 2
        if not less(h[j], h[parent]):
            break
        h[parent], h[j] = h[j], h[parent]
        j = parent


def _down(h: list[int], i: int, n: int, less: Callable[[int, int], bool]) -> None:
    while True:
        child = 2 * i + 1
        if child >= n:
            return
        if child + 1 < n and less(h[child + 1], h[child]):
            child += 1
        if not less(h[child], h[i]):
            return
        h[i], h[child] = h[child], h[i]
        i = child


def top_rows(values: F64, group: I64, k: int, bottom: bool) -> list[int]:
    """The rows ``topk``/``bottomk`` keep, in the order Prometheus 2.42 returns
    them: groups in order of first appearance, each group's heap sorted."""
    v = values.tolist()
    less_value = reverse_value_less if bottom else value_less

    def less(i: int, j: int) -> bool:
        return less_value(v[i], v[j])

    heaps: dict[int, list[int]] = {}
    for row, g in enumerate(group.tolist()):
        h = heaps.get(g)
        if h is None:
            heaps[g] = [row]
            continue
        root = v[h[0]]
        beats = root > v[row] if bottom else root < v[row]
        if len(h) < k or beats or math.isnan(root):
            if len(h) == k:
                if k == 1:
                    h[0] = row
                    continue
                # heap.Pop: the root swaps with the last, sinks, and goes.
                h[0], h[-1] = h[-1], h[0]
                _down(h, 0, len(h) - 1, less)
                h.pop()
            h.append(row)
            _up(h, len(h) - 1, less)
    out: list[int] = []
    for h in heaps.values():
        out.extend(h[i] for i in reverse_sort([v[r] for r in h], less_value))
    return out


def top_one(values: F64, group: I64, first: I64, bottom: bool) -> I64:
    """``topk``/``bottomk`` with k = 1, without walking the heap: 2.42 replaces
    the kept sample only by a strictly better one or when the kept one is NaN,
    so each group keeps the first row with its largest (smallest) non-NaN
    value, or its last row where every value is NaN. Groups in order of first
    appearance (``first``: each group's first row, by group number)."""
    n = len(values)
    groups = len(first)
    rows = np.arange(n, dtype=np.int64)
    nan = np.isnan(values)
    # Best value first, then earliest row: the first of a group in this order wins.
    key = np.where(nan, 0.0, values if bottom else -values)
    order = np.lexsort((rows, key, nan, group))
    g = group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    best = order[starts]
    # A group whose best is NaN is all NaN: its last row stays.
    last = np.zeros(groups, dtype=np.int64)
    last[group] = rows
    winners = np.where(nan[best], last[g[starts]], best)
    return np.asarray(winners[np.argsort(first[g[starts]], kind="stable")], dtype=np.int64)


def needs_heap(values: F64, group: I64) -> bool:
    """Whether some group holds equal values or a NaN, where only the heap's walk
    gives Prometheus's answer; otherwise sorting by value does."""
    if np.isnan(values).any():
        return True
    order = np.lexsort((values, group))
    g, x = group[order], values[order]
    return bool(np.any((g[1:] == g[:-1]) & (x[1:] == x[:-1])))
