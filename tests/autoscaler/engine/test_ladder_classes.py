"""Ladders that follow the fault's class (issue 34) in the engine itself: which steps
a class takes, what moves a ladder on at once (a move that is done while the fault
is seen, a step the node cannot perform), that an isolation is never recovered,
the recurrence cap and its record, and the loader's and ``check``'s words about
the new fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.commands.check import check
from autoscaler.decision import Decision
from autoscaler.engine import EngineState, evaluate
from autoscaler.engine.record import parse_record, record_text
from autoscaler.engine.state import ClusterInfo
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import RuleSet
from autoscaler.types import QueryResult, Sample, Vector, labels_of

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  rules:
    - name: fault
      expr: accel_fault_events_total > 0
      target: device
      classLabel: action
      escalate:
        - action: {type: migrate_jobs}
          timeout: 15m
        - action: {type: reset_devices}
          classes: [reset]
          timeout: 20m
        - action: {type: reboot_node}
          classes: [reset, reboot]
          timeout: 30m
        - action: {type: mark_for_return}
          classes: [isolate]
          timeout: 30m
      recurrence: {max: 2, window: 1d}
      recover: {expr: accel_up == 1, for: 5m}
"""

CLUSTER = ClusterInfo(frozenset({"n1", "n2", "n3"}))
KEY = ("fault", labels_of({"node": "n1", "device": "gpu0"}))


def load(tmp_path: Path, text: str = RULES) -> RuleSet:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return load_ruleset([path])


def fault(*classes: str | None) -> dict[str, QueryResult]:
    samples = []
    for i, klass in enumerate(classes):
        labels = {"node": "n1", "device": "gpu0", "code": str(i)}
        if klass is not None:
            labels["action"] = klass
        samples.append(Sample(labels_of(labels), 1.0, 0.0))
    return {"fault": Vector(tuple(samples))}


NONE: dict[str, QueryResult] = {"fault": Vector(())}
WELL: dict[str, QueryResult] = {
    "fault": Vector((Sample(labels_of({"node": "n1", "device": "gpu0"}), 1.0, 0.0),))
}


def ev(
    rules: RuleSet,
    results: dict[str, QueryResult],
    state: EngineState,
    now: float,
    recover: dict[str, QueryResult] | None = None,
) -> list[Decision]:
    return evaluate(rules, results, state, now, recover_results=recover or NONE, cluster=CLUSTER)


def steps(decisions: list[Decision]) -> list[tuple[int, str]]:
    return [(int(d.extra.get("step", 0)), d.action) for d in decisions if d.kind == "act"]


@pytest.mark.parametrize(
    ("klass", "expected"),
    [
        ("reboot", [(1, "migrate_jobs"), (3, "reboot_node")]),
        ("reset", [(1, "migrate_jobs"), (2, "reset_devices")]),
        ("isolate", [(1, "migrate_jobs"), (4, "mark_for_return")]),
        # Unknown (no label, or a class no step names): the reset ladder, never isolate.
        (None, [(1, "migrate_jobs"), (2, "reset_devices")]),
        ("watch", [(1, "migrate_jobs"), (2, "reset_devices")]),
    ],
)
def test_a_ladder_enters_at_its_class_step_once_the_move_is_done(
    tmp_path: Path, klass: str | None, expected: list[tuple[int, str]]
) -> None:
    rules = load(tmp_path)
    state = EngineState()
    made = steps(ev(rules, fault(klass), state, 0.0))
    assert state.report("fault", dict(KEY[1]), 1, "done")
    made += steps(ev(rules, fault(klass), state, 60.0))
    assert made == expected


def test_the_reason_names_the_skipped_steps(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("reboot"), state, 0.0)
    state.report("fault", dict(KEY[1]), 1, "done")
    [reboot] = ev(rules, fault("reboot"), state, 60.0)
    assert "step 1 (migrate_jobs) is done" in reboot.reason
    assert "step(s) 2 not for class reboot" in reboot.reason


def test_two_faults_of_one_device_follow_the_worse_class(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("reset", "reboot", None), state, 0.0)
    assert state.ladders[KEY].klass == "reboot"


def test_a_done_move_waits_for_its_timeout_when_the_fault_is_not_seen(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("reboot"), state, 0.0)
    state.report("fault", dict(KEY[1]), 1, "done")
    assert ev(rules, NONE, state, 60.0) == []
    # The timeout passes without the fault seen either: a reboot needs it seen.
    assert ev(rules, NONE, state, 15 * 60.0) == []
    assert any("the fault is not observed now" in n.reason for n in state.notes)
    assert steps(ev(rules, fault("reboot"), state, 16 * 60.0)) == [(3, "reboot_node")]


def test_a_step_the_node_cannot_perform_moves_on_at_once_but_unknown_waits(
    tmp_path: Path,
) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("reset"), state, 0.0)
    state.report("fault", dict(KEY[1]), 1, "done")
    ev(rules, fault("reset"), state, 60.0)  # the reset
    state.report("fault", dict(KEY[1]), 2, "unknown")
    assert ev(rules, fault("reset"), state, 120.0) == []
    state.report("fault", dict(KEY[1]), 2, "unsupported")
    # Unsupported, but the fault is not seen now: the reboot waits for it.
    assert ev(rules, NONE, state, 180.0) == []
    [reboot] = ev(rules, fault("reset"), state, 240.0)
    assert reboot.action == "reboot_node"
    assert "cannot be performed on this node (unsupported)" in reboot.reason


def test_an_isolation_is_never_recovered_and_ends_once_marked(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("isolate"), state, 0.0)
    # Well before the move is even done: no recover, ever.
    for minute in range(1, 15):
        assert ev(rules, NONE, state, minute * 60.0, recover=WELL) == []
    # The move's timeout: the mark (which needs no fault seen: it takes nothing away).
    assert steps(ev(rules, NONE, state, 15 * 60.0, recover=WELL)) == [(4, "mark_for_return")]
    for minute in range(16, 30):
        assert ev(rules, NONE, state, minute * 60.0, recover=WELL) == []
    state.report("fault", dict(KEY[1]), 4, "done")
    assert ev(rules, NONE, state, 1800.0, recover=WELL) == []
    assert [n.kind for n in state.notes] == ["isolated"]
    assert KEY not in state.active and KEY not in state.ladders
    # Healthy from now on: nothing undoes what the ladder did.
    for minute in range(31, 90):
        assert ev(rules, NONE, state, minute * 60.0, recover=WELL) == []


def ladder_once(rules: RuleSet, state: EngineState, at: float) -> list[Decision]:
    """One reset-class ladder that the reset fixes: act, move done, reset done, well."""
    made = ev(rules, fault("reset"), state, at)
    state.report("fault", dict(KEY[1]), 1, "done")
    made += ev(rules, fault("reset"), state, at + 60)
    state.report("fault", dict(KEY[1]), 2, "done")
    for minute in range(2, 9):
        made += ev(rules, NONE, state, at + minute * 60, recover=WELL)
    assert KEY not in state.active, made
    return made


def test_the_third_ladder_within_the_window_is_an_isolation(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ladder_once(rules, state, 0.0)
    ladder_once(rules, state, 3600.0)
    [third] = ev(rules, fault("reset"), state, 7200.0)
    assert state.ladders[KEY].klass == "isolate"
    assert "recurrence cap: ladder 3 for this target within 1d (at most 2)" in third.reason
    state.report("fault", dict(KEY[1]), 1, "done")
    [mark] = ev(rules, fault("reset"), state, 7260.0)
    assert mark.action == "mark_for_return" and "recurrence cap" in mark.reason


def test_ladders_outside_the_window_do_not_count(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ladder_once(rules, state, 0.0)
    ladder_once(rules, state, 3600.0)
    ev(rules, fault("reset"), state, 86_400.0 + 60)
    assert state.ladders[KEY].klass == "reset"


def test_the_count_survives_the_record_and_an_unreadable_one_counts_less(
    tmp_path: Path,
) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ladder_once(rules, state, 0.0)
    ladder_once(rules, state, 3600.0)
    again = parse_record(record_text(state), now=7200.0)
    assert again.ladder_starts == state.ladder_starts
    ev(rules, fault("reset"), again, 7200.0)
    assert again.ladders[KEY].klass == "isolate"

    doc = json.loads(record_text(state))
    doc["ladderStarts"][0]["at"].append("tomorrow")
    problems: list[str] = []
    hurt = parse_record(json.dumps(doc), now=7200.0, problems=problems)
    assert hurt.ladder_starts == {} and problems
    ev(rules, fault("reset"), hurt, 7200.0)
    assert hurt.ladders[KEY].klass == "reset"


def test_an_unreadable_class_in_the_record_is_no_class(tmp_path: Path) -> None:
    rules = load(tmp_path)
    state = EngineState()
    ev(rules, fault("isolate"), state, 0.0)
    doc = json.loads(record_text(state))
    doc["ladders"][0]["class"] = "destroy"
    problems: list[str] = []
    again = parse_record(json.dumps(doc), now=60.0, problems=problems)
    assert again.ladders[KEY].klass is None and "not a fault class" in problems[0]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("          classes: [reset]\n", "          classes: [rset]\n"),
            "escalate step 2: classes item must be one of ignore, app, watch, "
            "reset_when_idle, reset, reboot, isolate, got 'rset'; did you mean 'reset'?",
        ),
        (
            ("      classLabel: action\n", ""),
            "escalate step 2: classes needs the rule's classLabel",
        ),
        (
            (
                "        - action: {type: migrate_jobs}\n",
                "        - action: {type: migrate_jobs}\n          classes: [reset]\n",
            ),
            "escalate step 1: classes: the first step is the rule's act",
        ),
        (
            ("          classes: [isolate]\n", ""),
            "recurrence: the cap sends a target to the isolate class",
        ),
        (
            ("recurrence: {max: 2, window: 1d}", "recurrence: {max: 2, window: 10s}"),
            "recurrence window must be",
        ),
        (
            ("recurrence: {max: 2, window: 1d}", "recurrence: {max: 2, window: 1d, per: rack}"),
            "recurrence per must be target or node, got 'rack'",
        ),
        (
            ("classLabel: action", "classLabel: 'not a label'"),
            "classLabel must be a label name",
        ),
        (
            ("          classes: [reset]\n", "          classes: []\n"),
            "escalate step 2: classes lists no class",
        ),
        (
            (
                "accel_fault_events_total > 0",
                "max by (node, device) (accel_fault_events_total) > 0",
            ),
            "classLabel: the expr can never carry the 'action' label",
        ),
    ],
)
def test_the_loader_says_what_is_wrong_and_where(
    tmp_path: Path, change: tuple[str, str], said: str
) -> None:
    old, new = change
    assert old in RULES
    with pytest.raises(RuleSetError) as e:
        load(tmp_path, RULES.replace(old, new, 1))
    text = "\n".join(str(p) for p in e.value.problems)
    assert said in text, text
    assert f"{tmp_path / 'rules.yaml'}:" in text


def test_class_label_on_a_rule_without_a_ladder_is_refused(tmp_path: Path) -> None:
    text = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  rules:
    - name: one
      expr: accel_up == 0
      target: device
      classLabel: action
      action: {type: taint}
      recover: {expr: accel_up == 1}
"""
    with pytest.raises(RuleSetError) as e:
        load(tmp_path, text)
    [problem] = e.value.problems
    assert str(problem).startswith(f"{tmp_path / 'rules.yaml'}:8:7: classLabel: only a ladder")


def test_check_warns_about_a_class_no_rule_acts_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = RULES.replace(
        "accel_fault_events_total > 0",
        'accel_fault_events_total{action=~"reset|reboot|isolate"} > 0',
    )
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    assert check([path], verbose=True) == 0
    out, err = capsys.readouterr()
    assert (
        "fault: fault classes: reset (steps 1. migrate_jobs, 2. reset_devices, 3. "
        "reboot_node); reboot (steps 1. migrate_jobs, 3. reboot_node); isolate (steps 1. "
        "migrate_jobs, 4. mark_for_return)" in out
    )
    for klass in ("app", "watch", "reset_when_idle"):
        assert f"warning: no rule acts on fault class {klass} " in err
    assert "class ignore" not in err and "class reset " not in err
