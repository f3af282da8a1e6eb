"""The controller against real parts: Debian's Prometheus and Alertmanager, and the
exporter itself. Missing data never produces a decision; an alert that fires and
then resolves produces exactly one."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from autoscaler.controller import Controller
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app, render_metrics
from autoscaler.sources.alertmanager import MAX_BODY, AlertReceiver
from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
from tests.support.exposition import value
from tests.support.procs import alertmanager, exporter, free_port, prometheus
from tests.support.sources import HealthySource
from tests.support.waits import until, until_awaited, wait

# Slow (the controller beside real Prometheus, Alertmanager and exporters):
# `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  limits: {maxUnhealthyNodes: 3}
  rules:
    - name: fatal-device-fault
      expr: increase(accel_fault_events_total{severity="fatal"}[1m]) > 0
      target: device
      action: {type: migrate_jobs}
      cooldown: 30m
    - name: device-lost
      expr: accel_up == 0
      target: device
      action: {type: cordon}
    - name: gpu-fault-alert
      alertname: GPUFault
      target: node
      action: {type: cordon}
      cooldown: 1h
"""


def write_rules(tmp: Path) -> Path:
    path = tmp / "rules.yaml"
    path.write_text(RULES)
    return path


def controller(tmp: Path, url: str) -> Controller:
    source = PrometheusSource(PrometheusConfig(url=url, timeout=2.0, attempts=2))
    return Controller(
        RuleWatcher([str(write_rules(tmp))], source="prometheus"), source, AlertReceiver()
    )


async def test_prometheus_stopped_means_no_decision(tmp_path: Path) -> None:
    c = controller(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        for _ in range(3):
            assert await c.cycle() == []
        assert c.source_up is False
        assert value(render_metrics(c), "accel_autoscaler_source_up", source="prometheus") == 0
        assert c.stats.unknown["fatal-device-fault"] == 3
    finally:
        await c.source.close()


async def test_prometheus_without_accelerator_data_means_no_decision(tmp_path: Path) -> None:
    # Prometheus is up and answers, but scrapes nothing of ours: every query is empty.
    with prometheus(tmp_path, [f"127.0.0.1:{free_port()}"]) as prom:
        c = controller(tmp_path, prom)
        try:
            assert await c.cycle() == []
            assert c.source_up is False
            assert value(render_metrics(c), "accel_autoscaler_source_up", source="prometheus") == 0
        finally:
            await c.source.close()


async def test_fatal_fault_through_prometheus_gives_one_decision(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    # After Prometheus's first scrape (about 5 s), so it sees the counter go 0 -> 1.
    script.write_text("- {at: 12s, device: nvidia1, fault: 79}\n")
    port = free_port()
    args = [
        "--backends",
        "sim",
        "--sim-devices",
        "nvidia:2",
        "--sim-script",
        str(script),
        "--poll-interval",
        "500ms",
    ]
    with (
        exporter(args, port=port),
        prometheus(tmp_path, [f"127.0.0.1:{port}"], labels={"node": "node-a"}) as prom,
    ):
        c = controller(tmp_path, prom)
        try:
            seen: list[object] = []

            async def cycle_until_decision() -> bool:
                seen.extend(await c.cycle())
                return bool(seen)

            await until_awaited(cycle_until_decision, 30, "a decision for the Xid 79", every=0.5)
            assert c.source_up
            for _ in range(3):  # the cooldown holds: no second decision
                seen.extend(await c.cycle())
            decisions = [d for d in c.state.decisions if d.rule == "fatal-device-fault"]
            assert len(decisions) == 1
            assert dict(decisions[0].target) == {"node": "node-a", "device": "nvidia1"}
            assert decisions[0].action == "migrate_jobs"
        finally:
            await c.source.close()


def _am_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


def post_alert(am: str, ends_at: float | None) -> None:
    alert: dict[str, object] = {
        "labels": {"alertname": "GPUFault", "node": "node-b", "severity": "critical"},
        "annotations": {"summary": "GPU fault on node-b"},
        "startsAt": _am_time(time.time() - 5),
    }
    if ends_at is not None:
        alert["endsAt"] = _am_time(ends_at)
    req = urllib.request.Request(
        am + "/api/v2/alerts",
        data=json.dumps([alert]).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


async def test_alertmanager_firing_then_resolved_gives_exactly_one_decision(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    c = Controller(
        RuleWatcher([str(write_rules(tmp_path))], source="prometheus"),
        HealthySource(),
        AlertReceiver(),
    )
    runner = web.AppRunner(make_app(c, token_file=token))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        hook = f"http://127.0.0.1:{port}/api/v1/alerts"
        with alertmanager(tmp_path, hook, token="s3cret-token") as am:
            post_alert(am, ends_at=None)
            await until(lambda: len(c.alerts.firing) == 1)
            first = await c.cycle()
            assert [(d.rule, d.action, dict(d.target)) for d in first] == [
                ("gpu-fault-alert", "cordon", {"node": "node-b"})
            ]
            # Alertmanager may notify again; the same fingerprint is one alert.
            assert await c.cycle() == []
            post_alert(am, ends_at=time.time() - 1)
            await until(lambda: not c.alerts.firing)
            assert await c.cycle() == []
            assert await c.cycle() == []
        assert [d.rule for d in c.state.decisions] == ["gpu-fault-alert"]
    finally:
        await runner.cleanup()


async def test_webhook_refuses_bad_input_and_missing_auth(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken")
    c = Controller(
        RuleWatcher([str(write_rules(tmp_path))], source="prometheus"),
        HealthySource(),
        AlertReceiver(),
    )
    runner = web.AppRunner(make_app(c, token_file=token))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer t0ken"}
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/api/v1/alerts", data=b"{}") as r:
                assert r.status == 401
            async with s.post(url + "/api/v1/alerts", data=b"{not json", headers=auth) as r:
                assert r.status == 400
                assert "malformed JSON" in (await r.json())["error"]
            async with s.post(url + "/api/v1/alerts", json={"version": "3"}, headers=auth) as r:
                assert r.status == 400
                assert "version" in (await r.json())["error"]
            big = b"[" + b"0," * (MAX_BODY // 2) + b"0]"  # just over the limit
            async with s.post(url + "/api/v1/alerts", data=big, headers=auth) as r:
                assert r.status == 413
            payload = {
                "version": "4",
                "status": "firing",
                "alerts": [
                    {
                        "status": "firing",
                        "labels": {"alertname": "GPUFault", "node": "n1"},
                        "startsAt": "2026-11-29T10:00:00Z",
                        "fingerprint": "abc",
                    },
                    {"status": "bogus", "labels": {"alertname": "GPUFault", "node": "n2"}},
                ],
            }
            async with s.post(url + "/api/v1/alerts", json=payload, headers=auth) as r:
                assert r.status == 400
                assert "alerts[1].status" in (await r.json())["error"]
            assert c.alerts.firing == {}  # a bad body changes nothing
            async with s.post(url + "/api/v1/breaker/reset") as r:
                assert r.status == 401
            async with s.post(url + "/api/v1/breaker/reset", headers=auth) as r:
                assert r.status == 200
            async with s.get(url + "/api/v1/rules") as r:
                rules = await r.json()
                assert [x["name"] for x in rules["rules"]] == [
                    "fatal-device-fault",
                    "device-lost",
                    "gpu-fault-alert",
                ]
            async with s.get(url + "/metrics") as r:
                text = await r.text()
                assert value(text, "accel_autoscaler_rules_reload_success") == 1
    finally:
        await runner.cleanup()


def test_breaker_reset_refused_without_auth_configured(tmp_path: Path) -> None:
    async def go() -> None:
        c = Controller(
            RuleWatcher([str(write_rules(tmp_path))], source="prometheus"),
            HealthySource(),
            AlertReceiver(),
        )
        runner = web.AppRunner(make_app(c))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"http://127.0.0.1:{port}/api/v1/breaker/reset") as r,
            ):
                assert r.status == 403
        finally:
            await runner.cleanup()

    asyncio.run(go())


@pytest.mark.parametrize("missing", ["--prometheus.url", "--targets"])
def test_run_refuses_a_source_without_its_flags(tmp_path: Path, missing: str) -> None:
    import subprocess
    import sys

    source = "prometheus" if missing == "--prometheus.url" else "scrape"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "run",
            "--rules",
            str(write_rules(tmp_path)),
            "--source",
            source,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert missing in proc.stderr


def test_run_with_scrape_source_end_to_end(tmp_path: Path) -> None:
    """`accel-autoscaler run --source scrape`: no Prometheus at all; the controller
    scrapes the exporter, the built-in evaluator sees the Xid 79, one decision."""
    from tests.support.procs import autoscaler, http_get

    script = tmp_path / "faults.yaml"
    # Late enough that the controller (started after the exporter) has scraped the
    # counter at 0 first: an increase needs two samples in its window.
    script.write_text("- {at: 8s, device: nvidia0, fault: 79, lost: true}\n")
    exp_port = free_port()
    args = [
        "--backends",
        "sim",
        "--sim-devices",
        "nvidia:2",
        "--sim-script",
        str(script),
        "--poll-interval",
        "500ms",
    ]
    run_args = [
        "--rules",
        str(write_rules(tmp_path)),
        "--source",
        "scrape",
        "--targets",
        f"node-a=http://127.0.0.1:{exp_port}/metrics",
        "--dry-run",
    ]
    with exporter(args, port=exp_port), autoscaler(run_args) as running:
        api = running.url

        def both_decided() -> list[dict[str, Any]]:
            decisions: list[dict[str, Any]] = json.loads(http_get(api + "/api/v1/decisions"))[
                "decisions"
            ]
            rules = {d["rule"] for d in decisions}
            return decisions if {"fatal-device-fault", "device-lost"} <= rules else []

        decisions = wait(both_decided, 30, "decisions of both rules", every=0.3)
        fatal = [d for d in decisions if d["rule"] == "fatal-device-fault"]
        assert len(fatal) == 1
        assert fatal[0]["target"] == {"node": "node-a", "device": "nvidia0"}
        assert fatal[0]["dryRun"] is True
        text = http_get(api + "/metrics").decode()
        assert value(text, "accel_autoscaler_source_up", source="scrape") == 1
        assert (
            value(
                text,
                "accel_autoscaler_decisions_total",
                rule="fatal-device-fault",
                action="migrate_jobs",
                kind="act",
                dry_run="true",
            )
            == 1
        )
