"""A join whose right is a range function of a selector (``A * on (node, device)
group_left f(X[r])``, or that function aggregated by the labels it matches on)
windows only the series of X that A's few samples match, and a set operator
(``A unless on (node, device) X > 0``) reads only those series of X
(``Evaluator._narrowed_side``); each answers what reading every series answers:
the same samples, values and order, or the same error.

A randomized differential against the same evaluator with the narrowing off,
over series of X that share their match labels (twins: Prometheus's duplicate
series error when both answer, none when one has left the window), lack a match
label, miss scrapes, end in stale markers and reset; and left sides with repeated
match labels (an error one-to-one, none many-to-one) or none at all."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.promql import prefilter
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.plans import Binary
from autoscaler.promql.store import SeriesStore
from tests.support.stores import answer_or_error, same_answer

T0 = 1_700_000_000.0
SCRAPES = 14
TIMES = [T0 + 60.0 * (SCRAPES - 1) + 10.0, T0 + 60.0 * 7 + 30.0, T0 + 60.0 * 3]

JOINS = [
    "info * on (node, device) group_left max_over_time(x[3m])",
    "info * on (node, device) group_left (other) max_over_time(x[3m])",
    "info > on (node, device) group_left rate(x[5m])",
    "info + on (node, device) min_over_time(x[2m])",
    "info * on (node, device) group_left avg_over_time(x[10m] offset 2m)",
    "info * on (device) group_left count_over_time(x[3m])",
    "info * on (node) group_left max by (node) (max_over_time(x[3m]))",
    "info * on (node) group_left () sum by (node) (increase(x[5m]))",
    "info == on (node, device) group_left max_over_time(x[1m])",
    # Set operators, their right a selector or its comparison with a number.
    "info and on (node, device) x",
    "info unless on (node, device) x > 2",
    "info unless on (node) x == 0",
    'info and on (node, device) {__name__=~"x|info"} >= 1',
    "info and on (device) x offset 2m",
]


def _store(seed: int) -> SeriesStore:
    rng = np.random.default_rng(seed)
    store = SeriesStore()
    series = []
    for node in range(int(rng.integers(2, 7))):
        for device in range(8):
            if rng.random() < 0.85:
                series.append({"node": f"n{node}", "device": str(device), "other": "a"})
            if rng.random() < 0.08:  # a twin: the same match labels
                series.append({"node": f"n{node}", "device": str(device), "other": "b"})
        if rng.random() < 0.3:  # no device label
            series.append({"node": f"n{node}", "other": "c"})
    refs = [store.ref({"__name__": "x", **labels}) for labels in series]
    # The left: a few device pods, sometimes two on one device.
    for p in range(int(rng.integers(0, 7))):
        labels = dict(series[int(rng.integers(0, len(series)))])
        labels.pop("other")
        ref = store.ref({"__name__": "info", **labels, "pod": f"p{p}"})
        store.append([ref], T0, [1.0])
        for i in range(1, SCRAPES):
            store.append([ref], T0 + 60.0 * i, [float(rng.choice([1.0, 2.0, 0.5]))])
    value = rng.integers(0, 4, size=len(refs)).astype(float)
    start = rng.integers(0, SCRAPES // 2, size=len(refs))
    stop = rng.integers(SCRAPES // 2, SCRAPES + 4, size=len(refs))
    for i in range(SCRAPES):
        t = T0 + 60.0 * i + float(rng.integers(0, 3))
        live = [k for k in range(len(refs)) if start[k] <= i < stop[k] and rng.random() > 0.08]
        value[live] += rng.integers(0, 3, size=len(live))
        if rng.random() < 0.2:
            value[live[:3]] = 0.0  # resets
        if rng.random() < 0.1 and live:
            value[live[0]] = math.nan
        store.append([refs[k] for k in live], t, value[live])
        store.append_stale([refs[k] for k in range(len(refs)) if i == stop[k]], t)
    return store


@pytest.mark.parametrize("expr", JOINS)
def test_a_narrowed_join_answers_what_the_whole_right_does(
    expr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrows, sets = prefilter.narrows_join, prefilter.narrows_set
    narrowed = answered = errors = 0
    real = Evaluator._narrowed_side

    def counted(self: Evaluator, *args: object) -> object:
        nonlocal narrowed
        out = real(self, *args)  # type: ignore[arg-type]
        narrowed += out is not None
        return out

    monkeypatch.setattr(Evaluator, "_narrowed_side", counted)
    for seed in range(100):
        store = _store(seed)
        for t in TIMES:
            monkeypatch.setattr(prefilter, "narrows_join", narrows)
            monkeypatch.setattr(prefilter, "narrows_set", sets)
            got = answer_or_error(store, expr, t)
            monkeypatch.setattr(prefilter, "narrows_join", lambda b: None)
            monkeypatch.setattr(prefilter, "narrows_set", lambda b: None)
            want = answer_or_error(store, expr, t)
            if isinstance(got, str) or isinstance(want, str):
                assert got == want, (seed, t, expr, got, want)
                errors += 1
            else:
                assert same_answer(got, want), (seed, t, expr, got, want)
                answered += bool(want)
    # The narrowed path ran (but on device alone, where devices of every node
    # share their labels: the twins' error), and gave answers with samples.
    assert narrowed > 50 or "on (device)" in expr
    assert answered > 0
    # Twins and repeated left labels gave errors where they must; a set operator
    # never raises one.
    if " and " in expr or " unless " in expr:
        assert errors == 0
    else:
        assert errors > 0 or ("group_left" in expr and "by (node)" in expr)


def _narrows(expr: str) -> bool:
    plan = Evaluator(SeriesStore())._plan(expr)
    return isinstance(plan, Binary) and (
        prefilter.narrows_join(plan) is not None or prefilter.narrows_set(plan) is not None
    )


def test_joins_of_other_shapes_are_computed_whole() -> None:
    assert _narrows("info * on (node) group_left max_over_time(x[3m])")
    assert _narrows("info unless on (node) x > 0")
    for expr in (
        "info * ignoring (pod) group_left max_over_time(x[3m])",
        "info * on (node) group_right max_over_time(x[3m])",
        "info and on (node) max_over_time(x[3m])",
        "info * on (node) group_left max by (node, device) (max_over_time(x[3m]))",
        "info * on (node) group_left topk by (node) (1, max_over_time(x[3m]))",
        "info * on (node) group_left last_over_time(x[3m])",
        "info * on (node) group_left max_over_time(x[3m] @ 100)",
        "info * on (node) group_left deriv(x[3m])",
        "info * on (__name__) group_left max_over_time(x[3m])",
        "info and x",
        "info or on (node) x",
        "info and on (__name__) x",
        "info and on (node) x > bool 1",
        "info and on (node) rate(x[5m])",
        "info unless on (node) x > on (node) info",
    ):
        assert not _narrows(expr), expr
