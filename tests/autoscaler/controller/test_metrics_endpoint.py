"""The controller's own ``/metrics`` (issue 28): rendered through prometheus-client
from one status snapshot, every series declared in the catalogue
(``autoscaler/metrics.py``), passing ``promtool check metrics``, and reading it
changes nothing.

Values are at full precision: ``curl`` of a running controller shows the last
evaluation's timestamp below the second (``{:g}`` once wrote ``1.79612e+09``, up
to 5,000 s off, and the dashboard's "time since last evaluation" read negative),
and counters past 10^6 and 10^15 still move by one. They are spelt as the Go
client spells them (``1.796123456789e+09``): the shortest digits that read back
to the same float64."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from autoscaler import clusterstate as cs
from autoscaler import metrics
from autoscaler.actions.context import ActionContext
from autoscaler.clusterstate import collect
from autoscaler.controller import Controller
from autoscaler.kube.cache import CachedKube
from autoscaler.metrics import CATALOGUE, ControllerStatus
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app, render_metrics
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
from autoscaler.sources.store import StoreSource
from autoscaler.wiring import wire
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import client, node, pod
from tests.support.procs import autoscaler, exporter, free_port, http_get
from tests.support.waits import wait

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: device-lost
      expr: accel_up == 0
      target: device
      action: {type: cordon}
"""

TIMESTAMP = "accel_autoscaler_last_evaluation_timestamp_seconds"
T0 = 1_800_000_000.0
TTL = 60.0


def _sample_text(text: str, series: str) -> str:
    """The value of one series exactly as written, so that its digits are checked
    and not only what a float makes of them."""
    found = re.findall(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert len(found) == 1, f"{series}: {found} in\n{text}"
    return str(found[0])


def _samples(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample of an exposition, read by prometheus-client's own parser."""
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_running_controller_serves_the_evaluation_time_below_the_second(
    tmp_path: Path, promtool_check: Callable[[str], None]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    exp_port = free_port()
    sim = ["--backends", "sim", "--sim-devices", "nvidia:2", "--poll-interval", "500ms"]
    run_args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"node-a=http://127.0.0.1:{exp_port}/metrics",
        "--dry-run",
    ]
    with exporter(sim, port=exp_port), autoscaler(run_args) as running:

        def evaluated() -> tuple[str, float, str] | None:
            text = http_get(running.url + "/metrics").decode()
            now = time.time()
            written = _sample_text(text, TIMESTAMP)
            return (text, now, written) if float(written) > 0 else None

        found = wait(evaluated, 30, "an evaluation", every=0.2)
        assert found is not None
        text, now, written = found
        promtool_check(text)
        # The Go client's spelling, every digit kept (1.7961765769235713e+09):
        # within seconds of now, where {:g}'s six digits were up to 5,000 s off.
        assert re.fullmatch(r"\d\.\d+e\+09", written), written
        assert abs(float(written) - now) < 5, (written, now)

        # Evaluated every second, so the written time moves with the clock.
        wait(
            lambda: (
                float(_sample_text(http_get(running.url + "/metrics").decode(), TIMESTAMP))
                >= float(written) + 1
            ),
            30,
            "the evaluation time moving on",
            every=0.2,
        )
        later = float(_sample_text(http_get(running.url + "/metrics").decode(), TIMESTAMP))
        assert abs(later - time.time()) < 5


async def test_counters_past_a_million_and_ten_to_the_fifteen_render_exactly(
    tmp_path: Path, promtool_check: Callable[[str], None]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    source = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{free_port()}"))
    c = Controller(RuleWatcher([str(rules)], source="prometheus"), source, AlertReceiver())
    try:
        c.stats.decisions[("device-lost", "cordon", "act", True)] = 10**15 + 1
        c.stats.unknown["device-lost"] = 10**6 + 1
        c.stats.cluster_state_errors = 10**6 + 3
        c.stats.last_timestamp = 1796123456.789
        c.stats.last_duration = 0.012345678
        c.cluster_rows = [
            (cs.JOB_AGE, {"namespace": "ml", "pod": "p", "node": "n", "job": "j"}, 86400.125)
        ]
        text = render_metrics(c)
        promtool_check(text)
        decisions = (
            'accel_autoscaler_decisions_total{action="cordon",dry_run="true",'
            'kind="act",rule="device-lost"}'
        )
        assert _sample_text(text, decisions) == "1.000000000000001e+15"
        assert float(_sample_text(text, decisions)) == 10**15 + 1
        unknown = 'accel_autoscaler_rule_unknown_total{rule="device-lost"}'
        assert float(_sample_text(text, unknown)) == 10**6 + 1
        errors = float(_sample_text(text, "accel_autoscaler_cluster_state_errors_total"))
        assert errors == 10**6 + 3
        assert _sample_text(text, TIMESTAMP) == "1.796123456789e+09"
        assert float(_sample_text(text, TIMESTAMP)) == 1796123456.789
        duration = "accel_autoscaler_evaluation_duration_seconds"
        assert _sample_text(text, duration) == "0.012345678"
        job_age = 'accel_job_age_seconds{job="j",namespace="ml",node="n",pod="p"}'
        assert _sample_text(text, job_age) == "86400.125"
        # The cluster-state families follow the controller's own, each once.
        assert text.count("# TYPE accel_job_age_seconds gauge\n") == 1
        assert text.index(TIMESTAMP) < text.index("accel_job_age_seconds")
    finally:
        await source.close()


@dataclass
class World:
    """One in-process controller with everything its series count: a rule that
    cordons, the executor that did it, a remediation entry on the node, the
    informers' cache, an alert held past its TTL and the cluster-state rows, on
    the test's clock."""

    api: FakeApiServer
    tmp: Path
    now: float = T0

    def clock(self) -> float:
        return self.now

    async def start(self) -> Controller:
        self.api.add(node("n1"))
        self.api.add(node("n2"))
        self.api.add(pod("train-0", "n1"))
        rules = self.tmp / "rules.yaml"
        rules.write_text(RULES)
        self.kube = client(self.api, self.tmp)
        self.cached = CachedKube(self.kube)  # not started: its informers count 0 failures
        self.store = SeriesStore(retention=math.inf)
        source = StoreSource(self.store)
        ctx = ActionContext(
            kube=self.kube,
            clock=self.clock,
            sleep=lambda _: asyncio.sleep(0.005),
            query=source.query,
            retry_interval=0.01,
        )
        watcher = RuleWatcher([str(rules)], clock=self.clock)
        wiring = wire(source, lambda: watcher.current, ctx)
        assert wiring.executor is not None
        self.executor = wiring.executor
        kube = self.kube

        async def cluster_state(now: float) -> list[Any]:
            return list(await collect(kube, None, now))

        return Controller(
            watcher,
            source,
            AlertReceiver(ttl=TTL),
            clock=self.clock,
            wiring=wiring,
            kube=self.cached,
            cluster_state=cluster_state,
        )

    async def tick(self, c: Controller) -> None:
        self.now += 15
        for name, up in (("n1", 0.0), ("n2", 1.0)):
            base = {"node": name, "device": "nvidia0", "vendor": "nvidia", "uuid": f"GPU-{name}"}
            self.store.add({"__name__": "accel_up", **base}, self.now, up)
        await c.cycle()
        await self.executor.wait(timeout=5)


def _alert(c: Controller, at: float) -> None:
    c.alerts.ingest(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "NodeBroken", "node": "n2"},
                    "startsAt": "2027-01-15T08:00:00Z",
                }
            ],
        },
        at,
    )


@pytest.fixture
async def world(api: FakeApiServer, tmp_path: Path) -> AsyncIterator[tuple[World, Controller]]:
    w = World(api, tmp_path)
    c = await w.start()
    try:
        yield w, c
    finally:
        w.kube.close()


def _everything(c: Controller) -> Any:
    """All the state a scrape could change, copied."""
    return copy.deepcopy(
        (
            dataclasses.asdict(c.stats),
            c.state.to_json(),
            {fp: dataclasses.astuple(a) for fp, a in c.alerts.firing.items()},
            dict(c.alerts.resolved),
            dict(c.alerts.dropped),
            dict(c.executor.outcomes) if c.executor else {},
            list(c.remediations),
            list(c.cluster_rows),
        )
    )


async def test_a_scrape_changes_nothing_and_passes_promtool(
    world: tuple[World, Controller], promtool_check: Callable[[str], None]
) -> None:
    w, c = world
    await w.tick(c)  # n1's device is lost: a decision, a cordon, an entry on n1
    await w.tick(c)  # the entry is read back into the remediation series
    _alert(c, w.now)
    w.now += TTL + 1  # the alert is past its TTL: counted out, not yet expired
    before = _everything(c)
    async with (
        TestServer(make_app(c), host="127.0.0.1") as server,
        aiohttp.ClientSession() as session,
    ):
        bodies = []
        for _ in range(3):
            async with session.get(server.make_url("/metrics")) as r:
                assert r.status == 200
                assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
                bodies.append(await r.text())
    assert _everything(c) == before, "GET /metrics changed the controller"
    assert len(c.alerts.firing) == 1 and c.alerts.dropped["expired"] == 0
    assert bodies[0] == bodies[1] == bodies[2]
    text = bodies[0]
    promtool_check(text)

    got = _samples(text)

    def has(name: str, value: float, **labels: str) -> bool:
        return any(
            n == name and v == value and labels.items() <= dict(lb).items() for n, lb, v in got
        )

    assert has("accel_autoscaler_decisions_total", 1, rule="device-lost", action="cordon")
    assert has("accel_autoscaler_actions_total", 1, rule="device-lost", status="done")
    assert has("accel_autoscaler_nodes_under_remediation", 1, node="n1", rule="device-lost")
    assert has("accel_autoscaler_watch_failures_total", 0, resource="nodes")
    assert has("accel_autoscaler_kube_requests_total", 1, verb="patch", resource="nodes")
    started = cs.start_time(pod("train-0", "n1"))
    assert started is not None
    # The rows of the second cycle, at T0 + 30.
    assert has("accel_job_age_seconds", T0 + 30 - started, pod="train-0", node="n1")
    assert has("accel_autoscaler_alerts_firing", 0)  # past its TTL: not counted
    assert has("accel_autoscaler_alerts_dropped_total", 0, reason="expired")
    assert has("accel_autoscaler_leader", 1) and has("accel_autoscaler_healthy", 1)

    # The evaluation cycle is what expires the alert, and counts it.
    await w.tick(c)
    assert c.alerts.firing == {} and c.alerts.dropped["expired"] == 1
    after = _samples(render_metrics(c))
    assert ("accel_autoscaler_alerts_dropped_total", (("reason", "expired"),), 1.0) in after


async def test_every_family_is_the_catalogues_and_the_evaluator_reads_the_same_rows(
    world: tuple[World, Controller],
) -> None:
    w, c = world
    await w.tick(c)
    text = render_metrics(c)
    declared = {m.name: m for m in CATALOGUE}
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        assert name in declared, f"{name} is served but not in autoscaler/metrics.py"
        assert (fam.type, fam.documentation) == (declared[name].type, declared[name].help)
        for s in fam.samples:
            assert set(s.labels) == set(declared[name].labels), (name, s.labels)
    # The rows the built-in evaluator ingests (clusterstate.render, the cached
    # writer) are the rows /metrics shows through the collector.
    cluster = {m.name for m in cs.CATALOGUE}
    shown = {s for s in _samples(text) if s[0] in cluster}
    assert shown and shown == _samples(cs.render(c.cluster_rows))


def test_the_whole_catalogue_passes_promtool(promtool_check: Callable[[str], None]) -> None:
    """Every entry, not only those a test cluster happens to fill: a status with a
    sample in every family, rendered and checked."""
    counts = (("a", "b", "c", "d"), 1)
    status = ControllerStatus(
        rules=("r",),
        decisions=(counts,),
        outcomes=((("r", "cordon", "done"), 2),),
        remediations=(("n", "r", "cordon", "active"),),
        watch_failures=((("nodes",), 0),),
        kube_requests=((("get", "nodes", "200"), 3),),
        alerts_dropped=((("expired",), 0),),
        cluster_rows=tuple(
            (m, {k: "x" for k in m.labels}, float(i)) for i, m in enumerate(cs.CATALOGUE)
        ),
    )
    text = metrics.render(status)
    promtool_check(text)
    served = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
    }
    assert served == {m.name for m in CATALOGUE}


def test_every_metric_named_in_the_docs_is_in_the_catalogue() -> None:
    """docs/controller.md lists the series by name; each is declared, and each
    declared series is listed."""
    page = (Path(__file__).parents[3] / "docs" / "controller.md").read_text()
    named = set(re.findall(r"`(accel_autoscaler_[a-z_]+)", page))
    own = {m.name for m in metrics.CONTROLLER}
    assert named <= own, named - own
    assert own <= named, f"not in docs/controller.md: {sorted(own - named)}"
