"""What ``reset_devices`` and ``reboot_node`` share: asking for something that the
controller must not do from afar, and reading the answer, once per incident.

Both move the pods first (``move_pods``: the taint and the move of ``migrate``,
recorded under the asking action's own entry), then write a request on the cluster
(the node agent's annotation, or a SelfNodeRemediation) whose id comes from the rule,
the target and the incident (``request_id``), so that a controller restarted mid-way
finds its own request and only waits. The channel's annotations are read with the
bounded reader (``annotation_json``): what another program wrote is a value to check,
never one that ends the action. Kept apart from both actions so that neither imports
the other; docs/agent.md is the agent's side of the channel.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any

from accel_common import clusterjson
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.migrate import migrate
from autoscaler.actions.ops.ownership import Entry, entries, iso, ours
from autoscaler.decision import Decision
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

# How often an answer is read while waiting: the agent answers once a round.
POLL_SECONDS = 5.0


def request_id(decision: Decision, entry_started: str) -> str:
    """The id of this decision's request to the agent: the same for every run of the
    same decision (a restart, a ladder step resumed), new for a new incident."""
    since = decision.extra.get("since", decision.extra.get("incident"))
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        incident = iso(float(since))
    else:
        incident = str(since) if since else entry_started
    target = ",".join(f"{k}={v}" for k, v in sorted(decision.target.items()))
    digest = hashlib.sha256(f"{decision.rule}|{target}|{incident}".encode()).hexdigest()
    return f"{decision.rule}-{digest[:12]}"


def annotation_json(node: Obj, key: str) -> dict[str, Any] | None:
    """A JSON annotation of the node; None when absent or unreadable (someone else's
    format is not ours to read). Read with clusterjson: a nested or non-finite value
    on the agent channel is unknown, never a RecursionError that ends the action."""
    return clusterjson.annotation_object(node, key, log=log)


def own_entry(ctx: ActionContext, node: Obj, decision: Decision) -> Entry | None:
    e = entries(node).get(decision.rule)
    return e if e is not None and ours(e, ctx) and e.action == decision.action else None


async def move_pods(
    ctx: ActionContext, decision: Decision, *, device_only: bool
) -> tuple[Outcome | None, str]:
    """Taint the node and move its device pods (all, or the target device's) the way
    ``migrate_jobs`` does (``migrate``), recorded under this decision's own entry.
    Returns a final outcome when the action must stop here, else None and a summary
    of the move."""
    params = {**decision.params, "deviceOnly": device_only}
    moved = await migrate(ctx, replace(decision, params=params))
    details = moved.details
    if moved.status == "skipped" and details.get("unknown") == "holders":
        # Who holds the device is unknown here; the agent asks the kubelet itself and
        # refuses while a pod holds it, so asking costs nothing unsafe.
        return None, moved.message
    if moved.status in ("skipped", "failed", "unknown"):
        return moved, moved.message
    if moved.status == "partial" and "lost the leader" in moved.message:
        return Outcome("partial", moved.message, details), ""
    if moved.status == "partial" and details.get("refused"):
        return Outcome("failed", f"pods could not all be moved: {moved.message}", details), ""
    return None, moved.message


def node_ready(node: Obj) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def boot_id(node: Obj) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")
