"""Acceptance, against a real Alertmanager: one alert that fires, is re-sent and
then resolves is one incident. A rule with no cooldown makes exactly one decision
for it, however many notifications and evaluation cycles it spans; a rule with a
``recover`` makes one decision and one recovery.

Alertmanager here re-sends a firing alert every 2 s (``repeat_interval``, with
``group_interval`` 1 s), and the controller evaluates every 0.1 s, so the alert is
seen in dozens of cycles and several notifications: the README's rule used to
cordon once per cycle for as long as the alert fired.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from autoscaler.controller import Controller
from autoscaler.decision import Decision
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of
from tests.autoscaler.controller.test_autoscaler_run import post_alert
from tests.support.procs import alertmanager, free_port
from tests.support.waits import until, until_awaited

# Slow (a real Alertmanager for several seconds): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

TOKEN = "s3cret-token"
RECOVER_EXPR = "accel_up == 1"

NO_COOLDOWN = """\
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

WITH_RECOVER = (
    NO_COOLDOWN
    + f"""\
      recover: {{expr: '{RECOVER_EXPR}', for: 0s}}
"""
)


class RecoverSource:
    """A source with data whose only answer is the recover expression: no node is
    well until ``well`` is set, then node-b is."""

    name = "prometheus"

    def __init__(self) -> None:
        self.well = False

    async def refresh(self, at: float) -> bool:
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        if expr != RECOVER_EXPR:
            return Unknown("not asked of this source")
        if not self.well:
            return Vector(())
        return Vector((Sample(labels_of({"node": "node-b", "__name__": "accel_up"}), 1.0, at),))

    async def close(self) -> None:
        pass


async def _cycles_until(
    c: Controller, made: list[Decision], cond: Callable[[], bool], timeout: float
) -> None:
    """Evaluate every 0.1 s, collecting decisions, until ``cond()`` (or fail)."""

    async def reached() -> bool:
        if cond():
            return True
        made.extend(await c.cycle())
        return False

    await until_awaited(reached, timeout, "the condition, cycling", every=0.1)


def _short(d: Decision) -> tuple[str, str, str, dict[str, str]]:
    return (d.kind, d.rule, d.action, dict(d.target))


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (NO_COOLDOWN, [("act", "gpu-fault-alert", "cordon", {"node": "node-b"})]),
        (
            WITH_RECOVER,
            [
                ("act", "gpu-fault-alert", "cordon", {"node": "node-b"}),
                ("recover", "gpu-fault-alert", "cordon", {"node": "node-b"}),
            ],
        ),
    ],
    ids=["no cooldown: exactly one decision", "recover: one decision and one recovery"],
)
async def test_firing_resent_then_resolved_is_one_incident(
    tmp_path: Path, rules: str, expected: list[tuple[str, str, str, dict[str, str]]]
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(rules)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    source = RecoverSource()
    c = Controller(RuleWatcher([str(path)], source="prometheus"), source, AlertReceiver())
    runner = web.AppRunner(make_app(c, token_file=token))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    made: list[Decision] = []
    try:
        hook = f"http://127.0.0.1:{port}/api/v1/alerts"
        with alertmanager(tmp_path, hook, token=TOKEN, repeat_interval="2s") as am:
            post_alert(am, ends_at=None)
            await until(lambda: len(c.alerts.firing) == 1)
            first = c.alerts.received
            # Alertmanager re-sends the firing alert at least twice meanwhile.
            await _cycles_until(c, made, lambda: c.alerts.received >= first + 2, timeout=20)
            assert [_short(d) for d in made] == expected[:1]
            if len(expected) > 1:
                # The node is well again: the recover holds, while the alert still fires.
                source.well = True
                await _cycles_until(c, made, lambda: len(made) == 2, timeout=5)
                again = c.alerts.received
                await _cycles_until(c, made, lambda: c.alerts.received >= again + 1, timeout=20)
            post_alert(am, ends_at=time.time() - 1)
            await until(lambda: not c.alerts.firing)
            for _ in range(10):
                made.extend(await c.cycle())
        assert c.stats.cycles > 20
        assert [_short(d) for d in made] == expected
        assert [_short(d) for d in c.state.decisions] == expected
        # The receiver gave the alert's identity (fingerprint@startsAt); the decision
        # names it, and neither its target nor its sample carries the label.
        assert "; incident " in made[0].reason
        assert "__incident__" not in dict(made[0].sample_labels)
    finally:
        await runner.cleanup()
