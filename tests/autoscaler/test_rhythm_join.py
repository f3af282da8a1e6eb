"""The rhythm learner's own join of device pods to their devices' utilization, and
its own least age per pod (autoscaler/rhythm_join.py), against the PromQL queries
they stand for (``POD_QUERY``, ``POD_AGE_QUERY``), evaluated on the same store:
hostile values (NaN, an info value that is not 1), rows without a label, pods of
gangs, two series of one device, and the kept join dropped when the fleet changes."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.rhythm import POD_AGE_QUERY, POD_QUERY, Rhythm, _pod_ages, _pod_util
from autoscaler.rhythm_table import Answer, JobKey
from autoscaler.sources.store import StoreSource
from autoscaler.types import Vector

NODES = ("n0", "n1", "n2")
DEVICES = ("0", "1", "2")
PODS = (("a", "p0"), ("a", "p1"), ("b", "p0"), ("b", "p2"), ("", "p3"))
VALUES = st.sampled_from([0.0, 0.01, 0.5, 0.9, 1.0, math.nan, math.inf, -1.0])

device = st.tuples(st.sampled_from(NODES), st.sampled_from(DEVICES))
fleet = st.fixed_dictionaries(
    {
        # Each device's utilization series, and now and then a second one (another
        # uuid) for one of them: a clash.
        "util": st.dictionaries(device, VALUES, max_size=9),
        "clash": st.sampled_from([False, False, False, False, True]),
        # Each device's pod and the info series' value.
        "info": st.dictionaries(
            device,
            st.tuples(st.sampled_from(PODS), st.sampled_from([1.0, 2.0, math.nan])),
            max_size=9,
        ),
        "gangs": st.sets(st.sampled_from(PODS), max_size=2),
        # Each pod's age series: one per node it names (two: a duplicate).
        "ages": st.dictionaries(
            st.sampled_from(PODS),
            st.lists(st.tuples(st.sampled_from(NODES), VALUES), min_size=1, max_size=2),
            max_size=5,
        ),
    }
)


def _pod_labels(namespace: str, pod: str) -> str:
    return f'namespace="{namespace}",pod="{pod}"' if namespace else f'pod="{pod}"'


def _num(v: float) -> str:
    return "NaN" if math.isnan(v) else "+Inf" if v == math.inf else repr(v)


def _text(f: dict[str, object]) -> str:
    lines = []
    util = f["util"]
    assert isinstance(util, dict)
    for (node, dev), v in util.items():
        lines.append(f'accel_utilization_ratio{{node="{node}",device="{dev}",uuid="u"}} {_num(v)}')
    if f["clash"] and util:
        node, dev = next(iter(util))
        lines.append(f'accel_utilization_ratio{{node="{node}",device="{dev}",uuid="v"}} 0.5')
    info = f["info"]
    assert isinstance(info, dict)
    for (node, dev), ((namespace, pod), v) in info.items():
        labels = _pod_labels(namespace, pod)
        lines.append(f'accel_device_pod_info{{node="{node}",device="{dev}",{labels}}} {_num(v)}')
    gangs = f["gangs"]
    assert isinstance(gangs, set)
    for namespace, pod in gangs:
        labels = _pod_labels(namespace, pod)
        lines.append(f'accel_gang_info{{node="n0",gang="g",{labels}}} 1')
    ages = f["ages"]
    assert isinstance(ages, dict)
    for (namespace, pod), rows in ages.items():
        labels = _pod_labels(namespace, pod)
        for node, v in dict(rows).items():
            lines.append(f'accel_job_age_seconds{{node="{node}",{labels}}} {_num(v)}')
    return "\n".join(lines) + "\n"


def _by_key(answer: Answer) -> dict[JobKey, float]:
    ok = answer.valid()
    return {answer.key(i): float(answer.values[i]) for i in range(len(answer)) if ok[i]}


def _query(source: StoreSource, expr: str, t: float) -> dict[JobKey, float]:
    """``rhythm._by_job`` of the query itself: Unknown is no rows."""
    result = asyncio.run(source.query(expr, t))
    if not isinstance(result, Vector):
        return {}
    out = {}
    for s in result.samples:
        namespace, pod = s.get("namespace"), s.get("pod")
        if namespace and pod:
            out[("pod", namespace, pod)] = s.value
    return out


def _same(a: dict[JobKey, float], b: dict[JobKey, float]) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a
    )


@settings(max_examples=150, deadline=None)
@given(fleet)
def test_the_learners_join_and_ages_answer_what_the_queries_do(f: dict[str, object]) -> None:
    source = StoreSource()
    source.store.ingest_text(_text(f), 60.0, target="x")
    r = Rhythm()
    got = _by_key(asyncio.run(_pod_util(r, source, 60.0)))
    assert _same(got, _query(source, POD_QUERY, 60.0))
    ages = _by_key(asyncio.run(_pod_ages(r, source, 60.0)))
    assert _same(ages, _query(source, POD_AGE_QUERY, 60.0))


def _fleet(t: float, util: float, pods: int) -> str:
    lines = []
    for i in range(pods):
        for dev in DEVICES:
            lines.append(f'accel_utilization_ratio{{node="n{i}",device="{dev}"}} {util}')
            lines.append(
                f'accel_device_pod_info{{node="n{i}",device="{dev}",namespace="ml",pod="p{i}"}} 1'
            )
        lines.append(f'accel_job_age_seconds{{node="n{i}",namespace="ml",pod="p{i}"}} {t}')
    return "\n".join(lines) + "\n"


def test_the_join_is_kept_while_the_fleet_stays_and_made_again_when_it_changes() -> None:
    source = StoreSource()
    r = Rhythm()
    # Two minutes apart: each [1m] window holds one sample.
    for k, util in enumerate((0.9, 0.0, 0.5)):
        t = 120.0 * (k + 1)
        source.store.ingest_text(_fleet(t, util, 3), t, target="x")
        got = _by_key(asyncio.run(_pod_util(r, source, t)))
        assert got == {("pod", "ml", f"p{i}"): util for i in range(3)}
        ages = _by_key(asyncio.run(_pod_ages(r, source, t)))
        assert ages == {("pod", "ml", f"p{i}"): t for i in range(3)}
    assert r.pod_join.made == 1 and r.pod_ages.made == 1
    # A fourth pod: both are made again, and answer for it.
    t = 480.0
    source.store.ingest_text(_fleet(t, 0.7, 4), t, target="x")
    got = _by_key(asyncio.run(_pod_util(r, source, t)))
    assert got == {("pod", "ml", f"p{i}"): 0.7 for i in range(4)}
    assert _same(got, _query(source, POD_QUERY, t))
    assert len(_by_key(asyncio.run(_pod_ages(r, source, t)))) == 4
    assert r.pod_join.made == 2 and r.pod_ages.made == 2


def test_two_series_of_one_device_give_no_answer_as_the_query_gives_none() -> None:
    source = StoreSource()
    text = _fleet(60.0, 0.9, 2) + 'accel_utilization_ratio{node="n0",device="0",uuid="x"} 0.1\n'
    source.store.ingest_text(text, 60.0, target="x")
    assert _query(source, POD_QUERY, 60.0) == {}
    assert _by_key(asyncio.run(_pod_util(Rhythm(), source, 60.0))) == {}
