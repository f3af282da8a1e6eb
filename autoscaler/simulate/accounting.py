"""What the simulated fleet reports: the counters of ``summary.json`` and the plot
samples.

Why a module of its own: the figures are the simulator's product, and their
definitions should be readable in one place, apart from the model that produces
them. Device-seconds allocated are those held by a running pod, integrated between
events; useful ones are those whose progress was kept (reached a checkpoint that
was used, or the end). Restart overhead, stalled time and work lost since the last
checkpoint are allocated but not useful; both are also kept by job size, for
goodput per size. Time to remediate runs from the fault that stuck a job to the
moment its pod (for a gang, its run) leaves the failed device (or the end).

What a stopped run cost is booked by cause in device-seconds (``LOSS_CAUSES``):
the work redone since the last checkpoint, the stalled time until the pods went
(detection delay), the restart overhead spent loading, and the wait for capacity
after a restart until the job runs again (a pending pod holds no device, so
this is the job's own loss, not allocated time). A false requeue is a requeue
or gang restart of a job that was running, not stalled and on healthy devices.
Spare node-seconds are the spare buffer a pool's MachineDeployment declares
(``accel-fleet.io/spare-nodes``), as far as idle Ready nodes fill it, over time.

Healthy capacity (``repairs.py`` keeps the incidents): a fault on a node opens an
incident that ends when the node (or the Machine that replaced it) is Ready,
schedulable and has every device healthy again. Each fault counts once, under the
step that closed its incident (``CLOSED_BY``); its time to healthy capacity runs
from the fault to that moment (still open at the end: up to the end). Unhealthy
node-seconds are the incidents' durations, a replacement's wait included;
unhealthy device-seconds what they kept from work (every device of a node that
is NotReady, unschedulable or away, else its unhealthy devices), over time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.scenario import PoolSpec

LOSS_CAUSES = ("redone", "detection", "restart_overhead", "capacity_wait")
# The moment a time to remediate runs to, from the fault's onset (any instant):
# ``end_stuck``'s callers, said in summary.json (``time_to_remediate_until``).
REMEDIATED_WHEN = (
    "the stuck job's pod left the faulty device (moved, requeued, restarted, failed, or "
    "the job ended); for a gang, its run stopped as its first member pod went, which "
    "starts its restart"
)
# What ended a fault's incident: ``self`` the fault healed on its own (what the
# rules did was move the jobs, if anything), a ``reset`` or ``reboot`` by the node
# agent, a ``replace``ment by Cluster API; ``removed``: the node was scaled away
# unhealthy; ``open``: still unhealthy when the scenario ended.
CLOSED_BY = ("self", "reset", "reboot", "replace", "removed", "open")


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
    # Per completed job: submitted to done (its job completion time).
    completion: list[float] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    faults_total: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    actions_total: int = 0
    breaker_trips: int = 0
    # job size -> device-seconds allocated, useful
    allocated_by_size: dict[int, float] = field(default_factory=dict)
    useful_by_size: dict[int, float] = field(default_factory=dict)
    # namespace -> device-seconds allocated, useful (a Kueue team's goodput)
    allocated_by_namespace: dict[str, float] = field(default_factory=dict)
    useful_by_namespace: dict[str, float] = field(default_factory=dict)
    lost_by_cause: dict[str, float] = field(default_factory=dict)  # device-seconds
    false_requeues: int = 0
    spare_node_seconds: float = 0.0
    restarts: dict[int, int] = field(default_factory=dict)  # restarts -> jobs
    closed_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSED_BY, 0))
    # vendor -> the same, for the faults on that vendor's nodes
    closed_by_vendor: dict[str, dict[str, int]] = field(default_factory=dict)
    time_to_healthy: list[float] = field(default_factory=list)
    unhealthy_node_seconds: float = 0.0
    unhealthy_device_seconds: float = 0.0
    # Per ClusterQueue, its figures (kueue.py's QUEUE_FIGURES); empty without Kueue.
    queues: dict[str, dict[str, float]] = field(default_factory=dict)

    def complete(self, seconds: float) -> None:
        """A job completed, ``seconds`` after it was submitted."""
        self.completed += 1
        self.completion.append(seconds)


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
    unhealthy: list[int] = field(default_factory=list)  # nodes with an open incident


class Accounting:
    """``Stats`` and ``Timeline``, and the running totals they are integrated from."""

    def __init__(self, pools: Sequence[str]) -> None:
        self.stats = Stats()
        self.timeline = Timeline()
        self.allocated = 0  # devices held by running pods
        self.pool_alloc = dict.fromkeys(pools, 0)
        self.size_alloc: dict[int, int] = {}  # devices held, by the job's size
        self.ns_alloc: dict[str, int] = {}  # devices held, by the job's namespace
        self.stats.lost_by_cause = dict.fromkeys(LOSS_CAUSES, 0.0)
        self._integrated_to = EPOCH
        # job -> (fault time, kind), while a fault holds it
        self._stuck: dict[str, tuple[float, str]] = {}

    def integrate(self, t: float, machines: int) -> None:
        """Adds the device- and node-seconds from the last call up to ``t``;
        ``machines``: those alive (not deleted, provisioning included) meanwhile."""
        dt = t - self._integrated_to
        if dt > 0:
            self.stats.device_seconds_allocated += self.allocated * dt
            self.stats.node_seconds += machines * dt
            by_size = self.stats.allocated_by_size
            for size, held in self.size_alloc.items():
                if held:
                    by_size[size] = by_size.get(size, 0.0) + held * dt
            by_ns = self.stats.allocated_by_namespace
            for ns, held in self.ns_alloc.items():
                if held:
                    by_ns[ns] = by_ns.get(ns, 0.0) + held * dt
            self._integrated_to = t

    def hold(
        self, pool: str, devices: int, job_size: int | None = None, namespace: str = ""
    ) -> None:
        """A pod of a job of ``job_size`` devices (default: ``devices``) in
        ``namespace`` binds."""
        self.allocated += devices
        self.pool_alloc[pool] += devices
        size = devices if job_size is None else job_size
        self.size_alloc[size] = self.size_alloc.get(size, 0) + devices
        self.ns_alloc[namespace] = self.ns_alloc.get(namespace, 0) + devices

    def free(
        self, pool: str, devices: int, job_size: int | None = None, namespace: str = ""
    ) -> None:
        self.allocated -= devices
        self.pool_alloc[pool] -= devices
        size = devices if job_size is None else job_size
        self.size_alloc[size] -= devices
        self.ns_alloc[namespace] -= devices

    def lose(self, cause: str, device_seconds: float) -> None:
        """Device-seconds a stopped run cost, by cause (``LOSS_CAUSES``)."""
        if device_seconds > 0:
            self.stats.lost_by_cause[cause] += device_seconds

    def spare(self, nodes: int, seconds: float) -> None:
        self.stats.spare_node_seconds += nodes * seconds

    def restarted(self, restarts: int) -> None:
        """One job's restarts over the run, for the distribution."""
        self.stats.restarts[restarts] = self.stats.restarts.get(restarts, 0) + 1

    def useful(self, work: float, factor: float, size: int, namespace: str = "") -> None:
        """``work`` kept by a run (negative: none), on ``size`` devices, at ``factor``
        seconds per unit of work, of a job in ``namespace``."""
        kept = max(0.0, work) * factor * size
        self.stats.device_seconds_useful += kept
        self.stats.useful_by_size[size] = self.stats.useful_by_size.get(size, 0.0) + kept
        by_ns = self.stats.useful_by_namespace
        by_ns[namespace] = by_ns.get(namespace, 0.0) + kept

    def mark_stuck(self, job: str, kind: str, now: float) -> None:
        """A fault of ``kind`` holds ``job`` from ``now``, unless one already does."""
        self._stuck.setdefault(job, (now, kind))

    def end_stuck(self, job: str, now: float) -> None:
        """``job`` left its failed device (or ended): the remediation took until now."""
        stuck = self._stuck.pop(job, None)
        if stuck is not None:
            self._remediated(stuck[1], now - stuck[0])

    def end_all_stuck(self, end: float) -> None:
        for _, (since, kind) in sorted(self._stuck.items()):
            # Still stuck when the scenario ends: counted up to the end.
            self._remediated(kind, end - since)
        self._stuck.clear()

    def _remediated(self, kind: str, seconds: float) -> None:
        self.stats.remediation.append(seconds)
        self.stats.remediation_by_kind.setdefault(kind, []).append(seconds)

    def incident_closed(
        self,
        by: str,
        faults: list[float],
        opened: float,
        now: float,
        device_seconds: float,
        *,
        vendor: str = "",
    ) -> None:
        """A node's incident ended at ``now`` (``by``: one of ``CLOSED_BY``); ``faults``:
        when each of its faults happened; ``device_seconds``: what it kept from work;
        ``vendor``: its node's. A node scaled away unhealthy never came back, so it
        has no time to healthy capacity."""
        self.stats.closed_by[by] += len(faults)
        if vendor:
            per = self.stats.closed_by_vendor.setdefault(vendor, dict.fromkeys(CLOSED_BY, 0))
            per[by] += len(faults)
        self.stats.unhealthy_node_seconds += now - opened
        self.stats.unhealthy_device_seconds += device_seconds
        if by != "removed":
            self.stats.time_to_healthy.extend(now - t for t in faults)

    def record_action(self, name: str) -> None:
        self.stats.actions[name] = self.stats.actions.get(name, 0) + 1
        self.stats.actions_total += 1

    def sample(
        self,
        now: float,
        pools: Sequence[PoolSpec],
        nodes: Mapping[str, int],
        running: int,
        queued: int,
        unhealthy: int = 0,
    ) -> None:
        """One plot sample; ``nodes``: registered nodes per pool; ``unhealthy``: nodes
        (and replacements under way) with an open incident."""
        tl = self.timeline
        tl.hours.append((now - EPOCH) / 3600.0)
        for pool in pools:
            count = nodes[pool.name]
            devices = count * pool.devices_per_node
            used = self.pool_alloc[pool.name]
            tl.utilization.setdefault(pool.name, []).append(used / devices if devices else 0.0)
            tl.nodes.setdefault(pool.name, []).append(count)
        tl.running.append(running)
        tl.queued.append(queued)
        tl.faults.append(self.stats.faults_total)
        tl.actions.append(self.stats.actions_total)
        tl.unhealthy.append(unhealthy)


__all__ = ["CLOSED_BY", "LOSS_CAUSES", "REMEDIATED_WHEN", "Accounting", "Stats", "Timeline"]
