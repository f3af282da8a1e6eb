"""The executor on its own: one task per decision, serialised per target, every
outcome counted and kept, dry-run carried to the action, and in-flight work stopped
and resumed from the node annotations.

Two kinds of action run here. The real ones (cordon, drain) go through the real
``kubernetes`` client to the fake API server. A ``probe`` action, registered in the
action registry for one test, waits on a gate the test opens and says what context
it ran with: the executor's ordering can only be seen from inside an action.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from accel_common.names import REMEDIATION_ANNOTATION
from autoscaler.actions import ACTIONS
from autoscaler.actions.base import ActionSpec, ParamProblem
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import iso
from autoscaler.decision import Decision
from autoscaler.executor import HISTORY, STATUSES, Executor, serial_key
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Vector
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import Obj, evictions, node, pdb, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)

NOW = 1_800_000_000.0


def decision(
    action: str,
    target: dict[str, str],
    *,
    rule: str = "r",
    kind: str = "act",
    dry_run: bool = False,
    **params: Any,
) -> Decision:
    return Decision(
        rule=rule,
        kind=kind,  # type: ignore[arg-type]
        action=action,
        params=params,
        target=target,
        sample_labels=(),
        sample_value=1.0,
        at=NOW,
        dry_run=dry_run,
    )


def real(action: str, target: dict[str, str], **kw: Any) -> Decision:
    """A decision for a registered action, with its validated parameters."""
    raw = kw.pop("raw", {})
    params, problems = ACTIONS[action].validate(raw)
    assert not problems, problems
    return decision(action, target, **kw, **params)


def context(kube: Any, **kw: Any) -> ActionContext:
    kw.setdefault("retry_interval", 0.05)
    kw.setdefault("replica", "first")
    kw.setdefault("clock", lambda: NOW)
    return ActionContext(kube=kube, **kw)


def remediation(api: FakeApiServer, name: str) -> dict[str, Any]:
    n = api.get("nodes", None, name)
    assert n is not None
    raw = (n["metadata"].get("annotations") or {}).get(REMEDIATION_ANNOTATION)
    return dict(json.loads(raw)) if raw else {}


# -- the probe action --------------------------------------------------------------------


@dataclass
class Probe:
    """An action that says when it starts and ends, waits on ``gates[name]`` when the
    test set one, and does what its parameters ask: read a node, raise, or report a
    status. ``seen`` keeps the context each decision ran with."""

    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    seen: dict[str, ActionContext] = field(default_factory=dict)

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def execute(self, ctx: ActionContext, d: Decision) -> Outcome:
        name = str(d.params["name"])
        self.seen[name] = ctx
        self.log.append(f"start {name}")
        if name in self.gates:
            await self.gates[name].wait()
        if "pause" in d.params:
            await asyncio.sleep(float(d.params["pause"]))
        if "read" in d.params:
            await ctx.kube.get_node(str(d.params["read"]))
        if "raise" in d.params:
            raise ValueError(str(d.params["raise"]))
        self.log.append(f"end {name}")
        return Outcome(d.params.get("status", "done"), f"probe {name}")


def _no_problems(raw: Any) -> tuple[dict[str, Any], list[ParamProblem]]:
    return dict(raw), []


@dataclass(frozen=True)
class _NoParams:
    pass


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[Probe]:
    p = Probe()
    targets = ("node", "device", "pod", "pool")
    spec = ActionSpec("probe", targets, False, _NoParams, _no_problems, execute=p.execute)
    monkeypatch.setitem(ACTIONS, "probe", spec)
    yield p


def probe_decision(name: str, target: dict[str, str], **kw: Any) -> Decision:
    return decision("probe", target, name=name, **kw)


# -- which decisions wait for which ----------------------------------------------------


@pytest.mark.parametrize(
    ("target", "key"),
    [
        ({"node": "n1"}, ("node", "n1")),
        ({"node": "n1", "device": "nvidia3"}, ("node", "n1")),
        ({"namespace": "ml", "pod": "p", "node": "n1"}, ("node", "n1")),
        ({"namespace": "ml", "pod": "p"}, ("pod", "ml", "p")),
        ({"pod": "p"}, ("pod", "", "p")),
        ({"pool": "big"}, ("pool", "big")),
        ({"zone": "b", "rack": "7"}, ("target", "rack=7", "zone=b")),
    ],
    ids=[
        "a node",
        "a device waits with its node",
        "a pod target that names its node waits with the node",
        "a pod",
        "a pod without namespace",
        "a pool",
        "anything else by all its labels",
    ],
)
def test_serial_key(target: dict[str, str], key: tuple[str, ...]) -> None:
    assert serial_key(decision("cordon", target)) == key


async def test_one_task_per_decision_in_order_per_target_side_by_side_across_targets(
    kube: ClientKube, probe: Probe
) -> None:
    ex = Executor(context(kube))
    probe.gate("n1-first")
    probe.gate("n2")
    tasks = [
        ex.submit(probe_decision("n1-first", {"node": "n1"})),
        ex.submit(probe_decision("n2", {"node": "n2"})),
        ex.submit(probe_decision("n1-device", {"node": "n1", "device": "nvidia0"})),
        ex.submit(probe_decision("pod", {"namespace": "ml", "pod": "p"})),
        ex.submit(probe_decision("n1-last", {"node": "n1"})),
    ]
    assert len({id(t) for t in tasks}) == 5

    # Different targets run side by side; the second decision about n1 waits.
    await until(lambda: "end pod" in probe.log and "start n2" in probe.log)
    assert "start n1-first" in probe.log
    assert "start n1-device" not in probe.log
    assert ex.in_flight == 4

    # n2 finishing releases nothing on n1.
    probe.gates["n2"].set()
    await asyncio.wait_for(tasks[1], 20)  # n2 ended, and the executor heard it end
    await asyncio.sleep(0)  # one more turn: whatever its end scheduled has run
    assert "end n2" in probe.log
    assert "start n1-device" not in probe.log
    assert ex.in_flight == 3

    probe.gates["n1-first"].set()
    await ex.wait(5)
    assert ex.in_flight == 0
    on_n1 = [line for line in probe.log if "n1" in line]
    assert on_n1 == [
        "start n1-first",
        "end n1-first",
        "start n1-device",
        "end n1-device",
        "start n1-last",
        "end n1-last",
    ]
    assert [r.decision.params["name"] for r in ex.history] == [
        "pod",
        "n2",
        "n1-first",
        "n1-device",
        "n1-last",
    ]


async def test_act_then_recover_on_one_node_run_in_that_order(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """With the real cordon action: had the recover run beside the act, it would have
    found nothing to undo and left the node cordoned."""
    api.add(node("n1"))
    ex = Executor(context(kube))
    ex.submit(real("cordon", {"node": "n1"}, rule="flaky"))
    ex.submit(real("cordon", {"node": "n1"}, rule="flaky", kind="recover"))
    await ex.wait(10)
    assert [(r.decision.kind, r.outcome.status) for r in ex.history] == [
        ("act", "done"),
        ("recover", "done"),
    ]
    n = api.get("nodes", None, "n1")
    assert n is not None and not n["spec"].get("unschedulable")
    assert remediation(api, "n1") == {}


# -- failures and outcomes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("failing", "message"),
    [
        (
            probe_decision("boom", {"node": "n1"}, rule="bad", **{"raise": "boom"}),
            "ValueError: boom",
        ),
        (
            probe_decision("api", {"node": "n1"}, rule="bad", read="no-such-node"),
            "Kubernetes API: ",
        ),
        (decision("no_such_action", {"node": "n1"}, rule="bad"), "action no_such_action cannot"),
        (decision("unfinished", {"node": "n1"}, rule="bad"), "action unfinished cannot"),
    ],
    ids=[
        "an action that raises",
        "an API error the action lets through",
        "an action the registry does not know",
        "an action without its execute step",
    ],
)
async def test_a_failure_is_an_outcome_and_the_next_decision_still_runs(
    api: FakeApiServer,
    kube: ClientKube,
    probe: Probe,
    monkeypatch: pytest.MonkeyPatch,
    failing: Decision,
    message: str,
) -> None:
    monkeypatch.setitem(
        ACTIONS, "unfinished", ActionSpec("unfinished", ("node",), False, _NoParams, _no_problems)
    )
    ex = Executor(context(kube))
    first = ex.submit(failing)
    ex.submit(probe_decision("next", {"node": "n1"}, rule="good"))
    await ex.wait(10)
    assert first.exception() is None
    bad, good = ex.history
    assert bad.outcome.status == "unknown"
    assert bad.outcome.message.startswith(message), bad.outcome.message
    assert good.outcome.status == "done"
    assert ex.outcomes == {
        ("bad", failing.action, "unknown"): 1,
        ("good", "probe", "done"): 1,
    }


async def test_every_outcome_is_counted_timed_and_kept(
    api: FakeApiServer, kube: ClientKube, probe: Probe
) -> None:
    api.add(node("n1"))
    ex = Executor(context(kube))
    for i, status in enumerate(STATUSES):
        ex.submit(probe_decision(status, {"node": f"n{i}"}, rule=status, status=status))
    ex.submit(probe_decision("caller", {"pool": "p"}, rule="caller", pause=0.05, read="n1"))
    await ex.wait(10)

    assert set(STATUSES) == {"done", "partial", "skipped", "failed", "unknown"}
    assert ex.outcomes == {
        **{(s, "probe", s): 1 for s in STATUSES},
        ("caller", "probe", "done"): 1,
    }
    by_rule = {r.decision.rule: r for r in ex.history}
    assert {rule: r.outcome.status for rule, r in by_rule.items()} == {
        **{s: s for s in STATUSES},
        "caller": "done",
    }
    # Time to the first API call is known only for a decision that made one, and it
    # counts from submission: the probe paused 50 ms before its call.
    caller = by_rule["caller"]
    assert caller.first_call is not None
    assert 0.05 <= caller.first_call <= caller.duration
    assert all(by_rule[s].first_call is None for s in STATUSES)
    assert list(ex.first_call_seconds) == [caller.first_call]
    assert len(ex.duration_seconds["probe"]) == len(STATUSES) + 1
    assert caller.started == NOW

    doc = caller.as_json()
    assert doc == {
        "decision": caller.decision.as_json(),
        "outcome": {"status": "done", "message": "probe caller", "details": {}},
        "started": NOW,
        "firstCallSeconds": caller.first_call,
        "durationSeconds": caller.duration,
    }


async def test_the_history_keeps_the_last_500(kube: ClientKube, probe: Probe) -> None:
    ex = Executor(context(kube))
    for i in range(HISTORY + 5):
        ex.submit(probe_decision(f"p{i}", {"node": f"n{i}"}, rule=f"r{i}"))
    await ex.wait(30)
    assert HISTORY == 500
    assert len(ex.history) == HISTORY
    assert {r.decision.rule for r in ex.history} == {f"r{i}" for i in range(5, HISTORY + 5)}
    assert len(ex.duration_seconds["probe"]) == HISTORY
    # The counters are totals, not a window.
    assert sum(ex.outcomes.values()) == HISTORY + 5


# -- dry run and the context ------------------------------------------------------------


@pytest.mark.parametrize(
    ("controller_dry_run", "decision_dry_run", "action_dry_run"),
    [(False, False, False), (False, True, True), (True, False, True), (True, True, True)],
    ids=[
        "a real run",
        "a dry-run decision",
        "a dry-run controller",
        "both",
    ],
)
async def test_dry_run_reaches_the_action(
    kube: ClientKube,
    probe: Probe,
    caplog: pytest.LogCaptureFixture,
    controller_dry_run: bool,
    decision_dry_run: bool,
    action_dry_run: bool,
) -> None:
    ex = Executor(context(kube, dry_run=controller_dry_run))
    caplog.set_level(logging.INFO, logger="accel_autoscaler.executor")
    ex.submit(probe_decision("d", {"node": "n1"}, dry_run=decision_dry_run))
    await ex.wait(5)
    assert probe.seen["d"].dry_run is action_dry_run
    (line,) = [r.getMessage() for r in caplog.records if r.name == "accel_autoscaler.executor"]
    assert line.startswith("action probe done: rule=r target={'node': 'n1'}")
    assert ("dry-run" in line) is action_dry_run


async def test_a_dry_run_drain_makes_one_pass_instead_of_waiting(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A drain that a PodDisruptionBudget holds waits up to its drainTimeout; the same
    decision marked dry-run reports after one pass (the caller gives dry runs a Kube
    that writes nothing: here the real one, to see the pass happen)."""
    api.add(node("n1"))
    api.add(pod("guarded", "n1", owner="ReplicaSet", labels={"app": "g"}))
    api.add(pdb("g", {"app": "g"}, min_available=1))
    ex = Executor(context(kube))
    dry = ex.submit(
        real("drain", {"node": "n1"}, rule="dry", dry_run=True, raw={"drainTimeout": "10m"})
    )
    await asyncio.wait_for(dry, 10)
    (record,) = ex.history
    assert record.outcome.status == "partial", record.outcome.message

    live = ex.submit(real("drain", {"node": "n1"}, rule="live", raw={"drainTimeout": "10m"}))
    await until(lambda: len(api.requests_for("POST", r"/pods/guarded/eviction$")) >= 3)
    assert not live.done()
    await ex.stop()


async def test_the_action_runs_with_the_controllers_context(
    api: FakeApiServer, kube: ClientKube, probe: Probe
) -> None:
    async def query(expr: str, at: float) -> QueryResult:
        return Vector(())

    def leading() -> bool:
        return True

    def clock() -> float:
        return NOW + 7

    ctx = context(
        kube,
        controller="fleet-a",
        replica="fleet-a-0",
        clock=clock,
        query=query,
        retry_interval=1.5,
        leading=leading,
        event_namespace="accel-fleet",
    )
    api.add(node("n1"))
    ex = Executor(ctx)
    ex.submit(probe_decision("ctx", {"node": "n1"}, read="n1"))
    await ex.wait(5)
    seen = probe.seen["ctx"]
    assert (seen.controller, seen.replica, seen.event_namespace) == (
        "fleet-a",
        "fleet-a-0",
        "accel-fleet",
    )
    assert seen.clock is clock and seen.query is query and seen.leading is leading
    assert seen.sleep is ctx.sleep and seen.pools is ctx.pools
    assert seen.retry_interval == 1.5
    assert ex.history[0].outcome.status == "done"
    assert ex.history[0].started == NOW + 7
    # The action's Kube is the controller's, seen through the timing wrapper.
    assert (await seen.kube.get_node("n1"))["metadata"]["name"] == "n1"


# -- stop, wait and resume --------------------------------------------------------------


async def test_wait_returns_at_its_timeout_and_stop_cancels_without_an_outcome(
    kube: ClientKube, probe: Probe
) -> None:
    ex = Executor(context(kube))
    probe.gate("held")
    task = ex.submit(probe_decision("held", {"node": "n1"}))
    await ex.wait(0.05)
    assert ex.in_flight == 1 and not task.done()
    await ex.stop()
    assert task.cancelled()
    assert ex.in_flight == 0
    assert not ex.outcomes and not ex.history
    # The executor still works after a stop (a replica that leads again).
    ex.submit(probe_decision("after", {"node": "n1"}))
    await ex.wait(5)
    assert [r.decision.params["name"] for r in ex.history] == ["after"]


async def test_a_stopped_drain_is_resumed_by_the_next_leader(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(node("n2"))
    api.add(pod("guarded", "n1", owner="ReplicaSet", labels={"app": "g"}))
    api.add(pdb("g", {"app": "g"}, min_available=1))
    first = Executor(context(kube, replica="first"))
    first.submit(real("drain", {"node": "n1"}, rule="fault", raw={"drainTimeout": "10m"}))
    await until(lambda: remediation(api, "n1").get("fault", {}).get("phase") == "draining")
    await until(lambda: api.requests_for("POST", r"/pods/guarded/eviction$"))

    # Leadership lost: the task stops, the annotation keeps its in-flight phase.
    await first.stop()
    assert first.in_flight == 0 and not first.history
    entry = remediation(api, "n1")["fault"]
    assert entry["phase"] == "draining" and entry["replica"] == "first"

    # The next leader resumes it; a second replica of the workload lets it finish.
    api.add(pod("guarded-1", "n2", owner="ReplicaSet", labels={"app": "g"}))
    second = Executor(context(kube, replica="second"))
    assert await second.resume() == 1
    await second.wait(10)
    (record,) = second.history
    assert record.outcome.status == "done", record.outcome.message
    assert record.decision.target == {"node": "n1"}
    assert record.decision.reason.startswith("resuming draining started ")
    assert record.decision.reason.endswith(" by first")
    assert remediation(api, "n1")["fault"]["phase"] == "drained"
    assert evictions(api, "guarded") == 1


def annotated(name: str, entries: dict[str, Any] | str) -> Obj:
    n = node(name)
    raw = entries if isinstance(entries, str) else json.dumps(entries)
    n["metadata"]["annotations"] = {REMEDIATION_ANNOTATION: raw}
    return n


def entry(
    action: str, phase: str, controller: str = "accel-autoscaler", **kw: Any
) -> dict[str, Any]:
    params, _ = ACTIONS[action].validate({})
    return {
        "action": action,
        "phase": phase,
        "started": iso(NOW - 60),
        "controller": controller,
        "replica": "gone-0",
        "params": params,
        **kw,
    }


async def test_resume_takes_only_this_controllers_work_in_flight(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(annotated("draining", {"d": entry("drain", "draining")}))
    api.add(
        annotated(
            "migrating",
            {
                "m": entry(
                    "migrate_jobs", "migrating", target={"node": "migrating", "device": "nvidia1"}
                ),
                "c": entry("cordon", "cordoned"),
            },
        )
    )
    api.add(annotated("finished", {"d": entry("drain", "drained")}))
    api.add(annotated("theirs", {"d": entry("drain", "draining", controller="other")}))
    api.add(annotated("garbled", "{not json"))
    ex = Executor(context(kube, dry_run=True))
    assert await ex.resume() == 2
    await ex.wait(10)
    resumed = sorted((r.decision.rule, dict(r.decision.target)) for r in ex.history)
    assert resumed == [
        ("d", {"node": "draining"}),
        ("m", {"node": "migrating", "device": "nvidia1"}),
    ]
    assert all(r.decision.kind == "act" and r.decision.dry_run for r in ex.history)
    assert all(r.decision.reason.endswith(" by gone-0") for r in ex.history)


async def test_resume_with_nodes_unreadable_submits_nothing(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(annotated("draining", {"d": entry("drain", "draining")}))
    api.faults.fail(1, status=403, method="GET", path_regex=r"/nodes$")
    ex = Executor(context(kube))
    assert await ex.resume() == 0
    assert ex.in_flight == 0
