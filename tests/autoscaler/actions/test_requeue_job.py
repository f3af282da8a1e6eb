"""``requeue_job`` on its own, through the real ``kubernetes`` client against the fake
API server: which pods it restarts, how ``maxRequeues`` and ``backoff`` stop it, the
``accel-fleet.io/requeues`` record on the Job, and the Events it leaves.

The action's docstring is the spec; each test names the promise it holds it to.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from accel_common.names import REQUEUES_ANNOTATION as REQUEUES
from autoscaler.actions import requeue_job
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import iso
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import Obj, events, job, node, pod

pytestmark = pytest.mark.timeout(60)

NOW = 1_800_000_000.0


def decide(target: dict[str, str], *, kind: str = "act", reason: str = "", **raw: Any) -> Decision:
    params, problems = requeue_job.validate(raw)
    assert not problems, problems
    return Decision(
        rule="job-timeout",
        kind=kind,  # type: ignore[arg-type]
        action=requeue_job.NAME,
        params=params,
        target=target,
        sample_labels=(),
        sample_value=1.0,
        at=0.0,
        reason=reason,
    )


def ctx(kube: Any, now: list[float] | None = None, **kw: Any) -> ActionContext:
    clock = now if now is not None else [NOW]
    kw.setdefault("retry_interval", 0.01)
    return ActionContext(kube=kube, replica="test-replica", clock=lambda: clock[0], **kw)


async def run(c: ActionContext, d: Decision) -> Outcome:
    return await requeue_job.execute(c, d)


def record(api: FakeApiServer, name: str = "train") -> dict[str, Any]:
    stored = api.get("jobs", "ml", name)
    assert stored is not None
    raw = (stored["metadata"].get("annotations") or {}).get(REQUEUES)
    return dict(json.loads(raw)) if raw else {}


def annotated_job(name: str, rec: dict[str, Any]) -> Obj:
    j = job(name)
    j["metadata"]["annotations"] = {REQUEUES: json.dumps(rec)}
    return j


def target(name: str) -> dict[str, str]:
    return {"namespace": "ml", "pod": name}


# -- parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "params", "problems"),
    [
        ({}, {"maxRequeues": 3, "backoff": 60.0, "maxBackoff": 3600.0, "via": "delete"}, []),
        (
            {"maxRequeues": 0, "backoff": "5m", "maxBackoff": "30m", "via": "suspend"},
            {"maxRequeues": 0, "backoff": 300.0, "maxBackoff": 1800.0, "via": "suspend"},
            [],
        ),
        (
            {"backoff": "2h"},
            {"maxRequeues": 3, "backoff": 7200.0, "maxBackoff": 7200.0, "via": "delete"},
            [],
        ),
        ({"backoff": "5m", "maxBackoff": "1m"}, None, ["maxBackoff"]),
        ({"maxBackoff": "soon"}, None, ["maxBackoff"]),
        ({"maxRequeues": -1}, None, ["maxRequeues"]),
        ({"maxRequeues": 1.5}, None, ["maxRequeues"]),
        ({"backoff": 60}, None, ["backoff"]),
        ({"via": "evict"}, None, ["via"]),
        (
            {"maxRequeues": -1, "via": "evict", "backoff": "soon"},
            None,
            ["maxRequeues", "backoff", "via"],
        ),
        ({"retries": 3}, None, ["retries"]),
    ],
    ids=[
        "defaults",
        "every parameter given",
        "a backoff past the default cap raises the cap",
        "a cap below the backoff is refused",
        "a cap without a unit is refused",
        "a negative maxRequeues is refused",
        "a fractional maxRequeues is refused",
        "a backoff without a unit is refused",
        "via names only delete or suspend",
        "every problem is reported, not only the first",
        "an unknown parameter is refused",
    ],
)
def test_parameters(
    raw: dict[str, Any], params: dict[str, Any] | None, problems: list[str]
) -> None:
    got, found = requeue_job.validate(raw)
    assert sorted(p.param or "" for p in found) == sorted(problems), found
    if params is not None:
        assert got == params


# -- what is requeued, and what is left alone ------------------------------------------


async def test_recover_has_nothing_to_undo(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    outcome = await run(ctx(kube), decide(target("train-0"), kind="recover"))
    assert outcome.status == "skipped"
    assert "nothing to undo" in outcome.message
    assert api.get("pods", "ml", "train-0") is not None
    assert not api.requests_for("PATCH", r"/jobs/")


@pytest.mark.parametrize(
    ("tgt", "status", "words"),
    [
        ({"pod": "train-0"}, "failed", "names no namespace and pod"),
        ({"namespace": "ml"}, "failed", "names no namespace and pod"),
        ({"namespace": "ml", "pod": "gone-0"}, "skipped", "gone already"),
    ],
    ids=["no namespace", "no pod", "a pod that is gone already"],
)
async def test_a_target_that_names_no_pod_deletes_nothing(
    api: FakeApiServer, kube: ClientKube, tgt: dict[str, str], status: str, words: str
) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    outcome = await run(ctx(kube), decide(tgt))
    assert outcome.status == status
    assert words in outcome.message
    assert api.get("pods", "ml", "train-0") is not None
    assert record(api) == {}


@pytest.mark.parametrize(
    ("owner", "what"),
    [
        ("ReplicaSet", "ReplicaSet train-0-owner"),
        ("StatefulSet", "StatefulSet train-0-owner"),
        ("DaemonSet", "DaemonSet train-0-owner"),
        (None, "no owner"),
    ],
    ids=["a Deployment's pod", "a StatefulSet's pod", "a DaemonSet's pod", "a bare pod"],
)
async def test_only_job_pods_are_requeued(
    api: FakeApiServer, kube: ClientKube, owner: str | None, what: str
) -> None:
    api.add(node("n1"))
    api.add(pod("train-0", "n1", owner=owner))
    outcome = await run(ctx(kube), decide(target("train-0")))
    assert outcome.status == "skipped"
    assert what in outcome.message
    assert api.get("pods", "ml", "train-0") is not None
    assert not api.requests_for("DELETE", r"/pods/")
    (skipped,) = events(api, "RequeueSkipped")
    assert skipped["type"] == "Warning"
    assert skipped["involvedObject"]["kind"] == "Pod"
    assert skipped["involvedObject"]["name"] == "train-0"


async def test_a_job_that_is_gone_is_skipped(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    outcome = await run(ctx(kube), decide(target("train-0")))
    assert outcome.status == "skipped"
    assert "job ml/train is gone" in outcome.message
    assert api.get("pods", "ml", "train-0") is not None


# -- the record on the Job, then the delete ---------------------------------------------


async def test_the_attempt_is_recorded_on_the_job_before_the_pod_is_deleted(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    stored = api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    uid = stored["metadata"]["uid"]
    d = decide(target("train-0"), reason="running for 2h (timeout 1h)")
    outcome = await run(ctx(kube), d)

    assert outcome.status == "done", outcome.message
    assert outcome.details == {"attempt": 1, "resumed": False}
    assert api.get("pods", "ml", "train-0") is None
    assert record(api) == {"count": 1, "last": iso(NOW), "pods": [uid]}

    # The record is written conditionally on the Job's resourceVersion, and first.
    (patch,) = api.requests_for("PATCH", r"/namespaces/ml/jobs/train$")
    assert patch.body["metadata"]["resourceVersion"]
    (delete,) = api.requests_for("DELETE", r"/namespaces/ml/pods/train-0$")
    assert patch.time <= delete.time
    assert api.requests.index(patch) < api.requests.index(delete)
    # The pod's uid is a precondition: a retry never deletes its replacement.
    assert delete.body["preconditions"]["uid"] == uid

    (requeued,) = events(api, "Requeued")
    assert requeued["type"] == "Normal"
    assert requeued["involvedObject"]["kind"] == "Job"
    assert requeued["involvedObject"]["name"] == "train"
    assert "attempt 1 of 3" in requeued["message"]
    assert "deleted the pod" in requeued["message"]
    assert "running for 2h (timeout 1h)" in requeued["message"]


async def test_a_job_that_changed_meanwhile_is_read_again_and_counted_once(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    api.faults.fail(2, status=409, method="PATCH", path_regex=r"/jobs/train$")
    outcome = await run(ctx(kube), decide(target("train-0")))
    assert outcome.status == "done", outcome.message
    assert record(api)["count"] == 1
    assert len(api.requests_for("GET", r"/namespaces/ml/jobs/train$")) == 3


async def test_a_job_that_keeps_changing_fails_without_deleting(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    api.faults.fail(8, status=409, method="PATCH", path_regex=r"/jobs/train$")
    outcome = await run(ctx(kube), decide(target("train-0")))
    assert outcome.status == "unknown"
    assert "kept changing" in outcome.message
    assert api.get("pods", "ml", "train-0") is not None
    assert record(api) == {}


async def test_a_retried_requeue_finishes_without_counting_again(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The first attempt recorded the pod and then could not delete it (a 403 here; a
    restart does the same): the retry finishes that requeue, even at the limit."""
    api.add(node("n1"))
    api.add(job("train"))
    uid = api.add(pod("train-0", "n1", owner="Job", owner_name="train"))["metadata"]["uid"]
    api.faults.fail(1, status=403, method="DELETE")
    d = decide(target("train-0"), maxRequeues=1)
    first = await run(ctx(kube), d)
    assert first.status == "unknown"
    assert api.get("pods", "ml", "train-0") is not None
    assert record(api)["count"] == 1

    again = await run(ctx(kube, now=[NOW + 1]), d)
    assert again.status == "done", again.message
    assert again.details == {"attempt": 1, "resumed": True}
    assert api.get("pods", "ml", "train-0") is None
    assert record(api) == {"count": 1, "last": iso(NOW), "pods": [uid]}
    assert not events(api, "RequeueLimitReached")


async def test_the_record_keeps_the_last_twenty_pods(api: FakeApiServer, kube: ClientKube) -> None:
    old = [f"uid-{i}" for i in range(20)]
    api.add(node("n1"))
    api.add(annotated_job("train", {"count": 20, "last": iso(NOW - 3600), "pods": old}))
    uid = api.add(pod("train-20", "n1", owner="Job", owner_name="train"))["metadata"]["uid"]
    outcome = await run(ctx(kube), decide(target("train-20"), maxRequeues=100))
    assert outcome.status == "done", outcome.message
    rec = record(api)
    assert rec["count"] == 21
    assert rec["pods"] == [*old[1:], uid]


# -- maxRequeues and backoff -------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One requeue of a fresh pod of the Job ``train``, ``at`` seconds after NOW."""

    at: float
    status: str
    count: int
    limit_event: bool = False


@dataclass(frozen=True)
class LimitCase:
    description: str
    params: dict[str, Any]
    attempts: tuple[Attempt, ...]
    start: dict[str, Any] = field(default_factory=dict)


LIMIT_CASES = [
    LimitCase(
        "maxRequeues attempts, then nothing but a RequeueLimitReached Event",
        {"maxRequeues": 2, "backoff": "0s"},
        (
            Attempt(0, "done", 1),
            Attempt(1, "done", 2),
            Attempt(2, "skipped", 2, limit_event=True),
            Attempt(3, "skipped", 2, limit_event=True),
        ),
    ),
    LimitCase(
        "maxRequeues 0 never requeues",
        {"maxRequeues": 0},
        (Attempt(0, "skipped", 0, limit_event=True),),
    ),
    LimitCase(
        "a requeue within backoff of the last one is skipped, without a limit Event",
        {"maxRequeues": 5, "backoff": "1m"},
        (
            Attempt(0, "done", 1),
            Attempt(30, "skipped", 1),
            Attempt(59, "skipped", 1),
            Attempt(60, "done", 2),
        ),
    ),
    LimitCase(
        "the backoff doubles after each requeue (Kueue's base x 2^(n-1))",
        {"maxRequeues": 10, "backoff": "1m"},
        (
            Attempt(0, "done", 1),
            Attempt(60, "done", 2),  # 1m after the first
            Attempt(60 + 119, "skipped", 2),
            Attempt(60 + 120, "done", 3),  # 2m after the second
            Attempt(180 + 239, "skipped", 3),
            Attempt(180 + 240, "done", 4),  # 4m after the third
            Attempt(420 + 479, "skipped", 4),
            Attempt(420 + 480, "done", 5),  # 8m after the fourth
        ),
    ),
    LimitCase(
        "the doubled backoff stops at maxBackoff",
        {"maxRequeues": 10, "backoff": "1m", "maxBackoff": "3m"},
        (
            Attempt(0, "done", 2),  # 1m after the first
            Attempt(119, "skipped", 2),
            Attempt(120, "done", 3),  # 2m after the second
            Attempt(120 + 179, "skipped", 3),  # 4m would be next: capped at 3m
            Attempt(120 + 180, "done", 4),
            Attempt(300 + 180, "done", 5),  # and it stays there
        ),
        start={"count": 1, "last": iso(NOW - 60), "pods": ["uid-earlier"]},
    ),
    LimitCase(
        "the length of the backoff comes from the count recorded on the Job",
        {"maxRequeues": 40, "backoff": "1m"},
        (Attempt(0, "skipped", 30), Attempt(3599, "skipped", 30), Attempt(3600, "done", 31)),
        start={"count": 30, "last": iso(NOW), "pods": ["uid-earlier"]},
    ),
    LimitCase(
        "backoff runs from the last requeue recorded on the Job, by whoever",
        {"maxRequeues": 5, "backoff": "10m"},
        (Attempt(0, "skipped", 1), Attempt(300, "done", 2)),
        start={"count": 1, "last": iso(NOW - 300), "pods": ["uid-earlier"]},
    ),
    LimitCase(
        "the limit counts what is recorded on the Job, not what this replica did",
        {"maxRequeues": 3, "backoff": "0s"},
        (Attempt(0, "skipped", 3, limit_event=True),),
        start={"count": 3, "last": iso(NOW - 60), "pods": ["a", "b", "c"]},
    ),
]


@pytest.mark.parametrize("case", LIMIT_CASES, ids=[c.description for c in LIMIT_CASES])
async def test_limits(api: FakeApiServer, kube: ClientKube, case: LimitCase) -> None:
    api.add(node("n1"))
    if case.start:
        api.add(annotated_job("train", case.start))
    else:
        api.add(job("train"))
    now = [NOW]
    limit_events = 0
    for i, a in enumerate(case.attempts):
        name = f"train-{i}"
        api.add(pod(name, "n1", owner="Job", owner_name="train"))
        now[0] = NOW + a.at
        outcome = await run(ctx(kube, now=now), decide(target(name), **case.params))
        where = f"attempt {i} at +{a.at:g}s: {outcome.message}"
        assert outcome.status == a.status, where
        assert (api.get("pods", "ml", name) is None) == (a.status == "done"), where
        assert record(api).get("count", 0) == a.count, where
        limit_events += a.limit_event
        assert len(events(api, "RequeueLimitReached")) == limit_events, where
        if a.status == "skipped":
            assert outcome.details == {"limit": a.limit_event}, where
    for e in events(api, "RequeueLimitReached"):
        assert e["type"] == "Warning"
        assert e["involvedObject"]["kind"] == "Job"
        assert e["involvedObject"]["name"] == "train"


async def test_an_unreadable_record_is_unknown_and_nothing_is_requeued(
    api: FakeApiServer, kube: ClientKube
) -> None:
    # Read as "never requeued", it would lift maxRequeues and the backoff (issue 27).
    api.add(node("n1"))
    j = job("train")
    j["metadata"]["annotations"] = {REQUEUES: "{not json"}
    api.add(j)
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    assert requeue_job.SPEC.execute is not None
    outcome = await requeue_job.SPEC.execute(ctx(kube), decide(target("train-0"), maxRequeues=1))
    assert outcome.status == "unknown", outcome.message
    assert outcome.details["unknown"] == "requeue record"
    assert "job ml/train annotation accel-fleet.io/requeues" in outcome.message
    assert api.get("pods", "ml", "train-0") is not None
    stored = api.get("jobs", "ml", "train")
    assert stored is not None and stored["metadata"]["annotations"][REQUEUES] == "{not json"


# -- via: suspend ------------------------------------------------------------------------


def sleeper(
    on_sleep: Callable[[int], None],
) -> tuple[list[float], Callable[[float], Awaitable[None]]]:
    """An injected ``ctx.sleep`` that returns at once and tells the test each time."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        on_sleep(len(slept))

    return slept, sleep


def active_job(name: str, active: int) -> Obj:
    j = job(name)
    j["status"] = {"active": active}
    return j


def suspends(api: FakeApiServer, name: str = "train") -> list[bool]:
    bodies = [r.body or {} for r in api.requests_for("PATCH", rf"/jobs/{name}$")]
    return [b["spec"]["suspend"] for b in bodies if "spec" in b]


async def test_suspend_waits_for_the_pods_to_go_then_resumes(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(active_job("train", 1))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))

    def job_controller(n: int) -> None:
        # The Job controller removes the suspended Job's pods on the second wait.
        if n == 2:
            stored = api.get("jobs", "ml", "train")
            assert stored is not None
            stored["status"] = {"active": 0}
            api.add(stored)
            api.remove("pods", "ml", "train-0")

    slept, sleep = sleeper(job_controller)
    c = ctx(kube, sleep=sleep, retry_interval=5.0)
    outcome = await run(c, decide(target("train-0"), via="suspend"))
    assert outcome.status == "done", outcome.message
    assert suspends(api) == [True, False]
    assert slept == [5.0, 5.0]
    # The pods went through the Job's suspension, not through a delete of ours.
    assert not api.requests_for("DELETE", r"/pods/")
    assert record(api)["count"] == 1
    (requeued,) = events(api, "Requeued")
    assert "suspended and resumed the job" in requeued["message"]


@pytest.mark.parametrize(
    ("leading", "dry_run", "sleeps"),
    [(True, False, 3), (False, False, 0), (True, True, 0)],
    ids=[
        "pods that never go: resumed after SUSPEND_WAIT",
        "a replica that lost its Lease resumes at once",
        "a dry run does not wait",
    ],
)
async def test_suspend_always_resumes_the_job(
    api: FakeApiServer, kube: ClientKube, leading: bool, dry_run: bool, sleeps: int
) -> None:
    api.add(node("n1"))
    api.add(active_job("train", 1))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))
    slept, sleep = sleeper(lambda n: None)
    c = ctx(
        kube,
        sleep=sleep,
        retry_interval=requeue_job.SUSPEND_WAIT / 3,
        leading=lambda: leading,
        dry_run=dry_run,
    )
    outcome = await run(c, decide(target("train-0"), via="suspend"))
    assert outcome.status == "done", outcome.message
    assert len(slept) == sleeps
    assert suspends(api) == [True, False]
