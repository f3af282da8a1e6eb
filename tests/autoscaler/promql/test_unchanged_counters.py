"""``rate`` and ``increase`` over counters that have not changed since before the
window answer 0 from one point each (``ranges.unchanged``), and that answer is
the one the full window gives: a randomized differential against the same
evaluator with that shortcut off, over counters that stay, step, reset, hold NaN
or infinities, carry stale markers, have one point or none in the window, or a
point newer than the evaluation time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.promql import ranges as ranges_module
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from tests.support.stores import Answer, answer, same_answer

T0 = 1_700_000_000.0
SPECIAL = [math.nan, math.inf, -math.inf]


def _store(seed: int) -> tuple[SeriesStore, list[float]]:
    rng = np.random.default_rng(seed)
    store = SeriesStore()
    times = [T0 + 60.0 * i + float(rng.integers(0, 3)) for i in range(12)]
    for s in range(int(rng.integers(1, 12))):
        ref = store.ref({"__name__": "c", "s": str(s), "g": str(s % 3)})
        value = float(rng.integers(0, 5))
        # When the counter moves (if at all), and how.
        moves = set(rng.choice(12, size=int(rng.integers(0, 3)), replace=False).tolist())
        start = int(rng.integers(0, 6))
        for i, t in enumerate(times):
            if i < start or rng.random() < 0.05:
                continue  # not yet scraped, or a missed scrape
            if rng.random() < 0.04:
                store.append_stale([ref], t)
                continue
            if i in moves:
                roll = rng.random()
                if roll < 0.15:
                    value = float(rng.choice(SPECIAL))
                elif roll < 0.3:
                    value = 0.0  # a reset
                else:
                    value += float(rng.integers(1, 4))
            store.append([ref], t, [value])
    return store, times


def _answer(store: SeriesStore, expr: str, t: float) -> Answer:
    return answer(Evaluator(store).instant(expr, t))


@pytest.mark.parametrize(
    "expr",
    [
        "increase(c[5m])",
        "rate(c[3m])",
        "increase(c[1m])",
        "rate(c[10m] offset 2m)",
        "sum by (g) (increase(c[5m]))",
    ],
)
def test_unchanged_counters_answer_what_their_window_does(
    expr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shortcut = ranges_module.unchanged
    used = 0
    for seed in range(120):
        store, times = _store(seed)
        for t in (times[5], times[8] - 1.0, times[11], times[11] - 30.0):
            # Both answers from the same store: with the shortcut, then without.
            monkeypatch.setattr(ranges_module, "unchanged", shortcut)
            got = _answer(store, expr, t)
            monkeypatch.setattr(
                ranges_module,
                "unchanged",
                lambda fam, rows, mint, maxt: np.zeros(rows.size, dtype=np.bool_),
            )
            want = _answer(store, expr, t)
            assert same_answer(got, want), (seed, t, expr, got, want)
            used += any(v == 0 for _, v in want)
    # Counters that stood still were among them.
    assert used > 0
