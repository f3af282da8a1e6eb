"""Kueue in the simulated cluster: ClusterQueues, LocalQueues, ResourceFlavors and
a Workload per job as ``kueue.x-k8s.io/v1beta1`` objects in ``SimKube``, and
Kueue's controller admitting, evicting and requeueing them in simulated time.

Why a module of its own: under Kueue a job has no pods until its Workload is
admitted, so what the pool rules can see, and how long a team waits, is decided
here. The objects are in Kueue's real schema so that the production readers run
on them unchanged: the queue series come from ``autoscaler/queues.py``'s
``queue_rows`` over them (``rows``), and the production requeue
(``autoscaler/actions/ops/kueue.py``) finds and evicts a job's Workload here.

What is modelled (``scenario_kueue.py`` reads the section):

- **Submission**: every job is Kueue-managed. Its Job (or JobSet, PyTorchJob) is
  created suspended, with the ``kueue.x-k8s.io/queue-name`` label, and a Workload
  owned by it: ``spec.queueName``, ``spec.priority`` 0, ``spec.podSets`` (one pod
  set of ``count`` pods with the pods' template).
- **Admission** runs as an event of its own at the moment something changed (a
  Workload arrived, finished, was evicted or finished its backoff, or an admitted
  one's pods became Ready). Each ClusterQueue's pending Workloads are taken in
  order of priority, then queue time (creation, or the last eviction: Kueue's
  ``requeuingStrategy.timestamp: Eviction``); ``StrictFIFO`` tries only the head,
  ``BestEffortFIFO`` the first that fits. A Workload fits when its devices fit the
  flavor's nominal quota, or, in a cohort, the quota the cohort lends: every
  ClusterQueue of the cohort lends its ``lendingLimit`` (all of its nominal quota
  without one) and keeps the rest for itself; what it uses of its lendable part,
  or borrows, comes out of the cohort's lendable total; and its use above its
  nominal quota is at most its ``borrowingLimit``. Of the ClusterQueues' heads that
  fit, those within their nominal quota are admitted first, then the borrower
  whose cohort share (devices borrowed over the cohort's lendable total, divided
  by ``fairSharing.weight``) is lowest (Kueue's fair sharing), then by queue time.
  There is no preemption.
- **waitForPodsReady**: with ``blockAdmission`` nothing is admitted while an
  admitted Workload's pods are not all Ready (a batch Job's pod bound, a gang's
  every member bound); a Workload whose pods are not all Ready ``timeout`` after
  admission is evicted (``Evicted``, reason ``PodsReadyTimeout``), its
  ``requeueState.count`` one more, requeued after ``base x 2^(count-1)`` (at most
  ``max``). Pods that stop being Ready after that do not count again (Kueue's
  ``recoveryTimeout`` is not modelled).
- **Admitted**: ``QuotaReserved`` and ``Admitted`` True, ``status.admission``
  with the ClusterQueue and the pod set's flavor; the job is unsuspended, and its
  pods are created and scheduled as any job's.
- **Evicted** (by the timeout above, or by the production requeue, which writes
  the same condition through the status subresource): the job is suspended (its
  pods go), the quota freed (``QuotaReserved`` and ``Admitted`` False, admission
  cleared, ``Requeued`` False), and at ``requeueState.requeueAt`` the Workload is
  back in its queue (``Requeued`` True, ``BackoffFinished``).
- **Finished**: a job done or lost frees its quota; the Workload goes with its Job
  (garbage collected by its owner reference).

Per ClusterQueue, at the end (``Stats.queues``): the queue wait (submission to
first admission; a Workload never admitted waited until the end), the work its
jobs kept (device-hours at the reference speed, as ``device_hours_useful``), its
goodput (as the run's ``goodput_ratio``, over its LocalQueues' namespaces: the
work their runs kept over the device time their pods held), the mean share of
its nominal quota in use (above 1 while it borrows), and its jobs submitted,
admitted and completed, and evictions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel_common.names import POOL_LABEL, VENDOR_RESOURCE
from autoscaler.clusterstate import device_requests
from autoscaler.kube.kueue import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY_TIMEOUT,
    QUEUE_NAME_LABEL,
    QUOTA_RESERVED,
    REQUEUED,
    KueueObjects,
    condition,
    rfc3339_seconds,
)
from autoscaler.kube.protocol import (
    CLUSTER_QUEUES,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Obj,
)
from autoscaler.metrics import Row
from autoscaler.pools.base import Pool
from autoscaler.pools.capacity import read_shape
from autoscaler.queues import queue_rows
from autoscaler.simulate.accounting import Stats
from autoscaler.simulate.clock import SimClock
from autoscaler.simulate.gangs import JOBSETS, PYTORCHJOBS
from autoscaler.simulate.jobstate import Gang, Job, Member
from autoscaler.simulate.kube import SimKube, timestamp
from autoscaler.simulate.machines import CAPI_NAMESPACE, MachineSet
from autoscaler.simulate.scenario import Scenario
from autoscaler.simulate.scenario_kueue import ClusterQueueSpec, LocalQueueSpec

API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
# The figures kept per ClusterQueue (Stats.queues), in this order.
QUEUE_FIGURES = (
    "wait_p50_seconds",
    "wait_p95_seconds",
    "device_hours_useful",
    "goodput_ratio",
    "quota_used_ratio",
    "jobs_submitted",
    "jobs_admitted",
    "jobs_completed",
    "evictions",
)


@dataclass(frozen=True)
class Hooks:
    """What Kueue's job integration reaches of the fleet's controllers
    (``JobController``): the jobs, the reactions to a write of ``suspend`` on a
    Job or on a gang's owner, and a running job's progress."""

    jobs: dict[str, Job]
    job_changed: Callable[[Obj], None]
    owner_changed: Callable[[str, Obj], None]
    progress: Callable[[Job], float]
    # The fleet's job stream's seed: Kueue draws from a sibling of it.
    seed: np.random.SeedSequence


@dataclass
class _Workload:
    job: Job
    name: str
    local: LocalQueueSpec
    devices: int
    obj: Obj
    created: float
    queued_at: float  # its place in the queue: creation, or its last eviction
    seq: int
    state: str = "pending"  # pending | backoff | admitted | finished
    ready: bool = False
    admitted_at: float | None = None  # the first admission
    admissions: int = 0
    evictions: int = 0


@dataclass
class _Queue:
    spec: ClusterQueueSpec
    usage: dict[str, int] = field(default_factory=dict)  # pool -> devices admitted
    pending: list[_Workload] = field(default_factory=list)
    used_seconds: float = 0.0  # devices in use x seconds, for the quota share
    since: float = 0.0


def _condition(obj: Obj, kind: str, status: bool, reason: str, message: str, now: float) -> None:
    """Sets a status condition as Kueue does: its transition time changes only
    with its status."""
    conds: list[Any] = obj.setdefault("status", {}).setdefault("conditions", [])
    value = "True" if status else "False"
    for c in conds:
        if isinstance(c, dict) and c.get("type") == kind:
            if c.get("status") != value:
                c["lastTransitionTime"] = timestamp(now)
            c.update(status=value, reason=reason, message=message)
            return
    conds.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": timestamp(now),
        }
    )


class SimKueue:
    """Kueue's controller over the simulated cluster; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        machines: MachineSet,
        jobs: Hooks,
    ) -> None:
        if scenario.kueue is None:
            raise ValueError(f"scenario {scenario.name} has no kueue section")
        spec = scenario.kueue
        self.spec = spec
        self.scenario = scenario
        self.kube = kube
        self.time = time
        self.machines = machines
        self.jobs = jobs
        # A stream of its own, the sixth child of the fleet's seed (the fleet's
        # streams are the first five): drawing namespaces changes no other draw.
        own = np.random.SeedSequence(jobs.seed.entropy, spawn_key=(5,))
        self.rng = np.random.default_rng(own)
        shares = np.array([lq.share for lq in spec.local_queues], dtype=float)
        self.shares = shares / shares.sum()
        self.queues = {cq.name: _Queue(cq) for cq in spec.cluster_queues}
        self.workloads: dict[str, _Workload] = {}  # by job name
        self.by_name: dict[tuple[str, str], _Workload] = {}
        self._seq = 0
        self._pass_due = False
        self._started = time.now
        self.resource = {p.name: VENDOR_RESOURCE[p.vendor] for p in scenario.pools}
        self._objects()

    # -- the API objects ---------------------------------------------------------

    def _objects(self) -> None:
        for pool in self.scenario.pools:
            self.kube.add_custom(
                RESOURCE_FLAVORS,
                {
                    "apiVersion": API,
                    "kind": "ResourceFlavor",
                    "metadata": {"name": pool.name, "namespace": ""},
                    "spec": {"nodeLabels": {POOL_LABEL: pool.name}},
                },
            )
        for q in self.queues.values():
            q.since = self.time.now
            self.kube.add_custom(CLUSTER_QUEUES, self._cluster_queue(q.spec))
        for lq in self.spec.local_queues:
            self.kube.add_custom(
                LOCAL_QUEUES,
                {
                    "apiVersion": API,
                    "kind": "LocalQueue",
                    "metadata": {"name": lq.name, "namespace": lq.namespace},
                    "spec": {"clusterQueue": lq.cluster_queue},
                },
            )

    def _cluster_queue(self, cq: ClusterQueueSpec) -> Obj:
        groups: dict[str, list[Obj]] = {}  # one resource group per device resource
        for pool, quota in cq.flavors:
            res: Obj = {"name": self.resource[pool], "nominalQuota": str(quota.nominal)}
            if quota.borrowing is not None:
                res["borrowingLimit"] = str(quota.borrowing)
            if quota.lending is not None:
                res["lendingLimit"] = str(quota.lending)
            groups.setdefault(self.resource[pool], []).append({"name": pool, "resources": [res]})
        spec: Obj = {
            "namespaceSelector": {},
            "queueingStrategy": cq.strategy,
            "fairSharing": {"weight": f"{cq.weight:g}"},
            "resourceGroups": [
                {"coveredResources": [r], "flavors": flavors} for r, flavors in groups.items()
            ],
        }
        if cq.cohort:
            spec["cohort"] = cq.cohort
        return {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": cq.name, "namespace": ""},
            "spec": spec,
        }

    def namespace(self) -> str:
        """The namespace of the next job: a LocalQueue's, drawn by share."""
        i = int(self.rng.choice(len(self.shares), p=self.shares))
        return self.spec.local_queues[i].namespace

    def _owner(self, job: Job) -> tuple[str, Obj]:
        """(plural, the object Kueue manages the job through)."""
        if isinstance(job, Gang):
            plural = JOBSETS if job.kind == "jobset" else PYTORCHJOBS
            return plural, self.kube.custom[(plural, job.namespace, job.name)]
        return "jobs", self.kube.jobs[(job.namespace, job.name)]

    def submit(self, job: Job, pod_spec: Obj) -> None:
        """A new job, created suspended: the queue label on it, and its Workload.
        ``pod_spec``: one of its pods' spec."""
        local = self.spec.queue_of(job.namespace)
        if local is None:
            raise ValueError(f"job {job.name}: namespace {job.namespace} has no LocalQueue")
        plural, owner = self._owner(job)
        owner["metadata"].setdefault("labels", {})[QUEUE_NAME_LABEL] = local.name
        self.kube.touch(owner)
        count = job.nodes if isinstance(job, Gang) else 1
        kind = {"jobs": "job", JOBSETS: "jobset", PYTORCHJOBS: "pytorchjob"}[plural]
        name = f"{kind}-{job.name}"
        now = self.time.now
        obj: Obj = {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": job.namespace,
                "labels": {QUEUE_NAME_LABEL: local.name},
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": job.name,
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "queueName": local.name,
                "priority": 0,
                "active": True,
                "podSets": [{"name": "main", "count": count, "template": {"spec": pod_spec}}],
            },
            "status": {"conditions": []},
        }
        self.kube.add_custom(WORKLOADS, obj)
        self._seq += 1
        w = _Workload(job, name, local, job.size, obj, now, now, self._seq)
        self.workloads[job.name] = w
        self.by_name[(job.namespace, name)] = w
        self._enqueue(w)

    def _enqueue(self, w: _Workload) -> None:
        w.state = "pending"
        self.queues[w.local.cluster_queue].pending.append(w)
        self._due()

    def _due(self) -> None:
        if not self._pass_due:
            self._pass_due = True
            self.time.at(self.time.now, self.admit)

    # -- admission ---------------------------------------------------------------

    def _cohort(self, q: _Queue) -> list[_Queue]:
        if not q.spec.cohort:
            return [q]
        return [p for p in self.queues.values() if p.spec.cohort == q.spec.cohort]

    def _lendable(self, pool: str, cohort: Sequence[_Queue]) -> tuple[int, int]:
        """(the cohort's lendable quota on ``pool``, what its queues use of it)."""
        total = used = 0
        for p in cohort:
            quota = p.spec.quota(pool)
            if quota is None:
                continue
            lend = quota.nominal if quota.lending is None else quota.lending
            total += lend
            used += max(0, p.usage.get(pool, 0) - (quota.nominal - lend))
        return total, used

    def fits(self, q: _Queue, w: _Workload) -> bool | None:
        """None when ``w`` does not fit ``q`` now; else whether it borrows."""
        pool, n = w.job.pool, w.devices
        quota = q.spec.quota(pool)
        if quota is None:
            return None
        use = q.usage.get(pool, 0)
        if not q.spec.cohort:
            return False if use + n <= quota.nominal else None
        lend = quota.nominal if quota.lending is None else quota.lending
        kept = quota.nominal - lend
        total, used = self._lendable(pool, self._cohort(q))
        need = max(0, use + n - kept) - max(0, use - kept)
        if used + need > total:
            return None
        over = use + n - quota.nominal
        if quota.borrowing is not None and over > quota.borrowing:
            return None
        return over > 0

    def share(self, q: _Queue) -> float:
        """Its fair-sharing share: devices borrowed over the cohort's lendable total,
        over its weight."""
        borrowed = lendable = 0
        cohort = self._cohort(q)
        for pool, quota in q.spec.flavors:
            borrowed += max(0, q.usage.get(pool, 0) - quota.nominal)
            lendable += self._lendable(pool, cohort)[0]
        return borrowed / max(lendable, 1) / q.spec.weight

    def _blocked(self) -> bool:
        ready = self.spec.pods_ready
        if ready is None or not ready.block:
            return False
        return any(w.state == "admitted" and not w.ready for w in self.workloads.values())

    def _head(self, q: _Queue) -> tuple[_Workload, bool] | None:
        q.pending.sort(key=lambda w: (-int(w.obj["spec"].get("priority") or 0), w.queued_at, w.seq))
        for w in q.pending:
            borrows = self.fits(q, w)
            if borrows is not None:
                return w, borrows
            if q.spec.strategy == "StrictFIFO":
                return None
        return None

    def admit(self) -> None:
        """One admission pass (module docstring)."""
        self._pass_due = False
        while not self._blocked():
            heads = []
            for q in self.queues.values():
                head = self._head(q)
                if head is not None:
                    w, borrows = head
                    share = self.share(q) if borrows else 0.0
                    heads.append(((borrows, share, w.queued_at, w.seq), q, w))
            if not heads:
                return
            _, q, w = min(heads, key=lambda h: h[0])
            self._admit(q, w)

    def _use(self, q: _Queue, pool: str, delta: int) -> None:
        now = self.time.now
        q.used_seconds += sum(q.usage.values()) * (now - q.since)
        q.since = now
        q.usage[pool] = q.usage.get(pool, 0) + delta

    def _admit(self, q: _Queue, w: _Workload) -> None:
        now = self.time.now
        q.pending.remove(w)
        self._use(q, w.job.pool, w.devices)
        w.state, w.ready = "admitted", False
        w.admissions += 1
        if w.admitted_at is None:
            w.admitted_at = now
        status = w.obj["status"]
        status["admission"] = {
            "clusterQueue": q.spec.name,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {self.resource[w.job.pool]: w.job.pool},
                    "resourceUsage": {self.resource[w.job.pool]: str(w.devices)},
                    "count": w.obj["spec"]["podSets"][0]["count"],
                }
            ],
        }
        message = f"Quota reserved in ClusterQueue {q.spec.name}"
        _condition(w.obj, QUOTA_RESERVED, True, "QuotaReserved", message, now)
        _condition(w.obj, ADMITTED, True, "Admitted", "The workload is admitted", now)
        if condition(w.obj, EVICTED) is not None:
            _condition(w.obj, EVICTED, False, "QuotaReserved", "Previously: evicted", now)
        self.kube.touch(w.obj)
        ready = self.spec.pods_ready
        if ready is not None:
            seq = w.admissions
            self.time.at(now + ready.timeout, lambda: self._timeout(w, seq))
        self._suspend(w.job, False)

    def _suspend(self, job: Job, suspend: bool) -> None:
        """Kueue's job integration (un)suspends the job: the Job or gang controller
        reacts as to any write of ``suspend``."""
        plural, owner = self._owner(job)
        spec = owner["spec"]
        if plural == PYTORCHJOBS:
            spec = spec.setdefault("runPolicy", {})
        spec["suspend"] = suspend
        self.kube.touch(owner)
        if plural == "jobs":
            self.jobs.job_changed(owner)
        else:
            self.jobs.owner_changed(plural, owner)

    # -- pods ready, timeouts, evictions -------------------------------------------

    def hear(self, what: str, payload: Any) -> None:
        """The fleet's events (``emit``): pods bound, jobs done or lost."""
        if what == "pod_bound":
            if isinstance(payload, Member):
                gang = self.jobs.jobs.get(payload.gang)
                if not isinstance(gang, Gang) or any(m.slot < 0 for m in gang.members):
                    return
                self._ready(gang)
            elif isinstance(payload, Job):
                self._ready(payload)
        elif what == "job_done":
            self._finished(payload, "Succeeded", "Job finished successfully")
        elif what == "job_lost":
            job, reason = payload
            self._finished(job, "Failed", str(reason))

    def _ready(self, job: Job) -> None:
        w = self.workloads.get(job.name)
        if w is not None and w.state == "admitted" and not w.ready:
            w.ready = True
            self._due()

    def _finished(self, job: Job, reason: str, message: str) -> None:
        w = self.workloads.get(job.name)
        if w is None or w.state == "finished":
            return
        if w.state == "admitted":
            self._use(self.queues[w.local.cluster_queue], job.pool, -w.devices)
        elif w in self.queues[w.local.cluster_queue].pending:
            self.queues[w.local.cluster_queue].pending.remove(w)
        w.state = "finished"
        _condition(w.obj, FINISHED, True, reason, message, self.time.now)
        # Its Job is gone; the garbage collector takes the Workload it owned.
        self.kube.remove_custom(WORKLOADS, job.namespace, w.name)
        self.by_name.pop((job.namespace, w.name), None)
        self._due()

    def _timeout(self, w: _Workload, admission: int) -> None:
        ready = self.spec.pods_ready
        if ready is None or w.state != "admitted" or w.admissions != admission or w.ready:
            return
        count = int((w.obj["status"].get("requeueState") or {}).get("count", 0)) + 1
        at = self.time.now + ready.backoff(count)
        w.obj["status"]["requeueState"] = {"count": count, "requeueAt": timestamp(at)}
        message = f"Exceeded the PodsReady timeout {ready.timeout:g}s"
        _condition(w.obj, EVICTED, True, PODS_READY_TIMEOUT, message, self.time.now)
        self._evicted(w, at)

    def workload_changed(self, obj: Obj) -> None:
        """Someone wrote a Workload (the production requeue evicts through its status):
        an admitted one evicted now is suspended and requeued at its ``requeueAt``."""
        meta = obj.get("metadata") or {}
        w = self.by_name.get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        evicted = condition(obj, EVICTED)
        if w is None or w.state != "admitted" or evicted is None or evicted["status"] != "True":
            return
        state = (obj.get("status") or {}).get("requeueState") or {}
        at = rfc3339_seconds(state.get("requeueAt")) if isinstance(state, dict) else None
        self._evicted(w, self.time.now if at is None else at)

    def _evicted(self, w: _Workload, requeue_at: float) -> None:
        now = self.time.now
        q = self.queues[w.local.cluster_queue]
        self._use(q, w.job.pool, -w.devices)
        w.state = "backoff"
        w.evictions += 1
        w.queued_at = now
        w.obj["status"].pop("admission", None)
        _condition(w.obj, QUOTA_RESERVED, False, "Pending", "Evicted", now)
        _condition(w.obj, ADMITTED, False, "NoReservation", "Evicted", now)
        _condition(w.obj, REQUEUED, False, "Evicted", "Waiting for the requeuing backoff", now)
        self.kube.touch(w.obj)
        self._suspend(w.job, True)
        admissions = w.admissions
        self.time.at(max(now, requeue_at), lambda: self._requeue(w, admissions))
        self._due()

    def _requeue(self, w: _Workload, admissions: int) -> None:
        if w.state != "backoff" or w.admissions != admissions:
            return
        _condition(w.obj, REQUEUED, True, "BackoffFinished", "The backoff finished", self.time.now)
        self.kube.touch(w.obj)
        self._enqueue(w)

    # -- what is read: the queue series and the figures ------------------------------

    def pools(self) -> list[Pool]:
        """The pools as the Cluster API provider reads them (``Pool``)."""
        out = []
        m = self.machines
        for p in self.scenario.pools:
            nodes = tuple(n for i in m.pool_slots[p.name] if (n := m.slots[i].node) is not None)
            md = self.kube.custom.get(("machinedeployments", CAPI_NAMESPACE, p.name)) or {}
            machines = m.pool_machines[p.name]
            shape = read_shape(md) if md else None
            out.append(
                Pool(p.name, p.min, p.max, machines, nodes, machines - len(nodes), shape=shape)
            )
        return out

    def objects(self) -> KueueObjects:
        """Kueue's objects as ``autoscaler/kube/kueue.py``'s ``read_kueue`` lists them."""

        def listed(plural: str) -> tuple[Obj, ...]:
            return tuple(o for (p, _, _), o in self.kube.custom.items() if p == plural)

        return KueueObjects(
            cluster_queues=listed(CLUSTER_QUEUES),
            local_queues=listed(LOCAL_QUEUES),
            flavors=listed(RESOURCE_FLAVORS),
            workloads=listed(WORKLOADS),
            skipped={},
        )

    def rows(self) -> list[Row]:
        """The queue series now, by the production code (``queues.queue_rows``)."""
        kube = self.kube
        nodes, pods = list(kube.nodes.values()), list(kube.pods.values())
        return queue_rows(self.objects(), device_requests, self.pools(), nodes, pods)

    def figures(self, end: float, stats: Stats) -> dict[str, dict[str, float]]:
        """Per ClusterQueue, ``QUEUE_FIGURES`` (module docstring)."""
        out: dict[str, dict[str, float]] = {}
        span = max(end - self._started, 1e-9)
        for name, q in self.queues.items():
            spaces = {lq.namespace for lq in self.spec.local_queues if lq.cluster_queue == name}
            held = sum(stats.allocated_by_namespace.get(ns, 0.0) for ns in spaces)
            kept = sum(stats.useful_by_namespace.get(ns, 0.0) for ns in spaces)
            used = q.used_seconds + sum(q.usage.values()) * (end - q.since)
            nominal = sum(quota.nominal for _, quota in q.spec.flavors)
            mine = [w for w in self.workloads.values() if w.local.cluster_queue == name]
            waits = [
                (w.admitted_at if w.admitted_at is not None else end) - w.created for w in mine
            ]
            useful = sum(self._kept(w.job) * w.job.size for w in mine)
            out[name] = {
                "wait_p50_seconds": _pct(waits, 50),
                "wait_p95_seconds": _pct(waits, 95),
                "device_hours_useful": round(useful / 3600.0, 3),
                # As the run's goodput_ratio: work kept over device time held.
                "goodput_ratio": round(kept / held, 4) if held > 0 else 0.0,
                "quota_used_ratio": round(used / span / nominal, 4) if nominal else 0.0,
                "jobs_submitted": len(mine),
                "jobs_admitted": sum(1 for w in mine if w.admitted_at is not None),
                "jobs_completed": sum(1 for w in mine if w.job.state == "done"),
                "evictions": sum(w.evictions for w in mine),
            }
        return out

    def _kept(self, job: Job) -> float:
        """The work a job kept by the end: all of it when done, its progress while
        running (as ``JobController.finish`` counts it), else its last checkpoint."""
        if job.state == "done":
            return job.total
        if job.state == "running":
            return min(self.jobs.progress(job), job.total)
        return job.run_start_work


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return round(float(np.percentile(np.array(values), q, method="linear")), 3)


def listening(kueue: SimKueue, emit: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    """``emit`` with Kueue hearing every event first."""

    def both(what: str, payload: Any) -> None:
        kueue.hear(what, payload)
        emit(what, payload)

    return both


__all__ = ["QUEUE_FIGURES", "Hooks", "SimKueue", "listening"]
