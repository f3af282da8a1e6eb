"""``restore``: the engine's memory rebuilt from the nodes' remediation entries and
the controller's state record, then driven by ``evaluate`` as the controller drives
it after a restart. The process-level checks (``kill -9``, a leader handover) are
in tests/autoscaler/controller/test_state_survives.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from accel_common.names import REMEDIATION_ANNOTATION
from autoscaler.engine import evaluate
from autoscaler.engine.restore import RecordError, parse_record, record_text, restore
from autoscaler.engine.state import Active, EngineState
from autoscaler.kube.protocol import Obj
from autoscaler.ruleset.model import Action, Limits, Recover, Rule, RuleSet, Target
from autoscaler.types import Sample, Vector, labels_of

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
STARTED = "2027-01-15T08:00:00Z"


def rule(
    name: str = "broken",
    *,
    action: str = "cordon",
    target: Target = "node",
    cooldown: float = 3600.0,
    recover: bool = False,
) -> Rule:
    return Rule(
        name=name,
        expr=f"{name} > 0",
        alertname=None,
        target=target,
        action=Action(action, {}),
        for_=0.0,
        cooldown=cooldown,
        recover=Recover(f"{name}_ok > 0", 0.0) if recover else None,
    )


def ruleset(*rules: Rule, max_unhealthy: int | None = 3) -> RuleSet:
    limits = Limits(max_unhealthy_nodes=max_unhealthy, breaker_reset="manual")
    return RuleSet(evaluation_interval=15.0, limits=limits, rules=rules)


def entry(
    action: str = "cordon",
    *,
    controller: str = "accel-autoscaler",
    started: str = STARTED,
    phase: str = "cordoned",
    **target: str,
) -> dict[str, Any]:
    return {
        "action": action,
        "phase": phase,
        "started": started,
        "controller": controller,
        "target": target,
        "params": {},
    }


def node(name: str, **by_rule: Mapping[str, Any]) -> Obj:
    meta: Obj = {"name": name}
    if by_rule:
        meta["annotations"] = {REMEDIATION_ANNOTATION: json.dumps(by_rule)}
    return {"metadata": meta}


def storm(*names: str) -> Vector:
    return Vector(tuple(Sample(labels_of({"node": n}), 1.0, 0.0) for n in names))


def key(rule_name: str, **target: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (rule_name, labels_of(target))


NODES = [f"n{i}" for i in range(10)]


def test_our_entries_become_active_targets_and_the_breaker_counts_their_nodes() -> None:
    rs = ruleset(rule(), rule("hot", action="taint"))
    nodes = [
        node("n0", broken=entry(node="n0")),
        node("n1", broken=entry(node="n1"), hot=entry("taint", phase="tainted", node="n1")),
        node("n2", broken=entry(controller="someone-else", node="n2")),
        node("n3", gone=entry(node="n3")),
        node("n4"),
    ]
    state = EngineState()
    found = restore(state, nodes, None, "accel-autoscaler", rs, T0 + 60)
    assert state.active == {
        key("broken", node="n0"): Active(T0, "cordon", "n0"),
        key("broken", node="n1"): Active(T0, "cordon", "n1"),
        key("hot", node="n1"): Active(T0, "taint", "n1"),
    }
    assert found.nodes == ("n0", "n1")
    assert found.dropped == ("gone on n3",)
    assert state.last_acted[key("broken", node="n0")] == T0
    assert not found.record and not found.breaker_open


def test_a_restarted_engine_sends_the_storm_no_further_than_the_limit() -> None:
    """The bug of issue 14: three cordoned, then a restart, then the storm again."""
    rs = ruleset(rule())
    before = EngineState()
    acted = evaluate(rs, {"broken": storm(*NODES)}, before, T0)
    assert [d.target["node"] for d in acted] == ["n0", "n1", "n2"]
    assert before.breaker_open
    nodes = [node(n, broken=entry(node=n)) for n in ("n0", "n1", "n2")] + [
        node(n) for n in NODES[3:]
    ]
    saved = parse_record(record_text(before))

    for record in (saved, None):  # with the record, and from the node entries alone
        after = EngineState()
        restore(after, nodes, record, "accel-autoscaler", rs, T0 + 30)
        assert after.breaker_open is (record is not None)
        assert evaluate(rs, {"broken": storm(*NODES[3:])}, after, T0 + 45) == []
        assert after.breaker_open


def test_breaker_reset_manual_stays_open_after_the_remediation_ended() -> None:
    rs = ruleset(rule(recover=True))
    before = EngineState(
        breaker_open=True, breaker_opened_at=T0, breaker_reason="4 nodes would exceed 3"
    )
    record = parse_record(record_text(before))
    after = EngineState()
    found = restore(after, [node(n) for n in NODES], record, "accel-autoscaler", rs, T0 + 60)
    assert found.breaker_open and found.breaker_reason == "4 nodes would exceed 3"
    assert after.breaker_opened_at == T0
    assert evaluate(rs, {"broken": storm("n5")}, after, T0 + 75) == []


def test_the_cooldown_of_a_recovered_target_comes_from_the_record() -> None:
    """The node entry is gone (recovered), so only the record knows the cooldown."""
    rs = ruleset(rule(cooldown=600, recover=True))
    before = EngineState(last_acted={key("broken", node="n1"): T0})
    record = parse_record(record_text(before))
    after = EngineState()
    restore(after, [node("n1")], record, "accel-autoscaler", rs, T0 + 60)
    assert after.active == {}
    assert evaluate(rs, {"broken": storm("n1")}, after, T0 + 60) == []
    assert [d.target for d in evaluate(rs, {"broken": storm("n1")}, after, T0 + 600)] == [
        {"node": "n1"}
    ]


def test_memory_does_not_outvote_the_cluster() -> None:
    """A target that memory thinks is active but whose entry a person removed is not
    active; a cooldown that memory holds longer than the record is kept."""
    rs = ruleset(rule())
    state = EngineState(
        active={key("broken", node="n1"): Active(T0, "cordon", "n1")},
        last_acted={key("broken", node="n1"): T0 + 100},
        breaker_open=True,
        breaker_reason="stale",
    )
    record = EngineState(last_acted={key("broken", node="n1"): T0})
    found = restore(state, [node("n1")], record, "accel-autoscaler", rs, T0 + 200)
    assert state.active == {}
    assert state.last_acted[key("broken", node="n1")] == T0 + 100
    assert not found.breaker_open  # the record's word: a person reset it meanwhile


def test_actions_without_a_node_entry_stay_active_through_the_record() -> None:
    rs = ruleset(rule("stuck", action="requeue_job", target="pod"))
    target = {"namespace": "ml", "pod": "train-0"}
    before = EngineState(
        active={("stuck", labels_of(target)): Active(T0, "requeue_job", None)},
        actions=[(T0, "stuck"), (T0 - 7200, "stuck")],
    )
    after = EngineState()
    restore(after, [], parse_record(record_text(before)), "accel-autoscaler", rs, T0 + 60)
    assert after.active == {("stuck", labels_of(target)): Active(T0, "requeue_job", None)}
    assert after.actions == [(T0, "stuck")]  # older than an hour: gone


@pytest.mark.parametrize(
    "text",
    ["not json", "[1]", json.dumps({"version": 99}), "[" * 100_000, '{"version": 1e999}'],
)
def test_a_record_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(RecordError):
        parse_record(text)


GOOD = {"rule": "stuck", "target": {"namespace": "ml", "pod": "p"}}
NESTED: object = []
for _ in range(50):
    NESTED = [NESTED]


@pytest.mark.parametrize(
    ("part", "bad"),
    [
        ("cooldowns", {**GOOD, "lastActedAt": 1e300}),
        ("cooldowns", {**GOOD, "lastActedAt": "soon"}),
        ("cooldowns", {**GOOD, "lastActedAt": -5}),
        ("actions", {"at": T0 + 10 * 86_400, "rule": "stuck"}),
        ("actions", {"at": True, "rule": "stuck"}),
        ("incidents", {**GOOD, "since": T0, "ids": "x", "handledAt": T0}),
        ("active", {**GOOD, "since": T0, "action": ["requeue_job"], "node": None}),
        ("ladders", {**GOOD, "step": 10**6, "since": T0, "started": T0}),
        ("ladders", {**GOOD, "step": 1.5, "since": T0, "started": T0}),
        ("ladders", {**GOOD, "step": 1, "since": T0, "started": T0, "outcome": "boom"}),
        ("ladders", {**GOOD, "step": 1, "since": T0, "started": T0, "labels": {"a": NESTED}}),
        ("cooldowns", {"rule": "stuck", "target": {"x" * 300: "y"}, "lastActedAt": T0}),
        ("cooldowns", "not an object"),
        # A recurrence cap's count that cannot be read is dropped whole: it counts
        # fewer ladders, never more.
        ("ladderStarts", {**GOOD, "at": [T0, "yesterday"]}),
        ("ladderStarts", {**GOOD, "at": [T0] * 65}),
        ("ladderStarts", {**GOOD, "at": T0}),
    ],
)
def test_a_bad_entry_costs_only_itself_and_is_never_written_back(part: str, bad: object) -> None:
    good = {
        "cooldowns": {**GOOD, "lastActedAt": T0},
        "actions": {"at": T0, "rule": "stuck"},
        "incidents": {**GOOD, "since": T0, "ids": [], "handledAt": T0},
        "active": {**GOOD, "since": T0, "action": "requeue_job", "node": None},
        "ladders": {**GOOD, "step": 1, "since": T0, "started": T0},
        "ladderStarts": {**GOOD, "at": [T0 - 60, T0]},
    }
    doc: dict[str, object] = {"version": 1, **{name: [e] for name, e in good.items()}}
    doc[part] = [bad, good[part]]
    problems: list[str] = []
    state = parse_record(json.dumps(doc), now=T0 + 60, problems=problems)
    assert len(problems) == 1 and problems[0].startswith(f"{part}[0]"), problems
    # The good entry of the same part is kept, and the bad one is gone from the
    # record that the next write would store.
    again = json.loads(record_text(state))
    assert len(again[part]) == 1 and again[part][0] == json.loads(json.dumps(good[part])) | (
        {"labels": {}, "outcome": None, "class": None, "why": ""} if part == "ladders" else {}
    )
    assert not state.breaker_open


@pytest.mark.parametrize(
    "breaker",
    [3, {"open": "yes", "openedAt": None, "reason": ""}, {"open": True, "openedAt": 1e300}],
)
def test_an_unreadable_breaker_reads_as_open(breaker: object) -> None:
    problems: list[str] = []
    state = parse_record(json.dumps({"version": 1, "breaker": breaker}), now=T0, problems=problems)
    assert state.breaker_open and "could not be read" in state.breaker_reason
    assert "/api/v1/breaker/reset" in state.breaker_reason
    assert len(problems) == 1


def test_the_record_keeps_only_what_no_node_says() -> None:
    state = EngineState(
        active={
            key("broken", node="n1"): Active(T0, "cordon", "n1"),
            key("stuck", namespace="ml", pod="p"): Active(T0, "requeue_job", None),
        },
        last_acted={key("broken", node="n1"): T0},
        actions=[(T0, "broken")],
    )
    doc = json.loads(record_text(state))
    assert [a["rule"] for a in doc["active"]] == ["stuck"]
    assert doc["cooldowns"] == [{"rule": "broken", "target": {"node": "n1"}, "lastActedAt": T0}]
    assert "decisions" not in doc and "notes" not in doc
    assert record_text(parse_record(record_text(state))) == record_text(state)
