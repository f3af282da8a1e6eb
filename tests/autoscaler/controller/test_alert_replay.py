"""Alerts with a lifecycle, with a real Alertmanager (Debian's) in front of the
controller: a firing notification replayed after its resolve makes no decision, a
firing alert whose resolve was lost expires after the TTL, and a replica that stands
down (its Lease taken, against the fake API server) drops the alerts it held.

Between Alertmanager and the controller sits ``Relay``: it keeps every body that
Alertmanager sent, so the test can replay the very bytes of a firing notification,
and it can lose resolve notifications the way a network does."""

from __future__ import annotations

import datetime
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from autoscaler.controller import Controller
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app, render_metrics
from autoscaler.sources.alertmanager import INCIDENT_LABEL, AlertReceiver, fingerprint_of
from autoscaler.types import Vector
from tests.support.exposition import value
from tests.support.fakes.apiserver import running_apiserver
from tests.support.kubeobjs import node
from tests.support.procs import alertmanager, autoscaler, free_port, http_get
from tests.support.sources import HealthySource
from tests.support.waits import until, wait

# Slow (real Alertmanager, a controller process, a TTL to wait out):
# `make test-fast` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOKEN = "replay-t0ken"
LABELS = {"alertname": "GPUFault", "node": "node-b", "severity": "critical"}

# No cooldown: nothing but the receiver stands between a replay and a decision.
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


class Relay:
    """Alertmanager's webhook receiver in front of the controller: records each
    body and forwards it, or answers 200 to a resolve without forwarding it while
    ``lose_resolves`` is set."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.bodies: list[bytes] = []
        self.lost: list[bytes] = []
        self.lose_resolves = False

    def statuses(self) -> list[str]:
        return [json.loads(b)["status"] for b in self.bodies]

    def first(self, status: str) -> bytes:
        return next(b for b in self.bodies if json.loads(b)["status"] == status)

    async def hook(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if self.lose_resolves and json.loads(raw)["status"] == "resolved":
            self.lost.append(raw)
            return web.Response(text="lost\n")
        self.bodies.append(raw)
        headers = {"Authorization": request.headers.get("Authorization", "")}
        async with (
            aiohttp.ClientSession() as s,
            s.post(self.target, data=raw, headers=headers) as r,
        ):
            return web.Response(status=r.status, body=await r.read())


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def controller_behind_relay(
    tmp: Path, alerts: AlertReceiver
) -> AsyncIterator[tuple[Controller, Relay, str]]:
    """The controller's API (bearer token) and a relay in front of it; yields the
    controller, the relay and the controller's URL."""
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    token = tmp / "token"
    token.write_text(TOKEN + "\n")
    c = Controller(RuleWatcher([str(rules)], source="prometheus"), HealthySource(), alerts)
    async with served(make_app(c, token_file=token)) as api:
        relay = Relay(api + "/api/v1/alerts")
        app = web.Application()
        app.router.add_post("/hook", relay.hook)
        async with served(app) as relay_url:
            yield c, relay, relay_url + "/hook"


def _am_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


def post_alert(am: str, starts: float, ends_at: float | None = None) -> None:
    """What Prometheus does: post the alert to Alertmanager's API."""
    alert: dict[str, object] = {"labels": LABELS, "startsAt": _am_time(starts)}
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


def samples(c: Controller) -> list[dict[str, str]]:
    result = c.alerts.vector("GPUFault", c.clock())
    assert isinstance(result, Vector)
    return [s.as_dict() for s in result.samples]


def dropped(c: Controller, reason: str) -> float | None:
    return value(render_metrics(c), "accel_autoscaler_alerts_dropped_total", reason=reason)


async def test_a_firing_replayed_after_its_resolve_makes_no_decision(tmp_path: Path) -> None:
    async with controller_behind_relay(tmp_path, AlertReceiver()) as (c, relay, hook):
        with alertmanager(tmp_path, hook, token=TOKEN) as am:
            starts = time.time() - 5
            post_alert(am, starts)
            await until(lambda: len(c.alerts.firing) == 1)
            fired = json.loads(relay.first("firing"))["alerts"][0]
            # The incident is Alertmanager's fingerprint and startsAt, as it sent them;
            # the fingerprint is the one the receiver would compute from the labels.
            assert fired["fingerprint"] == fingerprint_of(LABELS)
            assert [s[INCIDENT_LABEL] for s in samples(c)] == [
                f"{fired['fingerprint']}@{fired['startsAt']}"
            ]
            first = await c.cycle()
            assert [(d.rule, d.action, dict(d.target)) for d in first] == [
                ("gpu-fault-alert", "cordon", {"node": "node-b"})
            ]
            post_alert(am, starts, ends_at=time.time() - 1)
            await until(lambda: "resolved" in relay.statuses() and not c.alerts.firing)
        assert await c.cycle() == []

        # Replay the captured firing body, byte for byte, after the resolve.
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                relay.target,
                data=relay.first("firing"),
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as r,
        ):
            assert r.status == 200
            assert await r.json() == {
                "status": "success",
                "firing": 1,
                "resolved": 0,
                "dropped": {"stale": 1},
            }
        assert c.alerts.firing == {}
        for _ in range(3):
            assert await c.cycle() == []
        assert [d.rule for d in c.state.decisions] == ["gpu-fault-alert"]
        assert dropped(c, "stale") == 1
        assert value(render_metrics(c), "accel_autoscaler_alerts_firing") == 0


async def test_a_lost_resolve_expires_after_the_ttl(tmp_path: Path) -> None:
    ttl = 3.0
    async with controller_behind_relay(tmp_path, AlertReceiver(ttl=ttl)) as (c, relay, hook):
        with alertmanager(tmp_path, hook, token=TOKEN) as am:
            starts = time.time() - 5
            post_alert(am, starts)
            await until(lambda: len(c.alerts.firing) == 1)
            received = next(iter(c.alerts.firing.values())).seen
            assert len(await c.cycle()) == 1
            relay.lose_resolves = True
            post_alert(am, starts, ends_at=time.time() - 1)
            await until(lambda: relay.lost)
            # The resolve never arrived: the alert still fires here, for now.
            assert len(samples(c)) == 1
            assert dropped(c, "expired") == 0
            await until(lambda: not samples(c), timeout=ttl + 5)
            assert time.time() - received >= ttl
        assert dropped(c, "expired") == 1
        assert value(render_metrics(c), "accel_autoscaler_alerts_firing") == 0
        assert await c.cycle() == []
        assert len(c.state.decisions) == 1


def _metric(port: int, name: str, **labels: str) -> float | None:
    try:
        text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2).decode()
    except OSError:
        return None
    return value(text, name, **labels)


def _fire(port: int) -> dict[str, Any]:
    body = {
        "version": "4",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "GPUFault", "node": "n1"},
                "startsAt": "2026-11-29T10:00:00Z",
            }
        ],
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        result: dict[str, Any] = json.loads(r.read())
        return result


def test_a_replica_that_stands_down_drops_what_it_received(tmp_path: Path) -> None:
    from autoscaler.kube.leader import micro_time

    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES + "      cooldown: 1h\n")
    with running_apiserver() as api:
        api.add(node("n1"))
        args = [
            "--rules",
            str(rules),
            "--source",
            "scrape",
            "--targets",
            f"n1=http://127.0.0.1:{free_port()}/metrics",
            "--kubeconfig",
            str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            "--leader-elect.namespace",
            "default",
            "--leader-elect.identity",
            "a",
            "--leader-elect.lease-duration",
            "2s",
            "--leader-elect.renew-deadline",
            "1500ms",
            "--leader-elect.retry-period",
            "250ms",
        ]
        port = free_port()
        with (tmp_path / "controller.log").open("ab") as out, autoscaler(args, port, out):
            wait(lambda: _metric(port, "accel_autoscaler_leader") == 1, what="leadership")
            assert _fire(port)["firing"] == 1
            assert _metric(port, "accel_autoscaler_alerts_firing") == 1

            # Another replica takes the Lease: this one stands down.
            lease = api.get("leases", "default", "accel-autoscaler")
            assert lease is not None
            now = time.time()
            lease["spec"].update(
                holderIdentity="b",
                leaseDurationSeconds=2,
                acquireTime=micro_time(now),
                renewTime=micro_time(now),
            )
            api.add(lease)
            wait(lambda: _metric(port, "accel_autoscaler_leader") == 0, what="standing down")
            assert _metric(port, "accel_autoscaler_alerts_firing") == 0
            assert _metric(port, "accel_autoscaler_alerts_dropped_total", reason="standby") == 1

            # "b" never renews: this replica leads again, holding nothing from before.
            wait(lambda: _metric(port, "accel_autoscaler_leader") == 1, what="leading again")
            assert _metric(port, "accel_autoscaler_alerts_firing") == 0
        log = (tmp_path / "controller.log").read_text()
        assert "standing down: firing alerts dropped: 1" in log
