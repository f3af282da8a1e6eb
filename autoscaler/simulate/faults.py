"""Faults in the simulated fleet: when they happen, and what they do to devices,
nodes and the jobs on them.

Why a module of its own: faults are what the rules exist for, and the simulator's
verdict on them is only as fair as this model, so it should be read whole. Faults
come at a rate per device-hour by kind (a Poisson process over every device place,
thinned where no node stands) or at set times. A fault on a device kills the job
on it (a lost device, a node that goes down) or stalls it (a fatal fault, an
uncorrected ECC burst, a hang, a stall): a stalled job holds its devices and makes
no progress until something removes its pod; a pending remap leaves the job
running. A ``collective_hang`` (a hung NCCL ring) stalls the whole job on the
device (every member of a gang) while its devices stay busy at the job's load and
their device links fall silent, which is what a kernel spinning in a collective
looks like; on a device no job holds it does nothing (there is no collective).
A node that goes down turns NotReady; its pods are deleted five minutes later
(the default ``tolerationSeconds`` for unreachable nodes). Every fault has an
action class (``classes.py``: the event's own, else drawn from the kind's
classes on a stream of its own, so that the faults fall where they would without
classes), which the simulated exporter publishes as the fault event's ``action``
label. What a fault needs to go away (time alone, or a repair of its class) and
how long its node's capacity stays away is ``repairs.py``'s, which hears of every
fault.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from accel_common.remedies import ActionClass
from autoscaler.simulate.accounting import Accounting
from autoscaler.simulate.classes import SEVERITY
from autoscaler.simulate.clock import EPOCH, SimClock
from autoscaler.simulate.jobs import JobController
from autoscaler.simulate.jobstate import Job
from autoscaler.simulate.kube import SimKube
from autoscaler.simulate.machines import BROKEN, FAULTY, LOST, OK, RESETTING, MachineSet, Slot
from autoscaler.simulate.repairs import Repairs
from autoscaler.simulate.scenario import Scenario

# Pods on an unreachable node are deleted after the default tolerationSeconds.
UNREACHABLE_GRACE = 300.0


class FaultInjector:
    """Draws the scenario's faults and applies them; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        machines: MachineSet,
        jobs: JobController,
        accounting: Accounting,
        repairs: Repairs,
        *,
        rng: np.random.Generator,
        rng_class: np.random.Generator,
        emit: Callable[[str, Any], None],
    ) -> None:
        self.scenario = scenario
        # The classes are drawn from a stream of their own, so that the faults'
        # times and places are those of a scenario without classes.
        self.rng_class = rng_class
        self.kube = kube
        self.time = time
        self.machines = machines
        self.jobs = jobs
        self.accounting = accounting
        self.repairs = repairs
        self.stats = accounting.stats
        self.rng = rng
        self.emit = emit

    def start(self) -> None:
        for kind, rate in self.scenario.faults.rates:
            if rate > 0:
                self._schedule_fault(kind, rate, self.time.now)
        for ev in self.scenario.faults.events:
            explicit = partial(self._explicit_fault, ev.kind, ev.node, ev.device, ev.action)
            self.time.at(EPOCH + ev.at, explicit)

    def _schedule_fault(self, kind: str, rate: float, after: float) -> None:
        """Poisson faults at ``rate`` per device-hour over every device place; a fault
        that lands on a place with no node is dropped, which keeps the rate per
        device whatever the pools' sizes (thinning)."""
        count = self.machines.device_count
        total = rate * count / 3600.0
        t = after + float(self.rng.exponential(1.0 / total))
        g = int(self.rng.integers(count))
        if t <= self.time.end:
            self.time.at(t, lambda: self._random_fault(kind, rate, g))

    def _random_fault(self, kind: str, rate: float, g: int) -> None:
        self._schedule_fault(kind, rate, self.time.now)
        slot = self.machines.slots[int(self.machines.dev_slot[g])]
        if slot.node is None or not slot.ready:
            return
        self._fault(kind, slot, g)

    def _explicit_fault(
        self, kind: str, node: str, device: int | None, action: ActionClass | None = None
    ) -> None:
        slot_id = self.machines.node_slot.get(node)
        if slot_id is None:
            return
        slot = self.machines.slots[slot_id]
        self._fault(kind, slot, slot.base + (device or 0), action)

    def _class(self, kind: str, action: ActionClass | None) -> ActionClass:
        """The fault's class: the event's own, else drawn from the kind's classes
        (one draw per fault whatever the mix, so the stream stays aligned)."""
        u = float(self.rng_class.random())
        return action if action is not None else self.scenario.faults.classes[kind].draw(u)

    def _fault(self, kind: str, slot: Slot, g: int, action: ActionClass | None = None) -> None:
        m, now = self.machines, self.time.now
        self.stats.faults[kind] = self.stats.faults.get(kind, 0) + 1
        self.stats.faults_total += 1
        klass = self._class(kind, action)
        if kind == "device_lost" and m.dev_state[g] == LOST:
            return  # already lost: nothing new to see
        waits = self.repairs.fault(kind, slot, g, klass)
        j = int(m.dev_job[g])
        job = self.jobs.job_by_index[j] if j >= 0 else None
        if kind == "node_down":
            self._node_down(slot)
            return
        if kind in SEVERITY:
            # What the exporter publishes: accel_fault_events_total{severity, action}
            # (a lost device as code "lost", fatal, class reboot).
            m.count_event(g, SEVERITY[kind], klass)
        if kind == "remap_pending":
            return  # the job goes on; the device waits for a reset (repairs.py)
        if kind == "device_lost":
            m.take_device(slot, g, LOST)
            if not waits:
                recovery = now + self.scenario.faults.device_lost_recovery
                self.time.at(recovery, lambda: m.reset(g))
            if job is not None:
                self._mark_stuck(job, kind)
                self.jobs.fail_pod(job, g)
            return
        if kind == "ecc_uncorrected":
            m.dev_ecc_uncorrected[g] += self.scenario.faults.ecc_burst
        if kind in ("fatal", "ecc_uncorrected", "hang", "remap_failure"):
            if job is None:
                if m.dev_state[g] == OK and m.dev_repair[g]:
                    m.take_device(slot, g, FAULTY)  # until a repair
                elif m.dev_state[g] == OK:
                    m.take_device(slot, g, RESETTING)
                    self.time.at(now + self.scenario.faults.reset_time, lambda: m.reset(g))
                return
            m.dev_state[g] = BROKEN
        if job is not None and job.state == "running":
            self._mark_stuck(job, kind)
            self.jobs.stall(job, job.version, kind)

    def _mark_stuck(self, job: Job, kind: str) -> None:
        self.accounting.mark_stuck(job.name, kind, self.time.now)

    def _node_down(self, slot: Slot) -> None:
        if not slot.ready or slot.node is None:
            return
        name = slot.node
        m, jobs = self.machines, self.jobs
        m.set_unschedulable(slot)
        node = self.kube.nodes[name]
        node["status"]["conditions"] = [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
        ]
        self.kube.touch(node)
        self.emit("node_down", slot)
        held = m.dev_job[slot.base : slot.base + slot.pool.devices_per_node]
        for j in sorted({int(x) for x in held if x >= 0}):
            job = jobs.job_by_index[j]
            if job.state == "running":
                self._mark_stuck(job, "node_down")
                jobs.stall(job, job.version, "node_down")

        def gc() -> None:
            if slot.node != name or slot.ready:
                return
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    jobs.pod_removed(pod, "Failed")

        def back() -> None:
            if slot.node != name:
                return
            slot.ready = True
            node["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ]
            self.kube.touch(node)
            m.update_schedulable(slot)
            m.changed_pools.add(slot.pool.name)
            self.emit("node_up", slot)

        now = self.time.now
        self.time.at(now + UNREACHABLE_GRACE, gc)
        self.time.at(now + self.scenario.faults.node_down_recovery, back)


__all__ = ["UNREACHABLE_GRACE", "FaultInjector"]
