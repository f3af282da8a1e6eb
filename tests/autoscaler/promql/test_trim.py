"""``Family.trim`` keeps exactly each row's samples at or after the cutoff, in order
(and ``drop_empty_rows`` then the rows with any, in their order),
however its rows group (rows that lose the same number of samples shift
together, in runs of consecutive rows, d samples at a time or in parts of up to
``_SHIFT_PART`` through numpy's buffer, and runs narrower than ``_WIDE_RUN`` in
gathers of about ``_SHIFT_PART`` samples: each way here; ``drop_empty_rows``
moves runs cut into slices of ``_MOVE_ROWS``: two here, so that runs and slices
both end inside a family), against a list of samples kept per row. The appends
are of random rows, so that every path of ``append`` (a slice or a scatter, one
count for all rows or each its own) writes what is checked. Half the seeds write
a value float32 does not hold now and then: their families widen to float64
(``narrow.py``) holding stale markers and padding, and are checked the same."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.promql import buffers as buffers_module
from autoscaler.promql import timelines as timelines_module
from autoscaler.promql.family import Family, is_stale
from autoscaler.promql.symbols import Symbols
from tests.support.stores import assert_timelines


@pytest.mark.parametrize(
    ("shift_part", "wide_run"), [(1, 1), (8, 1), (1 << 18, 1), (8, 3), (40, 64)]
)
def test_trim_keeps_each_rows_samples_from_the_cutoff(
    monkeypatch: pytest.MonkeyPatch, shift_part: int, wide_run: int
) -> None:
    monkeypatch.setattr(buffers_module, "_MOVE_ROWS", 2)
    monkeypatch.setattr(buffers_module, "_SHIFT_PART", shift_part)
    monkeypatch.setattr(timelines_module, "_SHIFT_PART", shift_part)
    monkeypatch.setattr(buffers_module, "_WIDE_RUN", wide_run)
    for seed in range(150):
        rng = np.random.default_rng(seed)
        fam = Family("m", 1, Symbols())
        rows = int(rng.integers(1, 24))
        for r in range(rows):
            fam.add_row((("__name__", "m"), ("s", str(r))), r)
        kept: list[list[tuple[int, float | None]]] = [[] for _ in range(rows)]
        names = [str(r) for r in range(rows)]
        # A row that never had a sample is kept (a series just made).
        ever = [False] * rows
        t = 0
        for _ in range(int(rng.integers(5, 60))):
            t += int(rng.choice([1_000, 15_000, 60_000]))
            some = np.flatnonzero(rng.random(rows) < 0.7).astype(np.int64)
            if not some.size:
                continue
            stale = rng.random() < 0.1
            values = None if stale else rng.integers(0, 9, some.size).astype(np.float64)
            if values is not None and seed % 2 and rng.random() < 0.05:
                # A value float32 does not hold: the family widens, markers kept.
                values[0] = 0.1
            fam.append(some, t, values, cutoff=-(2**62))
            for i, r in enumerate(some.tolist()):
                kept[r].append((t, None if values is None else float(values[i])))
                ever[r] = True
            if rng.random() < 0.3:
                cutoff = t - int(rng.choice([0, 30_000, 120_000, 600_000]))
                fam.trim(cutoff)
                kept = [[(ts, v) for ts, v in row if ts >= cutoff] for row in kept]
                if rng.random() < 0.5:
                    # Rows left with no sample go; the others keep their order.
                    fam.drop_empty_rows()
                    stay = [bool(row) or not e for row, e in zip(kept, ever, strict=True)]
                    names = [n for n, k in zip(names, stay, strict=True) if k]
                    ever = [e for e, k in zip(ever, stay, strict=True) if k]
                    kept = [row for row, k in zip(kept, stay, strict=True) if k]
                    rows = len(kept)
                    assert fam.n == rows
                    assert [dict(fam.labels[r])["s"] for r in range(rows)] == names
                    assert all(fam.index[fam.labels[r]] == fam.refs[r] for r in range(rows))
                    assert len(fam.index) == rows
            if not rows:
                break
            for r in range(rows):
                c = int(fam.count[r])
                got = [
                    (int(ts), None if is_stale(np.array([v]))[0] else float(v))
                    for ts, v in zip(fam.row_times(r), fam.row_values(r), strict=True)
                ]
                assert got == kept[r], (seed, r)
                assert int(fam.nstale[r]) == sum(v is None for _, v in kept[r]), (seed, r)
                # Past a row's count is padding only.
                assert np.isnan(fam.vals[c:, r]).all(), (seed, r)
            assert_timelines(fam)
