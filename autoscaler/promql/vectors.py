"""Instant vectors as the built-in evaluator holds them: label code columns.

Why a module of its own: nothing in the evaluator iterates over series in
Python. An instant vector is a ``Vec``: one integer code column per label name
(codes from the store's ``Symbols``, 0 = absent) and one value column. Matching
and grouping combine code columns into integer keys (``combine``) and sort them
once; labels become strings only in the result handed back. The evaluator, its
aggregations and the binary operators (``binops.py``) all work on this shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from autoscaler.promql.errors import EvalError
from autoscaler.promql.family import Family
from autoscaler.promql.symbols import F64, I64, Mask


class Cols(Mapping[str, I64]):
    """Label code columns gathered when first read: each is ``source[name][rows]``.

    A selection of a family with a dozen labels that a query then groups or
    joins by one or two (``by (node)``, ``on (node, device)``) gathers those,
    not every column; rows taken from it (``Vec.take``, a join's matches) compose
    the row indices, one gather for all columns, instead of one per column.
    ``extra`` columns are held as they are (``__name__``, labels a join copies
    over) and taken row by row. The source arrays are never rewritten where
    ``rows`` point (``Buffers.label_columns``), so a late read sees what an early
    one would have."""

    __slots__ = ("_got", "_rows", "_source")

    def __init__(
        self, source: Mapping[str, I64], rows: I64, extra: Mapping[str, I64] | None = None
    ) -> None:
        if extra and any(k in source for k in extra):
            source = {k: c for k, c in source.items() if k not in extra}
        self._source = source
        self._rows = rows
        self._got: dict[str, I64] = {} if extra is None else dict(extra)

    def __getitem__(self, name: str) -> I64:
        got = self._got.get(name)
        if got is None:
            got = self._got[name] = self._source[name][self._rows]
        return got

    def __iter__(self) -> Iterator[str]:
        yield from self._source
        yield from (k for k in self._got if k not in self._source)

    def __len__(self) -> int:
        return len(self._source) + sum(1 for k in self._got if k not in self._source)

    def __contains__(self, name: object) -> bool:
        return name in self._source or name in self._got

    def pick(self, idx: I64 | None, names: Iterable[str] | None = None) -> Cols:
        """Rows ``idx`` (positions, not a mask; every row where None) of the
        columns ``names`` (all where None): still ungathered where they were."""
        keep = set(self) if names is None else set(names)
        source = {k: c for k, c in self._source.items() if k in keep}
        if idx is None:
            got = {k: c for k, c in self._got.items() if k in keep}
            return Cols(source, self._rows, got)
        extra = {k: c[idx] for k, c in self._got.items() if k in keep and k not in source}
        return Cols(source, self._rows[idx], extra)

    def with_extra(self, extra: Mapping[str, I64]) -> Cols:
        """The same columns with ``extra`` set over them (a column they replace is
        no longer read from the source)."""
        return Cols(self._source, self._rows, {**self._got, **extra})


def pick(
    cols: Mapping[str, I64],
    idx: I64 | Mask | None,
    names: Iterable[str] | None = None,
    extra: Mapping[str, I64] | None = None,
) -> Mapping[str, I64]:
    """Rows ``idx`` (positions or a mask; every row where None) of the columns
    ``names`` of ``cols`` (all where None), with ``extra`` columns set over them.
    Taken rows are gathered when read (``Cols``)."""
    if idx is None:
        if isinstance(cols, Cols):
            kept = cols.pick(None, names)
            return kept.with_extra(extra) if extra else kept
        keep = cols.keys() if names is None else set(names)
        return {**{k: c for k, c in cols.items() if k in keep}, **(extra or {})}
    at: I64 = np.flatnonzero(idx) if idx.dtype == np.bool_ else idx.astype(np.int64, copy=False)
    if isinstance(cols, Cols):
        taken = cols.pick(at, names)
    else:
        keep = cols.keys() if names is None else set(names)
        taken = Cols({k: c for k, c in cols.items() if k in keep}, at)
    return taken.with_extra(extra) if extra else taken


@dataclass(frozen=True)
class Vec:
    """An instant vector: label code columns (0 = absent) and values."""

    cols: Mapping[str, I64]
    values: F64

    def __len__(self) -> int:
        return len(self.values)

    def take(self, idx: I64 | Mask) -> Vec:
        return Vec(pick(self.cols, idx), self.values[idx])

    def with_values(self, values: F64) -> Vec:
        return Vec(self.cols, values)


def empty() -> Vec:
    return Vec({}, np.zeros(0))


def concat(parts: list[Vec]) -> Vec:
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty()
    if len(parts) == 1:
        return parts[0]
    names = sorted({k for p in parts for k in p.cols})
    cols = {
        k: np.concatenate([p.cols.get(k, np.zeros(len(p), dtype=np.int64)) for p in parts])
        for k in names
    }
    return Vec(cols, np.concatenate([p.values for p in parts]))


def combine(columns: list[I64], n: int) -> I64:
    """Integer keys that are equal exactly where every column is equal."""
    if not columns:
        return np.zeros(n, dtype=np.int64)
    key = columns[0].astype(np.int64, copy=True)
    limit = 1 << 62
    for col in columns[1:]:
        if n == 0:
            break
        span = int(col.max()) + 1
        top = int(key.max()) + 1
        if top * span >= limit:
            _, key = np.unique(key, return_inverse=True)
            top = int(key.max()) + 1
            if top * span >= limit:
                _, col = np.unique(col, return_inverse=True)
                span = int(col.max()) + 1
        key = key * span + col
    return key


def groups_of(key: I64) -> tuple[I64, I64]:
    """``(first, group)``: each distinct key's first row, in key order, and each
    row's group number (``np.unique``'s ``return_index``/``return_inverse``).

    Keys built from label codes are small integers, so a lookup table indexed by
    key replaces the sort when the keys are dense enough."""
    n = len(key)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo = int(key.min())
    span = int(key.max()) - lo + 1
    if lo < 0 or span > 4 * n + 1024:
        _, index, inverse = np.unique(key, return_index=True, return_inverse=True)
        return index.astype(np.int64), inverse.reshape(-1).astype(np.int64)
    shifted = key - lo
    firsts = np.full(span, n, dtype=np.int64)
    # Writing in reverse leaves each key's first row (the last write wins).
    firsts[shifted[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int64)
    present = firsts < n
    lut = np.cumsum(present) - 1
    group: I64 = lut[shifted]
    first: I64 = firsts[present]
    return first, group


def member(keys: I64, of: I64) -> Mask:
    """``np.isin(keys, of)`` for integer keys, several times faster: a table
    indexed by key where the keys are dense enough (label codes combined), else
    ``of`` sorted and searched. ``np.isin`` sorts both arrays together and makes
    the first unique, which the set operators paid on every join."""
    if keys.size == 0 or of.size == 0:
        return np.zeros(keys.size, dtype=np.bool_)
    lo = min(int(keys.min()), int(of.min()))
    span = max(int(keys.max()), int(of.max())) - lo + 1
    if span <= 4 * (keys.size + of.size) + 1024:
        table = np.zeros(span, dtype=np.bool_)
        table[of - lo] = True
        hit: Mask = table[keys - lo]
        return hit
    ordered = np.sort(of)
    at = np.searchsorted(ordered, keys)
    np.minimum(at, ordered.size - 1, out=at)
    found: Mask = ordered[at] == keys
    return found


def label_key(vec: Vec, names: Iterable[str]) -> I64:
    return combine([vec.cols[k] for k in names if k in vec.cols], len(vec))


def check_unique(vec: Vec) -> None:
    if len(vec) < 2:
        return
    key = label_key(vec, sorted(vec.cols))
    if len(np.unique(key)) != len(key):
        raise EvalError("vector cannot contain metrics with the same labelset")


def drop_name(vec: Vec) -> Vec:
    col = vec.cols.get("__name__")
    if col is None:
        return vec
    out = Vec(pick(vec.cols, None, [k for k in vec.cols if k != "__name__"]), vec.values)
    if len(col) > 1 and col.min() != col.max():
        check_unique(out)
    return out


def family_vec(fam: Family, rows: I64, values: F64, keep_name: bool) -> Vec:
    """The ``rows`` of ``fam`` as a vector with ``values``; ``keep_name`` keeps the
    metric name as a ``__name__`` column (selectors, ``last_over_time``)."""
    name = {"__name__": np.full(rows.size, fam.name_code, dtype=np.int64)} if keep_name else None
    if fam.every_row(rows):
        cols = fam.label_columns()
        return Vec({**cols, **name} if name else cols, values)
    # A subset of the rows: each column gathered when a reader asks for it.
    return Vec(Cols(dict(fam.codes), rows, name), values)


__all__ = [
    "Cols",
    "Vec",
    "check_unique",
    "combine",
    "concat",
    "drop_name",
    "empty",
    "family_vec",
    "groups_of",
    "label_key",
    "member",
    "pick",
]
