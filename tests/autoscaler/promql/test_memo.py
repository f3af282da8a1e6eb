"""What the evaluator keeps between queries at one time (``promql/memo.py``):
shared subexpressions computed once, kept across a write to another family and
dropped by a write to their own, and always the answer a new evaluator gives."""

from __future__ import annotations

import random

import pytest

from autoscaler.promql import aggregations
from autoscaler.promql import evaluator as evaluator_module
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector

GANG_UTIL = "max by (gang) (info * on (node) group_left () max by (node) (max_over_time(util[1m])))"
# Queries that repeat each other's parts, as the learner and the stall rules do.
QUERIES = (
    GANG_UTIL,
    f"{GANG_UTIL} <= 0.05 and on (gang) rhythm > 2",
    "min by (gang) (age * on (node) group_left (gang) info)",
    "min by (gang) (age * on (node) group_left (gang) info) > 300 unless on (gang) rhythm",
    'sum by (node) (rate({__name__=~"util|age"}[2m]))',
    "max by (node) (util @ end())",
    "count(util) + count(rhythm)",
)


def _values(result: object) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    assert isinstance(result, Vector)
    return sorted((s.labels, s.value) for s in result.samples)


def _fill(store: SeriesStore, t: float, rng: random.Random, families: set[str]) -> None:
    for n in range(4):
        node = f"n{n}"
        if "util" in families:
            for d in range(2):
                store.add({"__name__": "util", "node": node, "device": str(d)}, t, rng.random())
        if "age" in families:
            store.add({"__name__": "age", "node": node, "pod": f"p{n}"}, t, t + rng.random())
        if "info" in families:
            store.add({"__name__": "info", "node": node, "gang": f"g{n % 2}"}, t, 1.0)
    if "rhythm" in families:
        for g in range(2):
            store.add({"__name__": "rhythm", "gang": f"g{g}"}, t, float(rng.randint(0, 4)))


def test_answers_agree_with_a_new_evaluator_whatever_is_written_between_queries() -> None:
    rng = random.Random(31)
    store = SeriesStore(retention=3600.0)
    kept = Evaluator(store)
    everything = {"util", "age", "info", "rhythm"}
    for cycle in range(60):
        t = 60.0 * cycle
        _fill(store, t, rng, everything)
        for _ in range(6):
            # Between two queries at one time: a write to some families, or none
            # (each family at most once a time: a second sample at t is refused).
            query = rng.choice(QUERIES)
            at = t + rng.choice((0.0, 0.5, 1.0))
            assert _values(kept.instant(query, at)) == _values(Evaluator(store).instant(query, at))
            chosen = {f for f in everything if rng.random() < 0.3}
            _fill(store, at + 0.25, rng, chosen)


def test_a_shared_part_is_computed_once_and_again_after_its_own_family_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SeriesStore(retention=3600.0)
    rng = random.Random(1)
    _fill(store, 0.0, rng, {"util", "age", "info", "rhythm"})
    calls: list[str] = []
    real = aggregations.aggregate

    def counted(agg, vec, param, symbols):  # type: ignore[no-untyped-def]
        calls.append(agg.op)
        return real(agg, vec, param, symbols)

    monkeypatch.setattr(evaluator_module, "aggregate", counted)
    ev = Evaluator(store)
    for q in QUERIES[:2]:
        ev.check(q)  # both compiled: the gang's utilization is shared
    first = _values(ev.instant(QUERIES[0], 30.0))
    assert len(calls) == 2  # max by (node), then max by (gang)
    # The learner's rows go in between: another family, the result stays.
    store.add({"__name__": "rhythm", "gang": "g0"}, 30.0, 3.0)
    ev.instant(QUERIES[1], 30.0)
    assert len(calls) == 2
    # A new utilization sample at that time changes the answer: computed again.
    store.add({"__name__": "util", "node": "n0", "device": "0"}, 30.0, 2.0)
    store.add({"__name__": "util", "node": "n0", "device": "1"}, 30.0, 2.0)
    again = _values(ev.instant(QUERIES[0], 30.0))
    assert len(calls) == 4
    assert again == _values(Evaluator(store).instant(QUERIES[0], 30.0))
    assert again != first


def test_a_part_read_at_the_query_edge_or_asked_once_is_not_kept() -> None:
    store = SeriesStore(retention=3600.0)
    _fill(store, 0.0, random.Random(2), {"util"})
    ev = Evaluator(store)
    edge = "max by (node) (util @ end())"
    ev.check(edge)
    ev.check(f"sum({edge})")  # shares the part that reads the query's end
    ev.check("max by (device) (util)")
    ev.check("sum(max by (device) (util))")
    shared_edge = ev._plans[f"sum({edge})"].expr  # type: ignore[union-attr]
    assert shared_edge is ev._plans[edge]
    assert not ev._interner.keeps(shared_edge)
    assert ev._interner.keeps(ev._plans["max by (device) (util)"])
    # Asked by one query only: nothing to share, not kept.
    assert not ev._interner.keeps(ev._plans[f"sum({edge})"])
