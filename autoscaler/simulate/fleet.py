"""The simulated fleet: nodes, devices, jobs and faults in simulated time.

A discrete-event simulation around one heap of timed events (job arrivals and
completions, stalls, faults, recoveries, machines that finish provisioning, the
pod GC after a node goes down, plot samples, and whatever the runner adds:
evaluation ticks and the wake-ups of actions that sleep). Kubernetes' own
controllers are modelled here, as reactions to writes through ``SimKube``:

- **Job controller**: a Job whose pod was deleted, evicted or failed gets a new
  pod at once (failures count towards ``backoffLimit``; deletions and evictions
  do not, as with a ``podFailurePolicy`` that ignores disruptions). A suspended
  Job has no pod. ``activeDeadlineSeconds`` runs from the job's start, reset when
  it is resumed (Kueue's admission semantics); a job past it fails for good.
- **Scheduler**: pending pods, oldest first, go to the nodes of the pools they
  may use (their pool's ``nodeSelector``; or, for a job that may use several,
  every pool of its vendor or those its node affinity lists) that are Ready, not
  cordoned and carry no ``NoSchedule`` or ``NoExecute`` taint, through a pluggable
  ``Scheduler`` (``scheduler.py``). A device that is lost, or resetting after a
  fatal fault, is not offered (the device plugin reports it unhealthy). Jobs that
  may use the same pools share one queue; the queues are served in the order of
  their pool lists.
- **MachineSet controller**: a MachineDeployment's replicas become Machines;
  a new Machine is a Node after the pool's ``provisionTime``; on scale-down the
  Machines annotated ``cluster.x-k8s.io/delete-machine`` go first, then those
  still provisioning, then the newest.
- **Node lifecycle**: a node that goes down turns NotReady; its pods are deleted
  five minutes later (the default ``tolerationSeconds`` for unreachable nodes).
  A ``NoExecute`` taint evicts the pods at once.

Jobs: a job needs ``total`` seconds of work at full speed on its reference
device (the model of the pool it was drawn for); on another model it runs
``peak(reference) / peak(model)`` times as long (the placement catalogue's peaks,
at the workload's precision), and on devices linked worse than ideally
``slowdown`` times longer again (``scheduler.slowdown``).
Progress is saved every ``checkpointInterval`` of work; a job that stops (a
fault kills it, it is evicted or requeued) resumes from its last checkpoint
after ``restartOverhead``. A fault on a device kills the job on it (a lost
device, a node that goes down) or stalls it (a fatal fault, an uncorrected ECC
burst, a hang, a stall): a stalled job holds its devices and makes no progress
until something removes its pod.

Accounting (what ``summary.json`` reports): device-seconds allocated are those
held by a running pod; useful ones are those whose progress was kept (reached a
checkpoint that was used, or the end). Restart overhead, stalled time and work
lost since the last checkpoint are allocated but not useful.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, overload

import numpy as np

from autoscaler.kube.protocol import Obj
from autoscaler.placement.catalogue import default_catalogue
from autoscaler.placement.score import ANN_FLOPS, ANN_PRECISION
from autoscaler.simulate.kube import (
    CAPI_API_VERSION,
    CLUSTER_LABEL,
    DELETE_ANNOTATION,
    DEPLOYMENT_LABEL,
    MAX_ANNOTATION,
    MIN_ANNOTATION,
    POOL_LABEL,
    SimKube,
    timestamp,
)
from autoscaler.simulate.scenario import (
    RESOURCE,
    PoolSpec,
    Scenario,
    WorkloadSpec,
    device_name,
    node_name,
)
from autoscaler.simulate.scheduler import NodeView, Request, Scheduler, slowdown

# Simulated time starts at 2026-01-01T00:00:00Z, so that every timestamp the
# actions write and read is a plausible one.
EPOCH = 1_767_225_600.0
CAPI_NAMESPACE = "default"
TIMEOUT_ANNOTATION = "accel-fleet.io/timeout"
VENDOR_LABEL = "accel-fleet.io/vendor"
JOB_LABEL = "job-name"
# Pods on an unreachable node are deleted after the default tolerationSeconds.
UNREACHABLE_GRACE = 300.0
# Device states.
OK, BROKEN, LOST, RESETTING = 0, 1, 2, 3
# Utilization while a job loads its checkpoint.
RESTORE_UTILIZATION = 0.05


@dataclass
class Job:
    name: str
    namespace: str
    pool: str  # drawn for: its reference device is this pool's model
    size: int
    total: float  # seconds of work at full speed on the reference device
    utilization: float
    timeout: float  # the accel-fleet.io/timeout annotation
    deadline: float  # activeDeadlineSeconds
    submitted: float
    stall_at: float | None  # work at which the job deadlocks by itself
    index: int
    pools: tuple[str, ...] = ()  # where it may run (its queue), sorted
    flops: float = 0.0  # total x reference peak x size
    bound: bool = True  # to ``pool`` by nodeSelector, or free to use ``pools``
    state: str = "pending"  # pending | running | done | lost
    work: float = 0.0  # progress at ``mark``
    mark: float = 0.0
    run_start_work: float = 0.0
    speed: float = 1.0  # work per second of the current run: 1 / factor
    factor: float = 1.0  # run time per unit of work: model ratio x links
    links: float = 1.0  # topology slowdown of the current run
    overhead_until: float = 0.0
    stalled: bool = False
    suspended: bool = False
    pod: str | None = None
    pod_created: float = 0.0
    attempts: int = 0
    failures: int = 0
    slot: int = -1
    devices: tuple[int, ...] = ()
    bound_at: float = 0.0
    started: float | None = None  # for activeDeadlineSeconds
    version: int = 0
    fault_at: float | None = None
    disrupted: bool = False  # evicted; counts against its namespace's PDB until it runs


@dataclass
class Slot:
    """A place for one node of a pool: its devices are a fixed range of the fleet's
    device arrays, reused by the next node of the pool when this one is deleted."""

    index: int
    pool: PoolSpec
    base: int  # first global device index
    node: str | None = None
    ready: bool = False
    blocked: bool = False  # cordoned, or a NoSchedule/NoExecute taint
    avoid: bool = False  # a PreferNoSchedule taint
    free: list[int] = field(default_factory=list)
    created: float = 0.0


@dataclass
class Machine:
    name: str
    pool: str
    created: float
    slot: int = -1  # -1 while provisioning
    deleted: bool = False


@dataclass
class Stats:
    """Counters the summary and the plots read."""

    submitted: int = 0
    completed: int = 0
    lost: int = 0
    device_seconds_allocated: float = 0.0
    device_seconds_useful: float = 0.0
    node_seconds: float = 0.0
    remediation: list[float] = field(default_factory=list)
    remediation_by_kind: dict[str, list[float]] = field(default_factory=dict)
    queue_wait: list[float] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    faults_total: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    actions_total: int = 0
    breaker_trips: int = 0


@dataclass
class Timeline:
    """Plot samples: time (hours since start) and per-pool and fleet-wide values."""

    hours: list[float] = field(default_factory=list)
    utilization: dict[str, list[float]] = field(default_factory=dict)
    nodes: dict[str, list[int]] = field(default_factory=dict)
    running: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)


class _Views(Sequence[NodeView]):
    """The schedulable nodes of some pools that have a free device, in name order,
    each built only when the scheduler looks at it. ``lists`` are the pools' live
    name lists (``Fleet.schedulable``), so a node that fills up during a pass
    drops out of the next request's view."""

    def __init__(self, fleet: Fleet, lists: list[list[str]]) -> None:
        self.fleet = fleet
        self.lists = lists

    def _names(self) -> list[str]:
        if len(self.lists) == 1:
            return list(self.lists[0])
        return list(heapq.merge(*self.lists))

    def __len__(self) -> int:
        return sum(len(names) for names in self.lists)

    @overload
    def __getitem__(self, i: int) -> NodeView: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[NodeView]: ...
    def __getitem__(self, i: int | slice) -> NodeView | Sequence[NodeView]:
        if isinstance(i, slice):
            return [self.fleet.view(n) for n in self._names()[i]]
        return self.fleet.view(self._names()[i])

    def __iter__(self) -> Iterator[NodeView]:
        for n in self._names():
            yield self.fleet.view(n)


Listener = Callable[[str, Any], None]


class Fleet:
    """The simulated cluster; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        scheduler: Scheduler,
        *,
        static_pools: bool,
        seed: int | None = None,
    ) -> None:
        self.scenario = scenario
        self.scheduler = scheduler
        self.static_pools = static_pools
        self.seed = scenario.seed if seed is None else seed
        self.now = EPOCH
        self.end = EPOCH + scenario.duration
        self.kube = SimKube(self.clock, self)
        self.stats = Stats()
        self.timeline = Timeline()
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._seq = 0
        # Separate random streams, so that the rules run and the baseline see the
        # same arrivals, jobs and faults whatever else each of them draws.
        root = np.random.SeedSequence(self.seed)
        s_arrival, s_job, s_fault = root.spawn(3)
        self.rng_arrival = np.random.default_rng(s_arrival)
        self.rng_job = np.random.default_rng(s_job)
        self.rng_fault = np.random.default_rng(s_fault)
        self.listeners: list[Listener] = []
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
        self._build_slots()
        self.jobs: dict[str, Job] = {}
        # One FIFO queue per set of pools that jobs may use.
        self.pending: dict[tuple[str, ...], dict[str, None]] = {(p,): {} for p in self.pools}
        self._eligible: dict[tuple[str, int], tuple[str, ...]] = {}
        self.running: set[str] = set()
        # Pools whose nodes changed, queues that gained a job: what to schedule next.
        self._schedule_dirty: set[str] = set()
        self._queues_dirty: set[tuple[str, ...]] = set()
        self.machines: dict[str, Machine] = {}
        self._machine_counter = dict.fromkeys(self.pools, 0)
        self._alloc = 0  # devices held by running pods
        self.pool_alloc = dict.fromkeys(self.pools, 0)
        self.pool_machines = dict.fromkeys(self.pools, 0)  # not deleted, incl. provisioning
        self._machines_alive = 0
        self._integrated_to = self.now
        self._disrupted: dict[str, int] = {}  # namespace -> evicted, not yet running
        # job -> (fault time, kind), while a fault holds it
        self._stuck: dict[str, tuple[float, str]] = {}
        self._job_seq = 0
        self._deployment_uid: dict[str, str] = {}
        # Set when a coroutine may have work to do: after an evaluation tick, and
        # when an action's simulated sleep ends.
        self._wake = False

    # -- time and events ---------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def at(self, t: float, fn: Callable[[], Any]) -> None:
        """Runs ``fn`` at simulated time ``t`` (events at the same time run in the
        order they were added)."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def every(self, interval: float, fn: Callable[[], Any], start: float | None = None) -> None:
        """Runs ``fn`` every ``interval`` seconds from ``start`` (default: now)."""

        def tick(t: float) -> Callable[[], Any]:
            def run() -> Any:
                if t + interval <= self.end:
                    self.at(t + interval, tick(t + interval))
                return fn()

            return run

        first = self.now if start is None else start
        self.at(first, tick(first))

    async def sleep(self, seconds: float) -> None:
        """``ActionContext.sleep``: wait in simulated time while events go on."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)
            self._wake = True

        self.at(self.now + max(0.0, seconds), wake)
        await future

    async def settle(self) -> None:
        """Lets every other task (the executor's actions) run until each finishes or
        waits: on ``sleep`` in simulated time, or on another task. The event loop's
        ready queue is empty exactly then. An action that waited on real time would
        never settle: that is a wiring bug, reported rather than spun on."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        if ready is None:  # an event loop without one: a bounded number of passes
            for _ in range(100):
                await asyncio.sleep(0)
            return
        for _ in range(1_000_000):
            await asyncio.sleep(0)
            if not ready:
                return
        raise RuntimeError("an action waited on something other than ctx.sleep")

    async def run(self) -> None:
        """Processes every event up to the scenario's end."""
        self._start()
        heap = self._heap
        while heap and heap[0][0] <= self.end:
            t, _, fn = heapq.heappop(heap)
            self._integrate(t)
            self.now = t
            result = fn()
            if asyncio.iscoroutine(result):
                await result
                self._wake = True
            if self._wake:
                self._wake = False
                await self.settle()
            if self._schedule_dirty or self._queues_dirty:
                self._schedule()
        self._integrate(self.end)
        self.now = self.end
        self._finish()

    def _integrate(self, t: float) -> None:
        dt = t - self._integrated_to
        if dt > 0:
            self.stats.device_seconds_allocated += self._alloc * dt
            self.stats.node_seconds += self._machines_alive * dt
            self._integrated_to = t

    def _emit(self, what: str, payload: Any) -> None:
        for listener in self.listeners:
            listener(what, payload)

    # -- setup ---------------------------------------------------------------------

    def _build_slots(self) -> None:
        self.slots: list[Slot] = []
        self.pool_slots: dict[str, list[int]] = {}
        base = 0
        for pool in self.scenario.pools:
            count = pool.initial if self.static_pools else pool.max
            ids = []
            for _ in range(count):
                self.slots.append(Slot(len(self.slots), pool, base))
                ids.append(len(self.slots) - 1)
                base += pool.devices_per_node
            self.pool_slots[pool.name] = ids
        self.device_count = base
        g = base
        self.dev_job = np.full(g, -1, dtype=np.int64)  # job index, -1 when free
        self.dev_state = np.zeros(g, dtype=np.int8)
        self.dev_util = np.zeros(g, dtype=np.float64)  # base utilization
        self.dev_fatal = np.zeros(g, dtype=np.float64)
        self.dev_recoverable = np.zeros(g, dtype=np.float64)
        self.dev_ecc_uncorrected = np.zeros(g, dtype=np.float64)
        self.dev_slot = np.zeros(g, dtype=np.int64)
        for s in self.slots:
            self.dev_slot[s.base : s.base + s.pool.devices_per_node] = s.index
        self.node_slot: dict[str, int] = {}
        self.schedulable: dict[str, list[str]] = {p: [] for p in self.pools}
        self._views: dict[str, NodeView] = {}
        self.job_by_index: list[Job] = []

    def _start(self) -> None:
        for pool in self.scenario.pools:
            uid = f"md-{pool.name}"
            self._deployment_uid[pool.name] = uid
            self.kube.add_custom(
                "machinedeployments",
                {
                    "apiVersion": CAPI_API_VERSION,
                    "kind": "MachineDeployment",
                    "metadata": {
                        "name": pool.name,
                        "namespace": CAPI_NAMESPACE,
                        "labels": {CLUSTER_LABEL: "sim"},
                        "annotations": {
                            MIN_ANNOTATION: str(pool.min),
                            MAX_ANNOTATION: str(pool.max),
                        },
                    },
                    "spec": {
                        "clusterName": "sim",
                        "replicas": pool.initial,
                        "selector": {"matchLabels": {DEPLOYMENT_LABEL: pool.name}},
                        "template": {"spec": {"clusterName": "sim"}},
                    },
                    "status": {"replicas": pool.initial, "readyReplicas": pool.initial},
                },
            )
            for name in self.scenario.initial_nodes[pool.name]:
                self._new_machine(pool, name, ready=True)
        for ns in range(self.scenario.workload.namespaces):
            self._disrupted[_namespace(ns)] = 0
        self._schedule_arrival(self.now)
        for kind, rate in self.scenario.faults.rates:
            if rate > 0:
                self._schedule_fault(kind, rate, self.now)
        for ev in self.scenario.faults.events:
            self.at(EPOCH + ev.at, partial(self._explicit_fault, ev.kind, ev.node, ev.device))
        samples = self.scenario.samples
        self.every(self.scenario.duration / samples, self._sample)

    # -- machines and nodes ------------------------------------------------------------

    def _new_machine(self, pool: PoolSpec, name: str | None = None, *, ready: bool) -> Machine:
        if name is None:
            while True:
                name = node_name(pool.name, self._machine_counter[pool.name])
                self._machine_counter[pool.name] += 1
                if name not in self.machines:
                    break
        else:
            self._machine_counter[pool.name] += 1
        m = Machine(name, pool.name, self.now)
        self.machines[name] = m
        self._machines_alive += 1
        self.pool_machines[pool.name] += 1
        self.kube.add_custom(
            "machines",
            {
                "apiVersion": CAPI_API_VERSION,
                "kind": "Machine",
                "metadata": {
                    "name": name,
                    "namespace": CAPI_NAMESPACE,
                    "labels": {DEPLOYMENT_LABEL: pool.name, CLUSTER_LABEL: "sim"},
                    "annotations": {},
                },
                "spec": {"clusterName": "sim", "providerID": f"sim:///{name}"},
                "status": {"phase": "Provisioning"},
            },
        )
        if ready:
            self._machine_ready(name)
        else:
            self.at(self.now + pool.provision_time, lambda: self._machine_ready(name))
        return m

    def _machine_ready(self, name: str) -> None:
        m = self.machines.get(name)
        if m is None or m.deleted:
            return
        pool = self.pools[m.pool]
        free_slots = [i for i in self.pool_slots[pool.name] if self.slots[i].node is None]
        if not free_slots:
            return  # more machines than the pool's max: the extra never joins
        slot = self.slots[free_slots[0]]
        m.slot = slot.index
        slot.node, slot.ready, slot.blocked, slot.avoid = name, True, False, False
        slot.created = self.now
        d = pool.devices_per_node
        slot.free = list(range(d))
        g = slice(slot.base, slot.base + d)
        self.dev_job[g] = -1
        self.dev_state[g] = OK
        self.dev_util[g] = 0.0
        self.dev_fatal[g] = 0.0
        self.dev_recoverable[g] = 0.0
        self.dev_ecc_uncorrected[g] = 0.0
        self.node_slot[name] = slot.index
        resource = RESOURCE[pool.vendor]
        self.kube.add_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        POOL_LABEL: pool.name,
                        DEPLOYMENT_LABEL: pool.name,
                        "kubernetes.io/hostname": name,
                        VENDOR_LABEL: pool.vendor,
                    },
                    "annotations": {"cluster.x-k8s.io/machine": name},
                },
                "spec": {"providerID": f"sim:///{name}"},
                "status": {
                    "capacity": {resource: str(d)},
                    "allocatable": {resource: str(d)},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )
        machine = self.kube.custom[("machines", CAPI_NAMESPACE, name)]
        machine["status"] = {"phase": "Running", "nodeRef": {"kind": "Node", "name": name}}
        self.kube.touch(machine)
        self._deployment_status(pool.name)
        self._update_schedulable(slot)
        self._emit("node_added", slot)
        self._schedule_dirty.add(pool.name)

    def _deployment_status(self, pool: str) -> None:
        md = self.kube.custom[("machinedeployments", CAPI_NAMESPACE, pool)]
        alive = [m for m in self.machines.values() if m.pool == pool and not m.deleted]
        md["status"] = {
            "replicas": len(alive),
            "readyReplicas": sum(1 for m in alive if m.slot >= 0),
        }
        self.kube.touch(md)

    def _delete_machine(self, name: str) -> None:
        m = self.machines[name]
        m.deleted = True
        self._machines_alive -= 1
        self.pool_machines[m.pool] -= 1
        self.kube.remove_custom("machines", CAPI_NAMESPACE, name)
        if m.slot >= 0:
            slot = self.slots[m.slot]
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    self.pod_removed(pod, "NodeDeleted")
            self._set_unschedulable(slot)
            self._emit("node_removed", slot)
            self.kube.remove_node(name)
            del self.node_slot[name]
            slot.node, slot.ready, slot.free = None, False, []
        del self.machines[name]
        self._deployment_status(m.pool)

    def replicas_changed(self, deployment: Obj) -> None:
        pool = self.pools.get(deployment["metadata"]["name"])
        if pool is None:
            return
        want = int(deployment.get("spec", {}).get("replicas", 0))
        alive = [m for m in self.machines.values() if m.pool == pool.name and not m.deleted]
        if want > len(alive):
            for _ in range(want - len(alive)):
                self._new_machine(pool, ready=False)
        elif want < len(alive):

            def order(m: Machine) -> tuple[int, float]:
                obj = self.kube.custom.get(("machines", CAPI_NAMESPACE, m.name), {})
                marked = DELETE_ANNOTATION in obj.get("metadata", {}).get("annotations", {})
                return (0 if marked else 1 if m.slot < 0 else 2, -m.created)

            # Newest first; among machines made at once, the highest name first.
            by_name = sorted(alive, key=lambda m: m.name, reverse=True)
            for m in sorted(by_name, key=order)[: len(alive) - want]:
                self._delete_machine(m.name)
        self._deployment_status(pool.name)

    def node_changed(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        slot_id = self.node_slot.get(name)
        if slot_id is None:
            return
        slot = self.slots[slot_id]
        taints = node.get("spec", {}).get("taints") or []
        effects = {t.get("effect") for t in taints}
        slot.blocked = bool(node.get("spec", {}).get("unschedulable")) or bool(
            effects & {"NoSchedule", "NoExecute"}
        )
        slot.avoid = "PreferNoSchedule" in effects
        self._update_schedulable(slot)
        self._schedule_dirty.add(slot.pool.name)
        if "NoExecute" in effects:
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    self.pod_removed(pod, "TaintEviction")

    # -- scheduling ------------------------------------------------------------------

    def view(self, name: str) -> NodeView:
        v = self._views.get(name)
        if v is None:
            slot = self.slots[self.node_slot[name]]
            pool = slot.pool
            v = NodeView(
                name,
                pool.name,
                pool.topology,
                pool.devices_per_node,
                tuple(slot.free),
                slot.avoid,
                pool.model,
                pool.vendor,
            )
            self._views[name] = v
        return v

    def _update_schedulable(self, slot: Slot) -> None:
        """Keeps ``schedulable[pool]`` (sorted names of nodes that can take a pod now
        and have a free device) and the view cache current for one node."""
        if slot.node is None:
            return
        self._views.pop(slot.node, None)
        names = self.schedulable[slot.pool.name]
        i = bisect.bisect_left(names, slot.node)
        present = i < len(names) and names[i] == slot.node
        want = slot.ready and not slot.blocked and bool(slot.free)
        if want and not present:
            names.insert(i, slot.node)
        elif present and not want:
            del names[i]

    def _set_unschedulable(self, slot: Slot) -> None:
        slot.ready = False
        self._update_schedulable(slot)

    def _schedule(self) -> None:
        pools, self._schedule_dirty = self._schedule_dirty, set()
        queues, self._queues_dirty = self._queues_dirty, set()
        for group in sorted(self.pending):
            queue = self.pending[group]
            if not queue or (group not in queues and pools.isdisjoint(group)):
                continue
            views = _Views(self, [self.schedulable[p] for p in group])
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
        slot = self.slots[self.node_slot[node]]
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
        self._update_schedulable(slot)
        assert job.pod is not None
        self.kube.bind_pod(job.namespace, job.pod, node)
        g = tuple(slot.base + d for d in devices)
        job.slot, job.devices = slot.index, g
        job.state = "running"
        job.bound_at = self.now
        job.links = slowdown(pool.topology, list(devices))
        job.factor = self.peak[job.pool] / self.peak[pool.name] * job.links
        job.speed = 1.0 / job.factor
        job.work = job.run_start_work
        job.mark = self.now
        job.overhead_until = self.now + (
            self.scenario.workload.restart_overhead if job.attempts > 1 else 0.0
        )
        job.stalled = False
        job.version += 1
        self.stats.queue_wait.append(self.now - job.pod_created)
        if job.started is None:
            job.started = self.now
            self._schedule_deadline(job)
        if job.disrupted:
            job.disrupted = False
            self._disrupted[job.namespace] -= 1
        idx = np.array(g)
        self.dev_job[idx] = job.index
        self.dev_util[idx] = (
            RESTORE_UTILIZATION if job.overhead_until > self.now else job.utilization
        )
        self._alloc += job.size
        self.pool_alloc[pool.name] += job.size
        self.running.add(job.name)
        if job.overhead_until > self.now:
            version = job.version
            self.at(job.overhead_until, lambda: self._restored(job, version))
        self._plan_progress(job)
        self._emit("pod_bound", job)

    def _restored(self, job: Job, version: int) -> None:
        if job.version == version and job.state == "running" and not job.stalled:
            self.dev_util[np.array(job.devices)] = job.utilization

    # -- jobs --------------------------------------------------------------------------

    def _schedule_arrival(self, after: float) -> None:
        w = self.scenario.workload
        rate = w.arrivals_per_hour / 3600.0
        if rate <= 0:
            return
        peak = rate * (1.0 + (w.swing.amplitude if w.swing else 0.0))
        t = after
        while True:
            t += float(self.rng_arrival.exponential(1.0 / peak))
            if t > self.end:
                return
            if w.swing is None:
                break
            phase = 2 * math.pi * (t - EPOCH) / w.swing.period
            if self.rng_arrival.random() * peak <= rate * (1 + w.swing.amplitude * math.sin(phase)):
                break
        self.at(t, self._arrival)

    def _draw_duration(self) -> float:
        d = self.scenario.workload.duration
        if d.distribution == "lognormal":
            return float(d.median * math.exp(d.sigma * self.rng_job.standard_normal()))
        if d.distribution == "exponential":
            return float(self.rng_job.exponential(d.mean))
        return d.value

    def _arrival(self) -> None:
        w = self.scenario.workload
        rng = self.rng_job
        sizes = np.array([s for s, _ in w.sizes])
        weights = np.array([x for _, x in w.sizes], dtype=float)
        size = int(sizes[rng.choice(len(sizes), p=weights / weights.sum())])
        if w.pools:
            names = [p for p, _ in w.pools]
            pw = np.array([x for _, x in w.pools], dtype=float)
        else:
            names = [p.name for p in self.scenario.pools]
            pw = np.array([p.initial * p.devices_per_node for p in self.scenario.pools], float)
        fits = np.array([self.pools[n].devices_per_node >= size for n in names])
        pw = np.where(fits, pw, 0.0)
        pool = names[int(rng.choice(len(names), p=pw / pw.sum()))] if pw.sum() > 0 else names[0]
        pools = self.eligible(pool, size)
        total = max(60.0, self._draw_duration())
        lo, hi = w.utilization
        util = float(lo + (hi - lo) * rng.random())
        stall = rng.random() < w.stall_probability
        stall_at = float(total * rng.random()) if stall else None
        index = self._job_seq
        self._job_seq += 1
        job = Job(
            name=f"train-{index:06d}",
            namespace=_namespace(index % w.namespaces),
            pool=pool,
            size=size,
            total=total,
            utilization=util,
            timeout=round(total * w.timeout_factor),
            deadline=round(total * w.deadline_factor),
            submitted=self.now,
            stall_at=stall_at,
            index=index,
            pools=pools,
            flops=total * self.peak[pool] * size,
            bound=w.eligible == "pool" or (w.eligible == "list" and pool not in w.eligible_pools),
        )
        self.jobs[job.name] = job
        self.job_by_index.append(job)
        self.stats.submitted += 1
        self.kube.add_job(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": job.name,
                    "namespace": job.namespace,
                    "labels": self._labels(job),
                    "annotations": {TIMEOUT_ANNOTATION: f"{int(job.timeout)}s"},
                },
                "spec": {
                    "suspend": False,
                    "backoffLimit": w.backoff_limit,
                    "activeDeadlineSeconds": int(job.deadline),
                    "template": {
                        "metadata": {"annotations": self._annotations(job)},
                        "spec": self._pod_spec(job),
                    },
                },
                "status": {"active": 0},
            }
        )
        self._new_pod(job)
        self._schedule_arrival(self.now)

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

    def _labels(self, job: Job) -> dict[str, str]:
        return {POOL_LABEL: job.pool} if job.bound else {}

    def _annotations(self, job: Job) -> dict[str, str]:
        """The timeout the rules read, and the work the placement scorer reads."""
        return {
            TIMEOUT_ANNOTATION: f"{int(job.timeout)}s",
            ANN_FLOPS: f"{job.flops:.6g}",
            ANN_PRECISION: self.scenario.workload.precision,
        }

    def _pod_spec(self, job: Job) -> Obj:
        """A bound job's pod selects its pool; one that may use every pool of its
        vendor asks only for the vendor's resource, which is all it takes on a real
        cluster; one that may use a list of pools requires them by node affinity."""
        resource = RESOURCE[self.pools[job.pool].vendor]
        n = str(job.size)
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
        job.pod_created = self.now
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
                        "batch.kubernetes.io/job-name": job.name,
                        **self._labels(job),
                    },
                    "annotations": self._annotations(job),
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
                "spec": self._pod_spec(job),
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
        counts them from the API: a pod that several pools can satisfy (nodes
        registered, big enough) counts towards the one with the most room to grow,
        then the first by name; a pod that none can satisfy counts nowhere.
        ``registered``: nodes per pool, when the caller has counted them."""
        if registered is None:
            registered = {p: self.pool_nodes(p) for p in self.pools}
        room = {p.name: p.max - self.pool_machines[p.name] for p in self.scenario.pools}
        out = dict.fromkeys(self.pools, 0)
        for group, queue in self.pending.items():
            fitting = [p for p in group if registered[p]]
            if not fitting or not queue:
                continue
            chosen = min(fitting, key=lambda p: (-room[p], p))
            out[chosen] += sum(self.jobs[j].size for j in queue if self.jobs[j].pod is not None)
        return out

    def _progress(self, job: Job) -> float:
        if job.state != "running" or job.stalled:
            return job.work
        start = max(job.mark, job.overhead_until)
        return job.work + max(0.0, self.now - start) * job.speed

    def _plan_progress(self, job: Job) -> None:
        """Schedules the job's next milestone: completion, or the stall it carries."""
        if job.state != "running" or job.stalled:
            return
        start = max(job.mark, job.overhead_until)
        version = job.version
        if job.stall_at is not None and job.work < job.stall_at < job.total:
            t = start + (job.stall_at - job.work) / job.speed
            self.at(t, lambda: self._stall(job, version, "stall"))
            return
        t = start + (job.total - job.work) / job.speed
        self.at(t, lambda: self._complete(job, version))

    def _stall(self, job: Job, version: int, why: str) -> None:
        if job.version != version or job.state != "running" or job.stalled:
            return
        if why == "stall":
            job.stall_at = None  # a deadlock that a restart cures
        job.work = self._progress(job)
        job.mark = self.now
        job.stalled = True
        job.version += 1
        self.dev_util[np.array(job.devices)] = 0.0

    def _complete(self, job: Job, version: int) -> None:
        if job.version != version or job.state != "running":
            return
        job.work = job.total
        self._release(job, kept=job.total)
        job.state = "done"
        self.stats.completed += 1
        assert job.pod is not None
        self.kube.remove_pod(job.namespace, job.pod)
        self.kube.remove_job(job.namespace, job.name)
        job.pod = None
        self._end_stuck(job)

    def _release(self, job: Job, kept: float) -> None:
        """The job's pod leaves its devices; ``kept`` is the work that survives."""
        useful = max(0.0, kept - job.run_start_work) * job.factor * job.size
        self.stats.device_seconds_useful += useful
        job.work = kept
        job.run_start_work = kept
        job.mark = self.now
        job.version += 1
        idx = np.array(job.devices)
        self.dev_job[idx] = -1
        self.dev_util[idx] = 0.0
        slot = self.slots[job.slot]
        for g in job.devices:
            d = g - slot.base
            state = self.dev_state[g]
            if state == BROKEN:
                self.dev_state[g] = RESETTING
                self.at(self.now + self.scenario.faults.reset_time, partial(self._reset, g))
            elif state == OK and slot.node is not None:
                bisect.insort(slot.free, d)
        self._update_schedulable(slot)
        self._schedule_dirty.add(slot.pool.name)
        self._alloc -= job.size
        self.pool_alloc[slot.pool.name] -= job.size
        self.running.discard(job.name)
        self._emit("pod_unbound", job)
        job.slot, job.devices = -1, ()

    def _checkpoint(self, job: Job) -> float:
        ci = self.scenario.workload.checkpoint_interval
        work = self._progress(job)
        if ci <= 0:
            return job.run_start_work
        return max(job.run_start_work, math.floor(work / ci) * ci)

    def _end_stuck(self, job: Job) -> None:
        stuck = self._stuck.pop(job.name, None)
        if stuck is not None:
            self._remediated(stuck[1], self.now - stuck[0])

    def _remediated(self, kind: str, seconds: float) -> None:
        self.stats.remediation.append(seconds)
        self.stats.remediation_by_kind.setdefault(kind, []).append(seconds)

    def pod_removed(self, pod: Obj, reason: str) -> None:
        """The Job controller's reaction to a pod that is gone (see the module
        docstring). Also called for pods the simulation itself fails."""
        meta = pod["metadata"]
        job = self.jobs.get(meta.get("labels", {}).get(JOB_LABEL, ""))
        if job is None or job.pod != meta["name"] or job.state in ("done", "lost"):
            return
        if job.state == "running":
            self._release(job, kept=self._checkpoint(job))
        else:
            self.pending[job.pools].pop(job.name, None)
        self._end_stuck(job)
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
        job.pod_created = self.now
        job.attempts += 1
        self._enqueue(job)

    def job_changed(self, kjob: Obj) -> None:
        job = self.jobs.get(kjob["metadata"]["name"])
        if job is None or job.state in ("done", "lost"):
            return
        suspend = bool(kjob.get("spec", {}).get("suspend"))
        if suspend and not job.suspended:
            job.suspended = True
            if job.pod is not None:
                pod = self.kube.remove_pod(job.namespace, job.pod)
                if pod is not None:
                    self.pod_removed(pod, "Deleted")
        elif not suspend and job.suspended:
            job.suspended = False
            job.started = self.now  # resuming resets the deadline clock
            self._schedule_deadline(job)
            if job.pod is None:
                self._new_pod(job)

    def _schedule_deadline(self, job: Job) -> None:
        started = job.started
        self.at(self.now + job.deadline, lambda: self._deadline(job, started))

    def _deadline(self, job: Job, started: float | None) -> None:
        if job.started != started or job.state in ("done", "lost"):
            return
        self._lose(job, "DeadlineExceeded")

    def _lose(self, job: Job, reason: str) -> None:
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
        self._end_stuck(job)
        job.state = "lost"
        self.stats.lost += 1
        self.kube.remove_job(job.namespace, job.name)
        self._emit("job_lost", (job, reason))

    def eviction_allowed(self, pod: Obj) -> bool:
        limit = self.scenario.workload.pdb_max_unavailable
        if limit is None:
            return True
        return self._disrupted.get(pod["metadata"]["namespace"], 0) < limit

    # -- faults -----------------------------------------------------------------------

    def _schedule_fault(self, kind: str, rate: float, after: float) -> None:
        """Poisson faults at ``rate`` per device-hour over every device place; a fault
        that lands on a place with no node is dropped, which keeps the rate per
        device whatever the pools' sizes (thinning)."""
        total = rate * self.device_count / 3600.0
        t = after + float(self.rng_fault.exponential(1.0 / total))
        g = int(self.rng_fault.integers(self.device_count))
        if t <= self.end:
            self.at(t, lambda: self._random_fault(kind, rate, g))

    def _random_fault(self, kind: str, rate: float, g: int) -> None:
        self._schedule_fault(kind, rate, self.now)
        slot = self.slots[int(self.dev_slot[g])]
        if slot.node is None or not slot.ready:
            return
        self._fault(kind, slot, g)

    def _explicit_fault(self, kind: str, node: str, device: int | None) -> None:
        slot_id = self.node_slot.get(node)
        if slot_id is None:
            return
        slot = self.slots[slot_id]
        self._fault(kind, slot, slot.base + (device or 0))

    def _fault(self, kind: str, slot: Slot, g: int) -> None:
        self.stats.faults[kind] = self.stats.faults.get(kind, 0) + 1
        self.stats.faults_total += 1
        j = int(self.dev_job[g])
        job = self.job_by_index[j] if j >= 0 else None
        if kind == "node_down":
            self._node_down(slot)
            return
        if kind == "device_lost":
            if self.dev_state[g] == LOST:
                return
            self._take_device(slot, g, LOST)
            self.at(self.now + self.scenario.faults.device_lost_recovery, lambda: self._reset(g))
            if job is not None:
                self._mark_stuck(job, kind)
                self._fail_pod(job)
            return
        if kind == "fatal":
            self.dev_fatal[g] += 1
        elif kind == "ecc_uncorrected":
            self.dev_ecc_uncorrected[g] += self.scenario.faults.ecc_burst
        if kind in ("fatal", "ecc_uncorrected", "hang"):
            if job is None:
                if self.dev_state[g] == OK:
                    self._take_device(slot, g, RESETTING)
                    self.at(self.now + self.scenario.faults.reset_time, lambda: self._reset(g))
                return
            self.dev_state[g] = BROKEN
        if job is not None and job.state == "running":
            self._mark_stuck(job, kind)
            self._stall(job, job.version, kind)

    def _mark_stuck(self, job: Job, kind: str) -> None:
        self._stuck.setdefault(job.name, (self.now, kind))

    def _take_device(self, slot: Slot, g: int, state: int) -> None:
        d = g - slot.base
        if d in slot.free:
            slot.free.remove(d)
            self._update_schedulable(slot)
        self.dev_state[g] = state

    def _reset(self, g: int) -> None:
        slot = self.slots[int(self.dev_slot[g])]
        if self.dev_state[g] not in (LOST, RESETTING):
            return
        self.dev_state[g] = OK
        d = g - slot.base
        if slot.node is not None and self.dev_job[g] < 0 and d not in slot.free:
            bisect.insort(slot.free, d)
            self._update_schedulable(slot)
            self._schedule_dirty.add(slot.pool.name)

    def _fail_pod(self, job: Job) -> None:
        if job.pod is None:
            return
        pod = self.kube.remove_pod(job.namespace, job.pod)
        if pod is not None:
            self.pod_removed(pod, "Failed")

    def _node_down(self, slot: Slot) -> None:
        if not slot.ready or slot.node is None:
            return
        name = slot.node
        self._set_unschedulable(slot)
        node = self.kube.nodes[name]
        node["status"]["conditions"] = [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
        ]
        self.kube.touch(node)
        self._emit("node_down", slot)
        for pod in self.kube.pods_by_node.get(name, {}).values():
            job = self.jobs.get(pod["metadata"]["labels"].get(JOB_LABEL, ""))
            if job is not None and job.state == "running":
                self._mark_stuck(job, "node_down")
                self._stall(job, job.version, "node_down")

        def gc() -> None:
            if slot.node != name or slot.ready:
                return
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    self.pod_removed(pod, "Failed")

        def back() -> None:
            if slot.node != name:
                return
            slot.ready = True
            node["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ]
            self.kube.touch(node)
            self._update_schedulable(slot)
            self._schedule_dirty.add(slot.pool.name)
            self._emit("node_up", slot)

        self.at(self.now + UNREACHABLE_GRACE, gc)
        self.at(self.now + self.scenario.faults.node_down_recovery, back)

    # -- samples and the end -----------------------------------------------------------

    def scraped_nodes(self) -> frozenset[str]:
        """The nodes whose exporter answers: registered and Ready."""
        return frozenset(s.node for s in self.slots if s.node is not None and s.ready)

    def registered_since(self, since: float) -> dict[str, float]:
        """Nodes that joined at or after ``since`` (not the initial ones), and when."""
        return {
            s.node: s.created
            for s in self.slots
            if s.node is not None and s.created >= since and s.created > EPOCH
        }

    def pool_nodes(self, pool: str) -> int:
        return sum(1 for i in self.pool_slots[pool] if self.slots[i].node is not None)

    def _sample(self) -> None:
        tl = self.timeline
        tl.hours.append((self.now - EPOCH) / 3600.0)
        for pool in self.scenario.pools:
            nodes = self.pool_nodes(pool.name)
            devices = nodes * pool.devices_per_node
            used = self.pool_alloc[pool.name]
            tl.utilization.setdefault(pool.name, []).append(used / devices if devices else 0.0)
            tl.nodes.setdefault(pool.name, []).append(nodes)
        tl.running.append(len(self.running))
        tl.queued.append(sum(len(q) for q in self.pending.values()))
        tl.faults.append(self.stats.faults_total)
        tl.actions.append(self.stats.actions_total)

    def _finish(self) -> None:
        for name in sorted(self.running):
            job = self.jobs[name]
            kept = self._progress(job)
            self.stats.device_seconds_useful += (
                max(0.0, kept - job.run_start_work) * job.factor * job.size
            )
        for _, (since, kind) in sorted(self._stuck.items()):
            # Still stuck when the scenario ends: counted up to the end.
            self._remediated(kind, self.end - since)
        self._stuck.clear()
        for queue in self.pending.values():
            for name in queue:
                self.stats.queue_wait.append(self.end - self.jobs[name].pod_created)

    def record_action(self, name: str) -> None:
        self.stats.actions[name] = self.stats.actions.get(name, 0) + 1
        self.stats.actions_total += 1


def _namespace(i: int) -> str:
    return f"team-{chr(ord('a') + i % 26)}{'' if i < 26 else i // 26}"


__all__ = ["EPOCH", "Fleet", "Job", "Slot", "Stats", "Timeline", "device_name", "timestamp"]
