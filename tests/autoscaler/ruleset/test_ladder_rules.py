"""``escalate:``, the escalation ladder of a rule, as the loader reads it and
``accel-autoscaler check`` reports it: every problem at its file:line:col."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.actions import ACTIONS
from autoscaler.commands.check import check
from autoscaler.ruleset.loader import RuleSetError, load_ruleset
from autoscaler.ruleset.model import Recover
from tests.support.paths import REPO

HEAD = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  rules:
"""

GOOD = (
    HEAD
    + """\
    - name: broken
      expr: accel_up == 0
      target: device
      escalate:
        - action: {type: taint}
          timeout: 5m
        - action: {type: migrate_jobs, deviceOnly: true}
          timeout: 10m
          recover: {expr: accel_up == 1, for: 2m}
        - action: {type: drain}
      recover: {expr: accel_up == 1, for: 5m}
"""
)

BAD = (
    HEAD
    + """\
    - name: ladder
      expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
      target: device
      escalate:
        - action: {type: taint}
          timeout: 5m
        - action: {type: cordn}
        - action: {type: requeue_job}
          timeout: 5m
          recover: {expr: 'accel_upp == 1'}
        - action: {type: drain, drainTimeout: soon}
          timeout: 0s
      recover: {expr: 'accel_up == 1'}
    - name: both
      expr: accel_up == 0
      target: node
      action: {type: cordon}
      escalate: [{action: {type: cordon}}]
    - name: neither
      expr: accel_up == 0
      target: node
    - name: empty
      expr: accel_up == 0
      target: node
      escalate: []
    - name: undoable
      expr: accel_up == 0
      target: node
      escalate:
        - action: {type: replace_machine}
      recover: {expr: accel_up == 1}
    - name: repeated
      expr: accel_up == 0
      target: node
      escalate: [{action: {type: cordon}}]
      repeat: 5m
"""
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return path


def test_a_ladder_loads_into_steps(tmp_path: Path) -> None:
    rule = load_ruleset([write(tmp_path, GOOD)]).rule("broken")
    assert [s.action.type for s in rule.escalate] == ["taint", "migrate_jobs", "drain"]
    assert [s.timeout for s in rule.escalate] == [300.0, 600.0, None]
    assert rule.action == rule.escalate[0].action
    assert rule.escalate[1].action.params["deviceOnly"] is True
    # Success: the step's own recover, else the rule's.
    assert rule.success(1) == Recover("accel_up == 1", 300.0)
    assert rule.success(2) == Recover("accel_up == 1", 120.0)
    assert rule.undo_action().type == "taint"
    assert (rule.escalate[1].position.line, rule.escalate[1].position.col) == (11, 11)


def test_every_ladder_problem_is_reported_at_its_position(tmp_path: Path) -> None:
    path = write(tmp_path, BAD)
    with pytest.raises(RuleSetError) as caught:
        load_ruleset([path])
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:11:11: escalate step 2: missing required key 'timeout' (every step but the "
        "last has one: when it passes without success, the next step starts)",
        f"{path}:11:26: unknown action type 'cordn'; did you mean 'cordon'? (one of "
        + ", ".join(ACTIONS)
        + ")",
        f"{path}:12:26: action requeue_job acts on target pod, not 'device'",
        f"{path}:14:27: recover expr: unknown metric 'accel_upp'; did you mean 'accel_up'? "
        "(not in exporter/schema.py nor autoscaler/clusterstate.py)",
        f"{path}:15:47: drainTimeout: invalid duration 'soon' (use whole numbers with units "
        "y, w, d, h, m, s, ms, largest first, e.g. 30s, 5m, 1h30m)",
        f"{path}:16:20: timeout must be from 1s to 1w, got '0s'",
        f"{path}:22:7: a rule has action (one step) or escalate (a ladder of steps), not both",
        f"{path}:23:7: a rule: missing required key 'action' (or 'escalate')",
        f"{path}:29:17: escalate lists no step (for one step, write action:)",
        f"{path}:34:9: recover: no step of this ladder can be undone, so the rule has no "
        "recover (make one step cordon, taint, drain or migrate_jobs)",
        f"{path}:39:18: escalate: with no recover, nothing ends this ladder; give its last "
        "step a timeout (or the rule a recover), or its node counts as unhealthy for good",
        f"{path}:40:7: repeat: a ladder acts once per incident and escalates by its steps' "
        "timeouts",
    ]


def test_check_reports_ladder_problems_and_describes_ladders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check([write(tmp_path, BAD)]) == 1
    assert "escalate step 2: missing required key 'timeout'" in capsys.readouterr().err
    assert check([REPO / "rules"], verbose=True) == 0
    out = capsys.readouterr().out
    assert (
        "it escalates: 1. migrate_jobs (done when its recover holds for 10m), next after "
        "15m or when it fails; 2. reset_devices" in out
    )
    assert (
        "4. replace_machine [reboot, reset] (done when its recover holds for 10m), next "
        "after 1h or when it fails; 5. mark_for_return [isolate] (never recovered: the "
        "ladder ends once it is done), released after 30m" in out
    )
