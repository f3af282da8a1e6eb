"""The reset task: resets the node's GPUs when the controller asks (``reset_devices``),
only once no pod holds a GPU of the reset group, and answers on the Node.

The channel (docs/agent.md): the controller writes RESET_REQUEST_ANNOTATION
``{"id", "devices": [uuid, ...], "requestedAt", "by"}`` (``devices`` empty: every
device of the node); this task answers in RESET_STATUS_ANNOTATION ``{"id", "state",
"devices", "message", "at"}`` and publishes RESET_SCOPE_ANNOTATION at start.

Why it is built this way:

* **The reset group, not the request, decides what must be free.** nvidia-smi's
  manual: GPUs joined by NVLink to a GPU being reset must be reset in the same command
  where one GPU cannot be reset alone (before Ampere, or on NVSwitch boards without
  Fabric Manager). The task takes that rule always: on an NVSwitch board the group is
  every GPU of the node (and nvidia-smi runs without ``-i``, which resets them all);
  on a direct-NVLink board it is the GPU and its NVLink peers. AMD's reset guide says a
  reset inside an XGMI hive can disturb the hive's other GPUs, so a hive must be free
  too (only the GPUs asked for are reset). The scope published at start is "node"
  when any group is wider than one GPU, so the controller moves every device pod of
  the node first; "device" otherwise.
* **Refuse while anything holds the group.** A pod the kubelet says holds a device of
  the group (a GPU, a MIG device of it, or, for a device the agent cannot place, any
  device of the vendor being reset), or a process NVML lists on it, answers
  "refused" with the pods, processes and devices named, re-checked every round while
  the request stands. Holders that cannot be read (the kubelet does not answer) also
  refuse: unknown is never "free".
* **Once per id, claimed by one conditional write.** The free round writes
  "resetting" conditionally on the Node it read: a controller that closed the request
  meanwhile (its ``failed``, "closed by ...") makes that write a Conflict, and the
  agent, reading again, finds the request final and leaves it. The reset runs only
  after the claim is on the Node, once the Node as written still shows it and nothing
  holds the group, and "done" or "failed" follows at once. An agent that finds
  "resetting" it did not write in this process (it restarted mid-reset) cannot know
  whether the reset ran, so it answers "failed" rather than reset again; "done" and
  "failed" are final for their id, whoever wrote them.
* **An unreadable request or status** (``nodeagent.channel``) is answered "failed"
  with ``"reason": "unreadable"``, and nothing is reset; the next request is served.
* **After the reset, look again**, as nvidia-smi's manual advises verifying every
  reset GPU, and answer "done" only for a device the vendor library shows fixed. A
  GPU that still does not answer NVML (or amdsmi) fails the answer. An NVIDIA GPU
  that answers fails it too while NVML still shows its fault: a row remap still
  pending (the reset should have applied it) or failed (the GPU must be returned:
  ``nvmlDeviceGetRemappedRows``), or a driver recovery action that still asks for
  a reset or more (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, the exporter's own
  reading of it: ``exporter.backends.nvidia.verdicts``). Such a failure carries
  ``"reason": "unfixed"``: the ladder's next step (a reboot) starts at once, on
  the agent's evidence. A reset whose own call failed answers ``failed`` with that
  error (and what the look found) but without the reason: nothing says the reset
  ran. A library that cannot say (a GPU before Ampere has no row
  remapper, a driver before the recovery-action field) is no evidence either way.
  An AMD GPU is looked at only for answering amdsmi again.
* Which vendors, and how, is ``accel_common.agentsupport`` (the controller and the
  simulator read the same table): NVIDIA has no public NVML reset, so production
  runs ``nvidia-smi --gpu-reset`` (``NvidiaSmi``, bounded in time and output); AMD
  uses ``amdsmi_reset_gpu``; ``nodeagent.resetters.RESETTERS`` holds one routine per declared
  mechanism. Other vendors' devices (Intel's Level Zero, Gaudi, Ascend, TPU) are not
  supported: a request naming one, or one for every device of a node that has none
  this agent can reset, fails with ``"reason": "unsupported"``, and the
  controller's ladder skips the step at once.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from accel_common.agentsupport import (
    SUPPORT,
    UNFIXED_REASON,
    UNSUPPORTED_REASON,
    ResetMechanism,
    can_reset,
    resets_summary,
    support,
)
from accel_common.names import (
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from exporter.backends.nvidia.device import normalize_bus_id
from exporter.model import PodAssignment
from nodeagent.channel import (
    UNREADABLE,
    Request,
    Status,
    Unreadable,
    cut,
    raw_value,
    read_request,
    read_status,
    unreadable_message,
)
from nodeagent.devholders import holders
from nodeagent.nvmlrelease import NOT_RESTARTED, nvml_released
from nodeagent.resetters import (
    LOOKS,
    NVIDIA_SMI_EXIT,
    RESETTERS,
    Device,
    NvidiaSmi,
    ResetError,
)
from nodeagent.tasks import AgentContext, NodePatch, Work

log = logging.getLogger("accel_node_agent.reset")

# After a refusal for a process that holds a device file, how long before the agent
# lets go of NVML and looks again: each look takes the exporter's NVIDIA backend down
# for a poll or two.
HOLDERS_RETRY_SECONDS = 120.0

UNSUPPORTED = (
    f"this agent resets {resets_summary()}; not "
    + ", ".join(s.name for s in SUPPORT.values() if not s.can_reset)
    + " devices (accel_common.agentsupport says why)"
)


# -- what the node has ----------------------------------------------------------------


class Inventory:
    """The node's resettable devices, rebuilt on every look. A device that stops
    answering (a GPU fallen off the bus is exactly what gets reset) keeps the identity
    it had when it last answered."""

    def __init__(self) -> None:
        self.devices: list[Device] = []
        self.known = False  # at least one look succeeded

    def scan(self, ctx: AgentContext) -> None:
        before = {(d.vendor, d.index): d for d in self.devices}
        devices: list[Device] = []
        ok = True
        if ctx.nvml is not None:
            found, fine = _scan_nvidia(ctx.nvml, before)
            devices += found
            ok = ok and fine
        if ctx.amdsmi is not None:
            found, fine = _scan_amd(ctx.amdsmi, before)
            devices += found
            ok = ok and fine
        self.devices = devices
        self.known = self.known or ok

    def find(self, ident: str) -> Device | None:
        key = ident.strip().lower()
        bus = normalize_bus_id(key) if ":" in key else key
        for d in self.devices:
            if key in d.names() or bus == d.bus_id:
                return d
        return None

    def group(self, wanted: Iterable[Device]) -> list[Device]:
        """``wanted`` and every device that must be free (and, for NVIDIA, reset)
        with it."""
        group = {id(d): d for d in wanted}
        by_bus = {d.bus_id: d for d in self.devices}
        todo = list(group.values())
        while todo:
            d = todo.pop()
            peers: list[Device] = []
            if d.switched:
                peers += [o for o in self.devices if o.vendor == d.vendor and o.switched]
            peers += [by_bus[b] for b in d.peer_buses if b in by_bus]
            if d.hive:
                peers += [o for o in self.devices if o.vendor == d.vendor and o.hive == d.hive]
            for o in peers:
                if id(o) not in group:
                    group[id(o)] = o
                    todo.append(o)
        return sorted(group.values(), key=lambda d: (d.vendor, d.index))

    def scope(self) -> str:
        return "node" if any(len(self.group([d])) > 1 for d in self.devices) else "device"


def _scan_nvidia(nvml: Any, before: Mapping[tuple[str, int], Device]) -> tuple[list[Device], bool]:
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as e:  # NVML not initialised, driver gone: nothing known this round
        log.warning("NVML cannot count the GPUs: %s", e)
        return [d for (v, _), d in before.items() if v == "nvidia"], False
    out: list[Device] = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = str(nvml.nvmlDeviceGetUUID(handle))
            bus = normalize_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except nvml.NVMLError as e:
            old = before.get(("nvidia", i))
            if old is not None:
                old.answering = False
                out.append(old)
            else:
                log.warning("GPU %d does not answer NVML (%s) and was never seen to", i, e)
            continue
        d = Device("nvidia", i, uuid, bus, handle, children=_migs(nvml, handle))
        try:
            d.minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except nvml.NVMLError:
            d.minor = None  # its device file cannot be looked for (``devholders``)
        _links(nvml, d)
        out.append(d)
    buses = {d.bus_id for d in out}
    for d in out:
        # A link whose far end is no GPU of this node, of a kind NVML would not name,
        # is taken for a switch: the wider group is the safe guess.
        strangers = d.peer_buses - buses
        if strangers:
            d.switched = True
            d.peer_buses -= strangers
    return out, True


def _migs(nvml: Any, handle: Any) -> set[str]:
    try:
        current = nvml.nvmlDeviceGetMigMode(handle)[0]
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) if current else 0
    except (nvml.NVMLError, AttributeError):
        return set()
    out: set[str] = set()
    for slot in range(slots):
        try:
            out.add(
                str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)))
            )
        except nvml.NVMLError:
            continue  # an empty slot
    return out


def _links(nvml: Any, d: Device) -> None:
    switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(d.handle, link):
                continue
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_INVALID_ARGUMENT:
                continue  # no such link on this GPU
            return  # no NVLink at all (NotSupported), or the GPU went away
        try:
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(d.handle, link)
        except (nvml.NVMLError, AttributeError):
            kind = None
        if kind == switch:
            d.switched = True
            continue
        try:
            d.peer_buses.add(
                normalize_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(d.handle, link).busId)
            )
        except nvml.NVMLError:
            continue


def _scan_amd(smi: Any, before: Mapping[tuple[str, int], Device]) -> tuple[list[Device], bool]:
    try:
        handles = list(smi.amdsmi_get_processor_handles())
    except Exception as e:  # amdsmi raises its own exception types, not one base
        log.warning("amdsmi cannot list the GPUs: %s", e)
        return [d for (v, _), d in before.items() if v == "amd"], False
    out: list[Device] = []
    for i, handle in enumerate(handles):
        try:
            uuid = str(smi.amdsmi_get_gpu_device_uuid(handle))
            bus = normalize_bus_id(str(smi.amdsmi_get_gpu_device_bdf(handle)))
        except Exception as e:
            old = before.get(("amd", i))
            if old is not None:
                old.answering = False
                out.append(old)
            else:
                log.warning("AMD GPU %d does not answer amdsmi (%s) and was never seen to", i, e)
            continue
        try:
            hive = int(smi.amdsmi_get_xgmi_info(handle).get("xgmi_hive_id") or 0)
        except Exception:
            hive = 0  # no XGMI (or an amdsmi without it): the GPU resets alone
        out.append(Device("amd", i, uuid or bus, bus, handle, hive=hive))
    return out, True


# -- the channel ------------------------------------------------------------------------


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


FINAL = ("done", "failed")
NOTHING_RESET = "nothing was reset"
Answer = tuple[dict[str, Any], Work | None]


class ResetTask:
    """See the module docstring."""

    name = "reset"

    def __init__(self) -> None:
        self.inventory = Inventory()
        # Final answers this process gave, by id: never carried out twice.
        self._final: dict[str, dict[str, Any]] = {}
        # The request last refused for a process holding a device file: when, and the
        # refusal. NVML is not let go again (the exporter not taken down again) for
        # HOLDERS_RETRY_SECONDS after, while that process most likely still runs.
        self._holders: tuple[str, float, str] | None = None

    def start(self, ctx: AgentContext) -> NodePatch:
        self.inventory.scan(ctx)
        if not self.inventory.known:
            return NodePatch()  # published once the devices can be seen (reconcile)
        return NodePatch(annotations={RESET_SCOPE_ANNOTATION: self.inventory.scope()})

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        patch = NodePatch()
        if not self.inventory.known:
            self.inventory.scan(ctx)
        if self.inventory.known and raw_value(node, RESET_SCOPE_ANNOTATION) != (
            scope := self.inventory.scope()
        ):
            patch.annotations[RESET_SCOPE_ANNOTATION] = scope
        request = read_request(node, RESET_REQUEST_ANNOTATION)
        if request is None:
            return patch
        status = read_status(node, RESET_STATUS_ANNOTATION)
        answered = self._answer(request, status, ctx)
        if answered is None:
            return patch
        answer, work = answered
        if work is None and _same(answer, status):
            return patch
        patch.annotations[RESET_STATUS_ANNOTATION] = json.dumps(answer, sort_keys=True)
        if work is not None:
            patch.after.append(work)
        return patch

    # -- one round of one request ---------------------------------------------------------

    def _answer(
        self, request: Request | Unreadable, status: Status | Unreadable | None, ctx: AgentContext
    ) -> Answer | None:
        """The answer to write, and the work to run once it is on the Node (only with
        "resetting"); None when the Node needs no answer."""
        if isinstance(request, Unreadable):
            if isinstance(status, Status) and status.id == request.id and status.state in FINAL:
                return None  # answered already, or closed by the controller
            return _unreadable(request.id, request, ctx), None
        if request.id in self._final:
            return self._final[request.id], None
        if isinstance(status, Unreadable):
            # Perhaps the controller's "failed" that closed this request: not carried out.
            return self._finish(request.id, _unreadable(request.id, status, ctx)), None
        if status is not None and status.id == request.id:
            if status.state in FINAL:
                return None  # answered, or closed by the controller: never carried out
            if status.state == "resetting":
                return self._finish(
                    request.id,
                    _status(
                        request.id,
                        "failed",
                        list(status.devices),
                        "the agent restarted while this reset was in progress; whether it "
                        "ran is unknown, and it is not carried out twice (ask again with a "
                        "new id, or reboot)",
                        ctx,
                    ),
                ), None
        planned = self._plan(request, ctx)
        if isinstance(planned, dict):
            return self._finish(request.id, planned), None
        group, scope_note = planned
        blocked = self._blockers(group, ctx)
        uuids = [d.uuid for d in group]
        if blocked:
            return _status(
                request.id,
                "refused",
                uuids,
                f"not reset while anything holds a device of the reset group: {blocked}; "
                f"reset group: {', '.join(uuids)}{scope_note}",
                ctx,
            ), None
        claim = _status(
            request.id, "resetting", uuids, f"resetting {', '.join(uuids)}{scope_note}", ctx
        )
        return claim, lambda written: self._claimed(written, request, ctx)

    def _claimed(self, written: Mapping[str, Any], req: Request, ctx: AgentContext) -> NodePatch:
        """The work after "resetting" is on the Node: look at the Node as written once
        more, then reset, and say how it went."""
        now = read_request(written, RESET_REQUEST_ANNOTATION)
        status = read_status(written, RESET_STATUS_ANNOTATION)
        if not (
            isinstance(now, Request)
            and now.id == req.id
            and isinstance(status, Status)
            and (status.id, status.state) == (req.id, "resetting")
        ):
            log.warning("reset %s: the Node no longer shows this agent's claim; not reset", req.id)
            return NodePatch()
        answer = self._carry_out(req, ctx)
        return NodePatch(annotations={RESET_STATUS_ANNOTATION: json.dumps(answer, sort_keys=True)})

    def _plan(self, req: Request, ctx: AgentContext) -> tuple[list[Device], str] | dict[str, Any]:
        """The reset group and a note on why it is that wide, or a failed answer."""
        inv = self.inventory
        inv.scan(ctx)  # the devices as they are now, not as they were at start
        if not inv.known:
            return _status(
                req.id,
                "failed",
                [],
                "the agent cannot see this node's devices (NVML and "
                f"amdsmi did not answer); {NOTHING_RESET}",
                ctx,
            )
        if req.devices:
            wanted: list[Device] = []
            for ident in req.devices:
                d = inv.find(ident)
                if d is None or not can_reset(d.vendor):
                    return _unsupported(
                        req.id,
                        list(req.devices),
                        f"device {ident} is not one this agent can reset on node "
                        f"{ctx.node_name} ({UNSUPPORTED}); {NOTHING_RESET}",
                        ctx,
                    )
                wanted.append(d)
        else:
            wanted = [d for d in inv.devices if can_reset(d.vendor)]
            if not wanted:
                return _unsupported(req.id, [], f"no device to reset: {UNSUPPORTED}", ctx)
        group = inv.group(wanted)
        extra = [d for d in group if d not in wanted]
        note = ""
        if any(d.switched for d in group) and extra:
            note = " (NVSwitch board: all its GPUs reset together)"
        elif any(d.vendor == "nvidia" for d in extra):
            note = " (GPUs joined by NVLink reset together)"
        elif extra:
            note = " (its XGMI hive must be free too)"
        return group, note

    def _blockers(self, group: list[Device], ctx: AgentContext) -> str:
        """What holds a device of the group, in words; empty when nothing does."""
        try:
            holders = ctx.holders()
        except Exception as e:
            return f"which pods hold devices is unknown (the kubelet did not answer: {e})"
        vendors = {d.vendor for d in group}
        ids = {id(d) for d in group}
        held: list[str] = []
        for h in holders:
            d = self.inventory.find(h.device_id)
            if (d is not None and id(d) in ids) or (d is None and _vendor(h) in vendors):
                held.append(
                    f"pod {h.namespace}/{h.pod} (container {h.container}) holds {h.device_id}"
                )
        held += _processes(ctx, group)
        return "; ".join(held)

    def _carry_out(self, req: Request, ctx: AgentContext) -> dict[str, Any]:
        planned = self._plan(req, ctx)
        if isinstance(planned, dict):
            return self._finish(req.id, planned)
        group, note = planned
        uuids = [d.uuid for d in group]
        blocked = self._blockers(group, ctx)
        if blocked:
            # Something arrived since the check: back to refused, not reset.
            return _status(req.id, "refused", uuids, f"not reset: {blocked}", ctx)
        last = self._holders
        if last is not None and last[0] == req.id and ctx.clock() - last[1] < HOLDERS_RETRY_SECONDS:
            return _status(req.id, "refused", uuids, last[2], ctx)
        errors, held = self._reset(group, req, ctx)
        if held:
            # A process outside NVML's lists holds a GPU's device file: nvidia-smi
            # would refuse "in use" and the ladder reboot. Refused, tried again.
            message = f"not reset: {held}"
            self._holders = (req.id, ctx.clock(), message)
            return _status(req.id, "refused", uuids, message, ctx)
        self._holders = None
        self.inventory.scan(ctx)
        unfixed = self._look(group, ctx)
        if errors or unfixed:
            answer = _status(req.id, "failed", uuids, "; ".join(errors + unfixed), ctx)
            if not errors:
                # The reset ran and the device is not fixed: the ladder's next step
                # (a reboot) starts at once, on this evidence.
                answer["reason"] = UNFIXED_REASON
        else:
            answer = _status(req.id, "done", uuids, f"reset {', '.join(uuids)}{note}", ctx)
        log.info("reset %s: %s: %s", req.id, answer["state"], answer["message"])
        return self._finish(req.id, answer)

    def _reset(self, group: list[Device], req: Request, ctx: AgentContext) -> tuple[list[str], str]:
        """Each declared mechanism (``accel_common.agentsupport``) resets its share of
        the group (``nodeagent.resetters``); what went wrong, in words, and what
        holds a GPU's device file where nothing was reset for that ("" if nothing)."""
        wanted = {d.uuid for d in (self.inventory.find(x) for x in req.devices) if d is not None}
        errors: list[str] = []
        for mechanism, devices in _by_mechanism(group).items():
            if mechanism != "nvidia-smi":
                errors += RESETTERS[mechanism](devices, self.inventory.devices, wanted, ctx)
                continue
            # nvidia-smi refuses a GPU any NVML client holds (``nvmlrelease``), and
            # any process that holds its device file (``devholders``).
            with nvml_released(ctx, req.id) as notes:
                held = _device_holders(ctx, devices)
                if held:
                    return errors, held
                failed = RESETTERS[mechanism](devices, self.inventory.devices, wanted, ctx)
            # What releasing NVML met explains a failed reset; NVML that did not
            # start again after it is an error of its own.
            errors += failed + (notes if failed else [n for n in notes if NOT_RESTARTED in n])
        return errors, ""

    def _look(self, group: list[Device], ctx: AgentContext) -> list[str]:
        """After the reset: why each device of the group is not fixed (it does not
        answer, or its vendor library still shows its fault); empty when all are."""
        found: list[str] = []
        for mechanism, devices in _by_mechanism(group).items():
            for d in devices:
                now = self.inventory.find(d.uuid)
                if now is None or not now.answering:
                    found.append(
                        f"{d.uuid} still does not answer after the reset (reboot the node)"
                    )
                elif why := LOOKS[mechanism](ctx, now):
                    found.append(f"{d.uuid} answers again but is not fixed: {why}")
        return found

    def _finish(self, rid: str, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("state") in FINAL:
            self._final[rid] = answer
        return answer


def _device_holders(ctx: AgentContext, devices: list[Device]) -> str:
    """The processes that hold a device file of ``devices`` once NVML was let go, in
    words ("" when none is seen, or procfs is not looked at)."""
    if ctx.procfs is None:
        return ""
    minors = {d.minor for d in devices if d.minor is not None}
    found = holders(ctx.procfs, minors, os.getpid())
    if not found:
        return ""
    return (
        f"{len(found)} process(es) hold the GPUs' device files, which nvidia-smi "
        f"refuses to reset under: {'; '.join(found[:10])}; stop them (a DCGM host "
        f"engine, another exporter): the agent looks again every "
        f"{HOLDERS_RETRY_SECONDS:g}s and resets once they are gone"
    )


def _by_mechanism(group: list[Device]) -> dict[ResetMechanism, list[Device]]:
    """The group's devices by their vendor's reset mechanism (every device of a group
    is one the agent can reset: ``_plan`` refuses the others)."""
    out: dict[ResetMechanism, list[Device]] = {}
    for d in group:
        reset = support(d.vendor).reset
        if reset is not None:
            out.setdefault(reset.mechanism, []).append(d)
    return out


def _vendor(h: PodAssignment) -> str:
    resource = h.resource.lower()
    return "nvidia" if "nvidia" in resource else "amd" if "amd" in resource else ""


def _processes(ctx: AgentContext, group: list[Device]) -> list[str]:
    """Processes the vendor library sees on the group's GPUs (a host process that the
    kubelet does not know holds a GPU too). A GPU that does not answer lists none: the
    reset itself has the last word."""
    out: list[str] = []
    for d in group:
        try:
            if d.vendor == "nvidia" and ctx.nvml is not None:
                pids = [p.pid for p in ctx.nvml.nvmlDeviceGetComputeRunningProcesses(d.handle)]
            elif d.vendor == "amd" and ctx.amdsmi is not None:
                pids = [p["pid"] for p in ctx.amdsmi.amdsmi_get_gpu_process_list(d.handle)]
            else:
                pids = []
        except Exception:
            continue
        out += [f"process {pid} runs on {d.uuid}" for pid in pids]
    return out


def _status(
    rid: str, state: str, devices: list[str], message: str, ctx: AgentContext
) -> dict[str, Any]:
    return {
        "id": rid,
        "state": state,
        "devices": list(devices),
        "message": cut(message),
        "at": iso(ctx.clock()),
    }


def _unsupported(rid: str, devices: list[str], message: str, ctx: AgentContext) -> dict[str, Any]:
    """The answer for devices this agent cannot reset (``accel_common.remedies.
    can_reset``, the rule the controller skips the step by too): failed, with
    ``"reason": "unsupported"``, so a ladder goes on at once (docs/agent.md)."""
    answer = _status(rid, "failed", devices, message, ctx)
    answer["reason"] = UNSUPPORTED_REASON
    return answer


def _unreadable(rid: str, what: Unreadable, ctx: AgentContext) -> dict[str, Any]:
    """The documented answer to an unreadable request or status (docs/agent.md)."""
    answer = _status(rid, "failed", [], unreadable_message(what, NOTHING_RESET), ctx)
    answer["reason"] = UNREADABLE
    return answer


def _same(answer: Mapping[str, Any], status: Status | Unreadable | None) -> bool:
    """Whether the Node already says this (the time aside): no write every round."""
    if not isinstance(status, Status):
        return False
    said = (status.id, status.state, list(status.devices), status.message)
    return said == tuple(answer.get(k) for k in ("id", "state", "devices", "message"))


TASK = ResetTask()

__all__ = [
    "NVIDIA_SMI_EXIT",
    "TASK",
    "Device",
    "Inventory",
    "NvidiaSmi",
    "ResetError",
    "ResetTask",
]
