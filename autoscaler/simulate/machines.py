"""Machines, nodes and devices of the simulated fleet: Cluster API's MachineSet
controller and the node lifecycle.

Why a module of its own: this is the part of the cluster the node-pool actions
act on, and the part every other one reads (the jobs bind to its devices, faults
break them, telemetry scrapes them). It owns:

- **Slots**: a place for one node of a pool; its devices are a fixed range of the
  fleet's device arrays (``dev_*``, numpy, indexed by a global device number), so
  that telemetry reads every device of the fleet with one slice per column. The
  next node of the pool reuses a deleted node's slot.
- **MachineSet controller**: a MachineDeployment's replicas become Machines; a
  new Machine is a Node after the pool's ``provisionTime``; on scale-down the
  Machines annotated ``cluster.x-k8s.io/delete-machine`` go first, then those
  still provisioning, then the newest.
- **Scale from zero**: each MachineDeployment carries the capacity annotations
  the controller reads for a pool at 0 nodes (``poolshape.capacity_annotations``),
  unless the pool says ``capacityAnnotations: false``.
- **Devices after Ready**: a node that joins after the start (a scale-up, a
  replacement) is Ready at once, but its devices are allocatable (its Node's
  ``status.allocatable`` and ``capacity`` name its vendor's resource, and the
  scheduler sees them free) only ``deviceReadyDelay`` later, when its device
  plugin has registered; its exporter reports the devices meanwhile, as the real
  one reads the driver directly. The initial nodes start with their devices.
- **Schedulability**: per pool, the sorted names of the nodes that can take a pod
  now (Ready, not cordoned, no ``NoSchedule`` or ``NoExecute`` taint, a free
  device); a device that is lost, resetting after a fatal fault, or faulty
  until a repair (``repairs.py``) is not offered (the device plugin reports it
  unhealthy).
- **Replacement**: a Machine that Cluster API remediates (or that is deleted)
  goes with its node, and the MachineSet's new one joins after
  ``repairs.replace.duration`` (``replace_machine``).

What happens to pods when a node goes (deleted, or a ``NoExecute`` taint) is the
Job controller's business: they are handed to ``pod_gone``.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, overload

import numpy as np

from accel_common.names import (
    CAPI_MACHINE_ANNOTATION,
    HOSTNAME_LABEL,
    RESET_SCOPE_ANNOTATION,
    VENDOR_RESOURCE,
)
from accel_common.remedies import ActionClass
from autoscaler.kube.protocol import Obj
from autoscaler.simulate.classes import SEVERITY, event_keys
from autoscaler.simulate.clock import EPOCH, SimClock
from autoscaler.simulate.kube import (
    CAPI_API_VERSION,
    CLUSTER_LABEL,
    DELETE_ANNOTATION,
    DEPLOYMENT_LABEL,
    MAX_ANNOTATION,
    MIN_ANNOTATION,
    SimKube,
)
from autoscaler.simulate.poolshape import PoolNodes, capacity_annotations, node_labels, sort_nodes
from autoscaler.simulate.scenario import PoolSpec, Scenario, node_name
from autoscaler.simulate.scheduler import NodeView

CAPI_NAMESPACE = "default"
# Device states: OK; BROKEN (a fault stalls the job still on it); LOST (does not
# answer); RESETTING (freed after a fault, back after ``resetTime``, or being reset
# by the agent); FAULTY (freed, but its fault needs a repair: ``repairs``).
OK, BROKEN, LOST, RESETTING, FAULTY = 0, 1, 2, 3, 4


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
    # Registered, its devices not yet allocatable (``deviceReadyDelay``).
    warming: bool = False


@dataclass
class Machine:
    name: str
    pool: str
    created: float
    slot: int = -1  # -1 while provisioning
    deleted: bool = False


class NodeViews(Sequence[NodeView]):
    """The schedulable nodes of some pools that have a free device, in name order,
    each built only when the scheduler looks at it. ``lists`` are the pools' live
    name lists (``MachineSet.schedulable``), so a node that fills up during a pass
    drops out of the next request's view."""

    def __init__(self, machines: MachineSet, lists: list[list[str]]) -> None:
        self.machines = machines
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
            return [self.machines.view(n) for n in self._names()[i]]
        return self.machines.view(self._names()[i])

    def __iter__(self) -> Iterator[NodeView]:
        for n in self._names():
            yield self.machines.view(n)


class MachineSet:
    """The fleet's machines, nodes and devices; see the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        *,
        static_pools: bool,
        emit: Callable[[str, Any], None],
        pod_gone: Callable[[Obj, str], None],
    ) -> None:
        self.scenario = scenario
        self.kube = kube
        self.time = time
        self.emit = emit
        self.pod_gone = pod_gone
        self.pools = {p.name: p for p in scenario.pools}
        self.by_name: dict[str, Machine] = {}
        self._machine_counter = dict.fromkeys(self.pools, 0)
        self.pool_machines = dict.fromkeys(self.pools, 0)  # not deleted, incl. provisioning
        self.alive = 0  # machines not deleted, provisioning included
        # Pools whose nodes changed: where the scheduler should look next.
        self.changed_pools: set[str] = set()
        self._build_slots(static_pools)

    def _build_slots(self, static_pools: bool) -> None:
        self.slots: list[Slot] = []
        self.pool_slots: dict[str, list[int]] = {}
        base = 0
        for pool in self.scenario.pools:
            count = pool.initial if static_pools else pool.max
            ids = []
            for _ in range(count):
                self.slots.append(Slot(len(self.slots), pool, base))
                ids.append(len(self.slots) - 1)
                base += pool.devices_per_node
            self.pool_slots[pool.name] = ids
        # Per pool: a heap of the slots without a node (the lowest goes first) and
        # how many have one, so that 2,000 nodes join in linear time.
        self._vacant: dict[str, list[int]] = {p: list(ids) for p, ids in self.pool_slots.items()}
        self._registered = dict.fromkeys(self.pool_slots, 0)
        self.device_count = base
        g = base
        self.dev_job = np.full(g, -1, dtype=np.int64)  # job index, -1 when free
        self.dev_state = np.zeros(g, dtype=np.int8)
        self.dev_util = np.zeros(g, dtype=np.float64)  # base utilization
        self.dev_fatal = np.zeros(g, dtype=np.float64)
        self.dev_recoverable = np.zeros(g, dtype=np.float64)
        self.dev_ecc_uncorrected = np.zeros(g, dtype=np.float64)
        # The fault-event counters by (severity, action class): what the exporter
        # publishes as accel_fault_events_total{severity, action}. dev_fatal and
        # dev_recoverable are their sums per severity.
        self.event_keys = event_keys(self.scenario.faults.classes, fault_kinds(self.scenario))
        for e in self.scenario.faults.events:
            if e.action is not None and e.kind in SEVERITY:
                key = (SEVERITY[e.kind], e.action)
                self.event_keys += () if key in self.event_keys else (key,)
        self._event_row = {key: i for i, key in enumerate(self.event_keys)}
        self.dev_events = np.zeros((len(self.event_keys), g), dtype=np.float64)
        self.dev_slot = np.zeros(g, dtype=np.int64)
        # The device's fault needs a repair (reset, reboot, replacement) to go, and
        # its class (an index into ACTION_CLASSES; -1: none).
        self.dev_repair = np.zeros(g, dtype=np.bool_)
        self.dev_class = np.full(g, -1, dtype=np.int8)
        # A row could not be remapped (a remap_failure fault): until replacement.
        self.dev_remap_failed = np.zeros(g, dtype=np.bool_)
        # Slots whose health (Ready, schedulable, devices OK) may have changed since
        # the repairs' bookkeeping last looked.
        self.health_dirty: set[int] = set()
        self.boots = 0
        for s in self.slots:
            self.dev_slot[s.base : s.base + s.pool.devices_per_node] = s.index
        self.node_slot: dict[str, int] = {}
        self.schedulable: dict[str, list[str]] = {p: [] for p in self.pools}
        self._views: dict[str, NodeView] = {}

    def start(self) -> None:
        """The pools' MachineDeployments, and their initial nodes, Ready at once."""
        for pool in self.scenario.pools:
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
                            **capacity_annotations(pool),
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
            # The MachineHealthCheck that makes Cluster API act on replace_machine's
            # remediate-machine mark (the action checks that one selects the Machine).
            self.kube.add_custom(
                "machinehealthchecks",
                {
                    "apiVersion": CAPI_API_VERSION,
                    "kind": "MachineHealthCheck",
                    "metadata": {"name": pool.name, "namespace": CAPI_NAMESPACE},
                    "spec": {
                        "clusterName": "sim",
                        "selector": {"matchLabels": {DEPLOYMENT_LABEL: pool.name}},
                    },
                },
            )
            for name in self.scenario.initial_nodes[pool.name]:
                self._new_machine(pool, name, ready=True)

    # -- machines and nodes ------------------------------------------------------------

    def _new_machine(
        self,
        pool: PoolSpec,
        name: str | None = None,
        *,
        ready: bool,
        after: float | None = None,
    ) -> Machine:
        """A new Machine of ``pool``, Ready at once or after ``after`` (default: the
        pool's ``provisionTime``)."""
        if name is None:
            while True:
                name = node_name(pool.name, self._machine_counter[pool.name])
                self._machine_counter[pool.name] += 1
                if name not in self.by_name:
                    break
        else:
            self._machine_counter[pool.name] += 1
        m = Machine(name, pool.name, self.time.now)
        self.by_name[name] = m
        self.alive += 1
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
            wait = pool.provision_time if after is None else after
            delay = pool.device_ready_delay
            self.time.at(self.time.now + wait, lambda: self._machine_ready(name, delay))
        return m

    def _machine_ready(self, name: str, delay: float = 0.0) -> None:
        """Machine ``name``'s node registers, Ready; its devices are allocatable at
        once, or ``delay`` later (``_devices_ready``)."""
        m = self.by_name.get(name)
        if m is None or m.deleted:
            return
        pool = self.pools[m.pool]
        vacant = self._vacant[pool.name]
        while vacant and self.slots[vacant[0]].node is not None:
            heapq.heappop(vacant)
        if not vacant:
            return  # more machines than the pool's max: the extra never joins
        slot = self.slots[heapq.heappop(vacant)]
        self._registered[pool.name] += 1
        m.slot = slot.index
        slot.node, slot.ready, slot.blocked, slot.avoid = name, True, False, False
        slot.created = self.time.now
        d = pool.devices_per_node
        slot.warming = delay > 0
        slot.free = [] if slot.warming else list(range(d))
        g = slice(slot.base, slot.base + d)
        self.dev_job[g] = -1
        self.dev_state[g] = OK
        self.dev_util[g] = 0.0
        self.clear_counters(g)
        self.dev_repair[g] = False
        self.dev_class[g] = -1
        self.dev_remap_failed[g] = False
        self.node_slot[name] = slot.index
        # Until its device plugin registers, the node has no vendor resource at all.
        devices = {} if slot.warming else {VENDOR_RESOURCE[pool.vendor]: str(d)}
        self.kube.add_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {**node_labels(pool), HOSTNAME_LABEL: name},
                    "annotations": {
                        CAPI_MACHINE_ANNOTATION: name,
                        # What the node agent says at start: NVSwitch boards reset
                        # every GPU together.
                        RESET_SCOPE_ANNOTATION: reset_scope(pool),
                    },
                },
                "spec": {"providerID": f"sim:///{name}"},
                "status": {
                    "nodeInfo": {"bootID": self.new_boot_id()},
                    "capacity": dict(devices),
                    "allocatable": dict(devices),
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )
        machine = self.kube.custom[("machines", CAPI_NAMESPACE, name)]
        machine["status"] = {"phase": "Running", "nodeRef": {"kind": "Node", "name": name}}
        self.kube.touch(machine)
        self._deployment_status(pool.name)
        self.update_schedulable(slot)
        self.emit("node_added", slot)
        self.changed_pools.add(pool.name)
        if slot.warming:
            self.time.at(self.time.now + delay, partial(self._devices_ready, slot, name))

    def _devices_ready(self, slot: Slot, name: str) -> None:
        """The device plugin on node ``name`` registered: its devices are allocatable
        (the healthy, free ones offered to the scheduler)."""
        if slot.node != name or not slot.warming:
            return  # the node went before its devices came
        slot.warming = False
        d = slot.pool.devices_per_node
        r = range(slot.base, slot.base + d)
        slot.free = [g - slot.base for g in r if self.dev_state[g] == OK and self.dev_job[g] < 0]
        node = self.kube.nodes[name]
        resource = VENDOR_RESOURCE[slot.pool.vendor]
        node["status"]["capacity"] = {resource: str(d)}
        node["status"]["allocatable"] = {resource: str(d)}
        self.kube.touch(node)
        self.update_schedulable(slot)
        self.changed_pools.add(slot.pool.name)

    def new_boot_id(self) -> str:
        self.boots += 1
        return f"00000000-0000-4000-b000-{self.boots:012d}"

    def replace_machine(self, name: str, after: float) -> str | None:
        """Cluster API replaces Machine ``name`` (remediated, or deleted while its
        MachineDeployment still wants it): the Machine and its node go now, and the
        MachineSet's new Machine joins after ``after``. Returns the new Machine's
        name (None: no such Machine)."""
        m = self.by_name.get(name)
        if m is None or m.deleted:
            return None
        self._delete_machine(name)
        return self._new_machine(self.pools[m.pool], ready=False, after=after).name

    def _deployment_status(self, pool: str) -> None:
        md = self.kube.custom[("machinedeployments", CAPI_NAMESPACE, pool)]
        md["status"] = {
            "replicas": self.pool_machines[pool],
            "readyReplicas": self._registered[pool],
        }
        self.kube.touch(md)

    def _delete_machine(self, name: str) -> None:
        m = self.by_name[name]
        m.deleted = True
        self.alive -= 1
        self.pool_machines[m.pool] -= 1
        self.kube.remove_custom("machines", CAPI_NAMESPACE, name)
        if m.slot >= 0:
            slot = self.slots[m.slot]
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    self.pod_gone(pod, "NodeDeleted")
            self.set_unschedulable(slot)
            self.emit("node_removed", slot)
            self.kube.remove_node(name)
            del self.node_slot[name]
            slot.node, slot.ready, slot.free, slot.warming = None, False, [], False
            heapq.heappush(self._vacant[m.pool], slot.index)
            self._registered[m.pool] -= 1
        del self.by_name[name]
        self._deployment_status(m.pool)

    def replicas_changed(self, deployment: Obj) -> None:
        pool = self.pools.get(deployment["metadata"]["name"])
        if pool is None:
            return
        want = int(deployment.get("spec", {}).get("replicas", 0))
        alive = [m for m in self.by_name.values() if m.pool == pool.name and not m.deleted]
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
        self.update_schedulable(slot)
        self.changed_pools.add(slot.pool.name)
        if "NoExecute" in effects:
            for key in list(self.kube.pods_by_node.get(name, {})):
                pod = self.kube.remove_pod(*key)
                if pod is not None:
                    self.pod_gone(pod, "TaintEviction")

    # -- devices -----------------------------------------------------------------------

    def count_event(self, g: int, severity: str, action: ActionClass) -> None:
        """One fault event of ``severity`` and class ``action`` on device ``g``."""
        self.dev_events[self._event_row[(severity, action)], g] += 1
        if severity == "fatal":
            self.dev_fatal[g] += 1
        elif severity == "recoverable":
            self.dev_recoverable[g] += 1

    def clear_counters(self, g: int | slice) -> None:
        """A new exporter on the node (a new node, a reboot): counters from 0."""
        for arr in (self.dev_fatal, self.dev_recoverable, self.dev_ecc_uncorrected):
            arr[g] = 0.0
        self.dev_events[:, g] = 0.0

    def take_device(self, slot: Slot, g: int, state: int) -> None:
        """Device ``g`` of ``slot`` stops being offered, in ``state``."""
        d = g - slot.base
        if d in slot.free:
            slot.free.remove(d)
            self.update_schedulable(slot)
        self.dev_state[g] = state

    def reset(self, g: int) -> None:
        """A lost or resetting device is healthy again, and offered if free (unless
        its fault needs a repair: then it is FAULTY)."""
        slot = self.slots[int(self.dev_slot[g])]
        if self.dev_state[g] not in (LOST, RESETTING):
            return
        if self.dev_repair[g]:
            # Its fault needs a repair: waiting does not bring it back.
            self.dev_state[g] = FAULTY
            self.health_dirty.add(slot.index)
            return
        self.dev_state[g] = OK
        self.health_dirty.add(slot.index)
        d = g - slot.base
        # A node still waiting for its device plugin offers none of its devices.
        offered = slot.node is not None and not slot.warming
        if offered and self.dev_job[g] < 0 and d not in slot.free:
            bisect.insort(slot.free, d)
            self.update_schedulable(slot)
            self.changed_pools.add(slot.pool.name)

    # -- what the scheduler sees ---------------------------------------------------------

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

    def views(self, pools: Sequence[str]) -> NodeViews:
        """The schedulable nodes of ``pools``, as the scheduler sees them."""
        return NodeViews(self, [self.schedulable[p] for p in pools])

    def release_broken(self, g: int) -> None:
        """Device ``g``, BROKEN under a job, was freed: it resets and is back after
        ``resetTime``, or, when its fault needs a repair, stays FAULTY until one."""
        if self.dev_repair[g]:
            self.dev_state[g] = FAULTY
            self.health_dirty.add(int(self.dev_slot[g]))
            return
        self.dev_state[g] = RESETTING
        self.time.at(self.time.now + self.scenario.faults.reset_time, partial(self.reset, g))

    def update_schedulable(self, slot: Slot) -> None:
        """Keeps ``schedulable[pool]`` (sorted names of nodes that can take a pod now
        and have a free device) and the view cache current for one node."""
        self.health_dirty.add(slot.index)
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

    def set_unschedulable(self, slot: Slot) -> None:
        slot.ready = False
        self.update_schedulable(slot)

    # -- what the rest of the simulation reads ---------------------------------------------

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
        return self._registered[pool]

    def readiness(self, pool: str, now: float) -> PoolNodes:
        """``pool``'s registered nodes as the controller's pool series sort them
        (``poolshape.sort_nodes``)."""
        slots = [s for s in (self.slots[i] for i in self.pool_slots[pool]) if s.node is not None]
        return sort_nodes(self.pools[pool], slots, now)


def fault_kinds(scenario: Scenario) -> set[str]:
    """The fault kinds a scenario can produce (a rate above 0, or an event)."""
    kinds = {kind for kind, rate in scenario.faults.rates if rate > 0}
    return kinds | {e.kind for e in scenario.faults.events}


def reset_scope(pool: PoolSpec) -> str:
    """``RESET_SCOPE_ANNOTATION`` as the agent writes it: ``node`` where an NVSwitch
    links the GPUs (they reset together), ``device`` elsewhere."""
    return "node" if pool.vendor == "nvidia" and pool.topology == "nvlink" else "device"


__all__ = [
    "BROKEN",
    "CAPI_NAMESPACE",
    "FAULTY",
    "LOST",
    "OK",
    "RESETTING",
    "Machine",
    "MachineSet",
    "NodeViews",
    "Slot",
    "reset_scope",
]
