"""Ownership of the changes this controller makes to nodes, and the Events that
say so.

Every node an action touches carries the annotation ``accel-fleet.io/remediation``:
a JSON object with one entry per rule that is remediating the node::

    {"fatal-device-fault": {"action": "migrate_jobs", "phase": "migrating",
      "started": "2026-11-29T20:00:00Z", "controller": "accel-autoscaler",
      "replica": "accel-autoscaler-5d9c-x2", "target": {"node": "n1", "device": "nvidia3"},
      "params": {...}, "cordoned": false, "taint": "accel-fleet.io/faulty=true:NoSchedule"}}

What it is for:

- **Only undo what we did.** ``cordoned`` is true only when this controller set
  ``spec.unschedulable`` (a node that someone else had cordoned records false), and
  ``taint`` is set only when this controller added the taint. ``recover`` and
  ``uncordon`` undo exactly that, and hand a cordon or a taint over to another of
  our entries that still needs it, so one rule's recovery never lifts another's
  cordon. NVSentinel #1424 uncordoned nodes that an operator had cordoned; this
  is the record that prevents it.
- **Resume, never repeat.** ``phase`` says whether the work is finished
  (``cordoned``, ``tainted``, ``drained``, ``migrated``, ...) or in flight
  (``draining``, ``migrating``). On start, the controller re-runs only the in-flight
  entries of its own controller name; each action is idempotent (a pod already gone
  is not evicted again), so a resumed drain finishes the drain and nothing else.
  ``started`` is kept across the restart, so the drain's deadline does not move.
  An in-flight entry whose rule left the rule set meanwhile is not resumed: it ends
  ``drain-incomplete`` (``migrate-incomplete``), the pods already evicted stay
  evicted, and no new eviction starts (``actions/drain.py``, ``abandon``).
- **Remember across restarts.** The entries of this controller are also what the
  engine's memory is rebuilt from at start and at every leadership gain: which
  targets are under remediation, the nodes the circuit breaker counts, and when
  each remediation started (``autoscaler/engine/restore.py``).

Changes are read-modify-write with the node's ``resourceVersion`` (``update_node``),
so two writers (a person with kubectl, a second rule) never overwrite each other:
a ``Conflict`` re-reads the node and applies the change again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from accel_common.names import MIGRATED_FROM_ANNOTATION as MIGRATED_FROM
from accel_common.names import NO_REBALANCE_ANNOTATION as NO_REBALANCE
from accel_common.names import REMEDIATION_ANNOTATION as ANNOTATION
from accel_common.names import REQUEUES_ANNOTATION as REQUEUES
from autoscaler.actions.context import ActionContext
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError
from autoscaler.kube.protocol import Kube, Obj

log = logging.getLogger("accel_autoscaler.actions")

COMPONENT = "accel-autoscaler"

# Phases whose work is not finished: resumed after a restart or a new leader.
IN_FLIGHT = ("draining", "migrating", "repartitioning", "resetting", "rebooting")
# The finished phase that an in-flight one ends in when it stops short of its end
# (its pods left, or its rule left the rule set before a restart resumed it).
INCOMPLETE = {
    "draining": "drain-incomplete",
    "migrating": "migrate-incomplete",
    "repartitioning": "repartition-incomplete",
    "resetting": "reset-failed",
    "rebooting": "reboot-failed",
}


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@dataclass
class Entry:
    """One rule's remediation of one node."""

    action: str
    phase: str
    started: str
    controller: str
    replica: str = ""
    target: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    cordoned: bool = False
    taint: str | None = None
    message: str = ""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Entry:
        return cls(
            action=str(raw["action"]),
            phase=str(raw["phase"]),
            started=str(raw["started"]),
            controller=str(raw["controller"]),
            replica=str(raw.get("replica", "")),
            target={str(k): str(v) for k, v in dict(raw.get("target") or {}).items()},
            params=dict(raw.get("params") or {}),
            cordoned=bool(raw.get("cordoned", False)),
            taint=raw.get("taint") or None,
            message=str(raw.get("message", "")),
        )

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["message"]:
            del out["message"]
        return out


def entries(node: Obj) -> dict[str, Entry]:
    """The node's remediation entries by rule. An annotation that is not ours to
    read (hand-edited, another tool's format) yields none: we own nothing there."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(rule): Entry.from_json(e) for rule, e in dict(data).items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        name = (node.get("metadata") or {}).get("name", "?")
        log.warning(
            "node %s: unreadable %s annotation, treating as not ours: %s", name, ANNOTATION, e
        )
        return {}


def annotation_value(es: Mapping[str, Entry]) -> str | None:
    """The annotation for ``es``; None (delete the annotation) when there are none."""
    if not es:
        return None
    return json.dumps({r: e.as_json() for r, e in sorted(es.items())}, sort_keys=True)


def ours(entry: Entry, ctx: ActionContext) -> bool:
    return entry.controller == ctx.controller


def new_entry(ctx: ActionContext, decision: Decision, phase: str) -> Entry:
    return Entry(
        action=decision.action,
        phase=phase,
        started=iso(ctx.clock()),
        controller=ctx.controller,
        replica=ctx.replica,
        target=dict(decision.target),
        params=dict(decision.params),
    )


# Mutate: the node as read → a merge patch to apply, or None for "nothing to change".
Mutate = Callable[[Obj], Obj | None]


async def update_node(kube: Kube, name: str, mutate: Mutate, attempts: int = 8) -> Obj:
    """Read the node, compute a patch, and apply it conditionally on the node's
    resourceVersion; on a Conflict, read again and recompute. Returns the node as
    it is after the change (or as read, when ``mutate`` had nothing to change)."""
    for _ in range(attempts):
        node = await kube.get_node(name)
        patch = mutate(node)
        if patch is None:
            return node
        meta = patch.setdefault("metadata", {})
        meta["resourceVersion"] = node["metadata"].get("resourceVersion")
        try:
            return await kube.patch_node(name, patch)
        except Conflict as e:
            if e.already_exists:
                raise
            log.debug("node %s changed while we wrote it; reading it again", name)
    raise Conflict(f"node {name} kept changing under {attempts} attempts to update it", status=409)


def entries_patch(es: Mapping[str, Entry]) -> Obj:
    return {"metadata": {"annotations": {ANNOTATION: annotation_value(es)}}}


async def set_phase(
    ctx: ActionContext, node: str, rule: str, phase: str, message: str = ""
) -> None:
    """Move one of our entries to ``phase`` (nothing when the entry is gone)."""

    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(rule)
        if e is None or not ours(e, ctx) or (e.phase == phase and e.message == message):
            return None
        e.phase = phase
        e.message = message
        return entries_patch(es)

    await update_node(ctx.kube, node, mutate)


def involved(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Node"),
        "name": meta.get("name", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


async def event(
    ctx: ActionContext,
    obj: Obj,
    reason: str,
    message: str,
    *,
    warning: bool = False,
    action: str = "",
) -> None:
    """Record a Kubernetes Event on ``obj``. An Event that cannot be written is
    logged, never fatal: the change it reports has already happened."""
    ref = involved(obj)
    namespace = ref.get("namespace") or ctx.event_namespace
    now = iso(ctx.clock())
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # Unique without generateName: object name, then nanoseconds.
            "name": f"{ref['name'][:200]}.{time.time_ns():x}",
            "namespace": namespace,
        },
        "involvedObject": ref,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": ctx.replica or COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if action:
        body["action"] = action
    log.info("event %s %s/%s: %s: %s", ref["kind"], namespace, ref["name"], reason, message)
    try:
        await ctx.kube.create_event(namespace, body)
    except KubeError as e:
        log.warning("could not record event %s on %s %s: %s", reason, ref["kind"], ref["name"], e)


def node_ref(name: str) -> Obj:
    """A node as ``event`` needs it, without reading it."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


__all__ = [
    "ANNOTATION",
    "INCOMPLETE",
    "IN_FLIGHT",
    "MIGRATED_FROM",
    "NO_REBALANCE",
    "REQUEUES",
    "Entry",
    "annotation_value",
    "entries",
    "entries_patch",
    "event",
    "iso",
    "new_entry",
    "node_ref",
    "ours",
    "parse_iso",
    "set_phase",
    "update_node",
]
