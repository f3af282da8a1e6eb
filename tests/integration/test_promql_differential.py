"""The built-in evaluator against a real Prometheus, same data, same questions.

One deterministic fleet (``tests/support/promql_cases.py``) is written as OpenMetrics,
backfilled with ``promtool tsdb create-blocks-from openmetrics`` into a data
directory that Debian's Prometheus then serves, and loaded into a ``SeriesStore``
from the same file. Every expression is asked of both at every instant of
``eval_times`` (``/api/v1/query``): the label sets must be identical and the
values equal to 1e-9 relative (NaN equals NaN); where Prometheus answers with an
error, the evaluator must raise one too.

Stale markers cannot be written in OpenMetrics, so staleness is compared through
``promtool test rules``, whose input series notation has ``stale``: the expected
samples are what the built-in evaluator answers, and promtool (Prometheus's own
engine) must agree exactly.

Prometheus starts once for the module; the whole file takes a few seconds.
"""

from __future__ import annotations

import json
import math
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.promql.errors import EvalError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.openmetrics import load
from autoscaler.promql.query import result_json
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Labels, Matrix, Scalar, Vector
from tests.support import promql_cases
from tests.support.procs import prometheus_tsdb, require

REL = 1e-9


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    series = promql_cases.generate()
    path = tmp_path_factory.mktemp("fleet") / "fleet.om"
    path.write_text(promql_cases.to_openmetrics(series))
    return path, promql_cases.eval_times(series)


@pytest.fixture(scope="module")
def prometheus_url(
    fleet: tuple[Path, list[float]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prometheus")
    data = tmp / "data"
    proc = subprocess.run(
        [
            require("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(fleet[0]),
            str(data),
        ],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    with prometheus_tsdb(tmp, data) as url:
        yield url


@pytest.fixture(scope="module")
def store(fleet: tuple[Path, list[float]]) -> SeriesStore:
    return load(fleet[0])


def prometheus_query(url: str, expr: str, t: float) -> dict[str, Any]:
    query = urllib.parse.urlencode({"query": expr, "time": repr(t)})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as resp:
            body: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    return body


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)


def _points(values: list[list[Any]]) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in values]


def differences(prom: dict[str, Any], mine: Vector | Scalar | Matrix) -> list[str]:
    """What differs between Prometheus's ``data`` and the evaluator's result."""
    kind = prom["resultType"]
    if kind == "scalar":
        if not isinstance(mine, Scalar):
            return [f"Prometheus answered a scalar, the evaluator {type(mine).__name__}"]
        t, v = _points([prom["result"]])[0]
        if t != mine.timestamp or not _same(v, mine.value):
            return [f"scalar: Prometheus {v} at {t}, evaluator {mine.value} at {mine.timestamp}"]
        return []
    theirs: dict[Labels, list[tuple[float, float]]] = {}
    for item in prom["result"]:
        labels = tuple(sorted(item["metric"].items()))
        theirs[labels] = _points([item["value"]] if kind == "vector" else item["values"])
    ours: dict[Labels, list[tuple[float, float]]] = {}
    if kind == "vector":
        if not isinstance(mine, Vector):
            return [f"Prometheus answered a vector, the evaluator {type(mine).__name__}"]
        for s in mine.samples:
            assert s.labels not in ours, f"duplicate series {s.labels}"
            ours[s.labels] = [(s.timestamp, s.value)]
    else:
        if not isinstance(mine, Matrix):
            return [f"Prometheus answered a matrix, the evaluator {type(mine).__name__}"]
        for series in mine.series:
            ours[series.labels] = list(series.points)
    out = [f"only in Prometheus: {dict(k)}" for k in theirs.keys() - ours.keys()]
    out += [f"only in the evaluator: {dict(k)}" for k in ours.keys() - theirs.keys()]
    for labels in theirs.keys() & ours.keys():
        a, b = theirs[labels], ours[labels]
        if len(a) != len(b) or any(
            ta != tb or not _same(va, vb) for (ta, va), (tb, vb) in zip(a, b, strict=False)
        ):
            out.append(f"{dict(labels)}: Prometheus {a[:4]}, evaluator {b[:4]}")
    return out


@pytest.mark.parametrize("expr", promql_cases.EXPRESSIONS)
def test_agrees_with_prometheus(
    expr: str,
    prometheus_url: str,
    store: SeriesStore,
    fleet: tuple[Path, list[float]],
) -> None:
    evaluator = Evaluator(store)
    problems: list[str] = []
    answered = 0
    for t in fleet[1]:
        prom = prometheus_query(prometheus_url, expr, t)
        try:
            mine = evaluator.instant(expr, t)
        except EvalError as e:
            if prom["status"] != "error":
                problems.append(f"t={t}: the evaluator raised {e!r}, Prometheus answered")
            continue
        if prom["status"] != "success":
            problems.append(f"t={t}: Prometheus raised {prom.get('error')!r}, evaluator answered")
            continue
        answered += len(prom["data"]["result"]) if prom["data"]["resultType"] != "scalar" else 1
        problems += [f"t={t}: {d}" for d in differences(prom["data"], mine)]
    assert not problems, f"{expr}:\n" + "\n".join(problems[:20])


def test_cases_cover_every_construct_and_answer() -> None:
    """The expression list is the contract: at least 60, all in the subset."""
    from autoscaler.promql.support import unsupported

    assert len(promql_cases.EXPRESSIONS) >= 60
    assert len(set(promql_cases.EXPRESSIONS)) == len(promql_cases.EXPRESSIONS)
    for expr in promql_cases.EXPRESSIONS:
        assert unsupported(expr) == [], expr


class _Number(str):
    """A JSON number kept as the text Prometheus wrote."""


def _dump(obj: object) -> str:
    if isinstance(obj, _Number):
        return str(obj)
    if isinstance(obj, str):
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, list):
        return "[" + ",".join(_dump(x) for x in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in obj.items()) + "}"
    raise TypeError(type(obj))


def test_query_json_is_prometheus_json(
    prometheus_url: str, store: SeriesStore, fleet: tuple[Path, list[float]]
) -> None:
    """Where the numbers are the same, ``accel-autoscaler query`` prints the same
    bytes as Prometheus's ``data`` object (value strings, timestamps, shapes)."""
    evaluator = Evaluator(store)
    t = fleet[1][1]
    for expr in (
        "accel_special",
        "count by (vendor) (accel_up)",
        'accel_fault_events_total{node="n1", severity="info"}[1m]',
        "accel_memory_used_bytes",
        "1 / 0",
        "time()",
    ):
        query = urllib.parse.urlencode({"query": expr, "time": repr(t)})
        with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=30) as r:
            body = json.loads(r.read(), parse_float=_Number, parse_int=_Number)
        data = body["data"]
        if data["resultType"] != "scalar":
            data["result"].sort(key=lambda item: sorted(item["metric"].items()))
        assert result_json(evaluator.instant(expr, t)) == _dump(data), expr


STALE_SERIES = {
    'x{a="1"}': "1 2 3 stale 5 6 _ _ _ _ 7",
    'x{a="2"}': "10 20 stale",
    'c_total{a="1"}': "0 5 10 stale 2 4 8 stale stale 9",
    'y{a="1"}': "1 1 2 stale 2 stale stale 3",
}
STALE_EXPRESSIONS = [
    "x",
    "count(x)",
    "x offset 1m",
    "last_over_time(x[5m])",
    "count_over_time(x[5m])",
    "sum_over_time(c_total[3m])",
    "max_over_time(y[2m])",
    "changes(y[10m])",
    "resets(c_total[10m])",
    "increase(c_total[4m])",
    'absent(x{a="2"})',
    "x > 2",
    "y and x",
]


def _stale_store() -> SeriesStore:
    from autoscaler.promql.textformat import parse_series

    store = SeriesStore(retention=float("inf"))
    for series, values in STALE_SERIES.items():
        name, pairs = parse_series(series)
        labels = {**dict(pairs), "__name__": name}
        for i, v in enumerate(values.split()):
            if v == "stale":
                store.add_stale(labels, i * 60)
            elif v != "_":
                store.add(labels, i * 60, float(v))
    return store


def test_staleness_agrees_with_promtool(tmp_path: Path) -> None:
    """Stale markers end a series at once, in instant and range selectors alike:
    the evaluator's answers, written as ``exp_samples``, must satisfy promtool."""
    evaluator = Evaluator(_stale_store())
    cases = []
    expected = 0
    for expr in STALE_EXPRESSIONS:
        for step in range(0, 24):
            t = step * 30
            result = evaluator.instant(expr, t)
            assert isinstance(result, Vector)
            samples = [
                {
                    "labels": _promtool_labels(s.labels),
                    "value": s.value,
                }
                for s in result.samples
            ]
            expected += len(samples)
            cases.append({"expr": expr, "eval_time": f"{t}s", "exp_samples": samples})
    assert expected > 100
    rules = tmp_path / "stale_test.yml"
    rules.write_text(
        json.dumps(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": s, "values": v} for s, v in STALE_SERIES.items()
                        ],
                        "promql_expr_test": cases,
                    }
                ],
            }
        )
    )
    proc = subprocess.run(
        [require("promtool"), "test", "rules", str(rules)], capture_output=True, timeout=60
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()[-4000:]


def _promtool_labels(labels: Labels) -> str:
    name = dict(labels).get("__name__", "")
    inner = ", ".join(f'{k}="{v}"' for k, v in labels if k != "__name__")
    return f"{name}{{{inner}}}"
