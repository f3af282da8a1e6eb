"""One malformed Prometheus answer makes only its own rule unknown (issue 15,
"Controller data paths"): a fake Prometheus on 127.0.0.1 answers one rule's query
with garbage (bad JSON, the wrong shape, a value that is not a number, a label that
is not a string, a body over the limit, a gzip bomb, JSON nested past any sane
depth) and the other rules' queries properly; the cycle evaluates the others."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from autoscaler.engine.cycle import run_cycle
from autoscaler.engine.state import EngineState
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource, parse_result
from autoscaler.types import QueryResult, Scalar, Unknown, Vector
from tests.support.procs import free_port

NOW = 1_700_000_000.0
LIMIT = 256 * 1024

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 15s
  rules:
    - name: lost
      expr: accel_up == 0
      target: device
      action: {type: cordon}
      cooldown: 1h
    - name: garbage
      expr: accel_temperature_celsius > 90
      target: device
      action: {type: cordon}
      cooldown: 1h
    - name: busy
      expr: accel_utilization_ratio > 0.9
      target: device
      action: {type: cordon}
      cooldown: 1h
"""


def vector(*samples: tuple[dict[str, Any], list[Any]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": v} for m, v in samples],
        },
    }


def one(metric: dict[str, Any] | None = None, value: list[Any] | None = None) -> bytes:
    metric = {"node": "n1", "device": "nvidia0"} if metric is None else metric
    return json.dumps(vector((metric, [NOW, "1"] if value is None else value))).encode()


def _bomb() -> bytes:
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(z.compress(b" " * (1 << 20)) for _ in range(64)) + z.flush()


BOMB = _bomb()
DEEP = b"[" * 100_000 + b"]" * 100_000
NESTED_LABEL = (
    b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"node":'
    + b"[" * 500
    + b"]" * 500
    + b'},"value":[1,"1"]}]}}'
)

# (case, body, Content-Encoding, what the rule's Unknown says)
GARBAGE = [
    ("not JSON", b"<html>Bad Gateway</html>", "", "not a Prometheus API answer"),
    ("cut short", one()[:40], "", "not a Prometheus API answer"),
    ("null", b"null", "", "a JSON NoneType"),
    ("data is a list", b'{"status":"success","data":[1,2]}', "", "data is list, not an object"),
    (
        "item not an object",
        b'{"status":"success","data":{"resultType":"vector","result":[7]}}',
        "",
        "result[0] is int, not an object",
    ),
    (
        "no metric",
        one(value=[NOW, "1"]).replace(b'"metric"', b'"labels"'),
        "",
        "metric is NoneType",
    ),
    ("value not a number", one(value=[NOW, "hot"]), "", "invalid sample value 'hot'"),
    ("value as a number", one(value=[NOW, 1]), "", "the value is int, not a string"),
    ("value too large", one(value=[NOW, "1e999"]), "", "out of the float64 range"),
    ("time a string", one(value=["now", "1"]), "", "the time is str, not a number"),
    ("time NaN", one(value=[float("nan"), "1"]), "", "NaN is not JSON"),
    ("time infinite", one().replace(b"1700000000.0", b"1e999"), "", "1e999 is not a finite number"),
    ("time a bool", one(value=[True, "1"]), "", "the time is bool"),
    ("value pair of three", one(value=[NOW, "1", "2"]), "", 'expected [time, "value"]'),
    ("label not a string", one(metric={"node": 5}), "", "label 'node' is int, not a string"),
    ("label a list", one(metric={"node": ["n1"]}), "", "label 'node' is list, not a string"),
    ("label nested deep", NESTED_LABEL, "", "nested 505 deep; at most 64"),
    ("deep JSON", DEEP, "", "nested deeper than"),
    ("huge number", b'{"status":"success","data":' + b"1" * 5000 + b"}", "", "not a Prometheus"),
    ("body over the limit", b" " * (LIMIT + 1) + one(), "", f"body larger than {LIMIT} bytes"),
    ("gzip bomb", BOMB, "gzip", "raise --prometheus.body-size-limit"),
    ("broken gzip", gzip.compress(one())[:-10], "gzip", "ends before its end marker"),
    ("unknown type", b'{"status":"success","data":{"resultType":"streams"}}', "", "unsupported"),
    (
        "error",
        b'{"status":"error","errorType":"bad_data","error":"' + b"x" * 5000 + b'"}',
        "",
        "bad_data",
    ),
]


class FakePrometheus:
    """Answers the health query and every rule's query properly, except
    ``garbage_for``, which gets ``garbage``."""

    def __init__(self) -> None:
        self.garbage_for = "accel_temperature_celsius > 90"
        self.garbage = b""
        self.encoding = ""
        self.asked: list[str] = []

    async def query(self, request: web.Request) -> web.StreamResponse:
        q = request.query.get("query", "")
        self.asked.append(q)
        if q == self.garbage_for:
            headers = {"Content-Encoding": self.encoding} if self.encoding else {}
            return web.Response(body=self.garbage, headers=headers, content_type="application/json")
        if q == "count(accel_up)":
            return web.json_response(vector(({}, [NOW, "2"])))
        if q == "accel_up == 0":
            return web.json_response(vector(({"node": "n1", "device": "nvidia0"}, [NOW, "0"])))
        if q == "accel_utilization_ratio > 0.9":
            return web.json_response(vector(({"node": "n2", "device": "nvidia1"}, [NOW, "0.95"])))
        return web.json_response(vector())


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[FakePrometheus, PrometheusSource]]:
    fake = FakePrometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", fake.query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    source = PrometheusSource(
        PrometheusConfig(url=f"http://127.0.0.1:{port}", timeout=10.0, body_size_limit=LIMIT)
    )
    try:
        yield fake, source
    finally:
        await source.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("case", "body", "encoding", "reason"), GARBAGE, ids=[g[0] for g in GARBAGE]
)
async def test_one_malformed_answer_makes_only_its_rule_unknown(
    prometheus: tuple[FakePrometheus, PrometheusSource],
    tmp_path: Path,
    case: str,
    body: bytes,
    encoding: str,
    reason: str,
) -> None:
    fake, source = prometheus
    fake.garbage, fake.encoding = body, encoding
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    ruleset = load_ruleset([str(path)], source="prometheus")

    class NoAlerts:
        def vector(self, alertname: str, now: float) -> QueryResult:
            return Vector(())

    start = time.monotonic()
    result = await run_cycle(ruleset, source, NoAlerts(), EngineState(), NOW)
    assert time.monotonic() - start < 10
    assert result.source_up is True
    assert result.unknown == ("garbage",)
    assert sorted((d.rule, d.target["node"]) for d in result.decisions if d.kind == "act") == [
        ("busy", "n2"),
        ("lost", "n1"),
    ]
    # The rule's Unknown says what was wrong, briefly; the source stays up.
    answer = await source.query(fake.garbage_for, NOW)
    assert isinstance(answer, Unknown)
    assert reason in answer.reason, answer.reason
    assert len(answer.reason) < 1000
    assert await source.refresh(NOW)
    # Malformed is not transient: asked once per query, not retried.
    assert fake.asked.count(fake.garbage_for) == 2


def test_parse_result_takes_what_prometheus_sends() -> None:
    v = parse_result(
        {
            "resultType": "vector",
            "result": [
                {"metric": {"node": "n1"}, "value": [NOW, "NaN"]},
                {"metric": {}, "value": [1700000000, "+Inf"]},
            ],
        }
    )
    assert isinstance(v, Vector) and len(v.samples) == 2
    assert v.samples[1].value == float("inf") and v.samples[1].timestamp == NOW
    assert parse_result({"resultType": "scalar", "result": [NOW, "2"]}) == Scalar(2.0, NOW)
    bad = parse_result({"resultType": "scalar", "result": "2"})
    assert isinstance(bad, Unknown) and 'expected [time, "value"]' in bad.reason
    assert isinstance(parse_result({"resultType": "matrix", "result": []}), Unknown)
