"""A comparison with a number that leaves out the rows that cannot pass before
the vector is built (``autoscaler.promql.prefilter``: an instant selection's
label columns, a ``max_over_time``/``min_over_time`` window, a rise that 0
fails over the series that did not change) answers what the
full computation answers: the same samples, values and order, or the same error.

The comparison is with the same query whose number is written
``scalar(vector(c))``, which the evaluator does not filter early, over random
series that hold NaN and infinities, miss scrapes, end in stale markers, come back
after them, start late, and lose their oldest samples to the retention; asked
after the newest scrape, between scrapes, before some series' newest sample, and
with an ``offset``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.promql import prefilter
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.plans import Binary
from autoscaler.promql.store import SeriesStore
from tests.support.stores import answer, answer_or_error, same_answer, same_answer_or_error

T0 = 1_700_000_000.0
VALUES = [0.0, 0.0, 0.5, 1.0, 1.0, 2.0, -1.0, math.nan, math.inf, -math.inf]
SCRAPES = 16
# Evaluation times: after the last scrape, between two, and in the middle of the
# run (where some series already have newer samples).
TIMES = [T0 + 60.0 * (SCRAPES - 1) + 30.0, T0 + 60.0 * (SCRAPES - 1), T0 + 60.0 * 9 + 20.0]

INSTANT = [
    ("m", ">", 0.5),
    ("m", "==", 0.0),
    ("m", "!=", 1.0),
    ("m", "<=", -1.0),
    ('m{g="1"}', ">=", 1.0),
    ('{__name__=~"m|n"}', "<", 1.0),
    ("m offset 3m", "==", 1.0),
]
WINDOWS = [
    ("max_over_time(m[3m])", "==", 0.0),
    ("max_over_time(m[5m])", "<=", 1.0),
    ("max_over_time(m[2m])", "<", 1.0),
    ("max_over_time(m[1m])", "==", 0.0),
    ("min_over_time(m[3m])", ">=", 0.5),
    ("min_over_time(m[3m])", ">", 0.0),
    ("min_over_time(m[10m])", "==", 1.0),
    ("max_over_time(m[3m] offset 2m)", "==", 0.0),
    ("max_over_time(m[1h])", "<=", 0.0),
    # Two families: filtered as before (their duplicate label sets are an error).
    ('max_over_time({__name__=~"m|n"}[3m])', "==", 0.0),
    # A rise that 0 fails: only the series that changed in the window are read.
    ("increase(m[3m])", ">", 0.0),
    ("increase(m[5m])", ">=", 1.0),
    ("rate(m[2m])", "!=", 0.0),
    ("increase(m[3m] offset 2m)", ">", 0.0),
    ("increase(m[1h])", "==", 2.0),
    ('rate({__name__=~"m|n"}[3m])', ">", 0.0),
]


def _store(seed: int) -> SeriesStore:
    rng = np.random.default_rng(seed)
    # A retention shorter than the run: the oldest samples are trimmed.
    store = SeriesStore(retention=float(rng.choice([600.0, 3600.0])))
    refs = []
    for s in range(int(rng.integers(1, 24))):
        name = "n" if rng.random() < 0.15 else "m"
        refs.append(store.ref({"__name__": name, "s": str(s), "g": str(s % 3)}))
    # Each series' habits: how it starts, how often it moves, misses, goes stale.
    start = rng.integers(0, SCRAPES, size=len(refs))
    still = rng.random(len(refs)) < 0.5
    value = rng.choice(VALUES, size=len(refs))
    for i in range(SCRAPES):
        t = T0 + 60.0 * i + float(rng.integers(0, 3))
        live, stale = [], []
        for k, ref in enumerate(refs):
            if i < start[k] or rng.random() < 0.08:
                continue  # not yet scraped, or a missed scrape
            if rng.random() < 0.07:
                stale.append(ref)
                continue
            if not still[k] or rng.random() < 0.1:
                value[k] = rng.choice(VALUES)
            live.append(k)
        store.append([refs[k] for k in live], t, value[live])
        store.append_stale(stale, t)
    return store


def _early(expr: str) -> bool:
    plan = Evaluator(SeriesStore())._plan(expr)
    if not isinstance(plan, Binary):
        return False
    return (
        prefilter.filters_selection(plan) is not None or prefilter.bounds_window(plan) is not None
    )


@pytest.mark.parametrize(("x", "op", "bound"), INSTANT + WINDOWS)
def test_leaving_out_what_cannot_pass_answers_what_the_full_vector_does(
    x: str, op: str, bound: float
) -> None:
    early = f"{x} {op} {bound}"
    late = f"{x} {op} scalar(vector({bound}))"
    assert _early(early) and not _early(late)
    passed = errors = 0
    for seed in range(120):
        store = _store(seed)
        for t in TIMES:
            got, want = answer_or_error(store, early, t), answer_or_error(store, late, t)
            assert same_answer_or_error(got, want), (seed, t, early, got, want)
            passed += isinstance(want, list) and bool(want)
            errors += isinstance(want, str)
    # The random series gave answers with samples (and, over two families, errors).
    assert passed > 0
    assert errors == 0 or "m|n" in x


def test_the_window_bound_reuses_a_full_answer_already_computed() -> None:
    store = _store(7)
    ev = Evaluator(store)
    t = TIMES[0]
    full = answer(ev.instant("max_over_time(m[3m])", t))
    both = answer(ev.instant("max_over_time(m[3m]) or max_over_time(m[3m]) == 0", t))
    assert full and same_answer(both, full)


def test_other_comparisons_are_filtered_as_before() -> None:
    for expr in (
        "m > bool 0",
        "max_over_time(m[3m]) > 0",
        "max_over_time(m[3m]) >= 0",
        "min_over_time(m[3m]) < 1",
        "max_over_time(m[3m]) != 0",
        "avg_over_time(m[3m]) == 0",
        "max_over_time(m[3m] @ 100) == 0",
        "max_over_time(m[3m:1m]) == 0",
        # 0 passes these, or the function is not a rise.
        "increase(m[3m]) >= 0",
        "rate(m[3m]) < 1",
        "irate(m[3m]) > 0",
        "delta(m[3m]) > 0",
        "increase(m[3m] @ 100) > 0",
        "0 < m",
        "m + 1",
    ):
        assert not _early(expr), expr
