"""``SeriesStore.ingest_samples`` stores what ``ingest_text`` stores from the same
samples written as text: labels, values to the bit, duplicates, stale markers for
series a target stops exposing, and a failed scrape."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from accel_common.exposition import Exposition
from autoscaler.promql.store import ExpositionError, SeriesStore

Sample = tuple[str, list[tuple[str, str]], float]

NAMES = ("accel_job_rhythm_pauses", "accel_job_rhythm_last_busy_timestamp_seconds")
VALUES = (0.0, -0.0, 1.0, 3, True, 2.5e-310, 1e300, 123456789.123, math.inf, -math.inf, math.nan)


def _text(samples: list[Sample]) -> str:
    """The samples as one body, families in the order they first come (as a
    renderer that declares every family before adding rows writes them)."""
    out = Exposition()
    for name in dict.fromkeys(n for n, _, _ in samples):
        out.family(name, "gauge", "test")
    for name, pairs, value in samples:
        out.add(name, pairs, value)
    return out.text()


def _contents(store: SeriesStore) -> dict[tuple[tuple[str, str], ...], list[tuple[int, int]]]:
    """Every series' samples as (time, value bits), by labels."""
    out = {}
    for fam in store.families.values():
        for row in range(fam.n):
            bits = fam.row_values(row).view(np.uint64).tolist()
            out[fam.labels[row]] = list(zip(fam.row_times(row).tolist(), bits, strict=True))
    return out


def _scrape(rng: random.Random) -> list[Sample]:
    """Some of a pool of series, in a shuffled order, with a duplicate now and then."""
    pool = [
        (name, [("namespace", f"ns{i % 3}"), ("job", f"j{i}")]) for name in NAMES for i in range(12)
    ]
    # A label value that the text format escapes, and one that is empty (dropped).
    pool.append((NAMES[0], [("namespace", 'we"ird\\\n'), ("job", "")]))
    chosen = rng.sample(pool, rng.randint(0, len(pool)))
    samples: list[Sample] = [(n, p, rng.choice(VALUES)) for n, p in chosen]
    if samples and rng.random() < 0.3:
        samples.append((samples[0][0], samples[0][1], 42.0))
    return samples


@pytest.mark.parametrize("extra", [None, {"job": "controller", "instance": "here"}])
def test_samples_store_what_their_text_stores_over_many_scrapes(
    extra: dict[str, str] | None,
) -> None:
    rng = random.Random(7)
    by_text, by_samples = SeriesStore(retention=600.0), SeriesStore(retention=600.0)
    for k in range(60):
        t = 1_700_000_000.0 + 30 * k
        samples = _scrape(rng)
        n_text = by_text.ingest_text(_text(samples), t, extra, target="t")
        n_samples = by_samples.ingest_samples(samples, t, extra, target="t")
        assert n_samples == n_text
        assert _contents(by_samples) == _contents(by_text)
        assert by_samples.series_count == by_text.series_count
    assert by_text.series_count > 0


def test_without_a_target_nothing_is_marked_stale() -> None:
    a, b = SeriesStore(), SeriesStore()
    first: list[Sample] = [(NAMES[0], [("job", "x")], 1.0), (NAMES[0], [("job", "y")], 2.0)]
    for t, samples in ((100.0, first), (130.0, first[:1])):
        a.ingest_text(_text(samples), t)
        b.ingest_samples(samples, t)
    assert _contents(a) == _contents(b)
    assert len(_contents(b)[(("__name__", NAMES[0]), ("job", "y"))]) == 1


def test_a_value_past_the_float64_range_fails_the_scrape_and_ends_the_target() -> None:
    store = SeriesStore()
    store.ingest_samples([(NAMES[0], [("job", "x")], 1.0)], 100.0, target="t")
    with pytest.raises(ExpositionError, match="out of the float64 range"):
        store.ingest_samples([(NAMES[0], [("job", "y")], 10**400)], 130.0, target="t")
    fam = store.families[NAMES[0]]
    row = fam.index[(("__name__", NAMES[0]), ("job", "x"))]
    last = fam.row_values(row)[-1:]
    assert last.view(np.uint64).tolist() == [0x7FF0000000000002]  # a stale marker at 130
