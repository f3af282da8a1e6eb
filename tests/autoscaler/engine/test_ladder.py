"""Escalation ladders in the engine (``engine/ladder.py``): the steps over time
through the rule unit-test runner (``step:`` and ``outcomes:``), and the limits,
unknown results, exhaustion and state of a ladder through ``evaluate`` itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel_common.names import REMEDIATION_ANNOTATION
from autoscaler.decision import Decision
from autoscaler.engine import EngineState, evaluate, ruletest
from autoscaler.engine.restore import parse_record, record_text, restore
from autoscaler.engine.state import ClusterInfo
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import RuleSet
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  limits: {maxUnhealthyNodes: 1, breakerReset: manual}
  rules:
    - name: broken
      expr: accel_up == 0
      target: node
      escalate:
        - action: {type: taint}
          timeout: 5m
        - action: {type: cordon}
          timeout: 10m
          recover: {expr: accel_up == 1, for: 2m}
        - action: {type: drain, drainTimeout: 5m}
          timeout: 30m
      recover: {expr: accel_up == 1, for: 5m}
"""

TESTS = """\
ruleFiles: [rules.yaml]
tests:
  - name: a fault that never recovers climbs every step, each after its timeout
    inputSeries:
      - {series: 'accel_up{node="n1",device="nvidia0"}', values: '0x60'}
    expect:
      - at: 0m
        decisions: [{rule: broken, target: {node: n1}}]
      - from: 1m
        to: 4m
        decisions: []
      - at: 5m
        decisions: [{rule: broken, action: cordon, step: 2, target: {node: n1}}]
      - at: 15m
        decisions: [{rule: broken, action: drain, target: {node: n1}}]
      - from: 16m
        to: 60m
        decisions: []
  - name: a fault that the second step fixes stops there, and its recover undoes the first
    inputSeries:
      - {series: 'accel_up{node="n1",device="nvidia0"}', values: '0x6 1x40'}
    expect:
      - at: 5m
        decisions: [{rule: broken, action: cordon, target: {node: n1}}]
      - at: 9m
        decisions: [{rule: broken, kind: recover, action: taint, target: {node: n1}}]
      - from: 10m
        to: 40m
        decisions: []
  - name: a failed step escalates at once
    inputSeries:
      - {series: 'accel_up{node="n1",device="nvidia0"}', values: '0x60'}
    outcomes:
      - {at: 2m, rule: broken, target: {node: n1}, step: 1, status: failed}
      - {at: 3m, rule: broken, target: {node: n1}, step: 2, status: done}
    expect:
      - at: 2m
        decisions: [{rule: broken, action: cordon, step: 2, target: {node: n1}}]
      - at: 12m
        decisions: [{rule: broken, action: drain, step: 3, target: {node: n1}}]
"""


def write(tmp_path: Path, tests: str = TESTS) -> Path:
    (tmp_path / "rules.yaml").write_text(RULES)
    path = tmp_path / "ladder_test.yaml"
    path.write_text(tests)
    return path


def test_the_rule_test_format_asserts_steps_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ruletest.main([str(write(tmp_path))])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert out == "3 tests passed\n"


def test_a_wrong_step_is_a_readable_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = TESTS.split("  - name: a fault that the second")[0].replace("step: 2", "step: 3")
    path = write(tmp_path, tests)
    assert ruletest.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert '- act broken cordon {node="n1"} step 3' in out
    assert '+ act broken cordon {node="n1"} step 2' in out


def test_steps_and_outcomes_are_checked_against_the_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = TESTS.replace("step: 2, status: done", "step: 7, status: done").replace(
        "at: 3m, rule: broken", "at: 90s, rule: broken"
    )
    assert ruletest.main([str(write(tmp_path, tests))]) == 2
    err = capsys.readouterr().err
    assert "rule 'broken' has 3 steps, not 7" in err
    assert "at 1m30s is not a multiple of the evaluation interval 1m" in err


# -- evaluate -------------------------------------------------------------------------


def ruleset(tmp_path: Path, text: str = RULES) -> RuleSet:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_ruleset([path])


def down(node: str = "n1") -> dict[str, QueryResult]:
    return {"broken": Vector((Sample(labels_of({"node": node}), 0.0, 0.0),))}


CLUSTER = ClusterInfo(frozenset({"n1", "n2", "n3"}))
# Known success results that name no target: nothing recovered.
NOT_WELL: dict[str, QueryResult] = {"broken": Vector(()), "broken/2": Vector(())}


def ev(
    rules: RuleSet, results: dict[str, QueryResult], state: EngineState, now: float
) -> list[Decision]:
    return evaluate(rules, results, state, now, recover_results=NOT_WELL, cluster=CLUSTER)


N1 = (("node", "n1"),)


def test_the_target_stays_active_and_counted_through_every_step(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    first = ev(rules, down(), state, 0.0)
    assert [(d.action, d.extra) for d in first] == [("taint", {"step": 1, "incident": 0.0})]
    second = ev(rules, {"broken": Vector(())}, state, 300.0)
    assert [(d.action, d.extra) for d in second] == [("cordon", {"step": 2, "incident": 0.0})]
    # The node is the one the breaker allows; another node's fault is held.
    held = ev(rules, down("n2"), state, 310.0)
    assert held == [] and state.breaker_open
    assert state.active[("broken", N1)].action == "cordon"
    assert state.active[("broken", N1)].node == "n1"


def test_an_open_breaker_and_hourly_limits_hold_escalation(tmp_path: Path) -> None:
    text = RULES.replace("breakerReset: manual}", "breakerReset: manual, maxActionsPerHour: 1}")
    rules = ruleset(tmp_path, text)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    assert ev(rules, down(), state, 300.0) == []
    assert any("escalation: global maxActionsPerHour" in n.reason for n in state.notes)
    state.actions.clear()
    state.breaker_open, state.breaker_reason = True, "storm"
    assert ev(rules, down(), state, 360.0) == []
    assert any("escalation: circuit breaker open: storm" in n.reason for n in state.notes)
    state.breaker_open = False
    assert [d.action for d in ev(rules, down(), state, 420.0)] == ["cordon"]


def test_an_unknown_success_never_escalates_by_timeout_but_a_failure_does(
    tmp_path: Path,
) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    unknown = {"broken": Unknown("source down")}
    assert evaluate(rules, down(), state, 300.0, recover_results=unknown) == []
    assert any("success is unknown; not escalating" in n.reason for n in state.notes)
    assert state.report("broken", {"node": "n1"}, 1, "failed")
    assert not state.report("broken", {"node": "n1"}, 2, "done")  # not at step 2
    decisions = evaluate(rules, down(), state, 310.0, recover_results=unknown)
    assert [d.action for d in decisions] == ["cordon"]
    assert "step 1 (taint) failed" in decisions[0].reason


def test_nothing_escalates_while_the_fault_itself_is_unknown(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    state.report("broken", {"node": "n1"}, 1, "failed")
    unknown = {"broken": Unknown("source down")}
    for now in (60.0, 300.0, 900.0):  # failed, then timed out too: still nothing
        assert evaluate(rules, unknown, state, now, recover_results=NOT_WELL) == []
        assert any("whether the fault is still there is unknown" in n.reason for n in state.notes)
    assert state.ladders[("broken", N1)].step == 1
    assert [d.action for d in ev(rules, down(), state, 960.0)] == ["cordon"]


def test_an_unknown_outcome_waits_for_the_timeout(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    assert state.report("broken", {"node": "n1"}, 1, "unknown")
    assert ev(rules, down(), state, 60.0) == []
    assert ev(rules, down(), state, 299.0) == []
    assert [d.action for d in ev(rules, down(), state, 300.0)] == ["cordon"]


DESTRUCTIVE_RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  rules:
    - name: broken
      expr: accel_up == 0
      target: device
      escalate:
        - action: {type: migrate_jobs}
          timeout: 5m
        - action: {type: reboot_node}
          timeout: 30m
      recover: {expr: accel_up == 1, for: 5m}
"""


def test_a_reboot_needs_the_fault_observed_and_carries_the_first_labels(
    tmp_path: Path,
) -> None:
    rules = ruleset(tmp_path, DESTRUCTIVE_RULES)
    state = EngineState()
    first = labels_of({"node": "n1", "device": "nvidia0", "uuid": "GPU-1", "code": "79"})
    fault: dict[str, QueryResult] = {"broken": Vector((Sample(first, 0.0, 0.0),))}
    recover: dict[str, QueryResult] = {"broken": Vector(())}

    def at(results: dict[str, QueryResult], now: float) -> list[Decision]:
        return evaluate(rules, results, state, now, recover_results=recover, cluster=CLUSTER)

    assert [d.action for d in at(fault, 0.0)] == ["migrate_jobs"]
    state.report("broken", {"node": "n1", "device": "nvidia0"}, 1, "failed")
    # Failed, but the fault is not seen now (the exporter went away: not recovered
    # either): no reboot, a held note says why.
    assert at({"broken": Vector(())}, 60.0) == []
    assert any("the fault is not observed now" in n.reason for n in state.notes)
    assert at({"broken": Vector(())}, 600.0) == []
    # Seen again: the reboot, with the labels of the sample that started the ladder.
    later = labels_of({"node": "n1", "device": "nvidia0"})
    (reboot,) = at({"broken": Vector((Sample(later, 0.0, 0.0),))}, 660.0)
    assert reboot.action == "reboot_node" and dict(reboot.sample_labels)["uuid"] == "GPU-1"
    assert state.ladders[("broken", later)].labels == first


def test_an_exhausted_ladder_releases_its_target(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    ev(rules, down(), state, 300.0)
    ev(rules, down(), state, 900.0)
    assert state.ladders[("broken", N1)].step == 3
    assert ev(rules, down(), state, 900.0 + 1800.0) == []
    assert ("broken", N1) not in state.active and not state.ladders
    assert [n.kind for n in state.notes if n.kind != "unknown"] == ["exhausted"]


def test_a_ladder_survives_a_json_round_trip_mid_way(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    ev(rules, down(), state, 300.0)
    state.report("broken", {"node": "n1"}, 2, "done")
    again = EngineState.from_json(json.loads(json.dumps(state.to_json())))
    assert again.ladders == state.ladders
    assert [d.extra for d in again.decisions] == [d.extra for d in state.decisions]
    # It goes on from step 2: the next step after step 2's timeout, nothing before.
    assert ev(rules, down(), again, 899.0) == []
    assert [d.action for d in ev(rules, down(), again, 900.0)] == ["drain"]


# -- restore ----------------------------------------------------------------------------


def _node(name: str, **by_rule: dict[str, object]) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if by_rule:
        meta["annotations"] = {REMEDIATION_ANNOTATION: json.dumps(by_rule)}
    return {"metadata": meta}


def _entry(action: str) -> dict[str, object]:
    return {
        "action": action,
        "phase": "cordoned",
        "started": "2026-11-29T10:00:00Z",
        "controller": "accel-autoscaler",
        "target": {"node": "n1"},
        "params": {},
    }


def _mid_ladder(tmp_path: Path) -> tuple[RuleSet, EngineState]:
    rules = ruleset(tmp_path)
    state = EngineState()
    ev(rules, down(), state, 0.0)
    ev(rules, down(), state, 300.0)
    return rules, parse_record(record_text(state))


def test_a_ladder_comes_back_from_the_record_while_its_node_holds_our_entry(
    tmp_path: Path,
) -> None:
    rules, record = _mid_ladder(tmp_path)
    state = EngineState()
    restore(state, [_node("n1", broken=_entry("cordon"))], record, "accel-autoscaler", rules, 310.0)
    assert state.ladders[("broken", N1)] == record.ladders[("broken", N1)]
    assert state.active[("broken", N1)].action == "cordon"
    # It goes on at step 2: the drain after step 2's timeout, and nothing before.
    assert ev(rules, down(), state, 899.0) == []
    assert [d.action for d in ev(rules, down(), state, 900.0)] == ["drain"]


def test_a_node_away_being_replaced_stays_counted_and_a_released_one_does_not(
    tmp_path: Path,
) -> None:
    rules, record = _mid_ladder(tmp_path)
    away = EngineState()
    found = restore(away, [_node("n2")], record, "accel-autoscaler", rules, 310.0)
    assert found.nodes == ("n1",) and ("broken", N1) in away.ladders
    released = EngineState()
    restore(released, [_node("n1"), _node("n2")], record, "accel-autoscaler", rules, 310.0)
    assert not released.active and not released.ladders


def test_an_entry_without_a_recorded_ladder_is_put_back_on_its_step(tmp_path: Path) -> None:
    rules = ruleset(tmp_path)
    state = EngineState()
    restore(state, [_node("n1", broken=_entry("cordon"))], None, "accel-autoscaler", rules, 0.0)
    assert state.ladders[("broken", N1)].step == 2
