"""Gang jobs of the simulated fleet: multi-node training jobs placed all or
nothing, stalled together, restarted together, and the operators that run them.

Why a module of its own: a gang is what makes remediation worth the most (one
faulty GPU stops a thousand), and its semantics are those of the owners real
training fleets run, which the gang-aware actions must meet exactly as they
would on a cluster. It models:

- **Placement** (gang scheduling, as Kueue or the coscheduling plugin give):
  a gang's pending member pods go to whole free nodes of its pool (Ready, not
  cordoned or tainted, every device free and healthy; ``PreferNoSchedule`` nodes
  last), all at once or not at all. Gangs wait in one FIFO queue per pool; a gang
  that does not fit lets smaller ones behind it try (backfill).
- **Progress and checkpoints**: a gang progresses only while every member runs.
  Every ``checkpointInterval`` of work it saves a checkpoint; the last pause of
  each interval (``checkpoints.py``: ``checkpointPause``, fixed or drawn per
  checkpoint) is the write, with every member's devices idle together
  (``PAUSE_UTILIZATION``), and the checkpoint counts from its end (when a
  declaring gang's pods get ``accel-fleet.io/last-checkpoint``).
- **Stalls**: a fault on any member's device, a member's node going down, or a
  drawn deadlock puts every member at 0 utilization; a ``collective_hang`` (a
  hung NCCL ring) keeps every member busy at its load with its device links
  silent. Either way the gang holds its nodes and makes no progress until its
  pods go.
- **JobSet** (``jobset.x-k8s.io/v1alpha2``): one child Job per member
  (``backoffLimit: 0``), labelled with the restart attempt. A member pod that is
  deleted, evicted or fails fails its child Job; the JobSet controller then
  restarts the JobSet once (``failurePolicy`` RestartJobSet): ``status.restarts``
  + 1, every child Job of the attempt deleted with its pods and recreated with
  ``jobset.sigs.k8s.io/restart-attempt`` = restarts; past
  ``failurePolicy.maxRestarts`` the JobSet fails (the job is lost). Failed
  child Jobs of an earlier attempt do not restart it again.
- **PyTorchJob** (``kubeflow.org/v1``): the operator recreates a deleted or
  failed pod under its own name (``restartPolicy: OnFailure``); the members that
  were not deleted restart in place on their nodes (their collective is gone), so
  the gang runs again when every member is bound, on whatever node each has. A
  run ended so counts towards ``runPolicy.backoffLimit``.
- **Suspend**: ``spec.suspend`` on a JobSet (``runPolicy.suspend`` on a
  PyTorchJob) deletes every member pod; clearing it recreates them, and resets
  the deadline clock as for a batch Job.

What a stopped run costs is booked in ``Accounting.lost`` by cause: the work
redone since the checkpoint, the stalled time until the pods went (detection
delay), the restart overhead, and the wait for capacity until every member is
bound again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from accel_common.names import (
    JOB_NAME_LABEL,
    JOBSET_GROUP,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_ATTEMPT_LABEL,
    KUBEFLOW_GROUP,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
)
from accel_common.names import LEGACY_JOB_NAME_LABEL as JOB_LABEL
from autoscaler.kube.protocol import WORKLOADS, Obj
from autoscaler.simulate.accounting import Accounting
from autoscaler.simulate.checkpoints import Checkpoints
from autoscaler.simulate.clock import SimClock
from autoscaler.simulate.jobstate import (
    PAUSE_UTILIZATION,
    RESTORE_UTILIZATION,
    Gang,
    Job,
    Member,
)
from autoscaler.simulate.kube import SimKube, timestamp
from autoscaler.simulate.links import DeviceLinks
from autoscaler.simulate.machines import BROKEN, FAULTY, LOST, OK, MachineSet, Slot
from autoscaler.simulate.scenario import Scenario


class JobHooks(Protocol):
    """What gangs share with the Job controller (``jobs.JobController``): the pod
    template, the running set, checkpoints, the devices' link load (``jobs.py``)
    and the deadline clock."""

    running: set[str]
    checkpoints: Checkpoints
    links: DeviceLinks

    def labels(self, job: Job) -> dict[str, str]: ...
    def annotations(self, job: Job) -> dict[str, str]: ...
    def pod_spec(self, job: Job, devices: int | None = None) -> Obj: ...
    def checkpoint_of(self, job: Job, work: float) -> float: ...
    def schedule_deadline(self, job: Job) -> None: ...


JOBSET_API = f"{JOBSET_GROUP}/v1alpha2"
PYTORCHJOB_API = f"{KUBEFLOW_GROUP}/v1"
JOBSETS, PYTORCHJOBS = "jobsets", "pytorchjobs"
# The accel_gang_info kind of each gangKind, as the actions' recogniser names them.
KIND_LABEL = {"jobset": "JobSet", "pytorchjob": "PyTorchJob"}
REPLICATED_JOB = "workers"
# The JobSet controller reconciles a failed child Job a moment later: the other
# deletions of the same pass arrive first, as they do on a cluster.
RECONCILE_DELAY = 1.0
# How near (seconds of work) progress counts as at a milestone.
WORK_EPSILON = 1e-3


class GangController:
    """The fleet's gang jobs and their operators; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        machines: MachineSet,
        accounting: Accounting,
        jobs: JobHooks,
        emit: Callable[[str, Any], None],
    ) -> None:
        self.scenario = scenario
        self.kube = kube
        self.time = time
        self.machines = machines
        self.accounting = accounting
        self.stats = accounting.stats
        self.jobs = jobs
        self.emit = emit
        self.kind = scenario.workload.gang_kind or "jobset"
        self.gangs: dict[str, Gang] = {}
        self.pending: dict[str, dict[str, None]] = {p.name: {} for p in scenario.pools}
        self.per_pool = {p.name: p.devices_per_node for p in scenario.pools}
        self.dirty: set[str] = set()  # pools whose queue or nodes changed
        # Gangs per pool whose JobSet restart is due: the pool's nodes wait for them.
        self.holding: dict[str, int] = {}
        # Kueue's reaction to a write of a Workload (kueue.py), where Kueue runs.
        self.workload_changed: Callable[[Obj], None] | None = None

    # -- arrival: the owner object and its pods ----------------------------------------

    def submit(self, g: Gang) -> None:
        """A new gang: its owner object, its child Jobs (JobSet) and member pods."""
        w = self.scenario.workload
        g.kind = self.kind
        self.gangs[g.name] = g
        kind = KIND_LABEL[self.kind]
        declared = self.jobs.checkpoints.declared_pause(g)
        for i in range(g.nodes):
            child = self._child_name(g, i) if self.kind == "jobset" else ""
            g.members.append(Member(i, g.namespace, g.name, kind, child, g.timeout, declared))
        template = {
            "metadata": {"annotations": self._annotations(g, None)},
            "spec": self.jobs.pod_spec(g, self.per_node(g)),
        }
        if self.kind == "jobset":
            owner: Obj = {
                "apiVersion": JOBSET_API,
                "kind": "JobSet",
                "metadata": {"name": g.name, "namespace": g.namespace},
                "spec": {
                    "suspend": g.suspended,
                    "failurePolicy": {"maxRestarts": w.backoff_limit},
                    "replicatedJobs": [
                        {
                            "name": REPLICATED_JOB,
                            "replicas": g.nodes,
                            "template": {
                                "spec": {
                                    "backoffLimit": 0,
                                    "completions": 1,
                                    "parallelism": 1,
                                    "template": template,
                                }
                            },
                        }
                    ],
                },
                "status": {"restarts": 0},
            }
            self.kube.add_custom(JOBSETS, owner)
        else:
            spec = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
            replicas = {"Master": spec}
            if g.nodes > 1:
                replicas["Worker"] = {**spec, "replicas": g.nodes - 1}
            owner = {
                "apiVersion": PYTORCHJOB_API,
                "kind": "PyTorchJob",
                "metadata": {"name": g.name, "namespace": g.namespace},
                "spec": {
                    "runPolicy": {"backoffLimit": w.backoff_limit, "suspend": g.suspended},
                    "pytorchReplicaSpecs": replicas,
                },
                "status": {"conditions": []},
            }
            self.kube.add_custom(PYTORCHJOBS, owner)
        if not g.suspended:  # a Kueue job waits for admission (kueue.py)
            self._create_all(g)

    def per_node(self, g: Gang) -> int:
        return g.size // g.nodes

    def _owner(self, g: Gang) -> Obj | None:
        plural = JOBSETS if g.kind == "jobset" else PYTORCHJOBS
        return self.kube.custom.get((plural, g.namespace, g.name))

    def _child_name(self, g: Gang, i: int) -> str:
        return f"{g.name}-{REPLICATED_JOB}-{i}"

    def _annotations(self, g: Gang, saved: float | None) -> dict[str, str]:
        stamp = None if saved is None else timestamp(saved)
        return self.jobs.annotations(g) | self.jobs.checkpoints.annotations(g, stamp)

    def _create_all(self, g: Gang) -> None:
        """Every member's pod (and, for a JobSet, child Job) of the current attempt."""
        if g.kind == "jobset":
            owner = self._owner(g)
            assert owner is not None
            for m in g.members:
                m.attempt = g.attempt
                self.kube.add_job(
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": m.name,
                            "namespace": g.namespace,
                            "labels": self._jobset_labels(g),
                            "ownerReferences": [self._ref(owner)],
                        },
                        "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1},
                        "status": {"active": 1},
                    }
                )
        for m in g.members:
            if m.pod is None:
                self._create_pod(g, m)

    def _jobset_labels(self, g: Gang) -> dict[str, str]:
        return {
            JOBSET_NAME_LABEL: g.name,
            JOBSET_REPLICATED_JOB_LABEL: REPLICATED_JOB,
            JOBSET_RESTART_ATTEMPT_LABEL: str(g.attempt),
        }

    def _ref(self, obj: Obj) -> Obj:
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def _create_pod(self, g: Gang, m: Member) -> None:
        labels = self.jobs.labels(g)
        if g.kind == "jobset":
            name = f"{m.name}-0-{g.attempt}"
            labels |= {JOB_LABEL: m.name, JOB_NAME_LABEL: m.name, **self._jobset_labels(g)}
            owner = self.kube.jobs[(g.namespace, m.name)]
            ref = self._ref(owner)
        else:
            rtype = "master" if m.index == 0 else "worker"
            idx = 0 if m.index == 0 else m.index - 1
            name = f"{g.name}-{rtype}-{idx}"
            labels |= {
                KUBEFLOW_JOB_NAME_LABEL: g.name,
                KUBEFLOW_REPLICA_TYPE_LABEL: rtype,
                KUBEFLOW_REPLICA_INDEX_LABEL: str(idx),
            }
            pj = self._owner(g)
            assert pj is not None
            ref = self._ref(pj)
        m.pod = name
        g.pod_created = self.time.now
        self.kube.add_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": g.namespace,
                    "labels": labels,
                    "annotations": self._annotations(g, g.saved_at),
                    "ownerReferences": [ref],
                },
                "spec": self.jobs.pod_spec(g, self.per_node(g)),
                "status": {"phase": "Pending"},
            }
        )
        queue = self.pending[g.pool]
        if g.waiting_since is not None and g.name not in queue:
            # A restarting gang keeps its place (its quota stays admitted, as
            # Kueue keeps a JobSet's while it restarts): it goes first.
            self.pending[g.pool] = {g.name: None, **queue}
        else:
            queue[g.name] = None
        self.dirty.add(g.pool)

    # -- scheduling: whole nodes, all or nothing ---------------------------------------

    def wants_schedule(self) -> bool:
        return bool(self.dirty)

    def note(self, pools: set[str]) -> None:
        """Nodes of ``pools`` changed (``MachineSet.changed_pools``)."""
        self.dirty |= pools & self.pending.keys()

    def schedule(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for pool in sorted(dirty):
            queue = self.pending[pool]
            if not queue or self.holding.get(pool):
                continue
            free = self._free_nodes(pool)
            smallest_failed = 1 << 62
            for name in list(queue):
                if not free:
                    break
                g = self.gangs[name]
                want = [m for m in g.members if m.slot < 0]
                if len(want) >= smallest_failed:
                    continue
                if len(want) > len(free):
                    smallest_failed = len(want)
                    continue
                del queue[name]
                for m in want:
                    self._bind(g, m, free.pop(0))
                self._maybe_start(g)

    def _free_nodes(self, pool: str) -> list[Slot]:
        """Whole free nodes of ``pool`` a member may go to, ``PreferNoSchedule`` last."""
        m = self.machines
        n = self.per_pool[pool]
        good: list[Slot] = []
        avoid: list[Slot] = []
        for node in m.schedulable[pool]:
            slot = m.slots[m.node_slot[node]]
            if len(slot.free) == n:
                (avoid if slot.avoid else good).append(slot)
        return good + avoid

    def _bind(self, g: Gang, m: Member, slot: Slot) -> None:
        ms = self.machines
        devices = tuple(slot.free)
        slot.free.clear()
        ms.update_schedulable(slot)
        assert m.pod is not None and slot.node is not None
        self.kube.bind_pod(g.namespace, m.pod, slot.node)
        m.slot = slot.index
        m.devices = tuple(slot.base + d for d in devices)
        idx = np.array(m.devices)
        ms.dev_job[idx] = g.index
        ms.dev_util[idx] = 0.0
        self.accounting.hold(slot.pool.name, len(devices), g.size, g.namespace)
        self.emit("pod_bound", m)

    def _unbind(self, g: Gang, m: Member) -> None:
        """The member's pod leaves its node (deleted, failed, or the gang ended)."""
        if m.slot < 0:
            return
        ms = self.machines
        slot = ms.slots[m.slot]
        idx = np.array(m.devices)
        ms.dev_job[idx] = -1
        ms.dev_util[idx] = 0.0
        self.jobs.links.quiet(idx)
        for gd in m.devices:
            state = ms.dev_state[gd]
            if state == BROKEN:
                ms.release_broken(gd)
            elif state == OK and slot.node is not None:
                bisect.insort(slot.free, gd - slot.base)
        ms.update_schedulable(slot)
        ms.changed_pools.add(slot.pool.name)
        self.dirty.add(slot.pool.name)
        self.accounting.free(slot.pool.name, len(m.devices), g.size, g.namespace)
        self.emit("pod_unbound", m)
        m.slot, m.devices = -1, ()

    # -- runs ----------------------------------------------------------------------------

    def _maybe_start(self, g: Gang) -> None:
        if any(m.slot < 0 for m in g.members) or g.state in ("done", "lost"):
            return
        now = self.time.now
        if g.waiting_since is not None:
            self.accounting.lose("capacity_wait", (now - g.waiting_since) * g.size)
            g.waiting_since = None
        self.stats.queue_wait.append(now - g.pod_created)
        g.state = "running"
        g.devices = tuple(d for m in g.members for d in m.devices)
        g.bound_at = g.run_started = now
        g.work = g.run_start_work
        g.mark = now
        g.overhead_until = now + (
            self.scenario.workload.restart_overhead if g.attempts > 0 else 0.0
        )
        g.attempts += 1
        g.stalled = g.hung = False
        g.version += 1
        self.jobs.running.add(g.name)
        if g.started is None:
            g.started = now
            self.jobs.schedule_deadline(g)
        idx = np.array(g.devices)
        state = self.machines.dev_state[idx]
        if (state == BROKEN).any() or (state == LOST).any() or (state == FAULTY).any():
            # Restarted in place on a faulty device: hung again at once.
            self.accounting.mark_stuck(g.name, "fatal", now)
            self.stall(g, g.version, "fatal")
            return
        busy = g.overhead_until > now
        self.machines.dev_util[idx] = RESTORE_UTILIZATION if busy else g.utilization
        self.jobs.links.busy(idx)
        self._plan(g)

    def progress(self, g: Gang) -> float:
        if g.state != "running" or g.stalled:
            return g.work
        start = max(g.mark, g.overhead_until)
        return g.work + max(0.0, self.time.now - start) * g.speed

    def _plan(self, g: Gang) -> None:
        """Schedules the gang's next milestone: the end of its restart overhead,
        a checkpoint pause's start or end, its deadlock, or its completion."""
        if g.state != "running" or g.stalled:
            return
        now, version = self.time.now, g.version
        if now < g.overhead_until:
            self.time.at(g.overhead_until, lambda: self._milestone(g, version, "restored"))
            return
        w = g.work + (now - max(g.mark, g.overhead_until)) * g.speed
        target, what = g.total, "complete"
        if g.stall_at is not None and w < g.stall_at < target:
            target, what = g.stall_at, "stall"
        ci = self.scenario.workload.checkpoint_interval
        if ci > 0:
            # Work is reckoned from clock times near 1.7e9 s (a few 1e-7 s apart):
            # a milestone's own point must not be planned again.
            boundary = (int((w + WORK_EPSILON) / ci) + 1) * ci
            pause = self.jobs.checkpoints.pause(g, boundary)
            start = boundary - pause
            if pause > 0 and w < start - WORK_EPSILON and start < target:
                target, what = start, "pause"
            elif boundary < target:
                target, what = boundary, "saved"
        t = now + max(0.0, target - w) / g.speed
        self.time.at(t, lambda: self._milestone(g, version, what))

    def _milestone(self, g: Gang, version: int, what: str) -> None:
        if g.version != version or g.state != "running" or g.stalled:
            return
        idx = np.array(g.devices)
        if what == "complete":
            self._complete(g)
            return
        if what == "stall":
            self.stall(g, version, "stall")
            return
        if what == "pause":
            self.machines.dev_util[idx] = PAUSE_UTILIZATION
        elif what == "saved":
            self.machines.dev_util[idx] = g.utilization
            g.saved_at = self.time.now
            stamp = timestamp(self.time.now)
            for m in g.members if g.declares else ():
                pod = self.kube.pods.get((g.namespace, m.pod or ""))
                if pod is not None:
                    pod["metadata"]["annotations"][LAST_CHECKPOINT_ANNOTATION] = stamp
                    self.kube.touch(pod)
            self.emit("checkpoint", g)
        else:  # restored
            self.machines.dev_util[idx] = g.utilization
            lost = (g.overhead_until - g.run_started) * g.size
            self.accounting.lose("restart_overhead", lost)
        self._plan(g)

    def stall(self, g: Gang, version: int, why: str) -> None:
        """Every member stops (a member's fault, its node down, or a deadlock); in
        a hung collective every member's kernels spin: busy, links silent."""
        if g.version != version or g.state != "running" or g.stalled:
            return
        if why == "stall":
            g.stall_at = None
        g.work = self.progress(g)
        g.mark = self.time.now
        g.stalled = True
        g.stalled_since = self.time.now
        g.version += 1
        g.hung = why == "collective_hang"
        idx = np.array(g.devices)
        self.machines.dev_util[idx] = g.utilization if g.hung else 0.0
        self.jobs.links.quiet(idx)

    def _stop(self, g: Gang) -> None:
        """The run ends (a member went): progress back to the checkpoint, and what
        was lost booked by cause. Members stay bound until their pods go."""
        if g.state != "running":
            return
        now, a = self.time.now, self.accounting
        w = self.progress(g)
        kept = self.jobs.checkpoint_of(g, w)
        a.useful(kept - g.run_start_work, g.factor, g.size, g.namespace)
        a.lose("redone", (w - kept) * g.factor * g.size)
        if g.stalled:
            a.lose("detection", (now - g.stalled_since) * g.size)
        if now < g.overhead_until:  # else booked when it ended
            a.lose("restart_overhead", (now - g.run_started) * g.size)
        if not g.stalled and not self._faulty(g):
            self.stats.false_requeues += 1
        g.work = g.run_start_work = kept
        g.mark = now
        g.version += 1
        g.stalled = False
        g.restarts += 1
        g.state = "waiting"
        g.waiting_since = now
        self.jobs.links.quiet(np.array(g.devices, dtype=np.int64))
        g.devices = ()
        self.jobs.running.discard(g.name)
        a.end_stuck(g.name, now)

    def _faulty(self, g: Gang) -> bool:
        """Whether any member is on a faulty device or a node that is not Ready."""
        ms = self.machines
        for m in g.members:
            if m.slot >= 0 and not ms.slots[m.slot].ready:
                return True
        state = ms.dev_state[np.array(g.devices)] if g.devices else np.zeros(0)
        return bool((state != OK).any())

    def _complete(self, g: Gang) -> None:
        g.work = g.total
        self.accounting.useful(g.total - g.run_start_work, g.factor, g.size, g.namespace)
        self._end(g, "done")
        self.stats.complete(self.time.now - g.submitted)
        self.emit("job_done", g)

    def _end(self, g: Gang, state: str) -> None:
        """The gang leaves the cluster: its pods, child Jobs and owner object."""
        self.jobs.running.discard(g.name)
        g.version += 1
        for m in g.members:
            self._unbind(g, m)
            if m.pod is not None:
                self.kube.remove_pod(g.namespace, m.pod)
                m.pod = None
            if g.kind == "jobset":
                self.kube.remove_job(g.namespace, m.name)
        self.pending[g.pool].pop(g.name, None)
        self.kube.remove_custom(JOBSETS if g.kind == "jobset" else PYTORCHJOBS, g.namespace, g.name)
        g.state = state
        g.devices = ()
        self.accounting.end_stuck(g.name, self.time.now)

    # -- the operators' reactions --------------------------------------------------------

    def _member(self, pod: Obj) -> tuple[Gang, Member] | None:
        meta = pod["metadata"]
        labels = meta.get("labels", {})
        g = self.gangs.get(labels.get(JOBSET_NAME_LABEL) or labels.get(KUBEFLOW_JOB_NAME_LABEL, ""))
        if g is None or g.namespace != meta["namespace"] or g.state in ("done", "lost"):
            return None
        for m in g.members:
            if m.pod == meta["name"]:
                return g, m
        return None

    def pod_removed(self, pod: Obj, reason: str) -> None:
        """A member pod was deleted, evicted or failed."""
        found = self._member(pod)
        if found is None:
            return
        g, m = found
        self._stop(g)
        self._unbind(g, m)
        m.pod = None
        if g.suspended:
            return
        if g.kind == "jobset":
            # Its child Job (backoffLimit 0) fails; the JobSet controller restarts
            # the whole JobSet once for the attempt.
            kjob = self.kube.jobs.get((g.namespace, m.name))
            if kjob is not None:
                kjob["status"] = {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}
                self.kube.touch(kjob)
            if m.attempt == g.attempt and not g.restart_pending:
                g.restart_pending = True
                self.holding[g.pool] = self.holding.get(g.pool, 0) + 1
                self.time.at(self.time.now + RECONCILE_DELAY, lambda: self._restart_jobset(g))
            return
        # PyTorchJob: the operator recreates the pod under its own name.
        if g.restarts > self.scenario.workload.backoff_limit:
            self._lose(g, "BackoffLimitExceeded")
            return
        self._create_pod(g, m)

    def _restart_jobset(self, g: Gang) -> None:
        g.restart_pending = False
        self.holding[g.pool] -= 1
        self.dirty.add(g.pool)
        if g.state in ("done", "lost") or g.suspended:
            return
        owner = self._owner(g)
        if owner is None:
            return
        restarts = int(owner["status"].get("restarts", 0))
        if restarts >= int(owner["spec"]["failurePolicy"]["maxRestarts"]):
            self._lose(g, "ReachedMaxRestarts")
            return
        self._stop(g)
        self._delete_members(g)
        owner["status"]["restarts"] = restarts + 1
        self.kube.touch(owner)
        g.attempt = restarts + 1
        self._create_all(g)

    def _delete_members(self, g: Gang) -> None:
        """The operator's own deletion of every member pod (and child Job)."""
        for m in g.members:
            self._unbind(g, m)
            if m.pod is not None:
                self.kube.remove_pod(g.namespace, m.pod)
                m.pod = None
            if g.kind == "jobset":
                self.kube.remove_job(g.namespace, m.name)
        self.pending[g.pool].pop(g.name, None)

    def _lose(self, g: Gang, reason: str) -> None:
        self._stop(g)
        self._end(g, "lost")
        self.stats.lost += 1
        self.emit("job_lost", (g, reason))

    def owner_changed(self, plural: str, obj: Obj) -> None:
        """A JobSet or PyTorchJob was patched: suspend and resume."""
        if plural == WORKLOADS and self.workload_changed is not None:
            self.workload_changed(obj)
        if plural not in (JOBSETS, PYTORCHJOBS):
            return
        g = self.gangs.get(obj["metadata"]["name"])
        if g is None or g.namespace != obj["metadata"]["namespace"] or g.state in ("done", "lost"):
            return
        spec = obj.get("spec", {})
        if plural == PYTORCHJOBS:
            spec = spec.get("runPolicy") or {}
        suspend = bool(spec.get("suspend"))
        if suspend and not g.suspended:
            g.suspended = True
            self._stop(g)  # counts a false requeue if the gang was fine
            g.waiting_since = None
            self._delete_members(g)
            g.state = "pending"
        elif not suspend and g.suspended:
            g.suspended = False
            g.started = self.time.now
            self.jobs.schedule_deadline(g)
            # Admitted the first time (Kueue), it has not waited for a restart.
            g.waiting_since = self.time.now if g.attempts else None
            self._create_all(g)  # a resumed JobSet keeps its restart attempt

    def fail_member(self, g: Gang, device: int) -> None:
        """The member pod holding ``device`` fails (its device was lost)."""
        for m in g.members:
            if device in m.devices and m.pod is not None:
                pod = self.kube.remove_pod(g.namespace, m.pod)
                if pod is not None:
                    self.pod_removed(pod, "Failed")
                return

    def deadline(self, g: Gang) -> None:
        self._lose(g, "DeadlineExceeded")

    def waiting_devices(self, registered: dict[str, int]) -> dict[str, int]:
        """Devices asked for by pending member pods, by pool."""
        out: dict[str, int] = {}
        for pool, queue in self.pending.items():
            if registered.get(pool):
                for name in queue:
                    g = self.gangs[name]
                    pending = sum(1 for m in g.members if m.slot < 0 and m.pod is not None)
                    out[pool] = out.get(pool, 0) + pending * self.per_node(g)
        return out


__all__ = ["JOBSETS", "KIND_LABEL", "PYTORCHJOBS", "GangController"]
