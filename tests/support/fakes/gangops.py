"""Gang operators for the fake API server: just enough of the JobSet controller, the
Job controller, the training operator and the scheduler to see where a gang
restart lands.

Why: the gang actions (``autoscaler/actions/ops/gangs.py``) delete member pods and rely on
the owner's operator to restart the gang once, elsewhere. The fake API server stores
objects and runs no controller, so without these a test could only check the
requests, not that the restart the operator makes is one restart, on nodes that
exclude the faulty one. ``reconcile()`` runs every emulated controller until
nothing changes; a test calls it where a real cluster's controllers would have
caught up. It works on the server's store directly (``add``/``remove``), as a
controller's own writes would, so the request log holds only the controller's.

What it emulates, from the real controllers' behaviour:

- **JobSet** (jobset.x-k8s.io/v1alpha2): one child Job per replicated-job index,
  named ``<jobset>-<replicatedJob>-<index>``, labelled with the JobSet name, the
  replicated job and ``jobset.sigs.k8s.io/restart-attempt`` = ``status.restarts``.
  When a child Job of the current attempt fails, the JobSet restarts: with
  ``spec.failurePolicy.maxRestarts`` not reached, ``status.restarts`` and
  ``status.restartsCountTowardsMax`` + 1 and every child Job of the older attempt
  is deleted with its pods and recreated; otherwise the JobSet is Failed. A
  suspended JobSet (``spec.suspend``, as Kueue holds one in its queue) has no child
  Jobs: they go with their pods, and come back when it is resumed.
- **Job** (batch/v1, one pod each, as a JobSet's child with parallelism 1): a Job
  whose pod was deleted or Failed, with ``backoffLimit: 0``, fails; with a backoff
  left, it makes a new pod.
- **PyTorchJob** (kubeflow.org/v1): pods ``<job>-<master|worker>-<i>`` for each
  replica spec, recreated when missing (``created`` counts them per job).
- **Scheduler**: a Pending pod without a node goes to the first node by name that
  is schedulable (not cordoned, no NoSchedule/NoExecute taint) and has the free
  devices it asks for; it is then Running there.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from accel_common.names import (
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_ATTEMPT_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
)
from autoscaler.clusterstate import device_requests
from tests.support.fakes.apiserver import FakeApiServer

Obj = dict[str, Any]
RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


def _ref(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def _owned(obj: Obj, owner: Obj) -> bool:
    return any(
        r.get("uid") == owner["metadata"]["uid"] for r in _meta(obj).get("ownerReferences") or []
    )


def _failed(job: Obj) -> bool:
    return any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class GangOperators:
    """The emulated controllers of one fake API server (see the module docstring)."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        # Pods the PyTorchJob operator created, per job (its first pods included).
        self.created: Counter[str] = Counter()
        # Pods each child Job created, by Job uid (its first pod included).
        self._job_pods: Counter[str] = Counter()

    def reconcile(self, rounds: int = 20) -> None:
        """Run every controller until nothing changes (at most ``rounds`` passes)."""
        for _ in range(rounds):
            changed = self._jobsets() | self._jobs() | self._pytorchjobs() | self._schedule()
            if not changed:
                return
        raise AssertionError(f"the gang operators did not settle in {rounds} rounds")

    # -- JobSet

    def _jobsets(self) -> bool:
        changed = False
        for js in self.api.objects("jobsets"):
            status = js.setdefault("status", {})
            if any(c.get("type") == "Failed" for c in status.get("conditions") or []):
                continue
            attempt = int(status.get("restarts") or 0)
            jobs = [j for j in self.api.objects("jobs") if _owned(j, js)]
            if (js.get("spec") or {}).get("suspend"):
                # Suspended (Kueue holds it in its queue): no child Job runs.
                for j in jobs:
                    self._delete_job(j)
                changed |= bool(jobs)
                continue
            current = [
                j
                for j in jobs
                if _meta(j)["labels"].get(JOBSET_RESTART_ATTEMPT_LABEL) == str(attempt)
            ]
            for j in jobs:
                if j not in current:
                    self._delete_job(j)
                    changed = True
            if any(_failed(j) for j in current):
                policy = (js.get("spec") or {}).get("failurePolicy") or {}
                used = int(status.get("restartsCountTowardsMax") or 0)
                if used < int(policy.get("maxRestarts") or 0):
                    status["restarts"] = attempt + 1
                    status["restartsCountTowardsMax"] = used + 1
                else:
                    status["conditions"] = [{"type": "Failed", "status": "True"}]
                self.api.add(js)
                return True
            names = {_meta(j)["name"] for j in current}
            for rjob in js["spec"]["replicatedJobs"]:
                for i in range(int(rjob.get("replicas", 1))):
                    name = f"{js['metadata']['name']}-{rjob['name']}-{i}"
                    if name not in names:
                        self._create_job(js, rjob, name, attempt)
                        changed = True
        return changed

    def _create_job(self, js: Obj, rjob: Obj, name: str, attempt: int) -> None:
        labels = {
            JOBSET_NAME_LABEL: js["metadata"]["name"],
            JOBSET_REPLICATED_JOB_LABEL: rjob["name"],
            JOBSET_RESTART_ATTEMPT_LABEL: str(attempt),
        }
        spec = dict(rjob["template"]["spec"])
        template = dict(spec["template"])
        template["metadata"] = {
            **(template.get("metadata") or {}),
            "labels": {**((template.get("metadata") or {}).get("labels") or {}), **labels},
        }
        spec["template"] = template
        self.api.add(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "namespace": js["metadata"]["namespace"],
                    "labels": labels,
                    "ownerReferences": [_ref(js)],
                },
                "spec": spec,
            }
        )

    def _delete_job(self, job: Obj) -> None:
        for p in self.api.objects("pods"):
            if _owned(p, job):
                self.api.remove("pods", p["metadata"]["namespace"], p["metadata"]["name"])
        self.api.remove("jobs", job["metadata"]["namespace"], job["metadata"]["name"])

    # -- Job (one pod each)

    def _jobs(self) -> bool:
        changed = False
        pods = self.api.objects("pods")
        for job in self.api.objects("jobs"):
            if _failed(job) or not _meta(job).get("labels", {}).get(JOBSET_NAME_LABEL):
                continue  # only the JobSet's children: other tests' Jobs are theirs
            name, uid = job["metadata"]["name"], job["metadata"]["uid"]
            mine = [p for p in pods if _owned(p, job)]
            alive = [p for p in mine if (p.get("status") or {}).get("phase") != "Failed"]
            if alive:
                continue
            if self._job_pods[uid] and self._job_pods[uid] > int(
                job["spec"].get("backoffLimit", 6)
            ):
                job.setdefault("status", {})["conditions"] = [{"type": "Failed", "status": "True"}]
                self.api.add(job)
            else:
                self._pod(job, f"{name}-{self._job_pods[uid]}", job["spec"]["template"])
                self._job_pods[uid] += 1
            changed = True
        return changed

    # -- PyTorchJob

    def _pytorchjobs(self) -> bool:
        changed = False
        pods = {
            (p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.api.objects("pods")
        }
        for pj in self.api.objects("pytorchjobs"):
            name, ns = pj["metadata"]["name"], pj["metadata"]["namespace"]
            for rtype, spec in (pj["spec"].get("pytorchReplicaSpecs") or {}).items():
                for i in range(int(spec.get("replicas", 1))):
                    pod_name = f"{name}-{rtype.lower()}-{i}"
                    if (ns, pod_name) in pods:
                        continue
                    template = dict(spec["template"])
                    template["metadata"] = {
                        "labels": {
                            KUBEFLOW_JOB_NAME_LABEL: name,
                            KUBEFLOW_REPLICA_TYPE_LABEL: rtype.lower(),
                            KUBEFLOW_REPLICA_INDEX_LABEL: str(i),
                            **((spec["template"].get("metadata") or {}).get("labels") or {}),
                        },
                        "annotations": (spec["template"].get("metadata") or {}).get("annotations")
                        or {},
                    }
                    self._pod(pj, pod_name, template)
                    self.created[name] += 1
                    changed = True
        return changed

    # -- pods and the scheduler

    def _pod(self, owner: Obj, name: str, template: Obj) -> None:
        meta = template.get("metadata") or {}
        self.api.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": owner["metadata"]["namespace"],
                    "labels": dict(meta.get("labels") or {}),
                    "annotations": dict(meta.get("annotations") or {}),
                    "ownerReferences": [_ref(owner)],
                },
                "spec": dict(template["spec"]),
                "status": {"phase": "Pending"},
            }
        )

    def _schedule(self) -> bool:
        changed = False
        pods = self.api.objects("pods")
        for p in pods:
            if p["spec"].get("nodeName") or (p.get("status") or {}).get("phase") != "Pending":
                continue
            node = self._fit(p, pods)
            if node is None:
                continue
            p["spec"]["nodeName"] = node
            p["status"] = dict(RUNNING)
            self.api.add(p)
            changed = True
        return changed

    def _fit(self, pod: Obj, pods: list[Obj]) -> str | None:
        wants = device_requests(pod)
        for n in self.api.objects("nodes"):
            spec = n.get("spec") or {}
            if spec.get("unschedulable") or any(
                t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []
            ):
                continue
            name = n["metadata"]["name"]
            used: Counter[str] = Counter()
            for other in pods:
                if other["spec"].get("nodeName") == name:
                    used.update(device_requests(other))
            alloc = (n.get("status") or {}).get("allocatable") or {}
            if all(int(alloc.get(r, 0)) - used[r] >= q for r, q in wants.items()):
                return str(name)
        return None


__all__ = ["GangOperators"]
