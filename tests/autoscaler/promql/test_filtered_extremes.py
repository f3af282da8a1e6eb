"""``max by (...) (X) > c`` (and ``min``, and ``sum`` without its zeros) filtered
before it is grouped (``Evaluator._filtered_extremes``) answers what grouping
first answers: the same samples, values and order, over random vectors with NaN,
infinities, ties, absent labels and more groups than are put in order one by
one. The comparison is with the same query whose number is written
``scalar(vector(c))``, which the evaluator does not filter early."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.plans import Binary
from autoscaler.promql.prefilter import filters_extremes
from autoscaler.promql.store import SeriesStore
from tests.support.stores import answer, same_answer

T = 1_700_000_000.0
VALUES = [math.nan, -math.inf, -1.0, 0.0, 0.5, 1.0, 1.0, 2.0, math.inf]
QUERIES = [
    ("max by (a) (m)", ">", 0.5),
    ("max by (a, b) (m)", ">=", 1.0),
    ("max without (c) (m)", ">", 0.0),
    ("min by (b) (m)", "<", 0.5),
    ("min without (c) (m)", "<=", 0.0),
    # Up to 40 groups: past the few put in order one by one.
    ("max by (c) (m)", ">", -1.0),
    ("max by (c) (increase(n[5m]))", ">", 0.0),
    # A sum leaves its zeros out first, for bounds a sum of 0 fails.
    ("sum by (a) (m)", ">", 0.0),
    ("sum by (a, b) (m)", ">=", 1.0),
    ("sum by (c) (increase(n[5m]))", ">=", 2.0),
    ("sum without (c) (m - m)", ">", 0.0),
    # A rise that 0 fails: known empty where no counter that changed passes.
    ("max by (c) (rate(n[5m]))", ">", 0.001),
    ("max by (k) (increase(n[5m]))", ">=", 1.0),
    ("min by (c) (increase(n[5m]))", "<", 0.0),
    ("sum by (c) (rate(n[3m]))", ">", 0.0),
    # 0 passes: grouped whole, as before.
    ("max by (c) (increase(n[5m]))", ">=", 0.0),
]


def _store(seed: int) -> SeriesStore:
    rng = np.random.default_rng(seed)
    store = SeriesStore()
    for c in range(int(rng.integers(1, 40))):
        labels = {"__name__": "m", "c": str(c), "b": str(rng.choice(["p", "q"]))}
        a = str(rng.choice(["x", "y", "z", ""]))
        if a:
            labels["a"] = a
        store.append([store.ref(labels)], T, [float(rng.choice(VALUES))])
        counter = store.ref({"__name__": "n", "c": str(c % 7), "k": str(c)})
        start = float(rng.integers(0, 3))
        # Still or rising, now and then a reset, a NaN or an end in a stale marker.
        steps = (0.0, *rng.choice([0.0, 0.0, 1.0, -2.0, math.nan], size=3).tolist())
        for i, step in enumerate(steps):
            start = step if math.isnan(step) or math.isnan(start) else start + step
            store.append([counter], T - 240 + 60 * i, [start])
        if rng.random() < 0.1:
            store.append_stale([counter], T - 10)
    return store


def _early(expr: str) -> bool:
    plan = Evaluator(SeriesStore())._plan(expr)
    return isinstance(plan, Binary) and filters_extremes(plan)


@pytest.mark.parametrize(("agg", "op", "bound"), QUERIES)
def test_filtering_before_grouping_answers_what_grouping_first_does(
    agg: str, op: str, bound: float
) -> None:
    early = f"{agg} {op} {bound}"
    late = f"{agg} {op} scalar(vector({bound}))"
    assert _early(early) and not _early(late)
    matched = 0
    for seed in range(150):
        ev = Evaluator(_store(seed))
        got, want = answer(ev.instant(early, T)), answer(ev.instant(late, T))
        assert same_answer(got, want), (seed, early, got, want)
        matched += bool(want)
    # The random vectors gave both answers with samples and without.
    assert 0 < matched < 150 or " by (c) " in agg or "m - m" in agg


def test_bool_and_other_aggregations_are_not_filtered_early() -> None:
    for expr in (
        "max by (a) (m) > bool 0",
        "sum by (a) (m) >= 0",
        "sum by (a) (m) > -1",
        "sum by (a) (m) < 5",
        "max by (a) (m) < 0",
        "count by (a) (m) > 0",
    ):
        assert not _early(expr)
