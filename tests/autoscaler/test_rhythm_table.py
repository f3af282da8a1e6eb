"""The rhythm learner's jobs held as arrays (autoscaler/rhythm_table.py,
rhythm_learner.py): the fast path that moves busy, steady jobs all at once
learns exactly what stepping every job one by one learns; answers read as code
columns learn what answers read as samples do; and a learner that stood by
longer than the store keeps its series writes again without an error."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from typing import Any

import numpy as np

from autoscaler.promql.store import SeriesStore
from autoscaler.rhythm import Rhythm, learn
from autoscaler.rhythm_table import JobKey
from autoscaler.sources.base import ColumnarSource
from autoscaler.sources.store import StoreSource
from autoscaler.types import QueryResult, Unknown, Vector
from tests.support.stores import stored


def _views(r: Rhythm, keys: list[JobKey]) -> tuple[Any, ...]:
    rhythms = [r.rhythm(k) for k in keys]
    return (
        r.rows(),
        [None if x is None else dataclasses.astuple(x) for x in rhythms],
        r.refused,
        sorted(r.jobs),
    )


def _drive(seed: int) -> tuple[int, int]:
    """Random jobs through two learners, one with the fast path and one without:
    each cycle both must publish the same rows, figures and series. Returns how
    many jobs each stepped one by one."""
    rnd = random.Random(seed)
    keys: list[JobKey] = [
        (rnd.choice(["gang", "pod"]), rnd.choice(["a", "b"]), f"j{i}")
        for i in range(rnd.randint(1, 12))
    ]
    limit = rnd.choice([3, 100])
    fast, slow = Rhythm(max_jobs=limit), Rhythm(max_jobs=limit)
    slow.fast = False
    stepped = [0, 0]
    for i, r in enumerate((fast, slow)):
        step = r._step

        def counted(*a: Any, _step: Any = step, _i: int = i) -> None:
            stepped[_i] += 1
            _step(*a)

        r._step = counted  # type: ignore[method-assign,assignment]
    stores = (SeriesStore(retention=math.inf), SeriesStore(retention=math.inf))
    born = {k: -float(rnd.randint(0, 5000)) for k in keys}
    busy = {k: rnd.random() < 0.7 for k in keys}
    t = 0.0
    for cycle in range(rnd.randint(60, 300)):
        t += rnd.choice([60.0] * 8 + [30.0, 120.0, 700.0] + ([7200.0] if cycle % 97 == 5 else []))
        util, starts, io = {}, {}, {}
        for k in keys:
            if rnd.random() < 0.05:
                continue  # not in this cycle's answers
            if rnd.random() < 0.1:
                busy[k] = not busy[k]
            if rnd.random() < 0.005:
                born[k] = t - rnd.randint(0, 100)  # restarted
            u = rnd.uniform(0.5, 1.0) if busy[k] else rnd.choice([0.0, 0.01, 0.05])
            util[k] = math.nan if rnd.random() < 0.01 else u
            if rnd.random() > 0.03:
                starts[k] = born[k] if rnd.random() > 0.01 else math.inf
            if rnd.random() < 0.6:
                io[k] = rnd.choice([1e6, 2e9, 3e5, 5e7, math.nan, math.inf])
        for r, store in zip((fast, slow), stores, strict=True):
            r.observe(t, dict(util), dict(starts), dict(io))
            r.write(store, t)
        assert _views(fast, keys) == _views(slow, keys), f"seed {seed}, cycle {cycle}"
        assert stored(stores[0], t) == stored(stores[1], t), f"seed {seed}, cycle {cycle}"
    return stepped[0], stepped[1]


def test_the_fast_path_learns_what_stepping_every_job_learns() -> None:
    one_by_one = [_drive(seed) for seed in range(25)]
    fast, slow = (sum(x) for x in zip(*one_by_one, strict=True))
    # Not vacuous: a good share of the steps took the fast path.
    assert fast < 0.8 * slow, (fast, slow)


def _fleet(t: float, cycle: int, gangs: range = range(3), pods: range = range(5)) -> str:
    """Gangs over two nodes each and lone pods of two devices (p3 without a
    namespace: no job), each idling now and then on its own beat; gang g2 and pod
    p4 go away for a while and come back."""
    lines = []
    for g in gangs:
        if g == 2 and 20 <= cycle < 30:
            continue
        util = 0.0 if (cycle + 3 * g) % 11 in (0, 1) else 0.9
        for m in range(2):
            node = f"g{g}n{m}"
            lines += [
                f'accel_utilization_ratio{{node="{node}",device="d0"}} {util}',
                f'accel_gang_info{{namespace="ml",pod="g{g}-{m}",node="{node}",gang="g{g}"}} 1',
                f'accel_device_pod_info{{namespace="ml",pod="g{g}-{m}",node="{node}",'
                'device="d0"} 1',
                f'accel_job_age_seconds{{namespace="ml",pod="g{g}-{m}",node="{node}"}} {900 + t}',
            ]
    for p in pods:
        if p == 4 and 10 <= cycle < 16:
            continue
        util = 0.0 if (cycle + 2 * p) % 7 == 0 else 0.8
        ns = "" if p == 3 else f'namespace="team{p % 2}",'
        lines += [
            f'accel_utilization_ratio{{node="p{p}",device="d0"}} {util}',
            f'accel_utilization_ratio{{node="p{p}",device="d1"}} {util / 2}',
            f'accel_device_pod_info{{{ns}pod="p{p}",node="p{p}",device="d0"}} 1',
            f'accel_device_pod_info{{{ns}pod="p{p}",node="p{p}",device="d1"}} 1',
            f'accel_job_age_seconds{{{ns}pod="p{p}",node="p{p}"}} {600 + t}',
        ]
    return "\n".join(lines) + "\n"


class _Samples:
    """A store's source that answers only with samples (as Prometheus does)."""

    name = "samples"

    def __init__(self, source: StoreSource) -> None:
        self._source = source
        self.store = source.store

    async def refresh(self, at: float) -> bool:
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        return await self._source.query(expr, at)

    async def close(self) -> None:
        return None


def test_answers_read_as_code_columns_learn_what_answers_read_as_samples_do() -> None:
    """Also across jobs forgotten (unseen for 6 hours) and slots given to new
    ones: a row is never read as the job that had its slot before."""

    async def run() -> None:
        columns, samples = StoreSource(), StoreSource()
        by_samples = _Samples(samples)
        assert isinstance(columns, ColumnarSource)
        assert not isinstance(by_samples, ColumnarSource)
        a, b = Rhythm(), Rhythm()
        # An hour of the first fleet; 7 hours on, others (g0 and p0 forgotten, their
        # slots taken by g5 and p6), then g0 and p0 again beside them.
        phases = (
            (0.0, range(60), range(3), range(5)),
            (7 * 3600.0, range(10), range(1, 6), range(1, 7)),
            (8 * 3600.0, range(20), range(6), range(7)),
        )
        for start, cycles, gangs, pods in phases:
            for cycle in cycles:
                t = start + cycle * 60.0
                text = _fleet(t, cycle, gangs, pods)
                for source in (columns, samples):
                    source.store.ingest_text(text, t, target="x")
                await learn(a, columns, t)
                await learn(b, by_samples, t)
                assert a.rows() == b.rows(), f"{t}"
                assert stored(columns.store, t) == stored(samples.store, t), f"{t}"
        assert set(a.jobs) == {("gang", "ml", f"g{g}") for g in range(6)} | {
            ("pod", f"team{p % 2}", f"p{p}") for p in (0, 1, 2, 4, 5, 6)
        }
        found = a.rhythm(("gang", "ml", "g1"))
        assert found is not None and found.pauses > 0

    asyncio.run(run())


def test_a_learner_that_stood_by_longer_than_the_store_keeps_series_writes_again() -> None:
    """Its handles name series the store has dropped since: it takes new ones
    instead of raising (a replica that leads again after an hour's standby)."""
    store = SeriesStore(retention=600.0)
    r = Rhythm()
    key = ("gang", "ml", "llm")
    for t in (0.0, 60.0, 120.0):
        r.observe(t, {key: 0.9}, {key: -100.0})
        r.write(store, t)
    # An hour later; the store kept scraping others and dropped the rhythm series.
    for t in range(180, 3600, 60):
        store.append(np.array([store.ref({"__name__": "up", "job": "x"})]), float(t), [1.0])
    r.observe(3600.0, {key: 0.9}, {key: -100.0})
    r.write(store, 3600.0)
    assert (
        stored(store, 3600.0)[
            (
                "accel_gang_rhythm_last_busy_timestamp_seconds",
                (("gang", "llm"), ("namespace", "ml")),
            )
        ]
        == 3600.0
    )


def test_a_result_as_code_columns_is_the_result_as_samples() -> None:
    async def run() -> None:
        source = StoreSource()
        source.store.ingest_text(_fleet(0.0, 5), 0.0, target="x")
        expr = (
            "max by (namespace, pod) (accel_device_pod_info"
            " * on (node, device) group_left () accel_utilization_ratio)"
        )
        got = await source.query_columns(expr, 0.0, ("namespace", "pod", "nothing"))
        assert not isinstance(got, Unknown)
        samples = await source.query(expr, 0.0)
        assert isinstance(samples, Vector)
        namespace, pod, nothing = (got.symbols.decode(c) for c in got.codes)
        assert not any(nothing)  # a label no row has: code 0, the empty string
        rows = sorted(zip(namespace, pod, got.values.tolist(), strict=True))
        assert rows == sorted(
            (s.get("namespace") or "", s.get("pod") or "", s.value) for s in samples.samples
        )
        assert len(rows) == 11  # six gang members and five pods, one with no namespace
        for bad in ("accel_utilization_ratio[1m]", "1 + 1", "rate(", "sum(accel_utilization_ratio"):
            failed = await source.query_columns(bad, 0.0, ("node",))
            assert isinstance(failed, Unknown), bad

    asyncio.run(run())
