"""The one evaluation cycle (``engine/cycle.py``): its contract, and that the
controller, the fleet simulator and the rule unit tests all decide through it, so
that for the same samples a decision appears at the same evaluation in all three."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from autoscaler import rhythm
from autoscaler.controller import Controller
from autoscaler.decision import Decision
from autoscaler.engine.cycle import run_cycle
from autoscaler.engine.state import EngineState
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.simulate import run as sim_run
from autoscaler.simulate.scenario import load_scenario
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.store import StoreSource
from autoscaler.types import Matrix, QueryResult, Sample, Unknown, Vector
from tests.support.cycles import RecordingCycle, keeping_the_past

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  rules:
    - name: fatal-device-fault
      expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
      for: 1m
      target: device
      action: {type: cordon}
      cooldown: 1h
"""

SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 1h
  evaluationInterval: 30s
  seed: 5
  # The controller's own scrape at each evaluation: one sample per evaluation, as
  # a rule test's input series have (with Prometheus they would come on its own
  # scrape phase, between the evaluations).
  telemetry: {source: scrape}
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 2, initial: 2, min: 2, max: 2,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 1
    sizes: {1: 1}
    duration: {distribution: fixed, value: 2h}
  faults:
    events:
      - {at: 20m, kind: fatal, node: h100-0001, device: nvidia1}
"""


def _series_values(store: SeriesStore, times: list[float]) -> list[tuple[str, str]]:
    """Every fatal-fault series in ``store`` as a rule test's input: its labels and
    its value at each of ``times`` (``_`` where it had none)."""
    source = StoreSource(store)
    result = source.evaluator.instant(
        'accel_fault_events_total{severity="fatal"}[2h]', times[-1] + 1
    )
    assert isinstance(result, Matrix) and result.series
    out = []
    for series in result.series:
        # By the millisecond, as the store keeps them: the evaluations' phase puts
        # them a fraction of a second past a whole one.
        at = {round(t * 1000): v for t, v in series.points}
        values = " ".join(
            "_" if round(t * 1000) not in at else f"{at[round(t * 1000)]:g}" for t in times
        )
        labels = ",".join(f'{k}="{v}"' for k, v in series.labels if k != "__name__")
        out.append((f"accel_fault_events_total{{{labels}}}", values))
    return out


def test_a_decision_appears_at_the_same_evaluation_in_the_simulator_the_controller_and_a_rule_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    scenario = load_scenario(tmp_path / "scenario.yaml")

    # 1. The simulator: its fleet makes the samples (and keeps the past that the
    # controller's replay reads).
    in_sim = RecordingCycle()
    monkeypatch.setattr(sim_run, "run_cycle", in_sim)
    keeping_the_past(monkeypatch)
    sim_run.simulate(scenario, [str(rules)], baseline=False, parallel=False)
    t_sim, what = in_sim.first_decision()
    assert what == ("fatal-device-fault", (("device", "nvidia1"), ("node", "h100-0001")))
    store: SeriesStore = in_sim.source.store
    interval = scenario.evaluation_interval
    evaluations = [t for t, _ in in_sim.calls if t <= t_sim + 5 * interval]

    # 2. The controller, over the same samples, evaluating at the same times.
    in_controller = RecordingCycle()
    monkeypatch.setattr("autoscaler.controller.run_cycle", in_controller)
    # The controller reads its clock more than once a cycle (the alerts' expiry
    # too): it shows each evaluation's time for the whole of that cycle.
    now = [evaluations[0]]
    controller = Controller(
        RuleWatcher([str(rules)], source="scrape"),
        StoreSource(store),
        AlertReceiver(),
        clock=lambda: now[0],
    )

    async def drive() -> None:
        for t in evaluations:
            now[0] = t
            await controller.cycle()

    asyncio.run(drive())
    assert in_controller.first_decision() == (t_sim, what)

    # 3. A rule unit test of the same samples (on its own time axis, from 0 at the
    # simulator's first evaluation), run as `accel-autoscaler test` runs it: the
    # decision at that evaluation and not at the one before.
    from autoscaler.engine import ruletest

    in_test = RecordingCycle()
    monkeypatch.setattr(ruletest, "run_cycle", in_test)
    origin = in_sim.calls[0][0]
    times = [origin + i * interval for i in range(round((t_sim - origin) / interval) + 6)]
    inputs = "\n".join(
        f"          - series: '{s}'\n            values: '{v}'"
        for s, v in _series_values(store, times)
    )
    at = round(t_sim - origin)
    before = at - interval
    test_file = tmp_path / "same_test.yaml"
    test_file.write_text(
        f"ruleFiles: [{rules}]\n"
        "tests:\n"
        "  - name: the simulator's fault\n"
        f"    interval: {interval:g}s\n"
        "    inputSeries:\n"
        f"{inputs}\n"
        "    cluster: {nodes: [h100-0000, h100-0001]}\n"
        "    expect:\n"
        f"      - at: {before:g}s\n"
        "        decisions: []\n"
        f"      - at: {at:g}s\n"
        "        decisions:\n"
        "          - {rule: fatal-device-fault, action: cordon, "
        "target: {node: h100-0001, device: nvidia1}}\n"
    )
    result = ruletest.run_file(test_file)
    assert result.problems == () and result.failures == (), result
    assert result.passed == 1
    assert in_test.first_decision() == (at, what)


# -- the cycle's own contract --------------------------------------------------------


class ScriptedSource:
    """A source whose answers are given per expression, recording every question."""

    name = "scripted"

    def __init__(self, up: bool, answers: dict[str, QueryResult]) -> None:
        self.up = up
        self.answers = answers
        self.asked: list[str] = []

    async def refresh(self, at: float) -> bool:
        return self.up

    async def query(self, expr: str, at: float) -> QueryResult:
        self.asked.append(expr)
        return self.answers.get(expr, Vector(()))

    async def close(self) -> None:
        return None


class Firing:
    """Alerts: one firing alert with ``labels``, or none."""

    def __init__(self, labels: Iterable[tuple[str, str]] | None) -> None:
        self.labels = None if labels is None else tuple(sorted(labels))

    def vector(self, alertname: str, now: float) -> QueryResult:
        if self.labels is None:
            return Vector(())
        return Vector((Sample((("alertname", alertname), *self.labels), 1.0, now),))


CYCLE_RULES = """\
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
      recover: {expr: accel_up == 1, for: 0s}
    - name: alert
      alertname: GPUFault
      target: node
      action: {type: cordon}
      cooldown: 1h
"""


def _sample(node: str, device: str, value: float) -> Sample:
    return Sample((("device", device), ("node", node)), value, 0.0)


@pytest.fixture
def cycle_rules(tmp_path: Path) -> Any:
    path = tmp_path / "rules.yaml"
    path.write_text(CYCLE_RULES)
    return load_ruleset([str(path)], source="prometheus")


async def test_a_source_that_is_down_makes_expression_rules_unknown_but_alerts_still_act(
    cycle_rules: Any,
) -> None:
    source = ScriptedSource(up=False, answers={})
    submitted: list[Decision] = []
    result = await run_cycle(
        cycle_rules,
        source,
        Firing([("node", "n1")]),
        EngineState(),
        100.0,
        submit=submitted.append,
    )
    assert source.asked == []  # nothing is asked of a source that is down
    assert result.source_up is False
    assert result.unknown == ("lost",)
    assert [(d.rule, dict(d.target)) for d in result.decisions] == [("alert", {"node": "n1"})]
    assert submitted == result.decisions


async def test_recover_is_asked_only_while_the_rule_has_active_targets_and_only_about_them(
    cycle_rules: Any,
) -> None:
    state = EngineState()
    down = Vector((_sample("n1", "nvidia0", 0.0),))
    source = ScriptedSource(up=True, answers={"accel_up == 0": down})
    first = await run_cycle(cycle_rules, source, Firing(None), state, 100.0)
    assert [d.rule for d in first.decisions if d.kind == "act"] == ["lost"]
    assert "accel_up == 1" not in source.asked  # nothing was active yet

    # Recovered: n1's device is up again; n2's device (never acted on) is up too.
    source.answers = {
        "accel_up == 0": Vector(()),
        "accel_up == 1": Vector((_sample("n1", "nvidia0", 1.0), _sample("n2", "nvidia3", 1.0))),
    }
    source.asked.clear()
    second = await run_cycle(cycle_rules, source, Firing(None), state, 115.0)
    assert source.asked.count("accel_up == 1") == 1
    assert [(d.kind, dict(d.target)) for d in second.decisions] == [
        ("recover", {"device": "nvidia0", "node": "n1"})
    ]


async def test_a_failed_query_is_unknown_and_decides_nothing(cycle_rules: Any) -> None:
    source = ScriptedSource(up=True, answers={"accel_up == 0": Unknown("timeout")})
    result = await run_cycle(cycle_rules, source, Firing(None), EngineState(), 100.0)
    assert result.source_up is True
    assert result.unknown == ("lost",)
    assert result.decisions == []


async def test_cluster_and_prepare_run_after_the_refresh_and_before_the_queries(
    cycle_rules: Any,
) -> None:
    order: list[str] = []

    class Source(ScriptedSource):
        async def refresh(self, at: float) -> bool:
            order.append("refresh")
            return True

        async def query(self, expr: str, at: float) -> QueryResult:
            order.append(f"query {expr}")
            return Vector(())

    async def prepare(now: float) -> None:
        order.append("prepare")

    async def cluster(now: float) -> None:
        order.append("cluster")

    await run_cycle(
        cycle_rules,
        Source(True, {}),
        Firing(None),
        EngineState(),
        1.0,
        prepare=prepare,
        cluster=cluster,
    )
    # The rhythm learner asks its queries after prepare (this cycle's cluster
    # state) and before the rules, which read what it learned: each kind's ages
    # first, and with no job of a kind (none here), not its utilization.
    learner = [f"query {q}" for q in (rhythm.GANG_AGE_QUERY, rhythm.POD_AGE_QUERY)]
    assert order == ["refresh", "prepare", *learner, "cluster", "query accel_up == 0"]
