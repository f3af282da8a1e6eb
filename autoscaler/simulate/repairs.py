"""Repairs in the simulated fleet: the node agent's resets and reboots, Cluster
API's machine replacement, and how long each fault keeps its node's capacity away.

Why a module of its own: the escalation ladder (migrate, reset, reboot, replace)
is only worth what the repairs it orders do, and the simulator's verdict on it is
only as fair as this model, so it is read whole here. The production actions
(``reset_devices``, ``reboot_node``, ``replace_machine``) run unchanged against the
in-memory API; this module is the other side of their channel
(``docs/design.md``'s node agent channel, ``accel_common.names``):

- **Which faults need a repair, and which repair.** With ``repairs`` in the
  scenario, a ``fatal`` fault (Xid 79, 48, 95, an uncorrectable RAS event) heals on
  its own only with probability ``selfHeals``; any other stays with its device
  (FAULTY once its job has left it, not offered by the device plugin) until a
  repair fixes it, and is reported again every ``REPORT_INTERVAL`` (the driver
  logs the Xid again each time it touches the device), so that a rule's
  ``recover`` cannot hold while the device is still broken. A ``device_lost``
  fault likewise stays lost (reported once, and again after a reboot that did not
  fix it); a ``remap_pending`` one, with or without ``repairs``, waits for any
  reset, its job running meanwhile. Which repair can fix a fault is its class's
  (``classes.FIXED_BY``: never a reset for ``reboot`` or ``isolate``, never a
  reboot for ``isolate``); whether one that can does is drawn once, at the fault,
  from the run's own seeded stream (``fixes``), so that a second reset of the same
  fault does what the first did and the runs with different rules see the same
  faults. Without ``repairs`` every other fault heals as it always has
  (``resetTime`` after its job left the device).
- **The node agent.** It answers ``RESET_REQUEST_ANNOTATION`` and
  ``REBOOT_REQUEST_ANNOTATION`` on the Node, once per request ``id``. A reset
  refuses (``refused``, looked at again every ``AGENT_INTERVAL``) while a pod
  holds a device of its group (every device of the node when the node's
  ``RESET_SCOPE_ANNOTATION`` is ``node``, as on NVSwitch boards), then says
  ``resetting``, takes the group's devices for ``reset.duration``, and looks
  again as the real agent does (``nodeagent/resetters.py``): ``done`` only when
  every device of the group is fixed, else ``failed`` with ``"reason":
  "unfixed"``, saying why: a device that does not answer (a ``reboot``-class
  fault, a lost device), or one that answers with its fault standing (an
  ``isolate`` one, a ``reset`` one drawn not to be fixed), which is also reported
  again at once. The real agent sees that last case only through what its vendor
  library keeps across a reset (NVML's row remapper and recovery action); the
  simulator assumes every unfixed fault is seen (``docs/simulator.md`` says so).
  On a vendor the agent cannot reset (``accel_common.agentsupport``, the table the
  real agent answers by) it answers ``failed`` with ``"reason": "unsupported"`` at
  once and resets nothing. A reboot says
  ``rebooting`` with the current ``status.nodeInfo.bootID``, takes the node
  NotReady for ``reboot.duration`` (the pods still on it fail; the exporter's
  counters start again from 0), then brings it back with a new boot id and says
  ``done``.
- **Cluster API.** A Machine marked ``CAPI_REMEDIATE_MACHINE_ANNOTATION``, or
  deleted, goes with its node; its MachineSet's new Machine joins, fault-free,
  after ``replace.duration``.
- **Healthy capacity.** A fault opens an incident on its node (``stall`` faults,
  which leave the device healthy, do not); further faults on the node join it.
  It ends when the node, or the Machine that replaced it, is Ready, schedulable
  and has every device healthy, and is booked by the step that fixed the last
  fault (``accounting.CLOSED_BY``). Meanwhile it counts the devices it keeps from
  work: every device of the node while the node is NotReady, cordoned, tainted
  ``NoSchedule``/``NoExecute`` or away being replaced, else its unhealthy ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from accel_common import clusterjson
from accel_common.agentsupport import (
    UNFIXED_REASON,
    UNSUPPORTED_REASON,
    can_reset,
    reset_unsupported,
)
from accel_common.names import (
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from accel_common.remedies import ACTION_CLASSES, RANK, ActionClass
from autoscaler.kube.protocol import MACHINES, Obj
from autoscaler.simulate.accounting import Accounting
from autoscaler.simulate.classes import SEVERITY, fixes
from autoscaler.simulate.clock import SimClock
from autoscaler.simulate.kube import SimKube, timestamp
from autoscaler.simulate.machines import (
    FAULTY,
    LOST,
    OK,
    RESETTING,
    MachineSet,
    Slot,
)
from autoscaler.simulate.scenario import Scenario, device_name

# An unrepaired fault is reported again this often, so that no recover whose
# window is longer (the shipped rule's look at 10 to 30 minutes) holds over a
# broken device, and the fault's own rule keeps seeing it.
REPORT_INTERVAL = 300.0
# How often the agent looks again at a request it could not carry out yet.
AGENT_INTERVAL = 30.0
# Fault kinds that leave the node's devices healthy: no incident.
NO_INCIDENT = frozenset({"stall", "app", "collective_hang"})
# Fault kinds that, with ``repairs``, stay until a repair of their class fixes them
# (a pending remap always waits for a reset: nothing else applies it).
NEEDS_REPAIR = frozenset({"fatal", "device_lost", "remap_pending", "remap_failure"})
# Of those, the kinds that need a repair with or without ``repairs``: nothing but a
# reset applies a pending remap, nothing but a new part cures a failed one.
ALWAYS_REPAIR = frozenset({"remap_pending", "remap_failure"})
# Why the agent cannot reset a vendor's devices: the vendor table's reason.
UNSUPPORTED = "{why}; nothing was reset"


@dataclass
class Fate:
    """What each repair would do to one fault, drawn when it happens, and the
    fault's kind and class (which repairs can fix it at all: ``classes.FIXED_BY``)."""

    self_heals: bool
    reset: bool
    reboot: bool
    kind: str = "fatal"
    action: ActionClass = "reset"

    def fixed_by(self, how: str) -> bool:
        """Whether a ``reset`` or ``reboot`` fixes this fault: never one of a class
        that repair cannot reach; a pending remap by any; else as drawn."""
        if not fixes(how, self.action):
            return False
        return self.action == "reset_when_idle" or bool(getattr(self, how))


@dataclass
class Incident:
    """A node's capacity away from the first fault until it is healthy again."""

    node: str  # the node now: the replacement's name once its Machine is replaced
    opened: float
    faults: list[float] = field(default_factory=list)
    by: str = "self"  # the last step that fixed a fault of it
    vendor: str = ""  # the node's pool's, for faults_closed_by_vendor
    held: int = 0  # devices it keeps from work now
    since: float = 0.0  # when ``held`` was last counted
    lost: float = 0.0  # device-seconds kept from work so far


class Repairs:
    """The node agent, Cluster API's remediation and the incidents; see the module
    docstring."""

    def __init__(
        self,
        scenario: Scenario,
        kube: SimKube,
        time: SimClock,
        machines: MachineSet,
        accounting: Accounting,
        *,
        rng: np.random.Generator,
        emit: Callable[[str, Any], None],
        pod_gone: Callable[[Obj, str], None],
    ) -> None:
        self.spec = scenario.repairs
        self.kube = kube
        self.time = time
        self.machines = machines
        self.accounting = accounting
        self.rng = rng
        self.emit = emit
        self.pod_gone = pod_gone
        self.fates: dict[int, Fate] = {}  # device -> the fault it has now
        self.reports = 0  # the last report chain started; one per fault needing repair
        self.chain: dict[int, int] = {}  # device -> its live report chain
        self.open: dict[str, Incident] = {}  # node (or replacement Machine) -> incident
        self.answered: dict[tuple[str, str], set[str]] = {}  # (node, request) -> ids
        self.busy: dict[str, str] = {}  # node -> the request id being carried out
        self.polling: set[str] = set()
        self.replacing: dict[str, Incident | None] = {}  # old Machine -> its incident

    # -- faults ----------------------------------------------------------------------

    def fault(self, kind: str, slot: Slot, g: int, action: ActionClass) -> bool:
        """A fault of ``kind`` and class ``action`` hit device ``g`` of ``slot`` (for
        ``node_down``, its first device): open or join the node's incident, and for
        a fault that needs a repair, mark the device and start its reports. Returns
        whether the device now waits for a repair."""
        if slot.node is None or kind in NO_INCIDENT:
            return False
        now = self.time.now
        incident = self.open.get(slot.node)
        if incident is None:
            incident = self.open[slot.node] = Incident(
                slot.node, now, since=now, vendor=slot.pool.vendor
            )
        incident.faults.append(now)
        self.machines.health_dirty.add(slot.index)  # counted after the fault is applied
        if kind not in NEEDS_REPAIR or (kind not in ALWAYS_REPAIR and not self.spec.needed):
            return False
        if kind in ALWAYS_REPAIR:
            fate = Fate(False, True, True, kind, action)  # the class alone decides
        else:
            u = self.rng.random(3)
            fate = Fate(
                bool(u[0] < self.spec.self_heals),
                bool(u[1] < self.spec.reset.fixes),
                bool(u[2] < self.spec.reboot.fixes),
                kind,
                action,
            )
        m = self.machines
        if fate.self_heals:
            return bool(m.dev_repair[g])  # heals as it always has
        if kind == "remap_failure":
            m.dev_remap_failed[g] = True  # accel_remapped_rows{type="failure"}
        held = self.fates.get(g)
        if m.dev_repair[g] and held is not None:
            # The device already waits for a repair: it now needs the stronger one.
            if RANK[action] > RANK[held.action]:
                self.fates[g] = fate
                m.dev_class[g] = ACTION_CLASSES.index(action)
            return True
        self.fates[g] = fate
        m.dev_repair[g] = True
        m.dev_class[g] = ACTION_CLASSES.index(action)
        if kind == "fatal":
            # One chain of reports per fault: a chain from an earlier fault of the
            # device (fixed since) stops rather than doubling the reports. A lost
            # device and a remap (pending or failed: its gauge stands) are reported
            # once (and again by the new exporter after a reboot).
            self.reports += 1
            self.chain[g] = chain = self.reports
            self.time.at(now + REPORT_INTERVAL, lambda: self._report(g, chain))
        return True

    def _report(self, g: int, chain: int) -> None:
        m = self.machines
        fate = self.fates.get(g)
        if self.chain.get(g) != chain or not m.dev_repair[g] or fate is None:
            return
        m.count_event(g, SEVERITY[fate.kind], fate.action)
        self.time.at(self.time.now + REPORT_INTERVAL, lambda: self._report(g, chain))

    def _fix(self, g: int, how: str) -> bool:
        """A reset or reboot (``how``) of device ``g`` ends: whether it fixed its
        fault (a device without one is simply back). A fault that the repair's class
        cannot reach, or that it was drawn not to fix, is reported again as the
        driver brings the device back."""
        m = self.machines
        fate = self.fates.get(g)
        if m.dev_repair[g] and fate is not None and not fate.fixed_by(how):
            m.count_event(g, SEVERITY[fate.kind], fate.action)
            return False
        if m.dev_repair[g]:
            m.dev_repair[g] = False
            m.dev_class[g] = -1
            m.dev_remap_failed[g] = False
            self.fates.pop(g, None)
            slot = m.slots[int(m.dev_slot[g])]
            incident = self.open.get(slot.node or "")
            if incident is not None:
                incident.by = how
        return True

    # -- health ----------------------------------------------------------------------

    def check(self) -> None:
        """Closes the incidents of the nodes that changed and are healthy again."""
        m = self.machines
        dirty, m.health_dirty = m.health_dirty, set()
        if not self.open:
            return
        for index in dirty:
            slot = m.slots[index]
            incident = self.open.get(slot.node or "")
            if incident is None:
                continue
            self._count(incident, slot)
            if incident.held == 0:
                del self.open[incident.node]
                self._close(incident, incident.by, self.time.now)

    def _count(self, incident: Incident, slot: Slot | None, now: float | None = None) -> None:
        """Books the devices ``incident`` kept from work since it last looked, and
        counts them again: all of the node's while it is away (``slot`` None),
        NotReady or unschedulable, else those not healthy."""
        now = self.time.now if now is None else now
        incident.lost += incident.held * (now - incident.since)
        incident.since = now
        if slot is None:
            return
        d = slot.pool.devices_per_node
        if slot.node != incident.node or not slot.ready or slot.blocked:
            incident.held = d
        else:
            # Its unhealthy devices, and those waiting for a repair that still work
            # (a pending remap: offered, but not yet whole).
            r = slice(slot.base, slot.base + d)
            m = self.machines
            incident.held = int(((m.dev_state[r] != OK) | m.dev_repair[r]).sum())

    def _close(self, incident: Incident, by: str, now: float) -> None:
        self.accounting.incident_closed(
            by, incident.faults, incident.opened, now, incident.lost, vendor=incident.vendor
        )

    def node_removed(self, slot: Slot) -> None:
        """A node left: its incident follows a replacement, or ends as removed."""
        name = slot.node or ""
        d = slot.pool.devices_per_node
        for g in range(slot.base, slot.base + d):
            self.fates.pop(g, None)
            self.chain.pop(g, None)
        self.machines.dev_repair[slot.base : slot.base + d] = False
        self.machines.dev_class[slot.base : slot.base + d] = -1
        self.machines.dev_remap_failed[slot.base : slot.base + d] = False
        for key in [k for k in self.answered if k[0] == name]:
            del self.answered[key]
        self.busy.pop(name, None)
        incident = self.open.pop(name, None)
        if incident is not None:
            self._count(incident, None)
        if name in self.replacing:
            if incident is not None:
                incident.held = d  # away until the replacement joins
            self.replacing[name] = incident
        elif incident is not None:
            self._close(incident, "removed", self.time.now)

    def finish(self) -> None:
        """The scenario ended: what is still unhealthy counts up to the end."""
        for incident in self.open.values():
            self._count(incident, None, self.time.end)
            self._close(incident, "open", self.time.end)
        self.open.clear()

    # -- Cluster API -------------------------------------------------------------------

    def machine_changed(self, plural: str, obj: Obj) -> None:
        """A Machine was patched or deleted: a remediated or deleted one is replaced
        (after the action's own write returns, as the MachineSet controller would)."""
        if plural != MACHINES:
            return
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        marked = CAPI_REMEDIATE_MACHINE_ANNOTATION in (meta.get("annotations") or {})
        if (marked or meta.get("deletionTimestamp")) and name not in self.replacing:
            self.replacing[name] = None
            self.time.at(self.time.now, lambda: self._replace(name))

    def _replace(self, name: str) -> None:
        m = self.machines
        new = m.replace_machine(name, self.spec.replace.duration)
        incident = self.replacing.pop(name, None)
        if new is None:
            return
        if incident is None:
            # Replaced without a fault (a ladder that went on after the fault
            # cleared): the wait is unhealthy capacity all the same.
            now = self.time.now
            pool = m.pools[m.by_name[new].pool]
            incident = Incident(new, now, held=pool.devices_per_node, since=now, vendor=pool.vendor)
        incident.node, incident.by = new, "replace"
        self.open[new] = incident

    # -- the node agent ----------------------------------------------------------------

    def node_changed(self, node: Obj) -> None:
        """The Node was patched: a new request for the agent, perhaps."""
        annotations = node.get("metadata", {}).get("annotations") or {}
        if RESET_REQUEST_ANNOTATION in annotations or REBOOT_REQUEST_ANNOTATION in annotations:
            self._reconcile(node["metadata"]["name"])

    def _poll(self, name: str) -> None:
        if name not in self.polling:
            self.polling.add(name)
            self.time.at(self.time.now + AGENT_INTERVAL, lambda: self._polled(name))

    def _polled(self, name: str) -> None:
        self.polling.discard(name)
        self._reconcile(name)

    def _reconcile(self, name: str) -> None:
        """One pass of the agent on node ``name`` (it runs only while the node is up)."""
        node = self.kube.nodes.get(name)
        slot_id = self.machines.node_slot.get(name)
        if node is None or slot_id is None:
            return
        slot = self.machines.slots[slot_id]
        if name in self.busy:
            return
        if not slot.ready:
            self._poll(name)  # the agent is down with its node: later
            return
        annotations = node["metadata"].get("annotations") or {}
        for key, act in (
            (REBOOT_REQUEST_ANNOTATION, self._reboot),
            (RESET_REQUEST_ANNOTATION, self._reset),
        ):
            raw = annotations.get(key)
            if raw is None:
                continue
            try:
                # Bounded, as the agent reads it: a nested request is refused, not a
                # RecursionError that ends the simulation.
                request = clusterjson.loads_object(raw, f"node {name} annotation {key}")
                rid = clusterjson.text(
                    request.get("id"), f"node {name} annotation {key} field id", max_len=253
                )
            except clusterjson.ClusterValueError as e:
                status = RESET_STATUS_ANNOTATION
                if key == REBOOT_REQUEST_ANNOTATION:
                    status = REBOOT_STATUS_ANNOTATION
                message = f"unreadable: {str(e)[:200]}"
                self._status(node, status, {"id": "", "state": "failed", "message": message})
                continue
            if rid in self.answered.get((name, key), set()):
                continue
            act(node, slot, rid, request)
            if name in self.busy:
                return

    def _status(self, node: Obj, key: str, body: dict[str, Any]) -> None:
        body.setdefault("message", "")
        body["at"] = timestamp(self.time.now)
        current = node["metadata"].setdefault("annotations", {})
        text = json.dumps(body, sort_keys=True)
        if current.get(key) != text:
            current[key] = text
            self.kube.touch(node)

    def _done(self, name: str, key: str, rid: str) -> None:
        self.answered.setdefault((name, key), set()).add(rid)
        self.busy.pop(name, None)

    # -- reset -------------------------------------------------------------------------

    def _group(self, node: Obj, slot: Slot, request: dict[str, Any]) -> list[int] | str:
        """The devices a reset takes (global numbers), or why it cannot be done."""
        d = slot.pool.devices_per_node
        every = list(range(slot.base, slot.base + d))
        wanted = request.get("devices") or []
        if not isinstance(wanted, list):
            return "devices must be a list of device uuids"
        names = {device_name(slot.pool.vendor, i): slot.base + i for i in range(d)}
        chosen: list[int] = []
        for item in wanted:
            # A uuid (the simulator's are SIM-<node>-<device>) or a device name.
            g = names.get(str(item).rsplit("-", 1)[-1])
            if g is None:
                return f"no device {item!r} on this node"
            chosen.append(g)
        scope = (node["metadata"].get("annotations") or {}).get(RESET_SCOPE_ANNOTATION)
        if not chosen or scope == "node":
            return every
        return sorted(set(chosen))

    def _reset(self, node: Obj, slot: Slot, rid: str, request: dict[str, Any]) -> None:
        m, name = self.machines, node["metadata"]["name"]
        group = self._group(node, slot, request)
        key = RESET_REQUEST_ANNOTATION
        if isinstance(group, str) or not can_reset(slot.pool.vendor):
            # The agent cannot carry it out (nodeagent/reset.py): nothing is reset,
            # and the answer says why at once.
            body: dict[str, Any] = {"id": rid, "state": "failed"}
            if isinstance(group, str):
                body["message"] = group
            else:
                body.update(
                    reason=UNSUPPORTED_REASON,
                    devices=list(request.get("devices") or []),
                    message=UNSUPPORTED.format(why=reset_unsupported(slot.pool.vendor)),
                )
            self._status(node, RESET_STATUS_ANNOTATION, body)
            self._done(name, key, rid)
            return
        uuids = [f"SIM-{name}-{device_name(slot.pool.vendor, g - slot.base)}" for g in group]
        held = [g for g in group if m.dev_job[g] >= 0]
        if held:
            devices = ", ".join(device_name(slot.pool.vendor, g - slot.base) for g in held)
            self._status(
                node,
                RESET_STATUS_ANNOTATION,
                {
                    "id": rid,
                    "state": "refused",
                    "devices": uuids,
                    "message": f"a pod still holds {devices}; the reset waits until it goes",
                },
            )
            self._poll(name)
            return
        self.busy[name] = rid
        body = {"id": rid, "state": "resetting", "devices": uuids}
        self._status(node, RESET_STATUS_ANNOTATION, body)
        for g in group:
            if m.dev_state[g] in (OK, FAULTY, LOST, RESETTING):
                m.take_device(slot, g, RESETTING)

        def end() -> None:
            if slot.node != name:
                return
            unfixed: list[str] = []
            for g in group:
                if m.dev_state[g] != RESETTING:
                    continue  # a pod came back on it meanwhile: not this reset's
                if self._fix(g, "reset"):
                    m.reset(g)
                    continue
                fate = self.fates.get(g)
                m.dev_state[g] = LOST if fate is not None and fate.kind == "device_lost" else FAULTY
                uuid = f"SIM-{name}-{device_name(slot.pool.vendor, g - slot.base)}"
                unfixed.append(f"{uuid} {_why_unfixed(fate)}")
            self._status(node, RESET_STATUS_ANNOTATION, self._answer(body, unfixed))
            self._done(name, key, rid)
            m.update_schedulable(slot)
            m.changed_pools.add(slot.pool.name)

        self.time.at(self.time.now + self.spec.reset.duration, end)

    @staticmethod
    def _answer(body: dict[str, Any], unfixed: list[str]) -> dict[str, Any]:
        """The agent looks again after a reset (nodeagent/resetters.py): ``done`` only
        when every device of the group is fixed; else ``failed``, reason
        ``unfixed``, with why for each device that is not (``_why_unfixed``)."""
        if not unfixed:
            return {**body, "state": "done"}
        return {**body, "state": "failed", "reason": UNFIXED_REASON, "message": "; ".join(unfixed)}

    # -- reboot ------------------------------------------------------------------------

    def _reboot(self, node: Obj, slot: Slot, rid: str, request: dict[str, Any]) -> None:
        m, name = self.machines, node["metadata"]["name"]
        self.busy[name] = rid
        boot = node["status"].setdefault("nodeInfo", {}).get("bootID", "")
        self._status(
            node, REBOOT_STATUS_ANNOTATION, {"id": rid, "state": "rebooting", "bootID": boot}
        )
        m.set_unschedulable(slot)
        node["status"]["conditions"] = [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
        ]
        self.kube.touch(node)
        self.emit("node_down", slot)
        # The reboot ends every container on the node: its pods fail.
        for pod_key in list(self.kube.pods_by_node.get(name, {})):
            pod = self.kube.remove_pod(*pod_key)
            if pod is not None:
                self.pod_gone(pod, "Failed")

        def end() -> None:
            if slot.node != name:
                return
            d = slot.pool.devices_per_node
            new_boot = m.new_boot_id()
            node["status"]["nodeInfo"]["bootID"] = new_boot
            node["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ]
            # A new exporter: its counters start again from 0.
            m.clear_counters(slice(slot.base, slot.base + d))
            for g in range(slot.base, slot.base + d):
                if m.dev_state[g] == OK and not m.dev_repair[g]:
                    continue
                if self._fix(g, "reboot"):
                    if m.dev_state[g] != OK:
                        m.dev_state[g] = RESETTING
                        m.reset(g)
                else:
                    fate = self.fates.get(g)
                    m.clear_counters(g)  # reported at the next agent pass instead
                    lost = fate is not None and fate.kind == "device_lost"
                    m.dev_state[g] = LOST if lost else FAULTY
                    self.time.at(self.time.now + AGENT_INTERVAL, partial(self._again, g))
            slot.ready = True
            m.update_schedulable(slot)
            m.changed_pools.add(slot.pool.name)
            self.kube.touch(node)
            self.emit("node_up", slot)
            self._status(
                node,
                REBOOT_STATUS_ANNOTATION,
                {"id": rid, "state": "done", "bootID": new_boot},
            )
            self._done(name, REBOOT_REQUEST_ANNOTATION, rid)

        self.time.at(self.time.now + self.spec.reboot.duration, end)

    def _again(self, g: int) -> None:
        """A fault the reboot did not fix shows again once the new exporter runs (a
        counter born at 1 would hide it from ``increase``)."""
        fate = self.fates.get(g)
        if self.machines.dev_repair[g] and fate is not None:
            self.machines.count_event(g, SEVERITY[fate.kind], fate.action)


def _why_unfixed(fate: Fate | None) -> str:
    """Why the agent's look after a reset finds a device not fixed, in the real
    agent's words where it has them (nodeagent/resetters.py): a device off the bus
    (a ``reboot``-class fault, a lost device) does not answer; a failed row remap
    is NVML's remapper; any other fault standing is the simulator's assumption that
    the look sees it (the real agent reads NVML's recovery action for that)."""
    if fate is None:
        return "answers again but is not fixed"
    if fate.action == "reboot" or fate.kind == "device_lost":
        return "still does not answer after the reset (reboot the node)"
    if fate.kind == "remap_failure":
        return (
            "answers again but is not fixed: its row remapping failed "
            "(nvmlDeviceGetRemappedRows): return the GPU"
        )
    return f"answers again but is not fixed: its {fate.action}-class fault still stands"


__all__ = [
    "AGENT_INTERVAL",
    "NEEDS_REPAIR",
    "NO_INCIDENT",
    "REPORT_INTERVAL",
    "UNSUPPORTED",
    "Fate",
    "Incident",
    "Repairs",
]
