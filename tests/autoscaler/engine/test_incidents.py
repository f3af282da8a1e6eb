"""Incidents, not cycles: a rule acts once per incident of its condition for a
target, however many cycles the incident lasts, and ``cooldown`` spaces incidents.

Table-driven: each case is a rule, a timeline of cycles (written compactly, one
entry per stretch of cycles: ``(first, last, result, recover)`` every 15 s) and
every decision the whole timeline makes, with its time. Results are hand-made
Vectors, so these tests need neither Prometheus nor the built-in evaluator; the
real Alertmanager end of the same story is
tests/autoscaler/controller/test_incidents_alertmanager.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from autoscaler.engine import Decision, EngineState, evaluate
from autoscaler.ruleset.model import Action, Recover, Rule, RuleLimits, RuleSet, Target
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of

STEP = 15.0
EMPTY = Vector(())


def vec(*samples: Mapping[str, str]) -> Vector:
    return Vector(tuple(Sample(labels_of(s), 1.0, 0.0) for s in samples))


def n1(incident: str | None = None, **extra: str) -> Vector:
    labels = {"node": "n1", **extra}
    if incident is not None:
        labels["__incident__"] = incident
    return vec(labels)


def alert(*incidents: str) -> Vector:
    """Firing GPUFault alerts for node n1 as the receiver returns them."""
    return vec(
        *(
            {"alertname": "GPUFault", "node": "n1", "device": f"d{i}", "__incident__": inc}
            for i, inc in enumerate(incidents)
        )
    )


def rule(
    *,
    target: Target = "node",
    action: str = "cordon",
    for_: float = 0.0,
    cooldown: float = 0.0,
    repeat: float = 0.0,
    recover_for: float | None = None,
    alertname: str | None = None,
    max_concurrent: int | None = None,
) -> Rule:
    return Rule(
        name="r",
        expr=None if alertname else "r_condition > 0",
        alertname=alertname,
        target=target,
        action=Action(action, {}),
        for_=for_,
        cooldown=cooldown,
        repeat=repeat,
        limits=RuleLimits(max_concurrent=max_concurrent),
        recover=None if recover_for is None else Recover("r_ok > 0", recover_for),
    )


# (first cycle, last cycle, expr result or None for "absent from results", recover result)
Stretch = tuple[int, int, QueryResult | None, QueryResult | None]


@dataclass(frozen=True)
class Case:
    description: str
    rule: Rule
    timeline: tuple[Stretch, ...]
    # Every decision of the whole timeline: "at kind target", at in seconds.
    expect: Sequence[str]
    extra_rules: tuple[Rule, ...] = field(default=())


def run(case: Case) -> tuple[list[Decision], EngineState]:
    ruleset = RuleSet(rules=(case.rule, *case.extra_rules))
    state = EngineState()
    made: list[Decision] = []
    for first, last, result, recover in case.timeline:
        for i in range(first, last + 1):
            results = {} if result is None else {"r": result}
            recovers = {} if recover is None else {"r": recover}
            made += evaluate(ruleset, results, state, i * STEP, recover_results=recovers)
    return made, state


def short(d: Decision) -> str:
    target = ",".join(f"{k}={v}" for k, v in sorted(d.target.items()))
    return f"{d.at:g} {d.kind} {target}"


CASES = [
    Case(
        "a condition that holds for 40 cycles, no cooldown, no recover: one decision",
        rule(),
        ((0, 39, n1(), None),),
        ["0 act node=n1"],
    ),
    Case(
        "a drain that holds for 40 cycles is one drain, not forty",
        rule(action="drain"),
        ((0, 39, n1(), None),),
        ["0 act node=n1"],
    ),
    Case(
        "flapping (holds, stops, holds) without cooldown: two incidents, two decisions",
        rule(),
        ((0, 9, n1(), None), (10, 10, EMPTY, None), (11, 20, n1(), None)),
        ["0 act node=n1", "165 act node=n1"],
    ),
    Case(
        "flapping within the cooldown: the second incident waits for its end, then acts",
        rule(cooldown=300),
        ((0, 3, n1(), None), (4, 4, EMPTY, None), (5, 39, n1(), None)),
        ["0 act node=n1", "300 act node=n1"],
    ),
    Case(
        "an incident that is over before the cooldown ends never acts",
        rule(cooldown=300),
        ((0, 3, n1(), None), (4, 4, EMPTY, None), (5, 8, n1(), None), (9, 39, EMPTY, None)),
        ["0 act node=n1"],
    ),
    Case(
        "flapping after the cooldown: each incident acts at once",
        rule(cooldown=60),
        ((0, 9, n1(), None), (10, 10, EMPTY, None), (11, 20, n1(), None)),
        ["0 act node=n1", "165 act node=n1"],
    ),
    Case(
        "an unknown result in the middle does not end the incident",
        rule(),
        ((0, 9, n1(), None), (10, 12, Unknown("timeout"), None), (13, 39, n1(), None)),
        ["0 act node=n1"],
    ),
    Case(
        "a result missing from the cycle does not end the incident either",
        rule(),
        ((0, 9, n1(), None), (10, 12, None, None), (13, 39, n1(), None)),
        ["0 act node=n1"],
    ),
    Case(
        "for: counts from the incident's start, across unknown cycles",
        rule(for_=60),
        ((0, 1, n1(), None), (2, 3, Unknown("down"), None), (4, 39, n1(), None)),
        ["60 act node=n1"],
    ),
    Case(
        "for: a new incident waits its whole for: again",
        rule(for_=60),
        ((0, 9, n1(), None), (10, 10, EMPTY, None), (11, 39, n1(), None)),
        ["60 act node=n1", "225 act node=n1"],
    ),
    Case(
        "an alert re-sent (same fingerprint and startsAt) is one incident",
        rule(alertname="GPUFault"),
        ((0, 39, alert("fp1@t0"), None),),
        ["0 act node=n1"],
    ),
    Case(
        "an alert with a new startsAt is a new incident, even with no cycle between",
        rule(alertname="GPUFault"),
        ((0, 9, alert("fp1@t0"), None), (10, 39, alert("fp1@t1"), None)),
        ["0 act node=n1", "150 act node=n1"],
    ),
    Case(
        "a new alert incident within the cooldown is held until it ends",
        rule(alertname="GPUFault", cooldown=300),
        ((0, 9, alert("fp1@t0"), None), (10, 39, alert("fp1@t1"), None)),
        ["0 act node=n1", "300 act node=n1"],
    ),
    Case(
        "two alerts on one node: the incident lasts while either does",
        rule(alertname="GPUFault"),
        (
            (0, 4, alert("fp1@t0"), None),
            (5, 9, alert("fp1@t0", "fp2@t0"), None),
            (10, 39, alert("fp2@t0"), None),
        ),
        ["0 act node=n1"],
    ),
    Case(
        "with recover: one decision and one recovery",
        rule(recover_for=30),
        ((0, 19, n1(), EMPTY), (20, 39, EMPTY, n1())),
        ["0 act node=n1", "330 recover node=n1"],
    ),
    Case(
        "with recover, the condition still holding after the recovery does not act again",
        rule(recover_for=0),
        ((0, 9, n1(), EMPTY), (10, 39, n1(), n1())),
        ["0 act node=n1", "150 recover node=n1"],
    ),
    Case(
        "with recover, a new incident while the remediation is in place is covered by it",
        rule(recover_for=0),
        ((0, 4, n1(), EMPTY), (5, 5, EMPTY, EMPTY), (6, 19, n1(), EMPTY), (20, 30, EMPTY, n1())),
        ["0 act node=n1", "300 recover node=n1"],
    ),
    Case(
        "with recover, a new alert after the recovery acts again",
        rule(alertname="GPUFault", recover_for=0),
        (
            (0, 9, alert("fp1@t0"), EMPTY),
            (10, 10, alert("fp1@t0"), n1()),
            (11, 20, alert("fp1@t1"), EMPTY),
        ),
        ["0 act node=n1", "150 recover node=n1", "165 act node=n1"],
    ),
    Case(
        "held by a limit, an incident acts once when the limit allows, and only once",
        rule(max_concurrent=1, recover_for=0),
        (
            (0, 9, vec({"node": "n1"}, {"node": "n2"}), EMPTY),
            (10, 10, vec({"node": "n1"}, {"node": "n2"}), n1()),
            (11, 39, vec({"node": "n1"}, {"node": "n2"}), EMPTY),
        ),
        ["0 act node=n1", "150 recover node=n1", "150 act node=n2"],
    ),
    Case(
        "repeat: a pool still short of nodes grows again every repeat while it lasts",
        rule(target="pool", action="scale_node_pool", repeat=150, cooldown=60),
        ((0, 29, vec({"pool": "a100"}), None), (30, 39, EMPTY, None)),
        ["0 act pool=a100", "150 act pool=a100", "300 act pool=a100"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_incidents(case: Case) -> None:
    made, _ = run(case)
    assert [short(d) for d in made] == list(case.expect)


def test_the_incident_label_is_neither_target_nor_sample() -> None:
    """``__incident__`` (and any ``__`` label but ``__name__``) is the receiver's
    bookkeeping: the decision names the target by its labels only, shows the
    sample without it, and says in its reason which incident acted."""
    ruleset = RuleSet(rules=(rule(alertname="GPUFault", target="device", action="migrate_jobs"),))
    state = EngineState()
    sample = {"alertname": "GPUFault", "node": "n1", "device": "d0", "__incident__": "fp@t0"}
    (d,) = evaluate(ruleset, {"r": vec({**sample, "__other__": "x"})}, state, 0.0)
    assert dict(d.target) == {"node": "n1", "device": "d0"}
    assert dict(d.sample_labels) == {"alertname": "GPUFault", "node": "n1", "device": "d0"}
    assert d.reason == "alert GPUFault firing for 0s (for: 0s); incident fp@t0"
    (incident,) = state.incidents.values()
    assert incident.ids == ("fp@t0",) and incident.handled == 0.0
    # A skipped sample's note leaves the bookkeeping out too.
    evaluate(ruleset, {"r": vec({"node": "n1", "__incident__": "fp@t1"})}, state, 15.0)
    (note,) = state.notes
    assert note.kind == "skipped" and dict(note.labels) == {"node": "n1"}


def test_a_held_incident_says_until_when() -> None:
    ruleset = RuleSet(rules=(rule(cooldown=300),))
    state = EngineState()
    evaluate(ruleset, {"r": n1()}, state, 0.0)
    evaluate(ruleset, {"r": EMPTY}, state, 15.0)
    assert evaluate(ruleset, {"r": n1()}, state, 30.0) == []
    assert [(n.kind, n.reason) for n in state.notes] == [
        ("held", "cooldown: acted at 0, cooldown 5m ends at 300")
    ]
    assert state.pending == {("r", labels_of({"node": "n1"})): 30.0}


def test_pending_counts_only_incidents_that_have_not_acted() -> None:
    ruleset = RuleSet(rules=(rule(for_=60),))
    state = EngineState()
    evaluate(ruleset, {"r": vec({"node": "n1"}, {"node": "n2"})}, state, 0.0)
    assert state.pending_counts() == {"r": 2}
    evaluate(ruleset, {"r": vec({"node": "n1"}, {"node": "n2"})}, state, 60.0)
    assert state.pending_counts() == {} and len(state.incidents) == 2
