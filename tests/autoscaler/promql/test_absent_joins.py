"""A binary operator whose right is an instant selector of a metric the store
holds no series of (never written, or every series dropped with the retention)
answers nothing without computing its left (``Evaluator._holds_nothing``): the
rhythm learner's gang ages and the stall rules' gang joins cost nothing on a
fleet that runs no gangs. ``or`` and ``unless`` keep their left, so they compute
it; a metric with series that are all stale is looked up as before."""

from __future__ import annotations

import pytest

from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from tests.support.stores import answer, answer_or_error

T0 = 1_700_000_000.0


def _store() -> SeriesStore:
    store = SeriesStore()
    refs = [store.ref({"__name__": "x", "node": f"n{i}", "pod": f"p{i}"}) for i in range(4)]
    gone = store.ref({"__name__": "stale", "node": "n0", "pod": "p0"})
    for k in range(5):
        store.append(refs, T0 + 60 * k, [float(k + i) for i in range(4)])
    store.append([gone], T0, [1.0])
    store.append_stale([gone], T0 + 60)
    return store


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = Evaluator._aggregate

    def counted(self: Evaluator, *args: object) -> object:
        calls[0] += 1
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Evaluator, "_aggregate", counted)
    return calls


@pytest.mark.parametrize(
    "expr",
    [
        "max by (node, pod) (x) * on (pod) group_left (gang) gang_info",
        "max by (node, pod) (x) and on (pod) gang_info",
        "max by (node, pod) (x) > on (pod) gang_info",
        "sum(x) + gang_info",
        "min by (pod) (x) == bool on (pod) gang_info",
    ],
)
def test_a_join_to_a_metric_with_no_series_is_empty_and_its_left_is_not_computed(
    expr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store()
    calls = _counting(monkeypatch)
    assert answer(Evaluator(store).instant(expr, T0 + 240)) == []
    assert calls[0] == 0


def test_or_and_unless_keep_their_left(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store()
    calls = _counting(monkeypatch)
    ev = Evaluator(store)
    got = answer(ev.instant("max by (pod) (x) or on (pod) gang_info", T0 + 240))
    assert [v for _, v in got] == [4.0, 5.0, 6.0, 7.0]
    got = answer(ev.instant("max by (pod) (x) unless on (pod) gang_info", T0 + 240))
    assert [v for _, v in got] == [4.0, 5.0, 6.0, 7.0]
    assert calls[0] == 2


def test_a_metric_whose_series_are_stale_or_dropped_is_still_looked_up() -> None:
    store = _store()
    # Stale: the family has its row; the lookup finds the marker and nothing.
    assert answer_or_error(store, "max by (pod) (x) * on (pod) group_left stale", T0 + 240) == []
    # The row left with the retention: the family has none, and the join is
    # known empty; the same answer as before it left.
    store.drop_before(T0 + 120)
    assert "stale" not in store.families or store.families["stale"].n == 0
    assert answer_or_error(store, "max by (pod) (x) * on (pod) group_left stale", T0 + 240) == []
    # A join that is an error stays one where the right has series.
    assert "many-to-many" in str(answer_or_error(store, "x * on () x", T0 + 240))
