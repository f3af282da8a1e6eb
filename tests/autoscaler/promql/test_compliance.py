"""The PromQL compliance tester's query list, asked of the built-in evaluator and of
a real Prometheus 2.42 over the same data.

Why: ``prometheus/compliance``'s expanded list (539 queries, read from
``<repo>/../shared/peers/promql-compliance/queries.json``, never copied here) is
how PromQL implementations are compared in the field; each query is a variant
of a template, so it covers operators, modifiers and functions more evenly than
hand-picked expressions do. The list expects the PromLabs demo service's
metrics; the data here is made to have the same names, labels and kinds
(``demo_data``), deterministic, with scrape times jittered by milliseconds.

Every query is asked at ``INSTANTS`` (all of them, no sampling: the whole file
takes seconds). Prometheus runs with ``promql-negative-offset``, which the list
uses and the evaluator accepts. Each query ends in one kind: ``agree`` (same
series, values equal to 1e-9 relative, NaN equal to NaN; or both refuse it),
``refused`` (the evaluator refuses it when rules load, with a reason: counted,
not failed) or ``disagree``. The counts are printed and held.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.promql.errors import EvalError, ExprError, UnsupportedError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.openmetrics import load
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Labels, Matrix, Scalar, Vector
from tests.autoscaler.promql.realprom import ask, serve
from tests.support.paths import REPO

QUERIES = REPO.parent / "shared" / "peers" / "promql-compliance" / "queries.json"
pytestmark = pytest.mark.skipif(
    not QUERIES.is_file(),
    reason=f"the compliance tester's query list is not at {QUERIES} (CI puts "
    "prometheus/compliance's expanded promql-test-queries.yml there; see SOURCE.txt)",
)

T0 = 1_700_000_000
HOURS = 2
STEP = 15
INSTANTS = [T0 + 3600.0, T0 + 5400.5, T0 + HOURS * 3600 - 60.25]
INSTANCES = [f"demo.promlabs.com:{10000 + i}" for i in range(3)]
REL = 1e-9

QUERY_COUNT = 539
AGREE = 539
MAX_REFUSED = 0
MAX_DISAGREE = 0
ANSWERED = 0.85
"""The share of queries with a non-empty answer from Prometheus: an empty answer
on both sides agrees but proves little. The rest ask for absent metrics, fail
on purpose or filter everything out, as the list means them to."""


def _jitter(series: int, i: int) -> float:
    return ((i * 211 + series * 97) % 997) / 1000


def _wave(series: int, i: int) -> float:
    """A deterministic, bumpy value in [0, 1)."""
    return (math.sin(i / 7 + series) + 1) / 2 * 0.999


def demo_data() -> str:
    """The demo service's families over ``HOURS`` hours, one scrape every ``STEP`` s."""
    families: dict[str, tuple[str, list[tuple[str, Any]]]] = {
        "demo_cpu_usage_seconds": ("counter", []),
        "demo_memory_usage_bytes": ("gauge", []),
        "demo_num_cpus": ("gauge", []),
        "demo_disk_usage_bytes": ("gauge", []),
        "demo_batch_last_success_timestamp_seconds": ("gauge", []),
        "demo_intermittent_metric": ("gauge", []),
        "demo_api_request_duration_seconds": ("histogram", []),
    }
    n = HOURS * 3600 // STEP
    lines: list[str] = []
    for name, (kind, _) in families.items():
        lines.append(f"# TYPE {name} {kind}")
        for s, (labels, value) in enumerate(_series(name)):
            for i in range(n):
                v = value(s, i)
                if v is not None:
                    t = T0 + i * STEP + _jitter(s, i)
                    lines.append(f"{labels} {v!r} {t:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _series(name: str) -> Iterator[tuple[str, Any]]:
    for k, inst in enumerate(INSTANCES):
        base = f'instance="{inst}",job="demo"'
        if name == "demo_cpu_usage_seconds":
            for m, mode in enumerate(("idle", "system", "user")):
                # A counter that grows by a bumpy amount and restarts at 2/3.
                def cpu(s: int, i: int, m: int = m) -> float:
                    j = i if i < 320 + 7 * s else i - 320 - 7 * s
                    return round(sum(0.25 + _wave(s, x) for x in range(j)) * (m + 1), 6)

                yield f'demo_cpu_usage_seconds_total{{{base},mode="{mode}"}}', cpu
        elif name == "demo_memory_usage_bytes":
            for kind in ("buffers", "cached", "free", "used"):
                yield (
                    f'demo_memory_usage_bytes{{{base},type="{kind}"}}',
                    lambda s, i: float(int(1e9 + 3e8 * _wave(s, i))),
                )
        elif name == "demo_num_cpus":
            yield f"demo_num_cpus{{{base}}}", lambda s, i, k=k: float(4 + 2 * k)
        elif name == "demo_disk_usage_bytes":
            yield f"demo_disk_usage_bytes{{{base}}}", lambda s, i: 5e10 + 1234.5 * i
        elif name == "demo_batch_last_success_timestamp_seconds":
            yield (
                f"demo_batch_last_success_timestamp_seconds{{{base}}}",
                lambda s, i: float(T0 + (i // 20) * 300),
            )
        elif name == "demo_intermittent_metric":
            if k == 0:
                yield (
                    f"demo_intermittent_metric{{{base}}}",
                    lambda s, i: 1.0 if i % 60 < 30 else None,
                )
        else:
            yield from _histogram(base)


def _histogram(base: str) -> Iterator[tuple[str, Any]]:
    bounds = ("0.0002", "0.001", "0.01", "0.1", "1", "+Inf")
    for method in ("GET", "POST"):
        for path in ("/api/foo", "/api/bar"):
            for status in ("200", "500"):
                labels = f'{base},method="{method}",path="{path}",status="{status}"'
                scale = (1 + len(method)) * (2 if status == "200" else 1)
                for b, le in enumerate(bounds):
                    yield (
                        f'demo_api_request_duration_seconds_bucket{{{labels},le="{le}"}}',
                        lambda s, i, b=b, scale=scale: float(i * scale * (b + 1) + (i * b) // 7),
                    )
                yield (
                    f"demo_api_request_duration_seconds_count{{{labels}}}",
                    lambda s, i, scale=scale: float(i * scale * 6 + (i * 5) // 7),
                )
                yield (
                    f"demo_api_request_duration_seconds_sum{{{labels}}}",
                    lambda s, i, scale=scale: i * scale * 0.0421,
                )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SeriesStore]]:
    tmp = tmp_path_factory.mktemp("compliance")
    path = tmp / "demo.om"
    path.write_text(demo_data())
    with serve(path, tmp, ["--enable-feature=promql-negative-offset"]) as url:
        yield url, load(path)


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)


def _series_of(result: Vector | Scalar | Matrix) -> dict[Labels, list[float]]:
    if isinstance(result, Scalar):
        return {(): [result.value]}
    if isinstance(result, Vector):
        return {s.labels: [s.value] for s in result.samples}
    return {s.labels: [v for _, v in s.points] for s in result.series}


def _theirs(data: dict[str, Any]) -> dict[Labels, list[float]]:
    if data["resultType"] == "scalar":
        return {(): [float(data["result"][1])]}
    out = {}
    for item in data["result"]:
        points = [item["value"]] if "value" in item else item["values"]
        out[tuple(sorted(item["metric"].items()))] = [float(v) for _, v in points]
    return out


def judge(url: str, evaluator: Evaluator, query: str, answered: list[str]) -> tuple[str, str]:
    """``(kind, why)`` for one query over every instant; the query is added to
    ``answered`` where Prometheus gave it something."""
    try:
        evaluator.check(query)
    except UnsupportedError as e:
        return "refused", str(e)
    except ExprError as e:
        refused_too = ask(url, query, INSTANTS[0])["status"] == "error"
        return ("agree", "") if refused_too else ("disagree", f"parse: {e}")
    for t in INSTANTS:
        body = ask(url, query, t)
        if body["status"] == "success" and _theirs(body["data"]) and answered[-1:] != [query]:
            answered.append(query)
        try:
            mine = _series_of(evaluator.instant(query, t))
        except EvalError as e:
            if body["status"] != "error":
                return "disagree", f"t={t}: ours raised {e}, Prometheus answered"
            continue
        if body["status"] != "success":
            return "disagree", f"t={t}: Prometheus raised {body.get('error')}, ours answered"
        theirs = _theirs(body["data"])
        if theirs.keys() != mine.keys():
            return "disagree", f"t={t}: other series {sorted(theirs.keys() ^ mine.keys())[:2]}"
        for labels, values in theirs.items():
            got = mine[labels]
            if len(got) != len(values) or not all(map(_same, values, got)):
                return "disagree", f"t={t} {dict(labels)}: Prometheus {values[:3]}, ours {got[:3]}"
    return "agree", ""


def test_compliance_queries_agree_with_prometheus(
    world: tuple[str, SeriesStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = world
    cases = json.loads(QUERIES.read_text())["cases"]
    evaluator = Evaluator(store)
    counts: Counter[str] = Counter()
    lines: list[str] = []
    answered: list[str] = []
    for case in cases:
        kind, why = judge(url, evaluator, case["query"], answered)
        counts[kind] += 1
        if kind != "agree":
            lines.append(f"  {kind}: #{case['id']} {case['query']}  ({why[:200]})")
    summary = (
        f"PromQL compliance queries: {len(cases)} at {len(INSTANTS)} instants: "
        f"{counts['agree']} agree, {counts['disagree']} disagree, "
        f"{counts['refused']} refused at load; Prometheus answered {len(answered)} non-empty"
    )
    with capsys.disabled():
        print("\n" + summary)
        print("\n".join(lines))
    assert len(cases) == QUERY_COUNT
    assert counts["agree"] >= AGREE, summary
    assert counts["refused"] <= MAX_REFUSED, summary
    assert counts["disagree"] <= MAX_DISAGREE, summary
    assert len(answered) >= ANSWERED * len(cases), summary
