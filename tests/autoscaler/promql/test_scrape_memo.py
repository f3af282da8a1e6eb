"""``Buffers._again``: a write through the same slice of rows as the last one,
with nothing else changed in between, skips reading back what that write left
(counts, newest times, timelines). Two families take the same random writes,
trims, row drops and new rows, one of them with the shortcut turned off; after
every step both hold exactly the same rows, samples and per-row state. The
writes go through every row, every k-th row from each offset (a fault family's
kinds, whose shortcuts must stand side by side), ranges of rows and random rows,
with values and with stale markers, so that each way the shortcut is kept,
forgotten and taken up again is exercised, and it is counted to have been taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from autoscaler.promql.buffers import Buffers
from autoscaler.promql.family import Family
from autoscaler.promql.narrow import bits
from autoscaler.promql.symbols import Symbols
from tests.support.stores import assert_timelines

_ROW_STATE = (
    "count",
    "nstale",
    "refs",
    "had_samples",
    "had_value",
    "last_drop",
    "last_change",
    "last_t",
)


def _family(rows: int) -> Family:
    fam = Family("m", 1, Symbols())
    for r in range(rows):
        fam.add_row((("__name__", "m"), ("s", str(r))), r)
    return fam


def _same(a: Family, b: Family) -> None:
    assert a.n == b.n
    n = a.n
    for name in _ROW_STATE:
        assert np.array_equal(getattr(a, name)[:n], getattr(b, name)[:n]), name
    assert np.array_equal(a.last_value[:n].view(np.int64), b.last_value[:n].view(np.int64))
    assert a.vals.dtype == b.vals.dtype
    for r in range(n):
        assert np.array_equal(a.row_times(r), b.row_times(r))
        assert np.array_equal(bits(a.row_values(r)), bits(b.row_values(r)))
    assert_timelines(a)
    assert_timelines(b)


def _rows(rng: np.random.Generator, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Rows as the scrapes write them: all, every k-th from an offset, a range, or
    some at random."""
    kind = rng.integers(0, 5)
    if kind <= 1:
        return np.arange(n, dtype=np.int64)
    if kind == 2:
        k = int(rng.integers(2, 4))
        return np.arange(int(rng.integers(0, k)), n, k, dtype=np.int64)
    if kind == 3:
        lo = int(rng.integers(0, n))
        return np.arange(lo, int(rng.integers(lo, n)) + 1, dtype=np.int64)
    return np.flatnonzero(rng.random(n) < 0.6).astype(np.int64)


@pytest.mark.parametrize("seeds", [range(0, 40), range(40, 80)])
def test_the_shortcut_leaves_what_the_full_write_leaves(
    monkeypatch: pytest.MonkeyPatch, seeds: range
) -> None:
    taken = writes = 0
    for seed in seeds:
        with monkeypatch.context() as m:
            got = _run(m, seed)
        taken += got[0]
        writes += got[1]
    # The shortcut is taken for a good share of the writes, or it is not tested.
    assert taken > writes // 4


def _run(monkeypatch: pytest.MonkeyPatch, seed: int) -> tuple[int, int]:
    """One seed's steps; (writes that took the shortcut, writes)."""
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(3, 30))
    plain, quick = _family(rows), _family(rows)
    monkeypatch.setattr(plain, "_again", lambda *_: None)
    taken = writes = 0
    real = Buffers._again

    def again(*args: Any) -> int | None:
        nonlocal taken
        out = real(quick, *args)
        taken += out is not None
        return out

    monkeypatch.setattr(quick, "_again", again)
    t = 0
    for step in range(int(rng.integers(20, 120))):
        t += int(rng.choice([15_000, 60_000]))
        # Mostly the same scrape every time (every row, or each kind of a fault
        # family: every k-th row from each offset); now and then other rows.
        k = 1 + seed % 3
        scrape = [np.arange(o, plain.n, k, dtype=np.int64) for o in range(k)]
        some_writes = scrape if rng.random() < 0.9 else [_rows(rng, plain.n) for _ in range(2)]
        for some in some_writes:
            if not some.size:
                continue
            values = None
            if rng.random() > 0.05:
                values = rng.integers(0, 3, some.size).astype(np.float64)
                if rng.random() < 0.03:
                    values[0] = rng.choice([0.1, np.nan, -0.0, np.inf])
            stored = [fam.append(some, t, values, cutoff=t - 600_000) for fam in (plain, quick)]
            assert stored[0] == stored[1]
            writes += 1
            t += int(rng.integers(0, 2))  # one write at a time, or several at one
        if rng.random() < 0.1:
            cutoff = t - int(rng.choice([60_000, 300_000]))
            for fam in (plain, quick):
                fam.trim(cutoff)
        if rng.random() < 0.05:
            assert np.array_equal(plain.drop_empty_rows()[0], quick.drop_empty_rows()[0])
        if rng.random() < 0.05:
            for fam in (plain, quick):
                fam.add_row((("__name__", "m"), ("s", f"new{step}")), 1000 + step)
        if plain.n == 0:
            break
        _same(plain, quick)
    return taken, writes
