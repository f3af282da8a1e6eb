"""The simulated fleet: nodes, devices, jobs and faults in simulated time.

A discrete-event simulation around one heap of timed events (job arrivals and
completions, stalls, faults, recoveries, machines that finish provisioning, the
pod GC after a node goes down, plot samples, and whatever the runner adds:
evaluation ticks and the wake-ups of actions that sleep). Kubernetes' own
controllers are modelled as reactions to writes through ``SimKube``. The fleet is
the composition of five parts, each in its own module, with its own docstring:

- ``clock``: simulated time, the event heap and its loop (``SimClock``);
- ``machines``: Cluster API's MachineSet controller, nodes, their devices and
  what the scheduler may use (``MachineSet``);
- ``jobs``: arrivals, progress and checkpoints, the Job controller and the
  scheduler's pass (``JobController``), with ``gangs``: multi-node jobs under
  their JobSet or PyTorchJob, placed all or nothing (``GangController``);
- ``faults``: fault draws and what they do to devices, nodes and jobs
  (``FaultInjector``);
- ``repairs``: the node agent's resets and reboots, Cluster API's machine
  replacement, and each fault's time to healthy capacity (``Repairs``);
- ``accounting``: what ``summary.json`` and the plots report (``Accounting``).

``Fleet`` wires them together, answers ``SimKube`` as its ``Reactor`` (routing each
change to the part it concerns) and is what the runner, telemetry and tests hold:
its attributes below are their read surface, so that none of them needs to know
which part keeps what.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from accel_common.names import SPARE_NODES_ANNOTATION
from autoscaler.kube.protocol import Obj
from autoscaler.simulate.accounting import Accounting
from autoscaler.simulate.clock import EPOCH, SimClock
from autoscaler.simulate.faults import FaultInjector
from autoscaler.simulate.jobs import JobController
from autoscaler.simulate.kube import SimKube
from autoscaler.simulate.machines import CAPI_NAMESPACE, MachineSet
from autoscaler.simulate.repairs import Repairs
from autoscaler.simulate.scenario import Scenario
from autoscaler.simulate.scheduler import Scheduler

Listener = Callable[[str, Any], None]


class Fleet:
    """The simulated cluster; see the module docstring.

    Listeners (``listeners``) hear ``node_added``, ``node_removed``, ``node_down``,
    ``node_up`` (with the ``Slot``), ``pod_bound``, ``pod_unbound`` (with the
    ``Job``) and ``job_lost`` (with the job and the reason)."""

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
        self.time = SimClock(EPOCH + scenario.duration)
        self.end = self.time.end
        self.clock = self.time.clock
        self.at = self.time.at
        self.every = self.time.every
        self.sleep = self.time.sleep
        self.kube = SimKube(self.clock, self)
        self.listeners: list[Listener] = []
        # Separate random streams, so that the rules run and the baseline see the
        # same arrivals, jobs and faults whatever else each of them draws.
        root = np.random.SeedSequence(self.seed)
        # The repairs' stream is the fourth child, the fault classes' the fifth: the
        # first ones are as they were before each was added.
        s_arrival, s_job, s_fault, s_repair, s_class = root.spawn(5)
        self.accounting = Accounting([p.name for p in scenario.pools])
        self.stats = self.accounting.stats
        self.timeline = self.accounting.timeline
        self._wire(s_arrival, s_job, s_fault, s_repair, s_class)
        self._expose()
        self._spares_at = EPOCH

    def _wire(
        self,
        s_arrival: np.random.SeedSequence,
        s_job: np.random.SeedSequence,
        s_fault: np.random.SeedSequence,
        s_repair: np.random.SeedSequence,
        s_class: np.random.SeedSequence,
    ) -> None:
        """The parts, each with its own random stream, in the order they depend on
        each other (and listen: the fleet's own node-removed hook goes between the
        repairs and the faults)."""
        scenario = self.scenario
        self.machines = MachineSet(
            scenario,
            self.kube,
            self.time,
            static_pools=self.static_pools,
            emit=self._emit,
            pod_gone=self.pod_removed,
        )
        self.job_controller = JobController(
            scenario,
            self.kube,
            self.time,
            self.machines,
            self.accounting,
            self.scheduler,
            rng_arrival=np.random.default_rng(s_arrival),
            rng_job=np.random.default_rng(s_job),
            emit=self._emit,
        )
        self.repairs = Repairs(
            scenario,
            self.kube,
            self.time,
            self.machines,
            self.accounting,
            rng=np.random.default_rng(s_repair),
            emit=self._emit,
            pod_gone=self.pod_removed,
        )
        self.listeners.append(self._node_removed)
        self.faults = FaultInjector(
            scenario,
            self.kube,
            self.time,
            self.machines,
            self.job_controller,
            self.accounting,
            self.repairs,
            rng=np.random.default_rng(s_fault),
            rng_class=np.random.default_rng(s_class),
            emit=self._emit,
        )

    def _expose(self) -> None:
        """What the runner, telemetry and tests read: the parts' own containers,
        mutated in place and never replaced."""
        m, j = self.machines, self.job_controller
        self.slots = m.slots
        self.pool_slots = m.pool_slots
        self.device_count = m.device_count
        self.pool_machines = m.pool_machines
        self.pool_alloc = self.accounting.pool_alloc
        self.dev_state: npt.NDArray[np.int8] = m.dev_state
        self.dev_util: npt.NDArray[np.float64] = m.dev_util
        self.dev_fatal: npt.NDArray[np.float64] = m.dev_fatal
        self.dev_recoverable: npt.NDArray[np.float64] = m.dev_recoverable
        self.dev_ecc_uncorrected: npt.NDArray[np.float64] = m.dev_ecc_uncorrected
        # accel_fault_events_total{severity, action}: one row per key of event_keys.
        self.event_keys = m.event_keys
        self.dev_events: npt.NDArray[np.float64] = m.dev_events
        # The class of the fault each device waits to have repaired (-1: none).
        self.dev_class: npt.NDArray[np.int8] = m.dev_class
        self.dev_remap_failed: npt.NDArray[np.bool_] = m.dev_remap_failed
        self.jobs = j.jobs
        self.pending = j.pending
        self.running = j.running
        self.gangs = j.gangs

    @property
    def now(self) -> float:
        return self.time.now

    def _emit(self, what: str, payload: Any) -> None:
        for listener in self.listeners:
            listener(what, payload)

    # -- the run -----------------------------------------------------------------------

    async def run(self) -> None:
        """Processes every event up to the scenario's end."""
        self.machines.start()
        self.job_controller.start()
        self.faults.start()
        self.time.every(self.scenario.duration / self.scenario.samples, self._sample)
        await self.time.run(self._advance, self._after_event)
        self.job_controller.finish()
        self.repairs.check()
        self.repairs.finish()

    def _advance(self, t: float) -> None:
        self.accounting.integrate(t, self.machines.alive)

    def _after_event(self) -> None:
        jobs, gangs = self.job_controller, self.gangs
        if self.machines.changed_pools:
            gangs.note(self.machines.changed_pools)
        if gangs.wants_schedule():
            gangs.schedule()
        if jobs.wants_schedule():
            jobs.schedule()
        if self.machines.health_dirty:
            self.repairs.check()

    def _node_removed(self, what: str, payload: Any) -> None:
        if what == "node_removed":
            self.repairs.node_removed(payload)

    def _sample(self) -> None:
        nodes = {p.name: self.machines.pool_nodes(p.name) for p in self.scenario.pools}
        self._spares()
        self.accounting.sample(
            self.now,
            self.scenario.pools,
            nodes,
            len(self.running),
            sum(len(q) for q in self.pending.values())
            + sum(len(q) for q in self.gangs.pending.values()),
            len(self.repairs.open),
        )

    def _spares(self) -> None:
        """Spare node-seconds since the last sample: per pool, the buffer its
        MachineDeployment declares (``SPARE_NODES_ANNOTATION``, written by
        scale_node_pool), as far as idle Ready schedulable nodes fill it. Sampled
        at the plot samples: the buffer changes at evaluations, far less often."""
        seconds, self._spares_at = self.now - self._spares_at, self.now
        m = self.machines
        for pool in self.scenario.pools:
            md = self.kube.custom.get(("machinedeployments", CAPI_NAMESPACE, pool.name))
            annotations = (md or {}).get("metadata", {}).get("annotations") or {}
            try:
                buffer = int(annotations.get(SPARE_NODES_ANNOTATION, 0))
            except ValueError:
                continue
            if buffer <= 0:
                continue
            idle = 0
            for name in m.schedulable[pool.name]:
                if len(m.slots[m.node_slot[name]].free) == pool.devices_per_node:
                    idle += 1
                    if idle >= buffer:
                        break
            self.accounting.spare(min(buffer, idle), seconds)

    # -- SimKube's Reactor: each change to the part it concerns ---------------------------

    def pod_removed(self, pod: Obj, reason: str) -> None:
        self.job_controller.pod_removed(pod, reason)

    def pod_created(self, pod: Obj) -> None:
        self.job_controller.pod_created(pod)

    def node_changed(self, node: Obj) -> None:
        self.machines.node_changed(node)
        self.repairs.node_changed(node)

    def job_changed(self, job: Obj) -> None:
        self.job_controller.job_changed(job)

    def custom_changed(self, plural: str, obj: Obj) -> None:
        self.gangs.owner_changed(plural, obj)
        self.repairs.machine_changed(plural, obj)

    def replicas_changed(self, deployment: Obj) -> None:
        self.machines.replicas_changed(deployment)

    def eviction_allowed(self, pod: Obj) -> bool:
        return self.job_controller.eviction_allowed(pod)

    # -- what the runner and telemetry ask ------------------------------------------------

    def scraped_nodes(self) -> frozenset[str]:
        """The nodes whose exporter answers: registered and Ready."""
        return self.machines.scraped_nodes()

    def registered_since(self, since: float) -> dict[str, float]:
        """Nodes that joined at or after ``since`` (not the initial ones), and when."""
        return self.machines.registered_since(since)

    def pool_nodes(self, pool: str) -> int:
        return self.machines.pool_nodes(pool)

    def waiting_devices(self, registered: Mapping[str, int] | None = None) -> dict[str, int]:
        """Devices asked for by pending pods, by pool (``JobController.waiting_devices``
        and the gangs' pending members)."""
        if registered is None:
            registered = {p.name: self.machines.pool_nodes(p.name) for p in self.scenario.pools}
        out = self.job_controller.waiting_devices(registered)
        for pool, n in self.gangs.waiting_devices(dict(registered)).items():
            out[pool] += n
        return out

    def record_action(self, name: str) -> None:
        self.accounting.record_action(name)


__all__ = ["Fleet", "Listener"]
