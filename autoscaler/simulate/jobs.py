"""Jobs of the simulated fleet: their arrivals and progress, Kubernetes' Job
controller, and the scheduler's pass over the pending pods.

Why a module of its own: this is what the rules protect (a job's progress is the
simulator's measure of goodput) and what most actions touch (they delete, evict,
requeue and migrate pods). It models:

- **Jobs**: a job needs ``total`` seconds of work at full speed on its reference
  device (the model of the pool it was drawn for); on another model it runs
  ``peak(reference) / peak(model)`` times as long (the placement catalogue's
  peaks, at the workload's precision), and on devices linked worse than ideally
  ``slowdown`` times longer again (``scheduler.slowdown``). Progress is saved
  every ``checkpointInterval`` of work; a job that stops (a fault kills it, it is
  evicted or requeued) resumes from its last checkpoint after
  ``restartOverhead``. A stalled job holds its devices and makes no progress
  until something removes its pod; a job hung in a collective
  (``collective_hang``) holds them busy, its device links silent
  (``links.py``).
- **Job controller**: a Job whose pod was deleted, evicted or failed gets a new
  pod at once (failures count towards ``backoffLimit``; deletions and evictions
  do not, as with a ``podFailurePolicy`` that ignores disruptions). A suspended
  Job has no pod. ``activeDeadlineSeconds`` runs from the job's start, reset when
  it is resumed (Kueue's admission semantics); a job past it fails for good.
- **Scheduler pass**: pending pods, oldest first, go to the nodes of the pools
  they may use (their pool's ``nodeSelector``; or, for a job that may use
  several, every pool of its vendor or those its node affinity lists) through a
  pluggable ``Scheduler`` (``scheduler.py``). Jobs that may use the same pools
  share one queue; the queues are served in the order of their pool lists.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from accel_common.names import (
    FLOPS_ANNOTATION,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    PRECISION_ANNOTATION,
    TIMEOUT_ANNOTATION,
    VENDOR_RESOURCE,
)
from accel_common.names import LEGACY_JOB_NAME_LABEL as JOB_LABEL
from autoscaler.kube.protocol import Obj
from autoscaler.placement.catalogue import default_catalogue
from autoscaler.simulate.accounting import Accounting
from autoscaler.simulate.checkpoints import Checkpoints
from autoscaler.simulate.clock import EPOCH, SimClock
from autoscaler.simulate.draws import draw_duration, draw_pool
from autoscaler.simulate.gangs import GangController
from autoscaler.simulate.jobstate import RESTORE_UTILIZATION, Gang, Job
from autoscaler.simulate.kube import POOL_LABEL, SimKube
from autoscaler.simulate.kueue import Hooks, SimKueue, listening
from autoscaler.simulate.links import DeviceLinks
from autoscaler.simulate.machines import BROKEN, OK, MachineSet
from autoscaler.simulate.scenario import Scenario
from autoscaler.simulate.scenario_workload import WorkloadSpec
from autoscaler.simulate.scheduler import Request, Scheduler, slowdown


class JobController:
    """The fleet's jobs and pods; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        machines: MachineSet,
        accounting: Accounting,
        scheduler: Scheduler,
        *,
        rng_arrival: np.random.Generator,
        rng_job: np.random.Generator,
        emit: Callable[[str, Any], None],
    ) -> None:
        self.scenario = scenario
        self.kube = kube
        self.time = time
        self.machines = machines
        self.accounting = accounting
        self.stats = accounting.stats
        self.scheduler = scheduler
        self.rng_arrival = rng_arrival
        self.rng_job = rng_job
        self.emit = emit
        self.pools = {p.name: p for p in scenario.pools}
        # Peak FLOP/s of one device of each pool at the workload's precision (the
        # loader checked that the catalogue has them).
        catalogue = default_catalogue()
        self.peak: dict[str, float] = {}
        for p in scenario.pools:
            peak = catalogue.peak(p.model, scenario.workload.precision)
            if peak is None:
                raise ValueError(
                    f"pool {p.name}: no {scenario.workload.precision} peak for {p.model!r} "
                    "in the device catalogue (load the scenario with load_scenario)"
                )
            self.peak[p.name] = peak
        self.jobs: dict[str, Job] = {}
        self.job_by_index: list[Job] = []
        # One FIFO queue per set of pools that jobs may use.
        self.pending: dict[tuple[str, ...], dict[str, None]] = {(p,): {} for p in self.pools}
        self._eligible: dict[tuple[str, int], tuple[str, ...]] = {}
        self.running: set[str] = set()
        # Queues that gained a job: what to schedule next, with the pools whose
        # nodes changed (``MachineSet.changed_pools``).
        self._queues_dirty: set[tuple[str, ...]] = set()
        self._disrupted: dict[str, int] = {}  # namespace -> evicted, not yet running
        self._job_seq = 0
        self.links = DeviceLinks(machines)  # what the link throughput series read
        w = scenario.workload
        seed = rng_job.bit_generator.seed_seq
        assert isinstance(seed, np.random.SeedSequence)
        self.checkpoints = Checkpoints(w.checkpoint_interval, w.checkpoint_pause, w.declares, seed)
        hooks = Hooks(self.jobs, self.job_changed, self._owner_changed, self._progress, seed)
        self.kueue = SimKueue(scenario, kube, time, machines, hooks) if scenario.kueue else None
        self.emit = emit if self.kueue is None else listening(self.kueue, emit)
        self.gangs = GangController(scenario, kube, time, machines, accounting, self, self.emit)
        if self.kueue is not None:
            self.gangs.workload_changed = self.kueue.workload_changed

    def _owner_changed(self, plural: str, obj: Obj) -> None:
        self.gangs.owner_changed(plural, obj)

    def start(self) -> None:
        for ns in range(self.scenario.workload.namespaces):
            self._disrupted[_namespace(ns)] = 0
        for _ in range(self.scenario.workload.initial_jobs):
            self._submit()  # the backlog the fleet starts with
        self._schedule_arrival(self.time.now)

    # -- scheduling ------------------------------------------------------------------

    def wants_schedule(self) -> bool:
        return bool(self.machines.changed_pools or self._queues_dirty)

    def schedule(self) -> None:
        pools, self.machines.changed_pools = self.machines.changed_pools, set()
        queues, self._queues_dirty = self._queues_dirty, set()
        for group in sorted(self.pending):
            queue = self.pending[group]
            if not queue or (group not in queues and pools.isdisjoint(group)):
                continue
            views = self.machines.views(group)
            if not views:
                continue
            smallest_failed = math.inf
            for job_name in list(queue):
                job = self.jobs[job_name]
                if job.size >= smallest_failed:
                    continue
                request = Request(
                    job.name,
                    job.pool,
                    job.size,
                    () if job.bound else group,
                    job.flops,
                    self.scenario.workload.precision,
                )
                placement = self.scheduler.place(request, views)
                if placement is None:
                    smallest_failed = job.size
                    if not views:
                        break
                    continue
                self._bind(job, placement.node, placement.devices)
                if not views:
                    break

    def _bind(self, job: Job, node: str, devices: Sequence[int]) -> None:
        m = self.machines
        now = self.time.now
        slot = m.slots[m.node_slot[node]]
        pool = slot.pool
        if len(devices) != job.size or any(d not in slot.free for d in devices):
            raise RuntimeError(
                f"scheduler {self.scheduler.name} placed {job.name} on devices {list(devices)} "
                f"of {node}, which has {slot.free} free and the job needs {job.size}"
            )
        if pool.name not in job.pools:
            raise RuntimeError(
                f"scheduler {self.scheduler.name} placed {job.name} on {node} of pool "
                f"{pool.name}; the job may only use {', '.join(job.pools)}"
            )
        del self.pending[job.pools][job.name]
        for d in devices:
            slot.free.remove(d)
        m.update_schedulable(slot)
        assert job.pod is not None
        self.kube.bind_pod(job.namespace, job.pod, node)
        g = tuple(slot.base + d for d in devices)
        job.slot, job.devices = slot.index, g
        job.state = "running"
        job.bound_at = now
        job.links = slowdown(pool.topology, list(devices))
        job.factor = self.peak[job.pool] / self.peak[pool.name] * job.links
        job.speed = 1.0 / job.factor
        job.work = job.run_start_work
        job.mark = now
        job.overhead_until = now + (
            self.scenario.workload.restart_overhead if job.attempts > 1 else 0.0
        )
        job.stalled = job.hung = False
        job.version += 1
        self.stats.queue_wait.append(now - job.pod_created)
        if job.attempts > 1:
            self.accounting.lose("capacity_wait", (now - job.pod_created) * job.size)
        if job.started is None:
            job.started = now
            self.schedule_deadline(job)
        if job.disrupted:
            job.disrupted = False
            self._disrupted[job.namespace] -= 1
        idx = np.array(g)
        m.dev_job[idx] = job.index
        m.dev_util[idx] = RESTORE_UTILIZATION if job.overhead_until > now else job.utilization
        self.links.busy(idx)
        self.accounting.hold(pool.name, job.size, namespace=job.namespace)
        self.running.add(job.name)
        if job.overhead_until > now:
            version = job.version
            self.time.at(job.overhead_until, lambda: self._restored(job, version))
        self._plan_progress(job)
        self.emit("pod_bound", job)

    def _restored(self, job: Job, version: int) -> None:
        if job.version == version and job.state == "running" and not job.stalled:
            self.machines.dev_util[np.array(job.devices)] = job.utilization

    # -- arrivals ------------------------------------------------------------------------

    def _schedule_arrival(self, after: float) -> None:
        w = self.scenario.workload
        rate = w.arrivals_per_hour / 3600.0
        if rate <= 0:
            return
        peak = rate * (1.0 + (w.swing.amplitude if w.swing else 0.0))
        t = after
        while True:
            t += float(self.rng_arrival.exponential(1.0 / peak))
            if t > self.time.end:
                return
            if w.swing is None:
                break
            phase = 2 * math.pi * (t - EPOCH) / w.swing.period
            if self.rng_arrival.random() * peak <= rate * (1 + w.swing.amplitude * math.sin(phase)):
                break
        self.time.at(t, self._arrival)

    def _arrival(self) -> None:
        self._submit()
        self._schedule_arrival(self.time.now)

    def _submit(self) -> None:
        """One new job, drawn, with its Job (or gang owner) and pod(s)."""
        w = self.scenario.workload
        rng = self.rng_job
        sizes = np.array([s for s, _ in w.sizes])
        weights = np.array([x for _, x in w.sizes], dtype=float)
        size = int(sizes[rng.choice(len(sizes), p=weights / weights.sum())])
        pool = draw_pool(self.scenario, size, rng)
        per = self.pools[pool].devices_per_node
        gang = w.gang_kind is not None and size >= per and size % per == 0
        pools = (pool,) if gang else self.eligible(pool, size)
        total = max(60.0, draw_duration(self.scenario, rng))
        lo, hi = w.utilization
        util = float(lo + (hi - lo) * rng.random())
        stall = rng.random() < w.stall_probability
        stall_at = float(total * rng.random()) if stall else None
        index = self._job_seq
        self._job_seq += 1
        job = (Gang if gang else Job)(
            name=f"train-{index:06d}",
            namespace=self.kueue.namespace() if self.kueue else _namespace(index % w.namespaces),
            pool=pool,
            size=size,
            total=total,
            utilization=util,
            timeout=round(total * w.timeout_factor),
            deadline=round(total * w.deadline_factor),
            submitted=self.time.now,
            stall_at=stall_at,
            index=index,
            pools=pools,
            flops=total * self.peak[pool] * size,
            bound=gang
            or w.eligible == "pool"
            or (w.eligible == "list" and pool not in w.eligible_pools),
        )
        self.checkpoints.draw_declares(job)
        job.suspended = self.kueue is not None  # Kueue admits it: created suspended
        self.jobs[job.name] = job
        self.job_by_index.append(job)
        self.stats.submitted += 1
        if isinstance(job, Gang):
            job.nodes = size // per
            self.gangs.submit(job)
        else:
            self._add_job(job)
        if self.kueue is not None:
            self.kueue.submit(job, self.pod_spec(job, job.size // getattr(job, "nodes", 1)))

    def _add_job(self, job: Job) -> None:
        w = self.scenario.workload
        self.kube.add_job(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": job.name,
                    "namespace": job.namespace,
                    "labels": self.labels(job),
                    "annotations": {TIMEOUT_ANNOTATION: f"{int(job.timeout)}s"},
                },
                "spec": {
                    "suspend": job.suspended,
                    "backoffLimit": w.backoff_limit,
                    "activeDeadlineSeconds": int(job.deadline),
                    "template": {
                        "metadata": {"annotations": self.annotations(job)},
                        "spec": self.pod_spec(job),
                    },
                },
                "status": {"active": 0},
            }
        )
        if not job.suspended:
            self._new_pod(job)

    def eligible(self, pool: str, size: int) -> tuple[str, ...]:
        """The pools a job of ``size`` devices drawn for ``pool`` may run on, sorted:
        its own; with ``eligiblePools: vendor`` every pool of the vendor whose nodes
        are big enough; with a list, the listed ones that are, if ``pool`` is one."""
        key = (pool, size)
        got = self._eligible.get(key)
        if got is None:
            w: WorkloadSpec = self.scenario.workload
            vendor = self.pools[pool].vendor
            if w.eligible == "vendor":
                names = [p.name for p in self.scenario.pools if p.vendor == vendor]
            elif w.eligible == "list" and pool in w.eligible_pools:
                names = list(w.eligible_pools)
            else:
                names = [pool]
            got = tuple(sorted(n for n in names if self.pools[n].devices_per_node >= size))
            self._eligible[key] = got
        return got

    # -- pods ----------------------------------------------------------------------------

    def labels(self, job: Job) -> dict[str, str]:
        return {POOL_LABEL: job.pool} if job.bound else {}

    def annotations(self, job: Job) -> dict[str, str]:
        """The timeout the rules read, and the work the placement scorer reads."""
        return {
            TIMEOUT_ANNOTATION: f"{int(job.timeout)}s",
            FLOPS_ANNOTATION: f"{job.flops:.6g}",
            PRECISION_ANNOTATION: self.scenario.workload.precision,
        }

    def pod_spec(self, job: Job, devices: int | None = None) -> Obj:
        """A bound job's pod selects its pool; one that may use every pool of its
        vendor asks only for the vendor's resource, which is all it takes on a real
        cluster; one that may use a list of pools requires them by node affinity."""
        resource = VENDOR_RESOURCE[self.pools[job.pool].vendor]
        n = str(job.size if devices is None else devices)
        spec: Obj = {"restartPolicy": "Never"}
        if job.bound:
            spec["nodeSelector"] = {POOL_LABEL: job.pool}
        elif self.scenario.workload.eligible == "list":
            term = {"matchExpressions": [
                {"key": POOL_LABEL, "operator": "In", "values": list(job.pools)}
            ]}  # fmt: skip
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        spec["containers"] = [
            {
                "name": "main",
                "image": "registry.example/train:latest",
                "resources": {"requests": {resource: n}, "limits": {resource: n}},
            }
        ]
        return spec

    def _new_pod(self, job: Job) -> None:
        job.attempts += 1
        job.pod = f"{job.name}-{job.attempts}"
        job.pod_created = self.time.now
        job.state = "pending"
        kjob = self.kube.jobs[(job.namespace, job.name)]
        self.kube.add_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": job.pod,
                    "namespace": job.namespace,
                    "labels": {
                        JOB_LABEL: job.name,
                        JOB_NAME_LABEL: job.name,
                        **self.labels(job),
                    },
                    "annotations": self.annotations(job),
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": job.name,
                            "uid": kjob["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": self.pod_spec(job),
                "status": {"phase": "Pending"},
            }
        )
        kjob["status"]["active"] = 1
        self.kube.touch(kjob)
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        self.pending.setdefault(job.pools, {})[job.name] = None
        self._queues_dirty.add(job.pools)

    def waiting_devices(self, registered: Mapping[str, int] | None = None) -> dict[str, int]:
        """Devices asked for by pending pods, by pool, as ``clusterstate.pool_rows``
        counts them from the API: a pod that several pools can satisfy (big enough,
        and offering a node: ``registered`` above 0) counts towards the one with the
        most room to grow, then the first by name; a pod that none can satisfy
        counts nowhere. ``registered``: per pool, above 0 when it offers a node (the
        telemetry counts a node whose devices are allocatable, or the shape its
        capacity annotations declare: scale from zero); by default its nodes."""
        if registered is None:
            registered = {p: self.machines.pool_nodes(p) for p in self.pools}
        pool_machines = self.machines.pool_machines
        room = {p.name: p.max - pool_machines[p.name] for p in self.scenario.pools}
        out = dict.fromkeys(self.pools, 0)
        for group, queue in self.pending.items():
            fitting = [p for p in group if registered[p]]
            if not fitting or not queue:
                continue
            chosen = min(fitting, key=lambda p: (-room[p], p))
            out[chosen] += sum(self.jobs[j].size for j in queue if self.jobs[j].pod is not None)
        return out

    # -- progress ------------------------------------------------------------------------

    def _progress(self, job: Job) -> float:
        if job.state != "running" or job.stalled:
            return job.work
        start = max(job.mark, job.overhead_until)
        return job.work + max(0.0, self.time.now - start) * job.speed

    def _plan_progress(self, job: Job) -> None:
        """Schedules the job's next milestone: completion, or the stall it carries."""
        if job.state != "running" or job.stalled:
            return
        start = max(job.mark, job.overhead_until)
        version = job.version
        if job.stall_at is not None and job.work < job.stall_at < job.total:
            t = start + (job.stall_at - job.work) / job.speed
            self.time.at(t, lambda: self.stall(job, version, "stall"))
            return
        t = start + (job.total - job.work) / job.speed
        self.time.at(t, lambda: self._complete(job, version))

    def stall(self, job: Job, version: int, why: str) -> None:
        """The job stops making progress but holds its devices (a deadlock, or a
        fault of kind ``why``: in a hung collective its kernels spin, busy with
        silent links), if ``version`` is still its current run."""
        if isinstance(job, Gang):
            self.gangs.stall(job, version, why)
            return
        if job.version != version or job.state != "running" or job.stalled:
            return
        if why == "stall":
            job.stall_at = None  # a deadlock that a restart cures
        job.work = self._progress(job)
        job.mark = self.time.now
        job.stalled = True
        job.version += 1
        job.hung = why == "collective_hang"
        idx = np.array(job.devices)
        self.machines.dev_util[idx] = job.utilization if job.hung else 0.0
        self.links.quiet(idx)

    def _complete(self, job: Job, version: int) -> None:
        if job.version != version or job.state != "running":
            return
        job.work = job.total
        self._release(job, kept=job.total)
        job.state = "done"
        self.stats.complete(self.time.now - job.submitted)
        assert job.pod is not None
        self.kube.remove_pod(job.namespace, job.pod)
        self.kube.remove_job(job.namespace, job.name)
        job.pod = None
        self.accounting.end_stuck(job.name, self.time.now)
        self.emit("job_done", job)

    def _release(self, job: Job, kept: float) -> None:
        """The job's pod leaves its devices; ``kept`` is the work that survives."""
        m = self.machines
        now = self.time.now
        a = self.accounting
        a.useful(kept - job.run_start_work, job.factor, job.size, job.namespace)
        a.lose("redone", (min(self._progress(job), job.total) - kept) * job.factor * job.size)
        if job.stalled:
            a.lose("detection", (now - job.mark) * job.size)
        a.lose("restart_overhead", max(0.0, min(now, job.overhead_until) - job.bound_at) * job.size)
        job.work = kept
        job.run_start_work = kept
        job.mark = now
        job.version += 1
        idx = np.array(job.devices)
        m.dev_job[idx] = -1
        m.dev_util[idx] = 0.0
        self.links.quiet(idx)
        slot = m.slots[job.slot]
        for g in job.devices:
            d = g - slot.base
            state = m.dev_state[g]
            if state == BROKEN:
                m.release_broken(g)
            elif state == OK and slot.node is not None:
                bisect.insort(slot.free, d)
        m.update_schedulable(slot)
        m.changed_pools.add(slot.pool.name)
        self.accounting.free(slot.pool.name, job.size, namespace=job.namespace)
        self.running.discard(job.name)
        self.emit("pod_unbound", job)
        job.slot, job.devices = -1, ()

    def _checkpoint(self, job: Job) -> float:
        return self.checkpoint_of(job, self._progress(job))

    def checkpoint_of(self, job: Job, work: float) -> float:
        """The work a run that got to ``work`` keeps: its last checkpoint."""
        ci = self.scenario.workload.checkpoint_interval
        if ci <= 0:
            return job.run_start_work
        return max(job.run_start_work, math.floor(work / ci) * ci)

    # -- the Job controller ----------------------------------------------------------------

    def pod_removed(self, pod: Obj, reason: str) -> None:
        """The Job controller's reaction to a pod that is gone (see the module
        docstring). Also called for pods the simulation itself fails."""
        meta = pod["metadata"]
        labels = meta.get("labels", {})
        if JOBSET_NAME_LABEL in labels or KUBEFLOW_JOB_NAME_LABEL in labels:
            self.gangs.pod_removed(pod, reason)
            return
        job = self.jobs.get(labels.get(JOB_LABEL, ""))
        if job is None or job.pod != meta["name"] or job.state in ("done", "lost"):
            return
        if job.state == "running":
            self._release(job, kept=self._checkpoint(job))
        else:
            self.pending[job.pools].pop(job.name, None)
        self.accounting.end_stuck(job.name, self.time.now)
        job.pod = None
        job.state = "pending"
        if reason == "Evicted" and not job.disrupted:
            job.disrupted = True
            self._disrupted[job.namespace] = self._disrupted.get(job.namespace, 0) + 1
        if reason == "Failed":
            job.failures += 1
            if job.failures > self.scenario.workload.backoff_limit:
                self._lose(job, "BackoffLimitExceeded")
                return
        if not job.suspended:
            self._new_pod(job)

    def pod_created(self, pod: Obj) -> None:
        """A pod someone else created (``migrate_jobs`` recreating a bare pod): it
        joins its job if the job has no pod; otherwise nothing runs it."""
        job = self.jobs.get(pod["metadata"].get("labels", {}).get(JOB_LABEL, ""))
        if job is None or job.pod is not None or job.state in ("done", "lost"):
            return
        job.pod = pod["metadata"]["name"]
        job.pod_created = self.time.now
        job.attempts += 1
        self._enqueue(job)

    def fail_pod(self, job: Job, device: int) -> None:
        """The job's pod on ``device`` fails (the device was lost)."""
        if isinstance(job, Gang):
            self.gangs.fail_member(job, device)
            return
        if job.pod is None:
            return
        pod = self.kube.remove_pod(job.namespace, job.pod)
        if pod is not None:
            self.pod_removed(pod, "Failed")

    def job_changed(self, kjob: Obj) -> None:
        job = self.jobs.get(kjob["metadata"]["name"])
        if job is None or job.state in ("done", "lost"):
            return
        suspend = bool(kjob.get("spec", {}).get("suspend"))
        if suspend and not job.suspended:
            job.suspended = True
            if job.state == "running" and not job.stalled and not self._faulty(job):
                self.stats.false_requeues += 1
            if job.pod is not None:
                pod = self.kube.remove_pod(job.namespace, job.pod)
                if pod is not None:
                    self.pod_removed(pod, "Deleted")
        elif not suspend and job.suspended:
            job.suspended = False
            job.started = self.time.now  # resuming resets the deadline clock
            self.schedule_deadline(job)
            if job.pod is None:
                self._new_pod(job)

    def _faulty(self, job: Job) -> bool:
        """Whether the job's pod is on a device that is not healthy."""
        return bool((self.machines.dev_state[np.array(job.devices)] != OK).any())

    def schedule_deadline(self, job: Job) -> None:
        started = job.started
        self.time.at(self.time.now + job.deadline, lambda: self._deadline(job, started))

    def _deadline(self, job: Job, started: float | None) -> None:
        if job.started != started or job.state in ("done", "lost"):
            return
        self._lose(job, "DeadlineExceeded")

    def _lose(self, job: Job, reason: str) -> None:
        if isinstance(job, Gang):
            self.gangs.deadline(job)
            return
        if job.state == "running":
            self._release(job, kept=self._checkpoint(job))
        elif job.name in self.pending[job.pools]:
            del self.pending[job.pools][job.name]
        if job.pod is not None:
            self.kube.remove_pod(job.namespace, job.pod)
            job.pod = None
        if job.disrupted:
            job.disrupted = False
            self._disrupted[job.namespace] -= 1
        self.accounting.end_stuck(job.name, self.time.now)
        job.state = "lost"
        self.stats.lost += 1
        self.kube.remove_job(job.namespace, job.name)
        self.emit("job_lost", (job, reason))

    def eviction_allowed(self, pod: Obj) -> bool:
        limit = self.scenario.workload.pdb_max_unavailable
        if limit is None:
            return True
        return self._disrupted.get(pod["metadata"]["namespace"], 0) < limit

    def finish(self) -> None:
        """At the scenario's end: the running jobs' progress counts as kept, the
        stuck ones count as remediated at the end, the pending ones waited until it."""
        end = self.time.end
        for name in sorted(self.running):
            job = self.jobs[name]
            kept = self._progress(job)
            self.accounting.useful(kept - job.run_start_work, job.factor, job.size, job.namespace)
            if job.stalled:  # still stalled: its detection delay runs to the end
                self.accounting.lose("detection", (end - job.mark) * job.size)
        self.accounting.end_all_stuck(end)
        for job in self.job_by_index:
            # A gang's whole-gang restarts; a batch Job's pods after its first.
            # (A Kueue job never admitted has had no pod at all.)
            self.accounting.restarted(
                job.restarts if isinstance(job, Gang) else max(0, job.attempts - 1)
            )
        for queue in (*self.pending.values(), *self.gangs.pending.values()):
            for name in queue:
                self.stats.queue_wait.append(end - self.jobs[name].pod_created)
        if self.kueue is not None:
            self.stats.queues = self.kueue.figures(end, self.stats)


def _namespace(i: int) -> str:
    return f"team-{chr(ord('a') + i % 26)}{'' if i < 26 else i // 26}"


__all__ = ["Job", "JobController"]
