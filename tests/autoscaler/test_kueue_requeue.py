"""``requeue_job`` for a job that Kueue manages, against the fake API server with the
real client and Kueue emulated (``tests/support/fakes/kueueops.py``): one eviction
of the Workload and no pod deleted by the controller, Kueue suspends the job and
frees its quota (the next job in the queue gets it), the job waits out the backoff
and is admitted again; a replayed decision writes nothing more."""

from __future__ import annotations

from typing import Any

import pytest

from accel_common.names import GANG_RESTARTS_ANNOTATION
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.kube.kueue import QUOTA_RESERVED, is_true
from tests.autoscaler.test_kueue_queues import (
    H100,
    QUEUE,
    cluster_queue,
    flavor,
    local_queue,
    queued_job,
)
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.kueueops import KueueOperators, parse
from tests.support.kubeobjs import events, node

pytestmark = pytest.mark.timeout(60)
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def decide(target: dict[str, str], **raw: Any) -> Decision:
    params, problems = ACTIONS["requeue_job"].validate(raw)
    assert not problems, problems
    return Decision("stalled-job", "act", "requeue_job", params, target, (), 1.0, 0.0)


async def requeue(kube: Any, clock: Clock, pod: str, **raw: Any) -> Outcome:
    execute = ACTIONS["requeue_job"].execute
    assert execute is not None
    ctx = ActionContext(kube=kube, retry_interval=0.05, clock=clock)
    return await execute(ctx, decide({"namespace": "ml", "pod": pod}, **raw))


def h100_node(name: str) -> dict[str, Any]:
    n = node(name)
    n["metadata"]["labels"].update(H100)
    return n


def setup(api: FakeApiServer, clock: Clock) -> KueueOperators:
    for i in (1, 2):
        api.add(h100_node(f"n{i}"))
    api.add(flavor("h100", H100))
    api.add(cluster_queue("team-a", {"h100": 16}))
    api.add(local_queue("a", "team-a"))
    kueue = KueueOperators(api, clock)
    api.add(queued_job("train", "a", 2))
    kueue.reconcile()
    api.add(queued_job("next", "a", 2))  # waits for train's quota
    kueue.reconcile()
    return kueue


def workload(kueue: KueueOperators, api: FakeApiServer, job: str) -> dict[str, Any]:
    wl = kueue.workload_of(api.get("jobs", "ml", job) or {})
    assert wl is not None
    return wl


def pods_of(api: FakeApiServer, job: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in api.objects("pods")
        if p["metadata"]["ownerReferences"][0]["name"] == job
    )


async def test_a_stalled_kueue_job_goes_back_through_its_queue_once(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    kueue = setup(api, clock)
    running = pods_of(api, "train")
    assert len(running) == 2 and pods_of(api, "next") == []
    assert not is_true(workload(kueue, api, "next"), QUOTA_RESERVED)

    done = await requeue(kube, clock, running[0])
    assert done.status == "done", done.message
    assert done.details["eviction"] == "evicted" and done.details["attempt"] == 1
    # A replay before Kueue caught up is the same requeue: nothing more written.
    again = await requeue(kube, clock, running[0])
    assert again.status == "done" and again.details["resumed"] is True, again.message
    assert len(api.requests_for("PATCH", r"/workloads/[^/]+/status$")) == 1
    # The controller deleted and evicted no pod: Kueue moves the job.
    assert api.requests_for("DELETE", "/pods/") == []
    assert api.requests_for("POST", "/eviction$") == []
    assert [e["reason"] for e in events(api, "Requeued")] == ["Requeued"]

    wl = workload(kueue, api, "train")
    state = wl["status"]["requeueState"]
    assert state["count"] == 1 and parse(state["requeueAt"]) == T0 + 60  # backoff 1m
    kueue.reconcile()
    # Suspended, its pods gone, its quota freed: the next job in the queue runs.
    assert (api.get("jobs", "ml", "train") or {})["spec"]["suspend"] is True
    assert pods_of(api, "train") == []
    wl = workload(kueue, api, "train")
    assert not is_true(wl, QUOTA_RESERVED) and "admission" not in wl["status"]
    requeued = [c for c in wl["status"]["conditions"] if c["type"] == "Requeued"]
    assert (requeued[0]["status"], requeued[0]["reason"]) == ("False", "PodsReadyTimeout")
    assert is_true(workload(kueue, api, "next"), QUOTA_RESERVED)
    assert len(pods_of(api, "next")) == 2
    assert kueue.evictions == [(wl["metadata"]["name"], "PodsReadyTimeout")]
    # The pod the rule named is gone: a late decision finds nothing to requeue.
    late = await requeue(kube, clock, running[0])
    assert late.status == "skipped"
    assert len(api.requests_for("PATCH", r"/workloads/[^/]+/status$")) == 1


async def test_kueue_backoff_holds_the_job_then_admits_it_again(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    kueue = setup(api, clock)
    other = workload(kueue, api, "next")["metadata"]["name"]
    api.remove("jobs", "ml", "next")  # nothing else wants the quota
    api.remove("workloads", "ml", other)
    first = pods_of(api, "train")[0]
    assert (await requeue(kube, clock, first)).status == "done"
    kueue.reconcile()
    clock.now = T0 + 59
    kueue.reconcile()
    assert not is_true(workload(kueue, api, "train"), QUOTA_RESERVED)  # backing off
    clock.now = T0 + 60
    kueue.reconcile()
    wl = workload(kueue, api, "train")
    assert is_true(wl, QUOTA_RESERVED)
    requeued = [c for c in wl["status"]["conditions"] if c["type"] == "Requeued"]
    assert (requeued[0]["status"], requeued[0]["reason"]) == ("True", "BackoffFinished")
    assert len(pods_of(api, "train")) == 2

    # Stalled again: Kueue's count goes on, and the backoff doubles.
    second = await requeue(kube, clock, pods_of(api, "train")[0])
    assert second.details["attempt"] == 2
    state = workload(kueue, api, "train")["status"]["requeueState"]
    assert parse(state["requeueAt"]) == T0 + 60 + 120
    kueue.reconcile()
    clock.now = T0 + 180
    kueue.reconcile()
    # maxRequeues 2: the third stall is for a person.
    third = await requeue(kube, clock, pods_of(api, "train")[0], maxRequeues=2)
    assert third.status == "skipped" and third.details["limit"] is True
    assert len(api.requests_for("PATCH", r"/workloads/[^/]+/status$")) == 2
    assert [e["reason"] for e in events(api, "RequeueLimitReached")] == ["RequeueLimitReached"]


async def test_without_kueue_the_queue_label_changes_nothing(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A Job labelled for a queue on a cluster without Kueue is requeued the usual
    way: its pod deleted."""
    api.unserved.add("kueue.x-k8s.io")
    api.add(node("n1"))
    job = api.add(queued_job("train", "a", 1))
    api.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "train-0",
                "namespace": "ml",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "train",
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "m", "image": "train:1"}]},
            "status": {"phase": "Running"},
        }
    )
    done = await requeue(kube, Clock(), "train-0")
    assert done.status == "done", done.message
    assert len(api.requests_for("DELETE", "/pods/train-0$")) == 1


async def test_a_kueue_jobset_gang_is_requeued_through_its_workload_not_restarted(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A JobSet member's stall evicts the JobSet's Workload: no member is deleted by
    the controller and no gang restart is counted; Kueue suspends the JobSet, whose
    child Jobs and pods go, and the quota is free."""
    clock = Clock()
    for i in (1, 2):
        api.add(h100_node(f"n{i}"))
    api.add(flavor("h100", H100))
    api.add(cluster_queue("team-a", {"h100": 16}))
    api.add(local_queue("a", "team-a"))
    template = queued_job("x", "a", 1)["spec"]
    api.add(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "llm", "namespace": "ml", "labels": {QUEUE: "a"}},
            "spec": {
                "failurePolicy": {"maxRestarts": 3},
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 2,
                        "template": {"spec": {"backoffLimit": 0, "template": template["template"]}},
                    }
                ],
            },
        }
    )
    kueue = KueueOperators(api, clock)
    kueue.reconcile()
    members = sorted(p["metadata"]["name"] for p in api.objects("pods"))
    assert len(members) == 2
    done = await requeue(kube, clock, members[0])
    assert done.status == "done" and done.details["eviction"] == "evicted", done.message
    assert api.requests_for("DELETE", "/pods/") == []
    jobset = api.get("jobsets", "ml", "llm") or {}
    assert GANG_RESTARTS_ANNOTATION not in (jobset["metadata"].get("annotations") or {})
    kueue.reconcile()
    assert (api.get("jobsets", "ml", "llm") or {})["spec"]["suspend"] is True
    assert api.objects("pods") == [] and api.objects("jobs") == []
    wl = kueue.workload_of(api.get("jobsets", "ml", "llm") or {})
    assert wl is not None and not is_true(wl, QUOTA_RESERVED)
    assert kueue.usage("team-a") == {}


async def test_the_emulated_kueue_never_requeues_a_deactivated_workload(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """Why the requeue does not set ``spec.active: false``: Kueue evicts the Workload
    (reason Deactivated), clears its requeueState, and admits it again only once
    someone sets it active, whatever the time."""
    clock = Clock()
    kueue = setup(api, clock)
    name = workload(kueue, api, "train")["metadata"]["name"]
    await kube.patch_custom("kueue.x-k8s.io", "v1beta1", "ml", "workloads", name, INACTIVE)
    kueue.reconcile()
    wl = workload(kueue, api, "train")
    assert not is_true(wl, QUOTA_RESERVED) and "requeueState" not in wl["status"]
    assert kueue.evictions == [(name, "Deactivated")]
    assert pods_of(api, "train") == [] and len(pods_of(api, "next")) == 2
    other = workload_name(kueue, api, "next")
    api.remove("jobs", "ml", "next")
    api.remove("workloads", "ml", other)
    clock.now = T0 + 86_400
    kueue.reconcile()
    assert not is_true(workload(kueue, api, "train"), QUOTA_RESERVED)
    await kube.patch_custom("kueue.x-k8s.io", "v1beta1", "ml", "workloads", name, ACTIVE)
    kueue.reconcile()
    assert is_true(workload(kueue, api, "train"), QUOTA_RESERVED)


INACTIVE = {"spec": {"active": False}}
ACTIVE = {"spec": {"active": True}}


def workload_name(kueue: KueueOperators, api: FakeApiServer, job: str) -> str:
    return str(workload(kueue, api, job)["metadata"]["name"])


async def test_an_unreadable_requeue_state_leaves_the_workload_alone(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """Read as "never requeued", a requeueState that is not what the API says would
    lift maxRequeues: the answer is unknown, and nothing is written."""
    clock = Clock()
    kueue = setup(api, clock)
    wl = workload(kueue, api, "train")
    wl["status"]["requeueState"] = {"count": "many"}
    api.add(wl)
    done = await requeue(kube, clock, pods_of(api, "train")[0])
    assert done.status == "unknown" and "requeueState" in done.message, done.message
    assert api.requests_for("PATCH", r"/workloads/") == []


async def test_under_a_kueue_that_serves_only_v1beta2_the_eviction_goes_there(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    api.kueue_versions = {"v1beta2"}
    kueue = setup(api, clock)
    done = await requeue(kube, clock, pods_of(api, "train")[0])
    assert done.status == "done", done.message
    assert len(api.requests_for("PATCH", r"/v1beta2/namespaces/ml/workloads/[^/]+/status$")) == 1
    kueue.reconcile()
    assert not is_true(workload(kueue, api, "train"), QUOTA_RESERVED)
