"""Acts are what acted (issue 30): an act holds its place in ``maxActionsPerHour``
from the evaluation that decides it, and gives it back when its action answers
that it did nothing, through the one outcome hook that the controller and the
simulator are both wired with (``wiring.report_outcomes``). The engine is driven
with ``evaluate`` and the outcomes are handed to that hook exactly as the
executor hands them; the state record and ``restore`` carry the count across a
restart."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from accel_common.remedies import UNSUPPORTED_REASON
from autoscaler.actions.context import Outcome
from autoscaler.decision import Decision
from autoscaler.engine import EngineState, evaluate, ruletest
from autoscaler.engine.record import parse_record, record_text
from autoscaler.engine.restore import restore
from autoscaler.engine.state import ClusterInfo
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import RuleSet
from autoscaler.types import Sample, Vector, labels_of
from autoscaler.wiring import acted, report_outcomes

T0 = 1_800_000_000.0
NODES = [f"n{i}" for i in range(1, 7)]

LIMITED = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  rules:
    - name: hot
      expr: accel_utilization_ratio > 0.9
      target: node
      action: {type: rebalance}
      cooldown: 2h
      limits: {maxActionsPerHour: 2}
"""

BREAKER = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  limits: {maxUnhealthyNodes: 1, breakerReset: manual}
  rules:
    - name: broken
      expr: accel_up == 0
      target: node
      action: {type: migrate_jobs}
      cooldown: 1h
      recover: {expr: accel_up == 1, for: 5m}
"""

LADDER = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  rules:
    - name: fatal
      expr: accel_up == 0
      target: device
      limits: {maxActionsPerHour: 2}
      escalate:
        - action: {type: migrate_jobs}
          timeout: 10m
        - action: {type: reset_devices}
          timeout: 10m
        - action: {type: reboot_node}
          timeout: 30m
      recover: {expr: accel_up == 1, for: 5m}
"""


def _rules(tmp_path: Path, text: str) -> RuleSet:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_ruleset([str(path)], source="prometheus")


def _firing(nodes: Iterable[str], **extra: str) -> Vector:
    return Vector(
        tuple(Sample(tuple(sorted({"node": n, **extra}.items())), 1.0, T0) for n in sorted(nodes))
    )


SKIPPED = Outcome("skipped", "node n1 has no movable pod")
DONE = Outcome("done", "moved 2 pod(s)")


def _acted_nodes(decisions: list[Decision]) -> list[str]:
    return [d.target["node"] for d in decisions if d.kind == "act"]


@pytest.mark.parametrize(
    ("outcome", "acted_by_hour"),
    [
        # Skipped: each evaluation's two acts give their places back, so every
        # node is rebalanced within the hour, two an evaluation.
        (SKIPPED, [["n1", "n2"], ["n3", "n4"], ["n5", "n6"], []]),
        # Done: the two acts of the first evaluation fill the hour.
        (DONE, [["n1", "n2"], [], [], []]),
    ],
    ids=["skipped", "done"],
)
def test_a_skipped_act_gives_its_place_in_max_actions_per_hour_back(
    tmp_path: Path, outcome: Outcome, acted_by_hour: list[list[str]]
) -> None:
    ruleset = _rules(tmp_path, LIMITED)
    state = EngineState()
    hook = report_outcomes(state)
    got = []
    for i in range(len(acted_by_hour)):
        now = T0 + 60 * i
        decisions = evaluate(ruleset, {"hot": _firing(NODES)}, state, now)
        # Both acts of one evaluation took their places before either ran: the
        # limit holds the third in the same evaluation.
        assert len(state.actions) <= 2
        got.append(_acted_nodes(decisions))
        for d in decisions:
            hook(d, outcome)
    assert got == acted_by_hour
    held = [n for n in state.notes if n.kind == "held"]
    if outcome is DONE:
        assert state.actions == [(T0, "hot"), (T0, "hot")]
        assert held and "maxActionsPerHour: 2 actions by this rule" in held[0].reason
    else:
        assert state.actions == [] and held == []
        # Released: not under remediation, so nothing counts it; the cooldown runs.
        assert state.active == {}
        assert set(state.last_acted) == {("hot", (("node", n),)) for n in NODES}


@pytest.mark.parametrize(
    ("outcome", "breaker_opens"), [(SKIPPED, False), (DONE, True)], ids=["skipped", "done"]
)
def test_a_skipped_act_does_not_count_towards_the_breaker(
    tmp_path: Path, outcome: Outcome, breaker_opens: bool
) -> None:
    ruleset = _rules(tmp_path, BREAKER)
    cluster = ClusterInfo(frozenset(NODES))
    state = EngineState()
    hook = report_outcomes(state)
    first = evaluate(
        ruleset, {"broken": _firing(["n1"], device="nvidia0")}, state, T0, cluster=cluster
    )
    assert _acted_nodes(first) == ["n1"]
    hook(first[0], outcome)
    # n1 is still down and n2 goes down: a second node under remediation exceeds
    # maxUnhealthyNodes: 1 only if n1's migrate_jobs counts.
    second = evaluate(
        ruleset,
        {"broken": _firing(["n1", "n2"], device="nvidia0")},
        state,
        T0 + 60,
        recover_results={"broken": Vector(())},
        cluster=cluster,
    )
    assert state.breaker_open is breaker_opens
    assert _acted_nodes(second) == ([] if breaker_opens else ["n2"])
    if not breaker_opens:
        # n1's act changed nothing: no recover is made for it either.
        assert [d.kind for d in second] == ["act"]


def _ladder_cycle(ruleset: RuleSet, state: EngineState, now: float) -> list[Decision]:
    return evaluate(
        ruleset,
        {"fatal": _firing(["n1"], device="nvidia0")},
        state,
        now,
        recover_results={"fatal": Vector(())},
    )


def test_an_unsupported_ladder_step_moves_on_at_once_and_gives_its_place_back(
    tmp_path: Path,
) -> None:
    """With maxActionsPerHour: 2, the reboot after a reset that the node cannot
    perform is the ladder's second act, not its third: before, it was held."""
    ruleset = _rules(tmp_path, LADDER)
    state = EngineState()
    hook = report_outcomes(state)
    key = ("fatal", labels_of({"node": "n1", "device": "nvidia0"}))
    (move,) = _ladder_cycle(ruleset, state, T0)
    assert (move.action, move.extra["step"]) == ("migrate_jobs", 1)
    hook(move, DONE)
    (reset,) = _ladder_cycle(ruleset, state, T0 + 60)  # a move done: the reset at once
    assert (reset.action, reset.extra["step"]) == ("reset_devices", 2)
    assert len(state.actions) == 2
    hook(reset, Outcome("skipped", "gaudi: cannot reset", {"reason": UNSUPPORTED_REASON}))
    ladder = state.ladders[key]
    assert ladder.outcome == UNSUPPORTED_REASON
    assert state.actions == [(T0, "fatal")]
    assert key in state.active  # the ladder goes on: its node stays counted
    (reboot,) = _ladder_cycle(ruleset, state, T0 + 120)
    assert (reboot.action, reboot.extra["step"]) == ("reboot_node", 3)
    assert "cannot be performed on this node (unsupported)" in reboot.reason
    assert state.actions == [(T0, "fatal"), (T0 + 120, "fatal")]


def test_a_step_that_did_nothing_gives_back_only_its_own_place_once(tmp_path: Path) -> None:
    ruleset = _rules(tmp_path, LADDER)
    state = EngineState()
    hook = report_outcomes(state)
    (move,) = _ladder_cycle(ruleset, state, T0)
    hook(move, SKIPPED)
    assert state.actions == []
    hook(move, SKIPPED)  # a second word on the same step gives nothing more back
    assert state.actions == []
    key = ("fatal", labels_of({"node": "n1", "device": "nvidia0"}))
    assert state.ladders[key].outcome == "skipped" and key in state.active
    # A skipped move is no evidence: the ladder waits for the step's timeout.
    assert _ladder_cycle(ruleset, state, T0 + 60) == []
    (reset,) = _ladder_cycle(ruleset, state, T0 + 600)
    assert reset.action == "reset_devices"


@pytest.mark.parametrize(
    ("outcome", "counts"),
    [
        (Outcome("done", ""), True),
        (Outcome("partial", "a budget kept 1 pod"), True),
        (Outcome("failed", "the agent answered failed"), True),
        (Outcome("unknown", "Kubernetes API: 503"), True),
        (Outcome("skipped", "nothing to move"), False),
        (Outcome("skipped", "gaudi", {"reason": UNSUPPORTED_REASON}), False),
        # The agent's own "unsupported" answer came after the taint and the move.
        (Outcome("skipped", "agent", {"reason": UNSUPPORTED_REASON, "request": "r1"}), True),
    ],
    ids=["done", "partial", "failed", "unknown", "skipped", "unsupported", "agent-unsupported"],
)
def test_which_outcomes_count_as_acts(outcome: Outcome, counts: bool) -> None:
    assert acted(outcome) is counts


def test_a_failed_or_resumed_act_keeps_its_place(tmp_path: Path) -> None:
    ruleset = _rules(tmp_path, LIMITED)
    state = EngineState()
    hook = report_outcomes(state)
    decisions = evaluate(ruleset, {"hot": _firing(NODES)}, state, T0)
    assert len(decisions) == 2
    hook(decisions[0], Outcome("failed", "the API refused the eviction"))
    resumed = decisions[1]
    hook(replace(resumed, extra={"resumed": True}), Outcome("skipped", "nothing left to move"))
    hook(replace(resumed, kind="recover"), Outcome("skipped", "rebalance has nothing to undo"))
    assert state.actions == [(T0, "hot"), (T0, "hot")]


def test_the_hourly_count_survives_a_restart_through_the_record(tmp_path: Path) -> None:
    """Two acts of one evaluation share their (time, rule): a restart once counted
    them as one. One act that did nothing is left out of the next record."""
    ruleset = _rules(tmp_path, LIMITED)
    state = EngineState()
    hook = report_outcomes(state)
    decisions = evaluate(ruleset, {"hot": _firing(NODES[:3])}, state, T0)
    assert len(decisions) == 2
    hook(decisions[0], DONE)
    hook(decisions[1], DONE)
    later = evaluate(ruleset, {"hot": _firing(NODES[:3])}, state, T0 + 60)
    assert later == [] and len(state.actions) == 2

    # A restart: a fresh process, the nodes (no entries: rebalance leaves none)
    # and the record.
    record = parse_record(record_text(state), now=T0 + 120)
    fresh = EngineState()
    restore(fresh, [], record, "accel-autoscaler", ruleset, T0 + 120)
    assert fresh.actions == [(T0, "hot"), (T0, "hot")]
    assert evaluate(ruleset, {"hot": _firing(NODES)}, fresh, T0 + 180) == []

    # A leadership gain in the same process: memory and record agree, no double.
    restore(state, [], record, "accel-autoscaler", ruleset, T0 + 120)
    assert state.actions == [(T0, "hot"), (T0, "hot")]


def test_a_released_act_is_left_out_of_the_next_record(tmp_path: Path) -> None:
    ruleset = _rules(tmp_path, LIMITED)
    state = EngineState()
    hook = report_outcomes(state)
    done, skipped = evaluate(ruleset, {"hot": _firing(NODES[:2])}, state, T0)
    before = parse_record(record_text(state), now=T0)
    hook(done, DONE)
    hook(skipped, SKIPPED)
    after = parse_record(record_text(state), now=T0)
    assert before.actions == [(T0, "hot"), (T0, "hot")]
    assert after.actions == [(T0, "hot")]
    # Active entries of actions that leave no node entry are in the record too.
    assert set(after.active) == {("hot", (("node", done.target["node"]),))}
    fresh = EngineState()
    restore(fresh, [], after, "accel-autoscaler", ruleset, T0 + 60)
    assert fresh.actions == [(T0, "hot")]
    # One place is left in the hour: one more node is rebalanced after the restart.
    more = evaluate(ruleset, {"hot": _firing(NODES)}, fresh, T0 + 60)
    assert _acted_nodes(more) == ["n3"]
    # Restarted before the record was written again: the released act counts once
    # more, never less than what acted.
    stale = EngineState()
    restore(stale, [], before, "accel-autoscaler", ruleset, T0 + 60)
    assert len(stale.actions) == 2


RULE_TEST = """\
ruleFiles: [rules.yaml]
tests:
  - name: a reset the node cannot perform gives its place back to the reboot
    interval: 1m
    inputSeries:
      - {series: 'accel_up{node="n1",device="nvidia0"}', values: '0x10'}
    outcomes:
      - {at: 2m, rule: fatal, target: {node: n1, device: nvidia0}, step: 2, status: unsupported}
    expect:
      - at: 0m
        decisions: [{rule: fatal, action: migrate_jobs, target: {node: n1, device: nvidia0}}]
      - at: 1m
        decisions:
          - {rule: fatal, action: reset_devices, step: 2, target: {node: n1, device: nvidia0}}
      - at: 2m
        decisions:
          - {rule: fatal, action: reboot_node, step: 3, target: {node: n1, device: nvidia0}}
"""


def test_a_rule_unit_test_counts_the_same_acts(tmp_path: Path) -> None:
    """The rule unit tests report a step's outcome into the same engine state
    (``EngineState.report``): the reboot is not held by maxActionsPerHour: 2."""
    (tmp_path / "rules.yaml").write_text(LADDER)
    (tmp_path / "acts_test.yaml").write_text(RULE_TEST)
    result = ruletest.run_file(tmp_path / "acts_test.yaml")
    assert result.problems == () and result.failures == (), result
    assert result.passed == 1
