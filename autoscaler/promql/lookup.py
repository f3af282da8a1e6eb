"""Finding rows and sample positions in a family of the built-in evaluator's store.

Why a module of its own: the two searches every query starts with, kept apart
from the family's storage so that each can be read and tested alone.

* **By label** (``LabelIndex``): a selector that names its values (``=``, or
  ``=~`` of plain strings: ``node=~"n1|n2|..."``, as the rhythm learner narrows
  its traffic query to a dip's nodes) takes its rows from the label's index, the
  rows ordered by code, in time proportional to what it finds rather than to the
  family (Prometheus's postings lists do the same), once the family's rows have
  stayed the same between two asks.
* **By time** (``time_search``): for each row, where a time would be inserted
  among its samples, guessing that every row is aligned with the fullest one at
  its end (scrapes write every row at once) and searching only the rows where the
  guess is wrong.
"""

from __future__ import annotations

import numpy as np

from autoscaler.promql.symbols import I64


class LabelIndex:
    """Per label of one family: its rows ordered by code, and those codes. Kept
    until ``clear`` (the family's rows changed), and built at the second ask
    since then: sorting a column costs some thirty scans of it, so a family whose
    rows change between every two asks (new pods each cycle) is scanned."""

    def __init__(self) -> None:
        self._by_label: dict[str, tuple[I64, I64]] = {}
        self._asked: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._by_label)

    def clear(self) -> None:
        self._by_label.clear()
        self._asked.clear()

    def rows(self, name: str, column: I64, codes: list[int]) -> I64 | None:
        """The rows (ascending) whose label ``name`` (``column``: its codes, one per
        row) has one of ``codes``; None at the first ask (the caller scans)."""
        index = self._by_label.get(name)
        if index is None:
            if name not in self._asked:
                self._asked.add(name)
                return None
            order = np.argsort(column, kind="stable")
            index = self._by_label[name] = (order, column[order])
        order, sorted_codes = index
        wanted = np.array(sorted(c for c in set(codes) if c >= 0), dtype=np.int64)
        lo = np.searchsorted(sorted_codes, wanted, "left")
        hi = np.searchsorted(sorted_codes, wanted, "right")
        parts = [order[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if b > a]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        if len(parts) == 1:
            return parts[0].astype(np.int64)
        if sum(p.size for p in parts) * 16 < order.size:
            return np.sort(np.concatenate(parts)).astype(np.int64)
        # Much of the family (``action=~"reset|reboot|isolate"`` over every fault
        # counter): marking the rows in a mask puts them in order in one pass,
        # where sorting them cost a third of the fault rules' evaluation.
        hit = np.zeros(order.size, dtype=np.bool_)
        for part in parts:
            hit[part] = True
        return np.flatnonzero(hit).astype(np.int64)


def runs(rows: I64, most: int) -> list[tuple[int, int]]:
    """``rows`` (ascending) as ``[lo, hi)`` runs of consecutive rows, none longer
    than ``most`` (a family's trims and moves go run by run)."""
    if not rows.size:
        return []
    breaks = (np.flatnonzero(np.diff(rows) != 1) + 1).tolist()
    out: list[tuple[int, int]] = []
    for a, b in zip([0, *breaks], [*breaks, rows.size], strict=True):
        start, stop = int(rows[a]), int(rows[b - 1]) + 1
        out.extend((lo, min(stop, lo + most)) for lo in range(start, stop, most))
    return out


def time_search(ts: I64, cnt: I64, rows: I64, target: int, right: bool) -> I64:
    """For each of ``rows`` of the time matrix ``ts`` (time-major: sample k of row
    r at ``[k, r]``; ``cnt``: its samples per row), how many of its samples are
    ``<= target`` (right) or ``< target`` (left): the index where ``target``
    would be inserted."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    cap, width = int(ts.shape[0]), int(ts.shape[1])
    r0 = int(np.argmax(cnt))
    c0 = int(cnt[r0])
    i0 = int(
        np.searchsorted(
            np.ascontiguousarray(ts[:c0, int(rows[r0])]),
            np.int64(target),
            "right" if right else "left",
        )
    )
    # Guess that every row is aligned with the fullest one at its end, then check.
    guess = np.clip(cnt - (c0 - i0), 0, cnt)
    before = ts.take(np.maximum(guess - 1, 0) * width + rows)
    at = ts.take(np.minimum(guess, cap - 1) * width + rows)
    if right:
        good = ((guess == 0) | (before <= target)) & ((guess >= cnt) | (at > target))
    else:
        good = ((guess == 0) | (before < target)) & ((guess >= cnt) | (at >= target))
    if not good.all():
        bad = np.flatnonzero(~good)
        lo = np.zeros(len(bad), dtype=np.int64)
        hi = cnt[bad].copy()
        where = rows[bad]
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) >> 1
            v = ts.take(np.minimum(mid, cap - 1) * width + where)
            go = (v <= target) if right else (v < target)
            go &= active
            lo = np.where(go, mid + 1, lo)
            hi = np.where(active & ~go, mid, hi)
        guess[bad] = lo
    out: I64 = guess
    return out


__all__ = ["LabelIndex", "runs", "time_search"]
