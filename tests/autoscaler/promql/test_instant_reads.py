"""``Family.instant`` (an instant selector's read) against the rule it implements,
written out per series: the newest sample at or before the time, within the
lookback, unless that sample is a stale marker. Randomized over series that hold
stale markers among clean ones, NaN values, missed scrapes, and samples newer
than the time read."""

from __future__ import annotations

import math

import numpy as np

from autoscaler.promql.family import is_stale
from autoscaler.promql.store import SeriesStore

T0 = 1_700_000_000.0
LOOKBACK = 300_000


def _reference(store: SeriesStore, ref: int) -> dict[int, float]:
    out: dict[int, float] = {}
    fam = store.families["x"]
    for row in range(fam.n):
        c = int(fam.count[row])
        times, values = fam.row_times(row), fam.row_values(row)
        at = [i for i in range(c) if times[i] <= ref]
        if not at:
            continue
        i = at[-1]
        if times[i] >= ref - LOOKBACK and not is_stale(values[i : i + 1])[0]:
            out[row] = float(values[i])
    return out


def test_instant_reads_follow_the_newest_sample_rule() -> None:
    for seed in range(200):
        rng = np.random.default_rng(seed)
        store = SeriesStore()
        refs = [store.ref({"__name__": "x", "s": str(s)}) for s in range(int(rng.integers(1, 30)))]
        for i in range(int(rng.integers(1, 12))):
            t = T0 + 60.0 * i
            for r in refs:
                roll = rng.random()
                if roll < 0.1:
                    continue
                if roll < 0.2:
                    store.append_stale([r], t)
                else:
                    store.append([r], t, [math.nan if roll < 0.25 else float(rng.integers(0, 9))])
        fam = store.families["x"]
        newest = int(fam.last_t[: fam.n].max())
        for ref in (newest, newest - 30_000, newest + 400_000, newest - 60_000):
            rows, values = fam.instant(np.arange(fam.n), ref, LOOKBACK)
            got = dict(zip(rows.tolist(), values.tolist(), strict=True))
            want = _reference(store, ref)
            assert got.keys() == want.keys(), (seed, ref)
            for row, v in want.items():
                assert got[row] == v or (math.isnan(v) and math.isnan(got[row])), (seed, ref, row)
            # The values read are the reader's: writing over them changes nothing
            # the family holds (every row read at once is a copy of its last values).
            values[:] = -1.0
            again = fam.instant(np.arange(fam.n), ref, LOOKBACK)[1]
            assert np.array_equal(again, np.array(list(got.values())), equal_nan=True)
