"""A store keeps of each metric what its readers read of it (``kept_by_name``):
every answer they get is the answer of a store that keeps the whole retention,
and a read that reaches further back is *unknown*, never a window cut short."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import required_retention, retention_by_name
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.sources.store import StoreSource
from autoscaler.types import Unknown
from autoscaler.wiring import action_queries, retained
from tests.support.stores import answer, same_answer

T0 = 1_700_000_000.0
STEP = 30.0
LINKS = range(64)
HOURS = 3

# What the readers ask: five or ten minutes of the wide family ``link``, two
# hours of the counter ``fault``, both joined, and the instant ``up``.
READS = (
    "max_over_time(link[5m])",
    "rate(link[10m])",
    'increase(fault{severity="fatal"}[2h]) > 0',
    "sum by (node) (rate(link[5m])) * on (node) group_left () max by (node) (up)",
    "count_over_time(fault[90m]) - count_over_time(link[10m])",
    "link",
)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("rate(a[5m]) + b", {"a": 600.0, "b": 300.0}),
        ("max_over_time(a[10m] offset 5m)", {"a": 1200.0}),
        ('count_over_time({__name__="a", x="y"}[1m])', {"a": 360.0}),
        ('sum({__name__=~"a|b"}) + c offset 1h', {"": 300.0, "c": 3900.0}),
        ("max_over_time(rate(a[1m])[10m:30s] offset 5m)", {"a": 1260.0}),
        ("vector(1)", {"": 300.0}),
    ],
)
def test_each_metric_is_kept_for_as_long_as_an_expression_reads_it(
    expr: str, want: dict[str, float]
) -> None:
    assert retention_by_name(expr) == want
    assert required_retention(expr) == max(want.values())


def _write(stores: list[SeriesStore], k: int) -> None:
    """Scrape ``k``: 64 links on 8 nodes, a pod's link that comes and goes,
    a fault counter that steps now and then, and ``up`` with a node lost."""
    t = T0 + k * STEP
    load = np.random.default_rng(k).random(64) * 1e9
    for store in stores:
        links = [store.ref({"__name__": "link", "node": f"n{i % 8}", "l": f"{i}"}) for i in LINKS]
        store.append(links, t, load)
        # A series that lives for 20 minutes of each hour, then ends stale.
        pod = store.ref({"__name__": "link", "node": "n0", "pod": f"p{k // 120}"})
        if k % 120 < 40:
            store.append([pod], t, [float(k)])
        elif k % 120 == 40:
            store.append_stale([pod], t)
        faults = [
            store.ref({"__name__": "fault", "node": f"n{i}", "severity": "fatal"}) for i in range(8)
        ]
        store.append(faults, t, [float((k + 17 * i) // 150) for i in range(8)])
        up = [store.ref({"__name__": "up", "node": f"n{i}"}) for i in range(8)]
        if k % 200 < 190:
            store.append(up, t, [1.0] * 8)
        else:
            store.append_stale(up[:1], t)
            store.append(up[1:], t, [1.0] * 7)


async def test_what_the_readers_ask_is_answered_as_from_the_whole_retention() -> None:
    whole, kept = StoreSource(), StoreSource()
    whole.store.retention = 2 * 3600 + 300.0
    kept.retain(READS)
    assert kept.store.retention == whole.store.retention
    assert kept.store.kept_by_name == {"link": 900.0, "fault": 7500.0, "up": 300.0}
    for k in range(int(HOURS * 3600 / STEP)):
        _write([whole.store, kept.store], k)
        t = T0 + k * STEP
        for expr in READS:
            got, want = await kept.query(expr, t), await whole.query(expr, t)
            assert same_answer(answer(got), answer(want)), (expr, k)
    # Of the wide family, the short store holds a quarter hour (with the buffer's
    # slack), the whole one two hours and more; the series live as long in both.
    short, full = kept.store.families["link"], whole.store.families["link"]
    assert int(short.count[: short.n].max()) <= 40 < int(full.count[: full.n].max())
    assert short.labels == full.labels
    assert kept.store.sample_count * 2 < whole.store.sample_count


async def test_a_read_further_back_than_a_metric_was_kept_is_unknown() -> None:
    whole, kept = StoreSource(), StoreSource()
    whole.store.retention = 2 * 3600 + 300.0
    kept.retain(READS)
    for k in range(int(HOURS * 3600 / STEP)):
        _write([whole.store, kept.store], k)
    t = T0 + (int(HOURS * 3600 / STEP) - 1) * STEP
    # An hour of ``link``: no reader declared it, and the store kept 15 minutes.
    expr = "max by (node) (max_over_time(link[1h]))"
    got = await kept.query(expr, t)
    assert isinstance(got, Unknown)
    assert "link" in got.reason and "keeps this metric's samples from" in got.reason
    assert len(answer(await whole.query(expr, t))) == 8
    # Declared, it is kept from then on (the samples already gone stay gone).
    kept.keep_at_least([expr])
    assert kept.store.kept_by_name["link"] == 3900.0
    assert isinstance(await kept.query(expr, t), Unknown)


def test_without_rules_every_metric_keeps_the_whole_retention() -> None:
    """``keep_at_least`` alone (a placement source that asks its own queries) says
    what it reads, not what nobody else reads: nothing is kept shorter."""
    source = StoreSource()
    source.keep_at_least(["max_over_time(link[5m])"])
    assert source.store.kept_by_name == {}
    assert source.store.retention == 3600.0


def test_the_queries_actions_ask_themselves_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  rules:
    - name: busy
      expr: 'avg by (node) (accel_utilization_ratio) > 0.9'
      target: node
      action: {type: rebalance}
    - name: grow
      expr: 'sum by (pool) (accel_pool_pending_device_requests) > 0'
      target: pool
      action:
        type: scale_node_pool
        direction: up
        spareFaultRateQuery: 'sum(rate(accel_fault_events_total{pool=$pool}[6h]))'
    - name: fatal
      expr: 'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0'
      target: device
      action: {type: reset_devices}
"""
    )
    ruleset = load_ruleset([str(path)], source="scrape")
    queries = action_queries(ruleset)
    assert any("avg_over_time(accel_utilization_ratio" in q for q in queries)
    assert 'accel_fault_events_total{pool="pool"}[6h]' in " ".join(queries)
    # A reset looks up its device's UUID: that metric keeps the lookback, not a
    # whole retention no reader asked for.
    assert "accel_device_info" in queries
    source = StoreSource()
    source.retain(retained(ruleset))
    assert source.store.kept_by_name["accel_device_info"] == 300.0
    assert source.store.retention == 6 * 3600 + 300.0


def test_a_series_handle_lives_as_long_as_the_whole_retention_would_keep_it() -> None:
    """A short family's samples go early, its series do not: a handle taken for
    a device that went quiet stays valid for as long as it did before (the
    simulator holds one per device series), and takes its samples again."""
    source = StoreSource()
    source.retain(["max_over_time(link[1m])", "increase(fault[2h])"])
    store = source.store
    link = store.ref({"__name__": "link", "node": "n0"})
    fault = store.ref({"__name__": "fault", "node": "n0"})
    store.append([link], T0, [1.0])
    store.append_stale([link], T0 + 30)
    for k in range(1, 121):
        store.append([fault], T0 + 30 * k, [0.0])
    assert store.families["link"].count[0] == 0
    assert store.append([link], T0 + 3630, [2.0]) == 1
    # Past the whole retention, the series is dropped with its handle.
    for k in range(122, 400):
        store.append([fault], T0 + 30 * k, [0.0])
    with pytest.raises(KeyError, match="take a new one"):
        store.append([link], T0 + 30 * 400, [3.0])
