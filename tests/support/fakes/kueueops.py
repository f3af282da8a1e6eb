"""Kueue for the fake API server: just enough of its job integration, its queue
manager and scheduler, and its workload controller to see what the queue series
read and where a requeue through a Workload lands.

Why: Kueue decides when a queued job runs, and the controller's queue series
(``autoscaler/queues.py``) and requeues through a Workload
(``autoscaler/actions/ops/kueue.py``) only mean something against the objects Kueue
writes. The fake API server stores objects and runs no controller; ``reconcile()``
runs these emulated ones until nothing changes, where a real cluster's Kueue would
have caught up. They work on the store directly (``add``/``remove``), so the
request log holds only the controller's requests. Time is the injected ``clock``
(unix seconds), so a test moves through a backoff without sleeping.

What it emulates, from Kueue's code (``pkg/controller/jobframework/reconciler.go``,
``pkg/controller/core/workload_controller.go``, ``pkg/workload``), with the
``kueue.x-k8s.io/v1beta1`` field names:

- **Job integration**: a ``batch/v1`` Job or a JobSet labelled
  ``kueue.x-k8s.io/queue-name`` is suspended (``spec.suspend``) and gets a Workload
  it owns (``job-<name>-<uid>``; one pod set per Job, ``count`` its parallelism; one
  per replicated job of a JobSet, ``count`` replicas times parallelism) in the
  LocalQueue the label names. An admitted Workload's job is unsuspended with its
  flavor's ``nodeLabels`` added to the pod template's ``nodeSelector``; an evicted
  one's job is suspended again and, once it is, the Workload's quota is released
  (``QuotaReserved`` and ``Admitted`` False, ``status.admission`` cleared) and
  ``Requeued`` is False with the eviction's reason. A Job that completes or fails
  finishes its Workload (``Finished``), which frees its quota.
- **Job controller** (Kueue-managed Jobs only; ``gangops.py`` plays the JobSet's):
  a running Job has ``parallelism`` pods from its template, a suspended one none.
  Pods are placed by ``GangOperators``' scheduler.
- **Admission** (the queue manager and scheduler): pending Workloads (active, not
  finished, holding no quota, their ``status.requeueState.requeueAt`` passed) in
  order of ``spec.priority`` then age; each gets the first flavor of its
  ClusterQueue (through its LocalQueue) that covers its device resources and has
  room: the nominal quota less what admitted Workloads use, plus, in a cohort, what
  the other ClusterQueues leave unused, at most the ``borrowingLimit``. Admission
  sets ``status.admission`` (``clusterQueue``, ``podSetAssignments[].flavors``,
  ``resourceUsage``, ``count``), ``QuotaReserved`` True and an ``Evicted`` that
  was True to False, and ``Admitted`` True at once, or, when the ClusterQueue
  names ``spec.admissionChecks``, once every one of the Workload's
  ``status.admissionChecks`` (``Pending`` at first; a test or a provisioner sets
  them) is ``Ready``; an eviction sets them back to ``Pending``.
- **Workload controller**: ``spec.active: false`` on a Workload that holds quota
  evicts it (``Evicted``, reason ``Deactivated``) and clears its
  ``requeueState``; it is not admitted again until it is active. After a
  ``PodsReadyTimeout`` eviction, once ``requeueAt`` passes, ``Requeued`` turns True
  (reason ``BackoffFinished``) and ``requeueAt`` is cleared.
- **Provisioning admission check** (``pkg/controller/admissionchecks/provisioning``):
  for a Workload that holds quota and waits for a check whose AdmissionCheck's
  ``spec.controllerName`` is ``kueue.x-k8s.io/provisioning-request``, a
  ProvisioningRequest ``<workload>-<check>-1`` (``autoscaling.x-k8s.io/v1``,
  controller-owned by the Workload; ``provisioningClassName`` and ``parameters``
  from the ProvisioningRequestConfig that the check's ``spec.parameters`` names;
  one pod set per pod set of the Workload, ``podTemplateRef``
  ``ppt-<request>-<pod set>``; the PodTemplates themselves are not made, as the
  fake API server does not serve them). Its ``Provisioned`` True sets the check
  ``Ready``, its ``Failed`` True sets it ``Rejected``. The request is deleted once
  its Workload is finished, evicted or holds no quota.
- **ClusterQueue status**: ``flavorsReservation`` (per flavor and device
  resource), ``pendingWorkloads`` and ``admittedWorkloads``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from autoscaler.clusterstate import device_requests
from autoscaler.kube.kueue import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY_TIMEOUT,
    PROVISIONING_CHECK_CONTROLLER,
    QUEUE_NAME_LABEL,
    QUOTA_RESERVED,
    REQUEUED,
    is_true,
)
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.gangops import GangOperators

Obj = dict[str, Any]
API = "kueue.x-k8s.io/v1beta1"


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


def set_condition(obj: Obj, kind: str, status: bool, reason: str, at: float, msg: str = "") -> None:
    """Set a condition as ``apimeta.SetStatusCondition`` does: the transition time
    moves only when the status changes."""
    conds: list[Obj] = obj.setdefault("status", {}).setdefault("conditions", [])
    value = "True" if status else "False"
    for c in conds:
        if c["type"] == kind:
            if c["status"] != value:
                c["lastTransitionTime"] = rfc3339(at)
            c.update(status=value, reason=reason, message=msg)
            return
    conds.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": msg,
            "lastTransitionTime": rfc3339(at),
            "observedGeneration": 1,
        }
    )


def _owner_uid(obj: Obj) -> str:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref["uid"])
    return ""


class KueueOperators:
    """The emulated Kueue of one fake API server (see the module docstring)."""

    def __init__(self, api: FakeApiServer, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.clock = clock
        self.scheduler = GangOperators(api)
        # Every eviction the job integration carried out: (workload, reason).
        self.evictions: list[tuple[str, str]] = []
        self.admissions: list[str] = []
        self._made = 0  # pods made, for their names

    def reconcile(self, rounds: int = 30) -> None:
        """Run every emulated controller until nothing changes."""
        for _ in range(rounds):
            changed = (
                self._integrate()
                | self._deactivate()
                | self._evict()
                | self._finish()
                | self._backoff()
                | self._admit()
                | self._provision()
                | self._checks()
                | self._start()
                | self._job_pods()
            )
            self.scheduler.reconcile()
            if not changed:
                self._queue_status()
                return
        raise AssertionError(f"the emulated Kueue did not settle in {rounds} rounds")

    # -- lookups

    def workload_of(self, job: Obj) -> Obj | None:
        uid = job["metadata"]["uid"]
        for wl in self.api.objects("workloads"):
            if _owner_uid(wl) == uid:
                return wl
        return None

    def _job_of(self, wl: Obj) -> tuple[str, Obj] | None:
        uid = _owner_uid(wl)
        for plural in ("jobs", "jobsets"):
            for job in self.api.objects(plural):
                if job["metadata"]["uid"] == uid:
                    return plural, job
        return None

    def _cluster_queue(self, wl: Obj) -> Obj | None:
        lq = self.api.get("localqueues", wl["metadata"]["namespace"], wl["spec"]["queueName"])
        if lq is None:
            return None
        return self.api.get("clusterqueues", None, lq["spec"]["clusterQueue"])

    def _queue_name(self, wl: Obj) -> str:
        cq = self._cluster_queue(wl)
        return str(cq["metadata"]["name"]) if cq is not None else ""

    # -- job integration

    def _integrate(self) -> bool:
        changed = False
        for plural in ("jobs", "jobsets"):
            for job in self.api.objects(plural):
                queue = (job["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL)
                if not queue or self.workload_of(job) is not None:
                    continue
                if not job["spec"].get("suspend"):
                    job["spec"]["suspend"] = True
                    job = self.api.add(job)
                self.api.add(self._new_workload(plural, job, queue))
                changed = True
        return changed

    @staticmethod
    def _new_workload(plural: str, job: Obj, queue: str) -> Obj:
        meta = job["metadata"]
        if plural == "jobs":
            pod_sets = [
                {
                    "name": "main",
                    "count": int(job["spec"].get("parallelism", 1)),
                    "template": job["spec"]["template"],
                }
            ]
        else:
            pod_sets = [
                {
                    "name": r["name"],
                    "count": int(r.get("replicas", 1))
                    * int(r["template"]["spec"].get("parallelism", 1)),
                    "template": r["template"]["spec"]["template"],
                }
                for r in job["spec"]["replicatedJobs"]
            ]
        kind = "Job" if plural == "jobs" else "JobSet"
        return {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {
                "name": f"{kind.lower()}-{meta['name']}-{meta['uid'][:5]}",
                "namespace": meta["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": job["apiVersion"],
                        "kind": kind,
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": queue, "podSets": pod_sets, "active": True, "priority": 0},
        }

    def _suspend(self, plural: str, job: Obj, suspend: bool, flavors: dict[str, str]) -> None:
        job["spec"]["suspend"] = suspend
        if not suspend and plural == "jobs":
            labels: dict[str, str] = {}
            for flavor in set(flavors.values()):
                rf = self.api.get("resourceflavors", None, flavor) or {}
                labels.update((rf.get("spec") or {}).get("nodeLabels") or {})
            spec = job["spec"]["template"]["spec"]
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **labels}
        self.api.add(job)

    # -- eviction, deactivation, finishing

    def _deactivate(self) -> bool:
        changed = False
        for wl in self.api.objects("workloads"):
            if wl["spec"].get("active", True) is not False:
                continue
            status = wl.setdefault("status", {})
            if is_true(wl, QUOTA_RESERVED) and not is_true(wl, EVICTED):
                set_condition(wl, EVICTED, True, "Deactivated", self.clock(), "deactivated")
                status.pop("requeueState", None)
                self.api.add(wl)
                changed = True
            elif status.get("requeueState"):
                status.pop("requeueState")
                self.api.add(wl)
                changed = True
        return changed

    def _evict(self) -> bool:
        changed = False
        for wl in self.api.objects("workloads"):
            if not (is_true(wl, EVICTED) and is_true(wl, QUOTA_RESERVED)):
                continue
            found = self._job_of(wl)
            if found is not None and not found[1]["spec"].get("suspend"):
                self._suspend(*found, True, {})
            if found is not None and found[0] == "jobs" and self._pods(found[1]):
                changed |= self._job_pods()
            evicted = next(c for c in wl["status"]["conditions"] if c["type"] == EVICTED)
            now = self.clock()
            set_condition(wl, QUOTA_RESERVED, False, "Pending", now, evicted.get("message", ""))
            set_condition(wl, ADMITTED, False, "NoReservation", now)
            requeued = evicted["reason"] == "Preempted"
            set_condition(
                wl, REQUEUED, requeued, evicted["reason"], now, evicted.get("message", "")
            )
            wl["status"].pop("admission", None)
            for check in wl["status"].get("admissionChecks") or []:
                check["state"] = "Pending"
            self.api.add(wl)
            self.evictions.append((wl["metadata"]["name"], evicted["reason"]))
            changed = True
        return changed

    def _finish(self) -> bool:
        changed = False
        for wl in self.api.objects("workloads"):
            found = self._job_of(wl)
            if found is None or is_true(wl, FINISHED):
                continue
            conds = (found[1].get("status") or {}).get("conditions") or []
            done = [
                c for c in conds if c["type"] in ("Complete", "Failed") and c["status"] == "True"
            ]
            if done:
                reason = "Succeeded" if done[0]["type"] == "Complete" else "Failed"
                set_condition(wl, FINISHED, True, reason, self.clock())
                self.api.add(wl)
                changed = True
        return changed

    def _backoff(self) -> bool:
        changed = False
        for wl in self.api.objects("workloads"):
            state = (wl.get("status") or {}).get("requeueState") or {}
            at = state.get("requeueAt")
            if not at or is_true(wl, QUOTA_RESERVED) or parse(at) > self.clock():
                continue
            del state["requeueAt"]
            requeued = [c for c in wl["status"].get("conditions", []) if c["type"] == REQUEUED]
            if requeued and (requeued[0]["status"], requeued[0]["reason"]) == (
                "False",
                PODS_READY_TIMEOUT,
            ):
                set_condition(wl, REQUEUED, True, "BackoffFinished", self.clock())
            self.api.add(wl)
            changed = True
        return changed

    # -- admission

    def _devices(self, wl: Obj) -> dict[str, int]:
        total: dict[str, int] = {}
        for ps in wl["spec"]["podSets"]:
            for r, n in device_requests({"spec": ps["template"]["spec"]}).items():
                total[r] = total.get(r, 0) + n * int(ps.get("count", 1))
        return total

    def usage(self, cq_name: str) -> dict[tuple[str, str], int]:
        """Devices that admitted Workloads of a ClusterQueue hold, by flavor and resource."""
        used: dict[tuple[str, str], int] = {}
        for wl in self.api.objects("workloads"):
            admission = (wl.get("status") or {}).get("admission") or {}
            if admission.get("clusterQueue") != cq_name or not is_true(wl, QUOTA_RESERVED):
                continue
            if is_true(wl, FINISHED):
                continue
            flavors = admission["podSetAssignments"][0].get("flavors") or {}
            for r, n in self._devices(wl).items():
                key = (flavors.get(r, ""), r)
                used[key] = used.get(key, 0) + n
        return used

    @staticmethod
    def _quotas(cq: Obj) -> list[tuple[str, dict[str, Obj]]]:
        """(flavor, resource → quota entry), in the ClusterQueue's order."""
        out = []
        for group in cq["spec"].get("resourceGroups") or []:
            for fq in group.get("flavors") or []:
                out.append((fq["name"], {r["name"]: r for r in fq.get("resources") or []}))
        return out

    def _room(self, cq: Obj, flavor: str, resource: str, entry: Obj) -> int:
        name = cq["metadata"]["name"]
        room = int(entry["nominalQuota"]) - self.usage(name).get((flavor, resource), 0)
        cohort = cq["spec"].get("cohort")
        if not cohort:
            return room
        spare = 0
        for peer in self.api.objects("clusterqueues"):
            if peer["spec"].get("cohort") != cohort or peer["metadata"]["name"] == name:
                continue
            used = self.usage(peer["metadata"]["name"])
            for f, resources in self._quotas(peer):
                if f == flavor and resource in resources:
                    nominal = int(resources[resource]["nominalQuota"])
                    lend = int(resources[resource].get("lendingLimit", nominal))
                    spare += max(0, min(lend, nominal - used.get((f, resource), 0)))
        limit = entry.get("borrowingLimit")
        return room + (spare if limit is None else min(spare, int(limit)))

    def _pending(self) -> list[Obj]:
        now = self.clock()
        out = []
        for wl in self.api.objects("workloads"):
            at = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
            if (
                wl["spec"].get("active", True) is False
                or is_true(wl, QUOTA_RESERVED)
                or is_true(wl, FINISHED)
                or (at and parse(at) > now)
            ):
                continue
            out.append(wl)
        out.sort(
            key=lambda w: (-int(w["spec"].get("priority") or 0), w["metadata"]["creationTimestamp"])
        )
        return out

    def _admit(self) -> bool:
        for wl in self._pending():
            cq = self._cluster_queue(wl)
            if cq is None:
                continue
            wants = self._devices(wl)
            for flavor, resources in self._quotas(cq):
                if not all(r in resources for r in wants):
                    continue
                if all(self._room(cq, flavor, r, resources[r]) >= n for r, n in wants.items()):
                    self._reserve(wl, cq, flavor, wants)
                    return True  # one at a time: the next sees this one's usage
        return False

    def _reserve(self, wl: Obj, cq: Obj, flavor: str, wants: dict[str, int]) -> None:
        now = self.clock()
        status = wl.setdefault("status", {})
        status["admission"] = {
            "clusterQueue": cq["metadata"]["name"],
            "podSetAssignments": [
                {
                    "name": ps["name"],
                    "flavors": {r: flavor for r in wants},
                    "resourceUsage": {
                        r: str(n * int(ps.get("count", 1)))
                        for r, n in device_requests({"spec": ps["template"]["spec"]}).items()
                    },
                    "count": int(ps.get("count", 1)),
                }
                for ps in wl["spec"]["podSets"]
            ],
        }
        message = f"Quota reserved in ClusterQueue {cq['metadata']['name']}"
        set_condition(wl, QUOTA_RESERVED, True, "QuotaReserved", now, message)
        checks = [str(c) for c in cq["spec"].get("admissionChecks") or []]
        if checks:  # admitted once every check is Ready (``_checks``)
            status["admissionChecks"] = [
                {"name": c, "state": "Pending", "lastTransitionTime": rfc3339(now), "message": ""}
                for c in checks
            ]
        else:
            set_condition(wl, ADMITTED, True, "Admitted", now, "The workload is admitted")
        if is_true(wl, EVICTED):
            set_condition(wl, EVICTED, False, "QuotaReserved", now)
        self.api.add(wl)
        self.admissions.append(wl["metadata"]["name"])

    def _provisioning_checks(self) -> dict[str, Obj]:
        """The AdmissionChecks answered by ProvisioningRequests, by name."""
        return {
            ac["metadata"]["name"]: ac
            for ac in self.api.objects("admissionchecks")
            if (ac.get("spec") or {}).get("controllerName") == PROVISIONING_CHECK_CONTROLLER
        }

    def _provision(self) -> bool:
        changed = False
        checks = self._provisioning_checks()
        wanted: set[tuple[str, str]] = set()
        for wl in self.api.objects("workloads"):
            meta = wl["metadata"]
            live = is_true(wl, QUOTA_RESERVED) and not is_true(wl, EVICTED)
            if not live or is_true(wl, FINISHED):
                continue
            for check in (wl.get("status") or {}).get("admissionChecks") or []:
                if check["name"] not in checks:
                    continue
                name = f"{meta['name']}-{check['name']}-1"
                wanted.add((meta["namespace"], name))
                pr = self.api.get("provisioningrequests", meta["namespace"], name)
                if pr is None:
                    self.api.add(self._request(wl, name, checks[check["name"]]))
                    changed = True
                    continue
                state = check.get("state")
                if is_true(pr, "Provisioned") and state != "Ready":
                    check.update(state="Ready", lastTransitionTime=rfc3339(self.clock()))
                elif is_true(pr, "Failed") and state != "Rejected":
                    check.update(state="Rejected", lastTransitionTime=rfc3339(self.clock()))
                else:
                    continue
                self.api.add(wl)
                changed = True
        for pr in self.api.objects("provisioningrequests"):
            key = (pr["metadata"]["namespace"], pr["metadata"]["name"])
            refs = pr["metadata"].get("ownerReferences") or []
            if any(r.get("kind") == "Workload" for r in refs) and key not in wanted:
                self.api.remove("provisioningrequests", *key)
                changed = True
        return changed

    def _request(self, wl: Obj, name: str, check: Obj) -> Obj:
        params = (check.get("spec") or {}).get("parameters") or {}
        config = self.api.get("provisioningrequestconfigs", None, str(params.get("name", "")))
        spec = (config or {}).get("spec") or {}
        meta = wl["metadata"]
        owner = {
            "apiVersion": API,
            "kind": "Workload",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
        return {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": [owner]},
            "spec": {
                "provisioningClassName": spec.get("provisioningClassName", ""),
                "parameters": dict(spec.get("parameters") or {}),
                "podSets": [
                    {"podTemplateRef": {"name": f"ppt-{name}-{ps['name']}"}, "count": ps["count"]}
                    for ps in wl["spec"]["podSets"]
                    if int(ps.get("count", 1)) > 0
                ],
            },
        }

    def _checks(self) -> bool:
        """A Workload that holds quota is admitted once every admission check of its
        ClusterQueue is Ready (a test, or a provisioner, sets their ``state``)."""
        changed = False
        for wl in self.api.objects("workloads"):
            checks = (wl.get("status") or {}).get("admissionChecks") or []
            if not checks or not is_true(wl, QUOTA_RESERVED) or is_true(wl, ADMITTED):
                continue
            if is_true(wl, EVICTED) or any(c.get("state") != "Ready" for c in checks):
                continue
            set_condition(wl, ADMITTED, True, "Admitted", self.clock(), "The workload is admitted")
            self.api.add(wl)
            changed = True
        return changed

    def _start(self) -> bool:
        changed = False
        for wl in self.api.objects("workloads"):
            if not is_true(wl, ADMITTED) or is_true(wl, EVICTED) or is_true(wl, FINISHED):
                continue
            found = self._job_of(wl)
            if found is not None and found[1]["spec"].get("suspend"):
                flavors = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]
                self._suspend(*found, False, flavors)
                changed = True
        return changed

    # -- the Job controller, for Kueue-managed Jobs

    def _pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [p for p in self.api.objects("pods") if _owner_uid(p) == uid]

    def _job_pods(self) -> bool:
        changed = False
        for job in self.api.objects("jobs"):
            if not (job["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL):
                continue
            pods = self._pods(job)
            if job["spec"].get("suspend"):
                for p in pods:
                    self.api.remove("pods", p["metadata"]["namespace"], p["metadata"]["name"])
                    changed = True
                continue
            alive = [p for p in pods if (p.get("status") or {}).get("phase") != "Failed"]
            for _ in range(len(alive), int(job["spec"].get("parallelism", 1))):
                self._pod(job)
                changed = True
        return changed

    def _pod(self, job: Obj) -> None:
        self._made += 1
        template = job["spec"]["template"]
        meta = job["metadata"]
        self.api.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{meta['name']}-{self._made:05d}",
                    "namespace": meta["namespace"],
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": dict(template["spec"]),
                "status": {"phase": "Pending"},
            }
        )

    # -- ClusterQueue status

    def _queue_status(self) -> None:
        workloads = self.api.objects("workloads")
        for cq in self.api.objects("clusterqueues"):
            name = cq["metadata"]["name"]
            used = self.usage(name)
            reservation = [
                {
                    "name": flavor,
                    "resources": [
                        {"name": r, "total": str(used.get((flavor, r), 0))} for r in resources
                    ],
                }
                for flavor, resources in self._quotas(cq)
            ]
            mine = [w for w in workloads if self._queue_name(w) == name]
            status = {
                "flavorsReservation": reservation,
                "flavorsUsage": reservation,
                "pendingWorkloads": sum(
                    1 for w in mine if not is_true(w, QUOTA_RESERVED) and not is_true(w, FINISHED)
                ),
                "reservingWorkloads": sum(1 for w in mine if is_true(w, QUOTA_RESERVED)),
                "admittedWorkloads": sum(1 for w in mine if is_true(w, ADMITTED)),
            }
            if cq.get("status") != status:
                cq["status"] = status
                self.api.add(cq)


__all__ = ["KueueOperators", "parse", "rfc3339", "set_condition"]
