"""The controller's HTTP bodies, fuzzed: the Alertmanager webhook
(``POST /api/v1/alerts``) and the scheduler extender (``POST /filter``,
``/prioritize``).

Two levels. In process, a JSON value goes straight to the validator
(``AlertReceiver.ingest``, ``parse_args`` and the extender's answer), many cases a
second. Over HTTP, bytes go to the real aiohttp apps on 127.0.0.1, as Alertmanager
and kube-scheduler send them: the property there is an answer of 2xx or 4xx within
the bound, never a 500 (an exception escaping a handler), whatever the body.

Bodies start from a valid payload (Alertmanager's v4 webhook, ExtenderArgs as
kube-scheduler writes them) with places replaced by raw JSON that ``json.dumps``
never writes: nesting 100,000 deep, 5,000-digit integers, ``NaN``, lone surrogates,
duplicate keys.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from accel_common import jsonread
from autoscaler.controller import Controller
from autoscaler.placement.extender import BadArgs, Extender, parse_args
from autoscaler.placement.extender import make_app as extender_app
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app as controller_app
from autoscaler.sources.alertmanager import MAX_BODY, AlertReceiver, PayloadError
from tests.autoscaler.placement.test_extender import cache_with, fleet, k8s_pod
from tests.autoscaler.placement.test_placement import nvlink_node
from tests.fuzz.harness import SECONDS, budget, check
from tests.fuzz.strategies import mutated_tree, raw_bytes
from tests.support.sources import HealthySource

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: gpu-fault-alert
      alertname: GPUFault
      target: node
      action: {type: cordon}
"""

_ALERT = {
    "status": "firing",
    "labels": {"alertname": "GPUFault", "node": "n1", "severity": "critical"},
    "annotations": {"summary": "a GPU fell off the bus"},
    "startsAt": "2026-11-30T10:00:00.123Z",
    "endsAt": "0001-01-01T00:00:00Z",
    "generatorURL": "http://prometheus:9090/graph",
    "fingerprint": "8f7c4c1d2b3a4e5f",
}
WEBHOOK_SEEDS: list[Any] = [
    {
        "version": "4",
        "groupKey": '{}:{alertname="GPUFault"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "accel-autoscaler",
        "groupLabels": {"alertname": "GPUFault"},
        "commonLabels": {"alertname": "GPUFault"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [{**_ALERT, "status": status}, {**_ALERT, "fingerprint": "0" * 16}],
    }
    for status in ("firing", "resolved")
]
POD = k8s_pod(2, {"accel-fleet.io/devices": "2"})
EXTENDER_SEEDS: list[Any] = [
    {"Pod": POD, "Nodes": None, "NodeNames": ["a", "b", "missing"]},
    {"Pod": POD, "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "a"}}]}},
    {"pod": k8s_pod(0), "nodenames": ["a"]},
]

# JSON text for one value that ``json.dumps`` would never write.
HOSTILE_JSON: tuple[str, ...] = (
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    "9" * 5000,
    "-" + "9" * 5000,
    "1e400",
    "NaN",
    "-Infinity",
    '"\\ud800"',
    '"\\u0000\\r\\n"',
    '"' + "x" * 200_000 + '"',
    '{"a": 1, "a": 2}',
    "null",
    "true",
    "[]",
    "{}",
    "0",
    '"0001-01-01T00:00:00Z"',
    '"9999-99-99T99:99:99Z"',
    '"2026-11-30T10:00:00+99:00"',
    '"' + "2" * 5000 + '"',
)
_MARK = '"zzrawzz'


@st.composite
def json_bodies(draw: st.DrawFn, seeds: list[Any]) -> bytes:
    """A seed payload with one to three places broken, as bytes on the wire."""
    tree, raws = draw(mutated_tree(seeds))
    hostile = [draw(st.sampled_from(HOSTILE_JSON)) for _ in raws]
    text = json.dumps(tree)
    for i in reversed(range(len(raws))):
        text = text.replace(f'{_MARK}{i}"', hostile[i])
    return text.encode("utf-8", "surrogatepass")


def _json_value(data: bytes) -> Any:
    """The body as the handlers decode it (``accel_common.jsonread``, bounded); where
    they refuse it, the validators still get a value: the bytes as text."""
    try:
        return jsonread.loads(data, max_bytes=MAX_BODY)
    except jsonread.JSONBodyError:
        return data.decode("utf-8", "replace")


# -- in process ----------------------------------------------------------------------


@budget(300)
@given(data=st.one_of(json_bodies(WEBHOOK_SEEDS), json_bodies(WEBHOOK_SEEDS), raw_bytes))
def test_webhook_payloads(data: bytes) -> None:
    payload = _json_value(data)
    receiver = AlertReceiver(limit=50)
    check("webhook payload", lambda: receiver.ingest(payload, 1.8e9), (PayloadError,))
    assert len(receiver.firing) <= 50


EXTENDER = Extender(cache_with(fleet(nvlink_node("a"), nvlink_node("b", held={0, 1, 2}))))


@budget(300)
@given(data=st.one_of(json_bodies(EXTENDER_SEEDS), json_bodies(EXTENDER_SEEDS), raw_bytes))
def test_extender_args(data: bytes) -> None:
    body = _json_value(data)

    def answer() -> Any:
        args = parse_args(body)
        return EXTENDER.filter(args), EXTENDER.prioritize(args)

    check("extender args", answer, (BadArgs,))


# -- over HTTP -------------------------------------------------------------------------


@dataclass
class _Apps:
    loop: asyncio.AbstractEventLoop
    controller: TestClient[Any, Any]
    extender: TestClient[Any, Any]

    def post(self, client: TestClient[Any, Any], path: str, body: bytes) -> int:
        async def send() -> int:
            headers = {"Content-Type": "application/json"}
            async with client.post(path, data=body, headers=headers) as r:
                await r.read()
                return r.status

        return self.loop.run_until_complete(asyncio.wait_for(send(), 2 * SECONDS))


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Apps]:
    rules = tmp_path_factory.mktemp("fuzz-bodies") / "rules.yaml"
    rules.write_text(RULES)
    loop = asyncio.new_event_loop()

    async def start() -> _Apps:
        c = Controller(
            RuleWatcher([str(rules)], source="prometheus"), HealthySource(), AlertReceiver(limit=50)
        )
        clients = []
        for app in (controller_app(c), extender_app(EXTENDER)):
            client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
            await client.start_server()
            clients.append(client)
        return _Apps(loop, *clients)

    running = loop.run_until_complete(start())
    yield running
    loop.run_until_complete(running.controller.close())
    loop.run_until_complete(running.extender.close())
    loop.close()


@budget(150)
@given(data=st.one_of(json_bodies(WEBHOOK_SEEDS), json_bodies(WEBHOOK_SEEDS), raw_bytes))
def test_webhook_http(apps: _Apps, data: bytes) -> None:
    status = check("webhook HTTP", lambda: apps.post(apps.controller, "/api/v1/alerts", data), ())
    assert status in (200, 400, 413), f"webhook answered {status}"


@budget(150)
@given(
    data=st.one_of(json_bodies(EXTENDER_SEEDS), json_bodies(EXTENDER_SEEDS), raw_bytes),
    path=st.sampled_from(["/filter", "/prioritize"]),
)
def test_extender_http(apps: _Apps, data: bytes, path: str) -> None:
    status = check(f"extender HTTP {path}", lambda: apps.post(apps.extender, path, data), ())
    assert status in (200, 400, 413), f"{path} answered {status}"


def test_seeds_are_valid(tmp_path: Path) -> None:
    """The seeds pass, so that a failing case is a broken seed and not a bad start."""
    receiver = AlertReceiver()
    assert receiver.ingest(WEBHOOK_SEEDS[0], 1.8e9).firing == 2
    for seed in EXTENDER_SEEDS:
        parse_args(seed)
