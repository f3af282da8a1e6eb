"""Gang restarts against the fake API server through the real ``kubernetes`` client,
with the JobSet and PyTorchJob operators and a scheduler emulated
(``tests/support/fakes/gangops.py``): a member on a fatal device restarts its whole
gang exactly once, on nodes that exclude the faulty one; no member is evicted alone;
a replayed decision after a controller restart restarts nothing; Volcano gets one
Command; a label gang restarts as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    GANG_LABEL,
    GANG_RESTARTS_ANNOTATION,
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
)
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.gangops import GangOperators
from tests.support.kubeobjs import client, node, pod

pytestmark = pytest.mark.timeout(60)

GPU = {"limits": {"nvidia.com/gpu": "8"}}
TEMPLATE = {
    "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "train", "image": "train:1", "resources": GPU}],
    }
}


def decide(action: str, target: dict[str, str], **raw: Any) -> Decision:
    params, problems = ACTIONS[action].validate(raw)
    assert not problems, problems
    return Decision("fatal", "act", action, params, target, (), 1.0, 0.0)


async def run(kube: Any, d: Decision, **kw: Any) -> Outcome:
    execute = ACTIONS[d.action].execute
    assert execute is not None
    return await execute(ActionContext(kube=kube, retry_interval=0.05, **kw), d)


def jobset(name: str, replicas: int = 4, max_restarts: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {"spec": {"backoffLimit": 0, "template": TEMPLATE}},
                }
            ],
        },
    }


def pytorchjob(name: str, workers: int = 3) -> dict[str, Any]:
    spec = {"restartPolicy": "OnFailure", "template": TEMPLATE}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **spec},
                "Worker": {"replicas": workers, **spec},
            }
        },
    }


def cluster(api: FakeApiServer, nodes: int = 5) -> None:
    for i in range(1, nodes + 1):
        api.add(node(f"n{i}"))


def placement(api: FakeApiServer) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in api.objects("pods")}


def no_single_eviction(api: FakeApiServer) -> None:
    """No member was evicted (the tests then check that the run's deletes are the
    whole gang, in one pass)."""
    assert api.requests_for("POST", "/eviction$") == []


def deletes(api: FakeApiServer) -> list[str]:
    return [r.path.rsplit("/", 1)[1] for r in api.requests_for("DELETE", "/pods/")]


def restart_record(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    return dict(json.loads(obj["metadata"]["annotations"][GANG_RESTARTS_ANNOTATION]))


async def test_jobset_member_on_a_fatal_device_restarts_the_gang_once_elsewhere(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    cluster(api)
    api.add(jobset("llm"))
    ops = GangOperators(api)
    ops.reconcile()
    before = placement(api)
    assert sorted(before.values()) == ["n1", "n2", "n3", "n4"]
    faulty = before["llm-workers-1-0"]

    out = await run(kube, decide("migrate_jobs", {"node": faulty, "device": "nvidia0"}))
    assert out.status == "done", out.message
    assert "restarted 1 gang(s) (JobSet/ml/llm)" in out.message
    no_single_eviction(api)
    # All four members deleted in one pass, the faulty node's member last.
    assert sorted(deletes(api)) == sorted(before)
    assert deletes(api)[-1] == "llm-workers-1-0"
    # The taint went on before the first delete.
    patches = api.requests_for("PATCH", f"/nodes/{faulty}$")
    first_delete = api.requests_for("DELETE", "/pods/")[0]
    assert patches and patches[0].time <= first_delete.time

    ops.reconcile()
    js = api.get("jobsets", "ml", "llm")
    assert js is not None and js["status"]["restarts"] == 1
    after = placement(api)
    assert len(after) == 4 and faulty not in after.values()
    assert all(p["metadata"]["labels"][JOBSET_NAME_LABEL] == "llm" for p in api.objects("pods"))
    assert restart_record(js)["count"] == 1

    # A controller restart (a new client) replays the same decision: no second restart.
    replayed = client(api, tmp_path)
    try:
        again = await run(replayed, decide("migrate_jobs", {"node": faulty, "device": "nvidia0"}))
    finally:
        replayed.close()
    assert again.status == "done", again.message
    ops.reconcile()
    js = api.get("jobsets", "ml", "llm")
    assert js is not None and js["status"]["restarts"] == 1
    assert len(deletes(api)) == 4


async def test_jobset_without_restarts_left_is_not_touched(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    api.add(jobset("small", replicas=2, max_restarts=0))
    GangOperators(api).reconcile()
    out = await run(kube, decide("migrate_jobs", {"node": "n1"}))
    assert out.status == "partial" and "no restart left" in out.message
    assert deletes(api) == [] and api.requests_for("POST", "/eviction$") == []


async def test_pytorchjob_restarts_once_and_a_replayed_requeue_does_not_repeat_it(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    cluster(api)
    api.add(pytorchjob("bert"))
    ops = GangOperators(api)
    ops.reconcile()
    before = placement(api)
    assert len(before) == 4 and ops.created["bert"] == 4
    faulty = before["bert-worker-2"]

    out = await run(kube, decide("migrate_jobs", {"node": faulty}))
    assert out.status == "done", out.message
    no_single_eviction(api)
    assert sorted(deletes(api)) == sorted(before)
    ops.reconcile()
    assert ops.created["bert"] == 8  # every replica recreated, once
    assert faulty not in placement(api).values()

    # The stall rule's requeue of the same gang, replayed after a controller restart
    # (same pod names, new pods): the gang's record refuses a second restart.
    replayed = client(api, tmp_path)
    try:
        again = await run(
            replayed, decide("requeue_job", {"namespace": "ml", "pod": "bert-worker-2"})
        )
    finally:
        replayed.close()
    # migrate_jobs' restart counted as the first; the backoff holds the next one.
    assert again.status == "skipped", again.message
    ops.reconcile()
    assert ops.created["bert"] == 8 and len(deletes(api)) == 4


async def test_a_gang_moved_off_failed_devices_may_still_be_requeued_for_a_stall(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """maxRequeues counts requeue_job's own restarts: a gang that two fatal device
    faults moved (migrate_jobs) has not hung twice, and its first stall is
    requeued; its requeues then stop it at the limit. A record from before the
    two were counted apart counts every restart, as it did."""
    cluster(api, nodes=8)
    api.add(jobset("llm", replicas=2, max_restarts=10))
    ops = GangOperators(api)
    ops.reconcile()
    now = [1_900_000_000.0]

    def clock() -> float:
        return now[0]

    for _ in range(2):
        member = sorted(placement(api).items())[0]
        out = await run(kube, decide("migrate_jobs", {"node": member[1]}), clock=clock)
        assert out.status == "done", out.message
        ops.reconcile()
        now[0] += 3600
    js = api.get("jobsets", "ml", "llm")
    assert restart_record(js)["count"] == 2 and restart_record(js)["requeues"] == 0

    def requeue() -> Decision:
        pod_name = sorted(placement(api))[0]
        return decide("requeue_job", {"namespace": "ml", "pod": pod_name}, maxRequeues=2)

    for expected in (1, 2):
        out = await run(kube, requeue(), clock=clock)
        assert out.status == "done", out.message
        ops.reconcile()
        now[0] += 3 * 3600  # past the doubled backoff
        rec = restart_record(api.get("jobsets", "ml", "llm"))
        assert (rec["count"], rec["requeues"]) == (2 + expected, expected)
    out = await run(kube, requeue(), clock=clock)
    assert out.status == "skipped" and "maxRequeues is 2" in out.message

    # A record written before requeues were counted apart: all of its restarts count.
    js = api.get("jobsets", "ml", "llm")
    assert js is not None
    legacy = {k: v for k, v in restart_record(js).items() if k != "requeues"}
    legacy["count"] = 1
    js["metadata"]["annotations"][GANG_RESTARTS_ANNOTATION] = json.dumps(legacy)
    api.add(js)
    out = await run(
        kube,
        decide("requeue_job", {"namespace": "ml", "pod": sorted(placement(api))[0]}, maxRequeues=1),
        clock=clock,
    )
    assert out.status == "skipped" and "maxRequeues is 1" in out.message


async def test_requeue_of_a_gang_member_restarts_the_gang_once(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    api.add(jobset("llm", replicas=2))
    ops = GangOperators(api)
    ops.reconcile()
    d = decide("requeue_job", {"namespace": "ml", "pod": "llm-workers-0-0"}, backoff="10m")
    out = await run(kube, d)
    assert out.status == "done", out.message
    assert sorted(deletes(api)) == ["llm-workers-0-0", "llm-workers-1-0"]
    ops.reconcile()
    js = api.get("jobsets", "ml", "llm")
    assert js is not None and js["status"]["restarts"] == 1
    assert api.requests_for("POST", "/eviction$") == []


async def test_dry_run_describes_the_gang_restart_without_doing_it(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    api.add(jobset("llm"))
    GangOperators(api).reconcile()
    dry = DryRunKube(kube)
    out = await run(dry, decide("migrate_jobs", {"node": "n1"}), dry_run=True)
    assert "restarted 1 gang(s)" in out.message, out.message
    described = [method for method, _ in dry.writes]
    assert described.count("delete_pod") == 4 and "patch_custom" in described
    # Nothing happened: the pods are there, no delete reached the server, no record.
    assert len(api.objects("pods")) == 4 and deletes(api) == []
    js = api.get("jobsets", "ml", "llm")
    assert js is not None and GANG_RESTARTS_ANNOTATION not in (
        js["metadata"].get("annotations") or {}
    )


async def test_volcano_job_gets_exactly_one_restart_command(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    vj = api.add(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "vj", "namespace": "ml"},
            "spec": {"minAvailable": 2, "tasks": []},
            "status": {"version": 0},
        }
    )
    owner = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "vj",
        "uid": vj["metadata"]["uid"],
        "controller": True,
    }
    for i, n in enumerate(("n1", "n2")):
        p = pod(f"vj-worker-{i}", n, owner=None, gpus=8, labels={"volcano.sh/job-name": "vj"})
        p["metadata"]["ownerReferences"] = [owner]
        api.add(p)
    for _ in range(2):  # the decision, and its replay before Volcano acted
        out = await run(kube, decide("migrate_jobs", {"node": "n2"}))
        assert out.status == "done", out.message
    commands = api.objects("commands")
    assert len(commands) == 1
    cmd = commands[0]
    assert cmd["action"] == "RestartJob"
    assert cmd["target"]["kind"] == "Job" and cmd["target"]["uid"] == vj["metadata"]["uid"]
    assert deletes(api) == [] and api.requests_for("POST", "/eviction$") == []
    # Volcano ran it (status.version moved): a third replay sends nothing.
    stored = api.get("jobs.batch.volcano.sh", "ml", "vj")
    assert stored is not None
    stored["status"]["version"] = 1
    api.add(stored)
    api.remove("commands", "ml", cmd["metadata"]["name"])
    await run(kube, decide("migrate_jobs", {"node": "n2"}))
    assert api.objects("commands") == []


async def test_label_gang_restarts_as_one(api: FakeApiServer, kube: ClientKube) -> None:
    cluster(api)
    api.add(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"template": TEMPLATE},
        }
    )
    for i in range(3):
        api.add(pod(f"g-{i}", f"n{i + 1}", owner_name="g", gpus=8, labels={GANG_LABEL: "g"}))
    api.add(pod("solo", "n2", gpus=0))
    out = await run(kube, decide("migrate_jobs", {"node": "n2"}))
    assert out.status == "done", out.message
    assert sorted(deletes(api)) == ["g-0", "g-1", "g-2"]
    assert deletes(api)[-1] == "g-1"
    assert api.requests_for("POST", "/eviction$") == []  # "solo" uses no device: it stays
    job = api.get("jobs", "ml", "g")
    assert restart_record(job)["count"] == 1


async def test_a_restart_cut_short_is_finished_by_the_next_run_not_repeated(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    cluster(api)
    api.add(pytorchjob("bert"))
    ops = GangOperators(api)
    ops.reconcile()
    faulty = placement(api)["bert-worker-2"]
    # The last delete (the faulty node's member) is refused: the pass stops there.
    api.faults.fail(1, status=403, method="DELETE", path_regex=r"/pods/bert-worker-2$")
    first = await run(kube, decide("migrate_jobs", {"node": faulty}))
    assert first.status == "partial", first.message
    assert len(deletes(api)) == 4  # three done, the fourth refused
    ops.reconcile()  # the operator recreates the three, away from the tainted node
    assert ops.created["bert"] == 7

    # The controller restarts and the decision runs again: it finishes the recorded
    # restart (the one member left), and counts nothing new.
    again_kube = client(api, tmp_path)
    try:
        second = await run(again_kube, decide("migrate_jobs", {"node": faulty}))
    finally:
        again_kube.close()
    assert second.status == "done", second.message
    assert deletes(api)[-1] == "bert-worker-2" and len(deletes(api)) == 5
    ops.reconcile()
    assert ops.created["bert"] == 8
    assert faulty not in placement(api).values()
    assert restart_record(api.get("pytorchjobs", "ml", "bert"))["count"] == 1


async def test_a_trainjob_restarts_through_its_jobset(api: FakeApiServer, kube: ClientKube) -> None:
    cluster(api)
    tj = api.add(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        }
    )
    js = jobset("tj", replicas=2)
    js["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "tj",
            "uid": tj["metadata"]["uid"],
            "controller": True,
        }
    ]
    api.add(js)
    ops = GangOperators(api)
    ops.reconcile()
    out = await run(kube, decide("migrate_jobs", {"node": "n1"}))
    assert out.status == "done" and "TrainJob/ml/tj" in out.message, out.message
    ops.reconcile()
    stored = api.get("jobsets", "ml", "tj")
    assert stored is not None and stored["status"]["restarts"] == 1
    assert "n1" not in placement(api).values()


async def test_an_mpijob_restarts_its_workers_and_its_launcher(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    mpi = api.add(
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "hpl", "namespace": "ml"},
            "spec": {"mpiReplicaSpecs": {}},
        }
    )
    owner = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "hpl",
        "uid": mpi["metadata"]["uid"],
        "controller": True,
    }
    for i in range(2):
        labels = {KUBEFLOW_JOB_NAME_LABEL: "hpl", KUBEFLOW_REPLICA_TYPE_LABEL: "worker"}
        w = pod(f"hpl-worker-{i}", f"n{i + 1}", owner=None, gpus=8, labels=labels)
        w["metadata"]["ownerReferences"] = [owner]
        api.add(w)
    launcher_labels = {KUBEFLOW_JOB_NAME_LABEL: "hpl", KUBEFLOW_REPLICA_TYPE_LABEL: "launcher"}
    api.add(pod("hpl-launcher-x", "n3", owner_name="hpl-launcher", gpus=0, labels=launcher_labels))
    out = await run(kube, decide("migrate_jobs", {"node": "n2"}))
    assert out.status == "done", out.message
    assert sorted(deletes(api)) == ["hpl-launcher-x", "hpl-worker-0", "hpl-worker-1"]
    assert deletes(api)[-1] == "hpl-worker-1"
    assert api.requests_for("POST", "/eviction$") == []
