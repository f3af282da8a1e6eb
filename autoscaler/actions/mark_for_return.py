"""``mark_for_return``: mark a device that must go back to its vendor, for good.

Some faults are not repaired by a reset or a reboot: a row-remap failure (the
GPU ran out of spare rows), AMD's bad-page threshold, Huawei MindCluster's
SeparateNPU, or a device whose ladder keeps coming back (the recurrence cap). The
vendors' guidance is to take the part out of service and return it (field
diagnostics, RMA). A reset or a reboot would only put it back into service for the
next job to fail on. This action is the last step of an ``isolate`` ladder
(docs/rules.md): after the jobs moved and the node was tainted, it leaves an
operator-visible mark on the node:

- the ``accel-fleet.io/return-to-vendor`` annotation: JSON by device UUID (the
  device name when the UUID is unknown), each ``{"device", "uuid", "reason",
  "rule", "at", "by"}``, where ``reason`` says what the fault was (its code and
  class labels) and why the ladder isolated it (the decision's reason, which names
  a recurrence cap when that sent it here);
- the ``accel-fleet.io/return-to-vendor=true`` label, so that
  ``kubectl get nodes -l accel-fleet.io/return-to-vendor`` lists them;
- a Warning Event ``MarkedForReturn`` on the node with the same words.

Nothing undoes it: the action is not reversible, so no rule's recover removes the
mark, and the engine never recovers an ``isolate`` ladder (the taint stays too).
The rule's remediation entry on the node (the one its move wrote, with the taint
it owns) becomes ``mark_for_return``, phase ``marked-for-return``: a restarted
controller leaves such an entry alone (``engine/restore.py``) instead of resuming
a ladder that would reset, reboot or recover the part. A person removes the mark,
the entry and the taint once the part is replaced. A second run for the same device
changes nothing and ends ``done`` again (a restart resumes safely).

Targets: ``node``, ``device`` (marks the device on its node; a ``node`` target
marks the node as a whole, keyed by its name).

Parameters: none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common import clusterjson
from accel_common.names import RETURN_ANNOTATION, RETURN_LABEL
from autoscaler.actions.base import ActionSpec, ParamProblem, ParamReader, param_keys, to_params
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.nodes import node_of
from autoscaler.actions.ops.ownership import (
    entries,
    entries_patch,
    event,
    iso,
    ours,
    update_node,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

NAME = "mark_for_return"
TARGETS = ("node", "device")
# The fault's labels a mark repeats, when the sample had them.
FAULT_LABELS = ("code", "action", "severity", "vendor")
# Marks kept on one node: more than a node has devices.
MAX_MARKS = 256


@dataclass(frozen=True)
class MarkParams:
    """No parameters: what to mark and why come from the decision."""


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(MarkParams))
    return to_params(MarkParams()), r.problems


def _marks(node: Obj) -> dict[str, Any]:
    """The marks already on the node; an unreadable annotation reads as none (it is
    replaced by ours, which keeps every readable mark, so a person's edit that broke
    it costs only what was unreadable)."""
    found = clusterjson.annotation_object(node, RETURN_ANNOTATION, log=log)
    return dict(found) if found is not None else {}


def _mark(ctx: ActionContext, decision: Decision, name: str) -> tuple[str, dict[str, Any]]:
    labels = dict(decision.sample_labels)
    device = decision.target.get("device", "")
    uuid = decision.target.get("uuid") or labels.get("uuid", "")
    fault = ", ".join(f"{k}={labels[k]}" for k in FAULT_LABELS if labels.get(k))
    reason = f"{fault}: {decision.reason}" if fault else decision.reason
    key = uuid or device or name
    return key, {
        "device": device,
        "uuid": uuid,
        "reason": reason[:1024],
        "rule": decision.rule,
        "at": iso(ctx.clock()),
        "by": ctx.controller,
    }


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return Outcome(
            "skipped", "a part marked for return is not returned to service by a recover"
        )
    name = node_of(decision)
    key, mark = _mark(ctx, decision, name)
    what = f"{mark['device'] or 'node ' + name} ({mark['uuid'] or 'UUID unknown'})"
    if ctx.dry_run:
        return Outcome("done", f"dry run: would mark {what} on node {name} for return")

    def mutate(n: Obj) -> Obj | None:
        marks = _marks(n)
        labelled = ((n.get("metadata") or {}).get("labels") or {}).get(RETURN_LABEL) == "true"
        es = entries(n)
        e = es.get(decision.rule)
        # The ladder's entry (its move's taint, kept) says the part is isolated: a
        # restarted controller must not take it for a remediation to resume, climb
        # or recover (engine/restore.py leaves such entries alone).
        settle = e is not None and ours(e, ctx) and e.action != NAME
        if key in marks and labelled and not settle:
            return None
        if len(marks) >= MAX_MARKS and key not in marks:
            marks.pop(sorted(marks)[0])
        marks.setdefault(key, mark)
        patch: Obj = {"metadata": {"annotations": {}, "labels": {RETURN_LABEL: "true"}}}
        if settle and e is not None:
            e.action, e.phase, e.message = NAME, "marked-for-return", mark["reason"]
            patch = entries_patch(es)
            patch["metadata"]["labels"] = {RETURN_LABEL: "true"}
        patch["metadata"]["annotations"][RETURN_ANNOTATION] = json.dumps(marks, sort_keys=True)
        return patch

    try:
        node = await update_node(ctx.kube, name, mutate)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    message = f"{what} on node {name} must be returned to its vendor: {mark['reason']}"
    await event(ctx, node, "MarkedForReturn", message, warning=True, action=NAME)
    return Outcome("done", message, {"device": mark["device"], "uuid": mark["uuid"]})


SPEC = ActionSpec(
    NAME,
    TARGETS,
    reversible=False,
    params_type=MarkParams,
    validate=validate,
    execute=execute,
)
