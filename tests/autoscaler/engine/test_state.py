"""``EngineState`` on its own: what the engine carries from one cycle to the next
(pending-since, recovering-since, active targets, cooldowns, the hour of actions, the
breaker, the decision log, the last cycle's notes), and its contract: it survives
``to_json``/``from_json`` with everything the engine decides on.

test_engine.py checks the decisions; these tests read the state itself, cycle by
cycle, as ``GET /api/v1/state`` shows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.decision import Decision
from autoscaler.engine import evaluate
from autoscaler.engine.state import (
    DECISION_LOG_SIZE,
    NOTE_KINDS,
    Active,
    ClusterInfo,
    EngineState,
    Incident,
    Ladder,
    Note,
    reset_breaker,
)
from autoscaler.ruleset.model import Action, Recover, Rule, RuleSet, Target
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of


def vec(*targets: Mapping[str, str]) -> Vector:
    return Vector(tuple(Sample(labels_of(t), 1.0, 0.0) for t in targets))


def nodes(*names: str) -> Vector:
    return vec(*({"node": n} for n in names))


def rule(
    name: str = "r",
    *,
    target: Target = "node",
    action: str = "cordon",
    for_: float = 0.0,
    cooldown: float = 0.0,
    recover_for: float | None = None,
) -> Rule:
    return Rule(
        name=name,
        expr=f"{name}_condition > 0",
        alertname=None,
        target=target,
        action=Action(action, {}),
        for_=for_,
        cooldown=cooldown,
        recover=None if recover_for is None else Recover(f"{name}_ok > 0", recover_for),
    )


def key(rule_name: str, **target: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (rule_name, labels_of(target))


# -- what the state holds, cycle by cycle ------------------------------------------------


@dataclass(frozen=True)
class Step:
    at: float
    results: Mapping[str, QueryResult]
    recover: Mapping[str, QueryResult] = field(default_factory=dict)
    # What the state holds after the cycle, for rule "r" and node n1 (None: no entry).
    pending: float | None = None
    recovering: float | None = None
    active: float | None = None
    last_acted: float | None = None
    actions: Sequence[float] = ()


@dataclass(frozen=True)
class Case:
    description: str
    rule: Rule
    steps: tuple[Step, ...]


N1 = nodes("n1")
EMPTY = Vector(())

CASES = [
    Case(
        "pending holds the time the condition was first seen, until it fires",
        rule(for_=60),
        (
            Step(0, {"r": N1}, pending=0),
            Step(30, {"r": N1}, pending=0),
            Step(60, {"r": N1}, active=60, last_acted=60, actions=[60]),
        ),
    ),
    Case(
        "an unknown cycle keeps pending-since; a known one without the target drops it",
        rule(for_=60),
        (
            Step(0, {"r": N1}, pending=0),
            Step(15, {"r": Unknown("timeout")}, pending=0),
            Step(30, {}, pending=0),
            Step(45, {"r": EMPTY}),
            Step(50, {"r": N1}, pending=50),
        ),
    ),
    Case(
        "a target under remediation is not pending",
        rule(recover_for=0),
        (
            Step(0, {"r": N1}, active=0, last_acted=0, actions=[0]),
            # A cooldown of 0s has ended by the next cycle: nothing to remember.
            Step(15, {"r": N1}, active=0, actions=[0]),
        ),
    ),
    Case(
        "without recover, active and the cooldown end together",
        rule(cooldown=300),
        (
            Step(0, {"r": N1}, active=0, last_acted=0, actions=[0]),
            Step(299, {"r": EMPTY}, active=0, last_acted=0, actions=[0]),
            Step(300, {"r": EMPTY}, actions=[0]),
        ),
    ),
    Case(
        "with recover, the cooldown outlives the remediation; a target seen meanwhile is pending",
        rule(cooldown=600, recover_for=0),
        (
            Step(0, {"r": N1}, active=0, last_acted=0, actions=[0]),
            Step(60, {"r": EMPTY}, {"r": N1}, last_acted=0, actions=[0]),
            Step(120, {"r": N1}, pending=120, last_acted=0, actions=[0]),
            Step(600, {"r": N1}, active=600, last_acted=600, actions=[0, 600]),
        ),
    ),
    Case(
        "recovering holds the time the recover condition was first seen; unknown keeps it",
        rule(recover_for=120),
        (
            Step(0, {"r": N1}, active=0, last_acted=0, actions=[0]),
            Step(30, {}, {"r": N1}, recovering=30, active=0, actions=[0]),
            Step(60, {}, {"r": Unknown("x")}, recovering=30, active=0, actions=[0]),
            Step(90, {}, {"r": EMPTY}, active=0, actions=[0]),
            Step(100, {}, {"r": N1}, recovering=100, active=0, actions=[0]),
            Step(220, {}, {"r": N1}, actions=[0]),
        ),
    ),
    Case(
        "actions are remembered for an hour, for the hourly limits",
        rule(cooldown=1800),
        (
            Step(0, {"r": N1}, active=0, last_acted=0, actions=[0]),
            # The incident ends; the next one acts once the cooldown has passed.
            Step(900, {"r": EMPTY}, active=0, last_acted=0, actions=[0]),
            Step(1800, {"r": N1}, active=1800, last_acted=1800, actions=[0, 1800]),
            Step(3599, {"r": EMPTY}, active=1800, last_acted=1800, actions=[0, 1800]),
            Step(3600, {"r": EMPTY}, actions=[1800]),
            Step(5400, {"r": EMPTY}),
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_what_the_state_holds(case: Case) -> None:
    ruleset = RuleSet(rules=(case.rule,))
    state = EngineState()
    k = key("r", node="n1")
    for step in case.steps:
        evaluate(ruleset, step.results, state, step.at, recover_results=step.recover)
        active = state.active.get(k)
        got = (
            state.pending.get(k),
            state.recovering.get(k),
            active.since if active else None,
            state.last_acted.get(k),
            [at for at, _ in state.actions],
        )
        expected = (step.pending, step.recovering, step.active, step.last_acted, list(step.actions))
        assert got == expected, f"t={step.at:g}: (pending, recovering, active, cooldown, actions)"
        assert state.last_evaluation == step.at
        # The counts the API and /metrics show are the entries, by rule.
        assert state.pending_counts() == ({"r": 1} if step.pending is not None else {})
        assert state.active_counts() == ({"r": 1} if step.active is not None else {})


@pytest.mark.parametrize(
    ("target", "action", "sample", "node"),
    [
        ("node", "cordon", {"node": "n1"}, "n1"),
        ("device", "migrate_jobs", {"node": "n1", "device": "d0"}, "n1"),
        ("node", "drain", {"node": "n1"}, "n1"),
        ("node", "rebalance", {"node": "n1"}, None),
        ("pod", "requeue_job", {"namespace": "ml", "pod": "p", "node": "n1"}, None),
        ("pool", "scale_node_pool", {"pool": "big"}, None),
    ],
    ids=[
        "a cordoned node",
        "a device's node",
        "a drained node",
        "a rebalanced node is busy, not unwell",
        "a pod",
        "a pool",
    ],
)
def test_an_active_target_names_the_node_the_breaker_counts(
    target: Target, action: str, sample: dict[str, str], node: str | None
) -> None:
    state = EngineState()
    evaluate(RuleSet(rules=(rule(target=target, action=action),)), {"r": vec(sample)}, state, 5.0)
    (active,) = state.active.values()
    assert active == Active(since=5.0, action=action, node=node)


def test_notes_describe_the_last_evaluation_only() -> None:
    ruleset = RuleSet(rules=(rule(),))
    state = EngineState()
    evaluate(ruleset, {"r": Unknown("prometheus down")}, state, 0.0)
    assert state.notes == [Note("r", "unknown", "expr: prometheus down")]
    evaluate(ruleset, {"r": EMPTY}, state, 15.0)
    assert state.notes == []


def test_evaluate_leaves_the_decision_log_to_the_caller() -> None:
    ruleset = RuleSet(rules=(rule(),))
    state = EngineState()
    got = evaluate(ruleset, {"r": nodes("n1", "n2")}, state, 0.0)
    assert len(got) == 2 and not state.decisions
    state.record(got)
    state.record(got[:1])
    assert list(state.decisions) == [*got, got[0]]


def test_the_decision_log_keeps_the_last_entries() -> None:
    state = EngineState()
    made = [_decision(f"r{i}") for i in range(DECISION_LOG_SIZE + 3)]
    state.record(made)
    assert DECISION_LOG_SIZE == 1000
    assert list(state.decisions) == made[3:]


# -- release and the breaker -----------------------------------------------------------


def test_release_forgets_the_remediation_and_its_recovery_but_not_the_cooldown() -> None:
    ruleset = RuleSet(rules=(rule(cooldown=600, recover_for=300),))
    state = EngineState()
    evaluate(ruleset, {"r": N1}, state, 0.0)
    evaluate(ruleset, {}, state, 60.0, recover_results={"r": N1})
    k = key("r", node="n1")
    assert k in state.active and state.recovering[k] == 60.0
    assert state.release("r", {"node": "n1"}) is True
    assert k not in state.active and k not in state.recovering
    assert state.last_acted[k] == 0.0
    assert state.release("r", {"node": "n1"}) is False
    assert state.release("r", {"node": "n2"}) is False


@pytest.mark.parametrize("was_open", [True, False], ids=["open", "closed"])
def test_reset_breaker(was_open: bool) -> None:
    state = EngineState(
        breaker_open=was_open,
        breaker_opened_at=10.0 if was_open else None,
        breaker_reason="3 nodes under remediation would exceed 2" if was_open else "",
    )
    assert reset_breaker(state, 99.5) is was_open
    assert (state.breaker_open, state.breaker_opened_at, state.breaker_reason) == (False, None, "")
    expected = [Note("", "breaker", "closed by a person at 99.5")] if was_open else []
    assert state.notes == expected


def test_cluster_info_counts_no_node_as_recently_added_by_default() -> None:
    info = ClusterInfo(frozenset({"n1", "n2"}))
    assert info.recently_added == {}
    with pytest.raises(AttributeError):
        info.nodes = frozenset()  # type: ignore[misc]


# -- JSON: what /api/v1/state shows, and reading it back --------------------------------


def _decision(rule_name: str, **kw: Any) -> Decision:
    return Decision(
        rule=rule_name,
        kind=kw.pop("kind", "act"),
        action="cordon",
        params={"k": 1},
        target={"node": "n1"},
        sample_labels=labels_of({"node": "n1", "severity": "fatal"}),
        sample_value=2.0,
        at=30.0,
        dry_run=True,
        reason="condition held for 0s (for: 0s)",
        **kw,
    )


def small_state() -> EngineState:
    state = EngineState(
        incidents={
            key("b", node="n2"): Incident(20.0),
            key("a", node="n1"): Incident(10.0, ("fp1@2026-11-29T10:00:00Z",)),
            key("a", node="n3"): Incident(4.0, handled=5.0),
        },
        recovering={key("a", node="n3"): 25.0},
        active={
            key("a", node="n3"): Active(5.0, "cordon", "n3"),
            key("p", namespace="ml", pod="x"): Active(6.0, "requeue_job", None),
        },
        ladders={key("a", node="n3"): Ladder(2, 15.0, 5.0, "failed", klass="reboot")},
        ladder_starts={key("a", node="n3"): (5.0,)},
        last_acted={key("a", node="n3"): 5.0},
        actions=[(5.0, "a"), (6.0, "p")],
        breaker_open=True,
        breaker_opened_at=7.0,
        breaker_reason="too many",
        notes=[Note("a", "held", "cooldown", labels_of({"node": "n3"}))],
        last_evaluation=30.0,
    )
    state.record([_decision("a")])
    return state


def test_to_json_is_the_documented_shape() -> None:
    doc = small_state().to_json()
    assert doc == {
        "pending": [
            {"rule": "a", "target": {"node": "n1"}, "since": 10.0},
            {"rule": "b", "target": {"node": "n2"}, "since": 20.0},
        ],
        "incidents": [
            {
                "rule": "a",
                "target": {"node": "n1"},
                "since": 10.0,
                "ids": ["fp1@2026-11-29T10:00:00Z"],
                "handledAt": None,
            },
            {"rule": "a", "target": {"node": "n3"}, "since": 4.0, "ids": [], "handledAt": 5.0},
            {"rule": "b", "target": {"node": "n2"}, "since": 20.0, "ids": [], "handledAt": None},
        ],
        "recovering": [{"rule": "a", "target": {"node": "n3"}, "since": 25.0}],
        "active": [
            {"rule": "a", "target": {"node": "n3"}, "since": 5.0, "action": "cordon", "node": "n3"},
            {
                "rule": "p",
                "target": {"namespace": "ml", "pod": "x"},
                "since": 6.0,
                "action": "requeue_job",
                "node": None,
            },
        ],
        "ladders": [
            {
                "rule": "a",
                "target": {"node": "n3"},
                "step": 2,
                "since": 15.0,
                "started": 5.0,
                "outcome": "failed",
                "labels": {},
                "class": "reboot",
                "why": "",
            }
        ],
        "ladderStarts": [{"rule": "a", "target": {"node": "n3"}, "at": [5.0]}],
        "cooldowns": [{"rule": "a", "target": {"node": "n3"}, "lastActedAt": 5.0}],
        "actions": [{"at": 5.0, "rule": "a"}, {"at": 6.0, "rule": "p"}],
        "breaker": {"open": True, "openedAt": 7.0, "reason": "too many"},
        "decisions": [
            {
                "rule": "a",
                "kind": "act",
                "action": "cordon",
                "params": {"k": 1},
                "target": {"node": "n1"},
                "sample": {"labels": {"node": "n1", "severity": "fatal"}, "value": 2.0},
                "at": 30.0,
                "dryRun": True,
                "reason": "condition held for 0s (for: 0s)",
            }
        ],
        "notes": [{"rule": "a", "kind": "held", "reason": "cooldown", "labels": {"node": "n3"}}],
        "lastEvaluation": 30.0,
    }
    # Plain JSON: it survives a trip through a string unchanged.
    assert json.loads(json.dumps(doc)) == doc
    assert EngineState.from_json(doc) == small_state()
    assert EngineState().to_json()["breaker"] == {"open": False, "openedAt": None, "reason": ""}
    assert EngineState.from_json(EngineState().to_json()) == EngineState()


def _broken(path: Sequence[str | int], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(small_state().to_json()))
    where: Any = doc
    for part in path[:-1]:
        where = where[part]
    if value is _DELETE:
        del where[path[-1]]
    else:
        where[path[-1]] = value
    return dict(doc)


_DELETE = object()


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        (_broken(["breaker"], _DELETE), KeyError),
        (_broken(["incidents", 0, "since"], _DELETE), KeyError),
        (_broken(["incidents", 0, "target"], ["node", "n1"]), TypeError),
        (_broken(["incidents", 0, "since"], "soon"), ValueError),
        (_broken(["incidents", 0, "ids"], "fp1"), TypeError),
        (_broken(["incidents", 0, "handledAt"], _DELETE), KeyError),
        (_broken(["notes", 0, "kind"], "warning"), ValueError),
        (_broken(["decisions", 0, "kind"], "undo"), ValueError),
        (_broken(["active", 0, "action"], _DELETE), KeyError),
        (_broken(["ladders", 0, "step"], 0), ValueError),
    ],
    ids=[
        "no breaker",
        "an incident without since",
        "a target that is not a mapping",
        "a time that is not a number",
        "incident ids that are not a list",
        "an incident without handledAt",
        "a note kind the engine does not make",
        "a decision kind other than act or recover",
        "an active entry without its action",
        "a ladder step below 1",
    ],
)
def test_from_json_refuses_a_document_of_another_shape(
    doc: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        EngineState.from_json(doc)


def test_note_kinds_are_the_ones_a_note_may_have() -> None:
    assert NOTE_KINDS == (
        "unknown",
        "skipped",
        "held",
        "dropped",
        "breaker",
        "exhausted",
        "isolated",
    )


@pytest.mark.parametrize("restart_at", [0.0, 30.0, 60.0, 90.0, 119.0], ids=lambda t: f"t={t:g}")
def test_a_restart_through_json_moves_no_wait_and_no_cooldown(restart_at: float) -> None:
    """The controller restarted from its saved state decides exactly when it would
    have without the restart: a ``for:`` wait begun before it, a cooldown, and an
    incident that has acted (it does not act again) run on."""
    ruleset = RuleSet(rules=(rule("slow", for_=90), rule("fast", cooldown=120)))
    times = [0.0, 30.0, 60.0, 90.0, 119.0, 120.0, 150.0]

    def results(at: float) -> dict[str, QueryResult]:
        # fast's first incident ends at 60; its second starts at 90, within the
        # cooldown, and acts when the cooldown ends.
        return {"slow": nodes("n1"), "fast": EMPTY if at == 60.0 else nodes("n2")}

    def run(restart: float | None) -> list[tuple[float, str]]:
        state = EngineState()
        fired: list[tuple[float, str]] = []
        for at in times:
            for d in evaluate(ruleset, results(at), state, at):
                fired.append((at, d.rule))
            if at == restart:
                state = EngineState.from_json(json.loads(json.dumps(state.to_json())))
        return fired

    straight = run(None)
    assert straight == [(0.0, "fast"), (90.0, "slow"), (120.0, "fast")]
    assert run(restart_at) == straight


def test_a_document_without_incidents_reads_pending_as_incidents() -> None:
    doc = small_state().to_json()
    del doc["incidents"]
    state = EngineState.from_json(doc)
    assert state.incidents == {
        key("a", node="n1"): Incident(10.0),
        key("b", node="n2"): Incident(20.0),
    }
    assert state.pending == {key("a", node="n1"): 10.0, key("b", node="n2"): 20.0}
