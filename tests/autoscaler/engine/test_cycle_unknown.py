""" "Unknown" in the cycle is as narrow as the failure (issue 15): a source that
raises for one rule's query (a bug, an answer nobody foresaw) makes that rule
unknown and leaves the others evaluated; a refresh that raises is a source down
for that cycle, not a cycle that dies."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.engine.cycle import run_cycle
from autoscaler.engine.state import EngineState
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import RuleSet
from autoscaler.types import QueryResult, Sample, Vector

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
    - name: broken
      expr: accel_temperature_celsius > 90
      target: device
      action: {type: cordon}
      cooldown: 1h
"""


class NoAlerts:
    def vector(self, alertname: str, now: float) -> QueryResult:
        return Vector(())


class RaisingSource:
    name = "raising"

    def __init__(self, refresh_raises: bool = False) -> None:
        self.refresh_raises = refresh_raises
        self.asked: list[str] = []

    async def refresh(self, at: float) -> bool:
        if self.refresh_raises:
            raise RuntimeError("refresh blew up")
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        self.asked.append(expr)
        if "temperature" in expr:
            raise KeyError("metric")
        labels = (("device", "nvidia0"), ("node", "n1"))
        return Vector((Sample(labels, 0.0, at),))

    async def close(self) -> None:
        return None


@pytest.fixture
def rules(tmp_path: Path) -> RuleSet:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    return load_ruleset([str(path)], source="prometheus")


async def test_a_query_that_raises_makes_only_its_rule_unknown(
    rules: RuleSet, caplog: pytest.LogCaptureFixture
) -> None:
    source = RaisingSource()
    result = await run_cycle(rules, source, NoAlerts(), EngineState(), 100.0)
    assert result.unknown == ("broken",)
    assert [(d.rule, d.kind) for d in result.decisions] == [("lost", "act")]
    assert "rule broken: the query raised KeyError" in caplog.text


async def test_a_refresh_that_raises_is_a_source_down(
    rules: RuleSet, caplog: pytest.LogCaptureFixture
) -> None:
    source = RaisingSource(refresh_raises=True)
    result = await run_cycle(rules, source, NoAlerts(), EngineState(), 100.0)
    assert result.source_up is False
    assert set(result.unknown) == {"lost", "broken"}
    assert result.decisions == []
    assert source.asked == []
    assert "refresh failed: refresh blew up" in caplog.text
