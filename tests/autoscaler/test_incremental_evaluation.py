"""The evaluator's shortcuts against evaluation from scratch, over many cycles of
one store that keeps growing, trimming and marking series stale.

The shortcuts: a family's buffer grown ahead of need and trimmed as it fills
(``Family.make_room``); rows with stale markers windowed apart from the others
(``Family.window``); ``rate``/``increase``/``resets``/``changes`` from a window's
first and last points except where a row reset or changed (``_event_function``),
stale markers or not; range functions and selections cached per evaluation
time until the store changes. The oracle asks the same question of each series
alone (a selector that matches one row: no split, no sharing), with a new
evaluator each time, and the answers must agree to the bit.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector

SERIES = 16
FUNCTIONS = (
    "rate({sel}[2m])",
    "increase({sel}[5m])",
    "resets({sel}[5m])",
    "changes({sel}[3m])",
    "max_over_time({sel}[4m])",
    "min_over_time({sel}[1m])",
    "avg_over_time({sel}[5m])",
    "sum_over_time({sel}[3m])",
    "count_over_time({sel}[5m])",
    "last_over_time({sel}[2m])",
    "delta({sel}[3m])",
    "{sel}",
)


Answers = dict[tuple[tuple[str, str], ...], int]
"""Labels -> the value's bits."""


def _answers(result: object) -> Answers:
    assert isinstance(result, Vector)
    out = {}
    for s in result.samples:
        assert s.labels not in out
        out[s.labels] = int(np.float64(s.value).view(np.uint64))
    return out


def _one_by_one(store: SeriesStore, expr: str, t: float) -> Answers:
    """``expr`` over each series alone, each with a fresh evaluator."""
    out: Answers = {}
    for i in range(SERIES):
        sel = f'm{{s="{i}"}}'
        out.update(_answers(Evaluator(store).instant(expr.format(sel=sel), t)))
    return out


def _assert_close(a: Answers, b: Answers, why: object) -> None:
    """The same series, values within a few units in the last place: the plain
    sum of ``sum``/``avg_over_time`` (``over_time.compensated_sum``) is numpy's
    pairwise sum, which rounds by where a row's points sit in the block it is
    summed in (padded past its count or not), as it did before these shortcuts."""
    assert a.keys() == b.keys(), why
    x = np.array([a[k] for k in a], dtype=np.uint64).view(np.float64)
    y = np.array([b[k] for k in a], dtype=np.uint64).view(np.float64)
    assert np.allclose(x, y, rtol=1e-14, atol=0.0, equal_nan=True), why


def _step(rng: random.Random, values: list[float]) -> list[float]:
    """The next value of each series: a counter that now and then resets, with
    plateaus (no change) and an occasional NaN."""
    out = []
    for v in values:
        r = rng.random()
        if r < 0.05:
            out.append(rng.choice((0.0, 1.0)))  # a reset
        elif r < 0.35:
            out.append(v)  # unchanged
        elif r < 0.37:
            out.append(math.nan)
        else:
            base = 0.0 if math.isnan(v) else v
            out.append(base + rng.choice((1.0, 2.5, 0.1, 1e6)))
    return out


@pytest.mark.parametrize("seed", [1])
def test_shortcuts_agree_with_each_series_alone_over_many_cycles(seed: int) -> None:
    rng = random.Random(seed)
    store = SeriesStore(retention=420.0)  # 7m: a trim every few cycles
    refs = store.refs([{"__name__": "m", "s": str(i)} for i in range(SERIES)])
    kept = Evaluator(store)  # lives through every cycle, with its caches
    values = [0.0] * SERIES
    down: set[int] = set()
    t = 1_700_000_000.0
    checked = 0
    for cycle in range(90):
        # A series goes away (a stale marker) or comes back now and then.
        for i in range(SERIES):
            if rng.random() < 0.04:
                down ^= {i}
        values = _step(rng, values)
        up = [i for i in range(SERIES) if i not in down]
        # Most series are scraped together; a few a second late.
        late = {i for i in up if rng.random() < 0.15}
        on_time = [i for i in up if i not in late]
        store.append(refs[on_time], t, np.array([values[i] for i in on_time]))
        if down:
            store.append_stale(refs[sorted(down)], t)
        if late:
            lt = sorted(late)
            store.append(refs[lt], t + 1.0, np.array([values[i] for i in lt]))
        now = t + 1.5
        if cycle >= 3:
            for expr in rng.sample(FUNCTIONS, 6):
                q = expr.format(sel="m")
                first = _answers(kept.instant(q, now))
                assert first == _answers(kept.instant(q, now)), q  # from the cache
                alone = _one_by_one(store, expr, now)
                if expr.startswith(("sum_over_time", "avg_over_time")):
                    _assert_close(first, alone, (cycle, q))
                else:
                    assert first == alone, (cycle, q)
                checked += 1
        t += 15.0
    assert checked == 87 * 6
    assert store.families["m"].nstale[: store.families["m"].n].any()


def test_a_cached_answer_is_not_read_after_the_store_changed() -> None:
    store = SeriesStore()
    refs = store.refs([{"__name__": "m", "s": str(i)} for i in range(3)])
    ev = Evaluator(store)
    for k in range(4):  # up to 1045
        store.append(refs, 1000.0 + 15 * k, np.array([k, k, k], dtype=np.float64))
    before = _answers(ev.instant("max_over_time(m[1m])", 1060.0))
    # A sample inside that window arrives after the query (a scrape stamped
    # before the evaluation, written late): the same query must see it.
    store.append(refs[:1], 1050.0, np.array([99.0]))
    after = _answers(ev.instant("max_over_time(m[1m])", 1060.0))
    assert max(before.values()) == int(np.float64(3.0).view(np.uint64))
    assert after[(("s", "0"),)] == int(np.float64(99.0).view(np.uint64))
    assert after[(("s", "1"),)] == before[(("s", "1"),)]
