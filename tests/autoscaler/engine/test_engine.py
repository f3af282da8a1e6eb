"""The engine, table-driven (descheduler's habit): each case is a description, a
rule set, a list of cycles (time, results, recover results) and the decisions
expected at each cycle, written one per line as ``kind rule label=value,...``.

Results are hand-made Vectors, so these tests need neither Prometheus nor the
built-in evaluator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from autoscaler.engine import (
    ClusterInfo,
    Decision,
    EngineState,
    evaluate,
    format_duration,
    reset_breaker,
)
from autoscaler.engine.breaker import SizeUnknown, allowed_unhealthy
from autoscaler.ruleset.model import Action, Limits, Recover, Rule, RuleLimits, RuleSet, Target
from autoscaler.types import QueryResult, Sample, Scalar, Unknown, Vector, labels_of


def vec(*targets: Mapping[str, str], value: float = 1.0) -> Vector:
    return Vector(tuple(Sample(labels_of(t), value, 0.0) for t in targets))


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
    max_concurrent: int | None = None,
    max_per_hour: int | None = None,
    alertname: str | None = None,
) -> Rule:
    return Rule(
        name=name,
        expr=None if alertname else f"{name}_condition > 0",
        alertname=alertname,
        target=target,
        action=Action(action, {"reason": name}),
        for_=for_,
        cooldown=cooldown,
        limits=RuleLimits(max_concurrent, max_per_hour),
        recover=None if recover_for is None else Recover(f"{name}_ok > 0", recover_for),
    )


def short(d: Decision) -> str:
    target = ",".join(f"{k}={v}" for k, v in sorted(d.target.items()))
    return f"{d.kind} {d.rule} {target}"


@dataclass(frozen=True)
class Cycle:
    at: float
    results: Mapping[str, QueryResult]
    recover: Mapping[str, QueryResult] = field(default_factory=dict)
    expect: Sequence[str] = ()


@dataclass(frozen=True)
class Case:
    description: str
    rules: tuple[Rule, ...]
    cycles: tuple[Cycle, ...]
    limits: Limits = field(default_factory=Limits)
    cluster: ClusterInfo | None = None


def run(case: Case) -> tuple[EngineState, list[list[str]]]:
    ruleset = RuleSet(limits=case.limits, rules=case.rules)
    state = EngineState()
    got = []
    for c in case.cycles:
        decisions = evaluate(
            ruleset, c.results, state, c.at, recover_results=c.recover, cluster=case.cluster
        )
        state.record(decisions)
        got.append([short(d) for d in decisions])
    return state, got


N = [f"n{i:02d}" for i in range(20)]
TWENTY = ClusterInfo(frozenset(N))
# Half of the twenty nodes were added by a scale-up at t=0.
SCALED_UP = ClusterInfo(frozenset(N), {n: 0.0 for n in N[10:]})

CASES = [
    Case(
        "for: a target fires once present continuously for 'for'",
        (rule(for_=60),),
        (
            Cycle(0, {"r": nodes("n1")}),
            Cycle(30, {"r": nodes("n1")}),
            Cycle(60, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "for: a known result without the target resets its pending",
        (rule(for_=60),),
        (
            Cycle(0, {"r": nodes("n1")}),
            Cycle(30, {"r": nodes("n2")}),
            Cycle(60, {"r": nodes("n1", "n2")}),
            Cycle(90, {"r": nodes("n1", "n2")}, expect=["act r node=n2"]),
            Cycle(120, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "unknown: no decision, pending kept, and it fires on the next known cycle",
        (rule(for_=60),),
        (
            Cycle(0, {"r": nodes("n1")}),
            Cycle(60, {"r": Unknown("timeout")}),
            Cycle(90, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "a scalar and a missing result are unknown: the for: wait is kept",
        (rule(for_=60),),
        (
            Cycle(0, {"r": nodes("n1")}),
            Cycle(60, {"r": Scalar(1.0, 60)}),
            Cycle(75, {}),
            Cycle(90, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "an empty vector is known: it fires nothing and ends the for: wait",
        (rule(for_=60),),
        (
            Cycle(0, {"r": nodes("n1")}),
            Cycle(45, {"r": Vector(())}),
            Cycle(60, {"r": nodes("n1")}),
            Cycle(105, {"r": nodes("n1")}),
            Cycle(120, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "unknown never fires, even with for: 0",
        (rule(),),
        (Cycle(0, {"r": Unknown("source down")}), Cycle(15, {"r": Vector(())})),
    ),
    Case(
        "an active target is not acted on again by the same rule",
        (rule(recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(15, {"r": nodes("n1")}),
            Cycle(3600, {"r": nodes("n1")}),
        ),
    ),
    Case(
        "another rule may act on a target that one rule is remediating",
        (rule("a", recover_for=0), rule("b", action="drain", recover_for=0)),
        (
            Cycle(0, {"a": nodes("n1")}, expect=["act a node=n1"]),
            Cycle(15, {"a": nodes("n1"), "b": nodes("n1")}, expect=["act b node=n1"]),
        ),
    ),
    Case(
        "cooldown without recover: one incident acts once, however long it lasts",
        (rule(cooldown=300),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(60, {"r": nodes("n1")}),
            Cycle(299, {"r": nodes("n1")}),
            Cycle(300, {"r": nodes("n1")}),
            Cycle(3600, {"r": nodes("n1")}),
        ),
    ),
    Case(
        "cooldown: an incident that starts within it is held, and acts when it ends",
        (rule(cooldown=300),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(60, {"r": Vector(())}),
            Cycle(120, {"r": nodes("n1")}),
            Cycle(299, {"r": nodes("n1")}),
            Cycle(300, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "cooldown with recover: no second act until the cooldown has passed",
        (rule(cooldown=600, recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(60, {"r": Vector(())}, {"r": nodes("n1")}, expect=["recover r node=n1"]),
            Cycle(120, {"r": nodes("n1")}),
            Cycle(600, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "recover needs its condition continuously for recover.for; unknown keeps it",
        (rule(recover_for=120),),
        (
            Cycle(0, {"r": nodes("n1", "n2")}, expect=["act r node=n1", "act r node=n2"]),
            Cycle(60, {}, {"r": nodes("n1", "n2")}),
            Cycle(120, {}, {"r": Unknown("timeout")}),
            Cycle(150, {}, {"r": nodes("n1")}),
            Cycle(180, {}, {"r": nodes("n1", "n2")}, expect=["recover r node=n1"]),
            Cycle(300, {}, {"r": nodes("n2")}, expect=["recover r node=n2"]),
        ),
    ),
    Case(
        "unknown and empty recover results never recover",
        (rule(recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(60, {}, {"r": Unknown("down")}),
            Cycle(120, {}, {"r": Vector(())}),
            Cycle(180, {}, {}),
            Cycle(240, {}, {"r": nodes("n1")}, expect=["recover r node=n1"]),
        ),
    ),
    Case(
        "hysteresis: the trigger and the recovery are different conditions",
        (rule(recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, {"r": Vector(())}, expect=["act r node=n1"]),
            # The trigger is gone but the recover condition does not hold yet.
            Cycle(60, {"r": Vector(())}, {"r": Vector(())}),
            Cycle(120, {"r": nodes("n2")}, {"r": nodes("n2")}, expect=["act r node=n2"]),
            Cycle(180, {}, {"r": nodes("n1")}, expect=["recover r node=n1"]),
        ),
    ),
    Case(
        "a recover ends the incident: the condition must stop holding before it acts again",
        (rule(recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(60, {"r": nodes("n1")}, {"r": nodes("n1")}, expect=["recover r node=n1"]),
            Cycle(120, {"r": nodes("n1")}, {"r": Vector(())}),
            Cycle(180, {"r": Vector(())}),
            Cycle(240, {"r": nodes("n1")}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "a target recovered this cycle is not acted on in the same cycle",
        (rule(recover_for=0),),
        (
            Cycle(0, {"r": nodes("n1")}, expect=["act r node=n1"]),
            Cycle(15, {"r": Vector(())}),
            # A new incident while the remediation is in place: it covers it.
            Cycle(30, {"r": nodes("n1")}),
            Cycle(60, {"r": Vector(())}, {"r": nodes("n1")}, expect=["recover r node=n1"]),
            Cycle(75, {"r": nodes("n1")}, {"r": Vector(())}, expect=["act r node=n1"]),
        ),
    ),
    Case(
        "per-rule maxConcurrent: a held target fires once a slot frees",
        (rule(recover_for=0, max_concurrent=2),),
        (
            Cycle(0, {"r": nodes("n3", "n1", "n2")}, expect=["act r node=n1", "act r node=n2"]),
            Cycle(60, {"r": nodes("n3")}),
            Cycle(
                120,
                {"r": nodes("n3")},
                {"r": nodes("n1")},
                expect=["recover r node=n1", "act r node=n3"],
            ),
        ),
    ),
    Case(
        "per-rule maxActionsPerHour counts acts in the last hour",
        (rule(max_per_hour=2),),
        (
            Cycle(0, {"r": nodes("n1", "n2", "n3")}, expect=["act r node=n1", "act r node=n2"]),
            Cycle(1800, {"r": nodes("n3")}),
            Cycle(3599, {"r": nodes("n3")}),
            Cycle(3600, {"r": nodes("n3")}, expect=["act r node=n3"]),
        ),
    ),
    Case(
        "global maxActionsPerHour across rules, in rule order",
        (rule("a"), rule("b")),
        (
            Cycle(
                0,
                {"a": nodes("n1", "n2"), "b": nodes("n3")},
                expect=["act a node=n1", "act a node=n2"],
            ),
            Cycle(3600, {"b": nodes("n3")}, expect=["act b node=n3"]),
        ),
        limits=Limits(max_actions_per_hour=2),
    ),
    Case(
        "global maxConcurrentDrains counts active drain and migrate_jobs targets",
        (
            rule("drain", action="drain", recover_for=0),
            rule("migrate", target="device", action="migrate_jobs", recover_for=0),
            rule("cordon", action="cordon"),
        ),
        (
            Cycle(
                0,
                {
                    "drain": nodes("n1"),
                    "migrate": vec({"node": "n2", "device": "d0"}, {"node": "n3", "device": "d0"}),
                    "cordon": nodes("n4", "n5"),
                },
                expect=[
                    "act drain node=n1",
                    "act migrate device=d0,node=n2",
                    "act cordon node=n4",
                    "act cordon node=n5",
                ],
            ),
            Cycle(60, {"migrate": vec({"node": "n3", "device": "d0"})}),
            Cycle(
                120,
                {"migrate": vec({"node": "n3", "device": "d0"})},
                {"drain": nodes("n1")},
                expect=["recover drain node=n1", "act migrate device=d0,node=n3"],
            ),
        ),
        limits=Limits(max_concurrent_drains=2),
    ),
    Case(
        "alert storm: 50% of nodes fault with maxUnhealthyNodes 10%; decisions stop at "
        "the limit and the breaker opens",
        (rule("fault", action="migrate_jobs"),),
        (
            Cycle(
                0, {"fault": nodes(*N[:10])}, expect=["act fault node=n00", "act fault node=n01"]
            ),
            Cycle(15, {"fault": nodes(*N[:10])}),
        ),
        limits=Limits(max_unhealthy_ratio=0.1),
        cluster=TWENTY,
    ),
    Case(
        "nodes a scale-up added within scaleUpGrace neither count nor open the breaker",
        (rule("fault", action="migrate_jobs"),),
        (
            Cycle(
                60,
                {"fault": nodes(*N[10:])},
                expect=[f"act fault node={n}" for n in N[10:]],
            ),
        ),
        limits=Limits(max_unhealthy_ratio=0.1, scale_up_grace=600),
        cluster=SCALED_UP,
    ),
    Case(
        "once scaleUpGrace has passed, a new node counts like any other",
        (rule("fault", action="migrate_jobs"),),
        (Cycle(600, {"fault": nodes(*N[10:])}, expect=["act fault node=n10"]),),
        # 10 established nodes at 10% (grace 600 s since t=0 has passed: 20 nodes) -> 2;
        # a count limit of 1 is the tighter one.
        limits=Limits(max_unhealthy_nodes=1, max_unhealthy_ratio=0.1, scale_up_grace=600),
        cluster=SCALED_UP,
    ),
    Case(
        "the breaker counts nodes, not targets: devices of one node count once",
        (rule("dev", target="device", action="migrate_jobs"),),
        (
            Cycle(
                0,
                {
                    "dev": vec(
                        {"node": "n00", "device": "d0"},
                        {"node": "n00", "device": "d1"},
                        {"node": "n01", "device": "d0"},
                    )
                },
                expect=["act dev device=d0,node=n00", "act dev device=d1,node=n00"],
            ),
        ),
        limits=Limits(max_unhealthy_nodes=1),
        cluster=TWENTY,
    ),
    Case(
        "pod and pool targets put no node under remediation",
        (
            rule("requeue", target="pod", action="requeue_job"),
            rule("grow", target="pool", action="scale_node_pool"),
        ),
        (
            Cycle(
                0,
                {
                    "requeue": vec(
                        {"namespace": "a", "pod": "p1", "node": "n1"},
                        {"namespace": "a", "pod": "p2", "node": "n2"},
                    ),
                    "grow": vec({"pool": "big"}),
                },
                expect=[
                    "act requeue namespace=a,pod=p1",
                    "act requeue namespace=a,pod=p2",
                    "act grow pool=big",
                ],
            ),
        ),
        limits=Limits(max_unhealthy_nodes=0),
        cluster=TWENTY,
    ),
    Case(
        "a share limit with no cluster size holds node remediation, not the others",
        (rule("fault"), rule("requeue", target="pod", action="requeue_job")),
        (
            Cycle(
                0,
                {"fault": nodes("n1"), "requeue": vec({"namespace": "a", "pod": "p"})},
                expect=["act requeue namespace=a,pod=p"],
            ),
        ),
        limits=Limits(max_unhealthy_ratio=0.5),
    ),
    Case(
        "samples without the target's labels are skipped",
        (rule("dev", target="device"),),
        (
            Cycle(
                0,
                {"dev": vec({"node": "n1"}, {"device": "d0"}, {"node": "n2", "device": "d1"})},
                expect=["act dev device=d1,node=n2"],
            ),
        ),
    ),
    Case(
        "alertname rules take a vector of firing alerts",
        (rule("gpu", alertname="GPUFault", for_=30),),
        (
            Cycle(0, {"gpu": vec({"alertname": "GPUFault", "node": "n1"})}),
            Cycle(
                30,
                {"gpu": vec({"alertname": "GPUFault", "node": "n1"})},
                expect=["act gpu node=n1"],
            ),
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_engine(case: Case) -> None:
    _, got = run(case)
    expected = [list(c.expect) for c in case.cycles]
    assert got == expected, "\n".join(
        f"t={c.at:g}: expected {e}, got {g}"
        for c, e, g in zip(case.cycles, expected, got, strict=True)
        if e != g
    )


def storm(limits: Limits, cluster: ClusterInfo = TWENTY) -> tuple[RuleSet, EngineState]:
    """A rule set with one recoverable rule, after a storm on n00..n09 at t=0 that
    opened the breaker with n00 and n01 remediated."""
    ruleset = RuleSet(limits=limits, rules=(rule("fault", recover_for=0),))
    state = EngineState()
    got = evaluate(ruleset, {"fault": nodes(*N[:10])}, state, 0.0, cluster=cluster)
    assert [d.target["node"] for d in got] == ["n00", "n01"]
    assert state.breaker_open
    assert state.breaker_opened_at == 0.0
    assert state.breaker_reason == (
        "3 nodes under remediation would exceed maxUnhealthyNodes 10% of 20 established nodes"
    )
    return ruleset, state


def test_breaker_open_holds_acts_but_allows_recovery() -> None:
    ruleset, state = storm(Limits(max_unhealthy_ratio=0.1, breaker_reset="manual"))
    got = evaluate(
        ruleset,
        {"fault": nodes(*N[2:10])},
        state,
        60.0,
        recover_results={"fault": nodes("n00")},
        cluster=TWENTY,
    )
    assert [short(d) for d in got] == ["recover fault node=n00"]
    held = [n for n in state.notes if n.kind == "held"]
    assert len(held) == 8
    assert all(n.reason.startswith("circuit breaker open: 3 nodes") for n in held)


def test_rebalancing_busy_nodes_is_no_storm() -> None:
    """Ten hot nodes rebalanced at once under a 2-node limit: the breaker stays
    closed (a busy node is not an unwell one), and a fault still gets through."""
    ruleset = RuleSet(
        limits=Limits(max_unhealthy_nodes=2),
        rules=(rule("hot", action="rebalance", cooldown=1800), rule("fault")),
    )
    state = EngineState()
    got = evaluate(ruleset, {"hot": nodes(*N[:10]), "fault": nodes()}, state, 0.0, cluster=TWENTY)
    assert len(got) == 10 and not state.breaker_open
    got = evaluate(
        ruleset, {"hot": nodes(*N[:10]), "fault": nodes("n15")}, state, 15.0, cluster=TWENTY
    )
    assert [short(d) for d in got] == ["act fault node=n15"]
    assert not state.breaker_open


def test_manual_breaker_stays_open_until_reset() -> None:
    ruleset, state = storm(Limits(max_unhealthy_ratio=0.1, breaker_reset="manual"))
    # A day later with nothing left to remediate: still open.
    assert evaluate(ruleset, {"fault": nodes("n05")}, state, 86_400.0, cluster=TWENTY) == []
    assert state.breaker_open
    assert reset_breaker(state, 86_401.0) is True
    assert not state.breaker_open
    assert [n.reason for n in state.notes if n.kind == "breaker"] == ["closed by a person at 86401"]
    got = evaluate(ruleset, {"fault": nodes("n05")}, state, 86_415.0, cluster=TWENTY)
    # n00 and n01 are still under remediation: one more would be three.
    assert got == []
    assert state.breaker_open
    assert reset_breaker(state, 86_420.0) is True
    assert reset_breaker(state, 86_421.0) is False
    got = evaluate(
        ruleset,
        {"fault": nodes("n05")},
        state,
        86_430.0,
        recover_results={"fault": nodes("n00")},
        cluster=TWENTY,
    )
    assert [short(d) for d in got] == ["recover fault node=n00", "act fault node=n05"]
    assert not state.breaker_open


def test_window_breaker_closes_after_window_and_back_under_limit() -> None:
    limits = Limits(max_unhealthy_ratio=0.1, breaker_reset="window", breaker_window=600)
    ruleset, state = storm(limits)
    # Before the window: closed would be under the limit, but the window has not passed.
    assert evaluate(ruleset, {"fault": Vector(())}, state, 599.0, cluster=TWENTY) == []
    assert state.breaker_open
    # After the window, but the storm goes on: 10 nodes want remediation.
    assert evaluate(ruleset, {"fault": nodes(*N[:10])}, state, 600.0, cluster=TWENTY) == []
    assert state.breaker_open
    # The storm is over (only the two remediated nodes): it closes, and acts again.
    got = evaluate(
        ruleset,
        {"fault": nodes("n05")},
        state,
        900.0,
        recover_results={"fault": nodes("n00")},
        cluster=TWENTY,
    )
    assert [short(d) for d in got] == ["recover fault node=n00", "act fault node=n05"]
    assert not state.breaker_open
    assert [n.reason for n in state.notes if n.kind == "breaker"] == [
        "closed: 10m passed and 2 nodes want remediation, within maxUnhealthyNodes 10% of "
        "20 established nodes"
    ]


def test_dry_run_marks_decisions_and_counts_like_a_real_run() -> None:
    ruleset = RuleSet(rules=(rule(cooldown=600),))
    state = EngineState()
    got = evaluate(ruleset, {"r": nodes("n1")}, state, 0.0, dry_run=True)
    assert [(short(d), d.dry_run) for d in got] == [("act r node=n1", True)]
    assert evaluate(ruleset, {"r": nodes("n1")}, state, 60.0, dry_run=True) == []
    assert evaluate(ruleset, {"r": Vector(())}, state, 120.0, dry_run=True) == []
    assert evaluate(ruleset, {"r": nodes("n1")}, state, 180.0, dry_run=True) == []
    got = evaluate(ruleset, {"r": nodes("n1")}, state, 600.0)
    assert [(short(d), d.dry_run) for d in got] == [("act r node=n1", False)]


def test_decision_records_the_cause() -> None:
    ruleset = RuleSet(rules=(rule(target="device", action="migrate_jobs", for_=30),))
    state = EngineState()
    sample = {"__name__": "x", "node": "n1", "device": "nvidia0", "severity": "fatal"}
    evaluate(ruleset, {"r": vec(sample, value=3)}, state, 100.0)
    (d,) = evaluate(ruleset, {"r": vec(sample, value=4)}, state, 130.0)
    assert d == Decision(
        rule="r",
        kind="act",
        action="migrate_jobs",
        params={"reason": "r"},
        target={"node": "n1", "device": "nvidia0"},
        sample_labels=labels_of(sample),
        sample_value=4.0,
        at=130.0,
        dry_run=False,
        reason="condition held for 30s (for: 30s)",
    )


def test_notes_say_why_nothing_happened() -> None:
    ruleset = RuleSet(rules=(rule("a", target="device", cooldown=60, recover_for=0), rule("b")))
    state = EngineState()
    dev = {"node": "n1", "device": "d"}
    evaluate(ruleset, {"a": vec(dev)}, state, 0.0)
    evaluate(ruleset, {"a": vec(dev, {"node": "n2"}), "b": Unknown("timeout")}, state, 15.0)
    assert [(n.rule, n.kind, n.reason, dict(n.labels)) for n in state.notes] == [
        ("a", "unknown", "recover: no result was given", {}),
        (
            "a",
            "skipped",
            "expr: the sample has no device label; a device target is named by node, device",
            {"node": "n2"},
        ),
        ("b", "unknown", "expr: timeout", {}),
    ]
    got = evaluate(ruleset, {"a": Vector(())}, state, 30.0, recover_results={"a": vec(dev)})
    assert [short(d) for d in got] == ["recover a device=d,node=n1"]
    evaluate(ruleset, {"a": vec(dev), "b": Vector(())}, state, 45.0)
    assert [(n.rule, n.kind, n.reason) for n in state.notes] == [
        ("a", "held", "cooldown: acted at 0, cooldown 1m ends at 60"),
    ]
    assert [short(d) for d in evaluate(ruleset, {"a": vec(dev)}, state, 60.0)] == [
        "act a device=d,node=n1"
    ]


def test_a_rule_that_leaves_the_rule_set_takes_its_state_with_it() -> None:
    state = EngineState()
    evaluate(RuleSet(rules=(rule("a", recover_for=0), rule("b", for_=60))),
             {"a": nodes("n1"), "b": nodes("n1")}, state, 0.0)  # fmt: skip
    assert state.active_counts() == {"a": 1}
    assert state.pending_counts() == {"b": 1}
    evaluate(RuleSet(rules=(rule("c"),)), {}, state, 15.0)
    assert state.active == {} and state.pending == {} and state.last_acted == {}
    assert [(n.rule, n.kind) for n in state.notes] == [("a", "dropped"), ("c", "unknown")]


def test_release_forgets_an_active_target_but_not_its_cooldown() -> None:
    ruleset = RuleSet(rules=(rule(cooldown=600, recover_for=0),))
    state = EngineState()
    evaluate(ruleset, {"r": nodes("n1")}, state, 0.0)
    assert state.release("r", {"node": "n1"}) is True
    assert state.release("r", {"node": "n1"}) is False
    assert evaluate(ruleset, {"r": nodes("n1")}, state, 60.0) == []
    # The incident it acted in stays handled; a new one acts after the cooldown.
    assert evaluate(ruleset, {"r": Vector(())}, state, 120.0) == []
    assert evaluate(ruleset, {"r": nodes("n1")}, state, 180.0) == []
    assert [short(d) for d in evaluate(ruleset, {"r": nodes("n1")}, state, 600.0)] == [
        "act r node=n1"
    ]


def test_state_json_round_trip() -> None:
    ruleset = RuleSet(
        limits=Limits(max_unhealthy_ratio=0.1, breaker_reset="manual"),
        rules=(
            rule("fault", action="migrate_jobs", recover_for=0, cooldown=900),
            rule("slow", for_=600, recover_for=60),
            rule("p", target="pod", cooldown=900),
        ),
    )
    state = EngineState()
    for at in (0.0, 15.0, 30.0):
        results: dict[str, QueryResult] = {
            "fault": nodes(*N[:10]),
            "slow": nodes("n19"),
            "p": vec({"namespace": "ns", "pod": "p", "node": "n18"}),
        }
        state.record(evaluate(ruleset, results, state, at, cluster=TWENTY, dry_run=True))
    assert state.breaker_open and state.pending and state.active and state.last_acted
    assert state.decisions and state.notes and state.actions
    doc = json.loads(json.dumps(state.to_json()))
    again = EngineState.from_json(doc)
    assert again == state
    assert again.to_json() == doc
    # A restored state decides as the original does.
    for s in (state, again):
        reset_breaker(s, 40.0)
    a = evaluate(ruleset, {"fault": nodes("n05")}, state, 45.0, cluster=TWENTY)
    b = evaluate(ruleset, {"fault": nodes("n05")}, again, 45.0, cluster=TWENTY)
    assert a == b


def test_decision_log_keeps_the_last_thousand() -> None:
    ruleset = RuleSet(rules=(rule(),))
    state = EngineState()
    for i in range(1005):
        state.record(evaluate(ruleset, {"r": nodes(f"n{i}")}, state, float(i)))
    assert len(state.decisions) == 1000
    assert state.decisions[0].target == {"node": "n5"}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (15, "15s"), (330, "5m30s"), (3600, "1h"), (93_600, "1d2h"), (1.5, "1.5s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("limits", "cluster", "allowed"),
    [
        (Limits(), TWENTY, None),
        (Limits(max_unhealthy_nodes=3), None, 3),
        (Limits(max_unhealthy_ratio=0.1), TWENTY, 2),
        # A share is rounded up, like a PodDisruptionBudget's maxUnavailable.
        (Limits(max_unhealthy_ratio=0.1), ClusterInfo(frozenset(N[:5])), 1),
        (Limits(max_unhealthy_ratio=0.07), ClusterInfo(frozenset(f"x{i}" for i in range(100))), 7),
        (Limits(max_unhealthy_ratio=0.0), TWENTY, 0),
        # Nodes in their scale-up grace are not part of the cluster the share is of.
        (Limits(max_unhealthy_ratio=0.1), SCALED_UP, 1),
        (Limits(max_unhealthy_nodes=1, max_unhealthy_ratio=0.5), TWENTY, 1),
    ],
)
def test_allowed_unhealthy(
    limits: Limits, cluster: ClusterInfo | None, allowed: int | None
) -> None:
    assert allowed_unhealthy(limits, cluster, 60.0) == allowed


def test_a_share_needs_the_cluster_size() -> None:
    with pytest.raises(SizeUnknown):
        allowed_unhealthy(Limits(max_unhealthy_ratio=0.1), None, 0.0)
