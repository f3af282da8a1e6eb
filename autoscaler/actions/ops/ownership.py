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
  evicted, and no new eviction starts (``actions/ops/drain.py``, ``abandon``).
- **Remember across restarts.** The entries of this controller are also what the
  engine's memory is rebuilt from at start and at every leadership gain: which
  targets are under remediation, the nodes the circuit breaker counts, and when
  each remediation started (``autoscaler/engine/restore.py``).

- **Unreadable is not absent.** Anyone who may patch the Node may write this
  annotation, so it is read through ``accel_common.clusterjson`` (bounded depth and
  size, finite numbers) and every field is checked. A bad entry is left out of what
  is read (logged with the node and the key), but the annotation is never
  rewritten while it holds one: dropping it could hand us a node that another
  owner's entry claims. ``update_node`` raises ``UnknownFact`` instead, and the
  action answers without acting (``autoscaler/actions/ops/unknown.py``).

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

from accel_common.clusterjson import (
    ClusterValueError,
    annotations_of,
    describe,
    loads_object,
    text,
)
from accel_common.logs import Once
from accel_common.names import MIGRATED_FROM_ANNOTATION as MIGRATED_FROM
from accel_common.names import NO_REBALANCE_ANNOTATION as NO_REBALANCE
from accel_common.names import REMEDIATION_ANNOTATION as ANNOTATION
from accel_common.names import REQUEUES_ANNOTATION as REQUEUES
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.unknown import UnknownFact, plausible_time
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError
from autoscaler.kube.protocol import Kube, Obj

log = logging.getLogger("accel_autoscaler.actions")

COMPONENT = "accel-autoscaler"
# A target names a node, a device, a pod: a handful of labels at most.
MAX_TARGET_LABELS = 16

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
    def from_json(cls, raw: Any, at: str) -> Entry:
        """One entry as the bounded reader gave it; ``ClusterValueError`` (naming
        ``at`` and the field) when a field is missing, of the wrong type, too long,
        or ``started`` is not a plausible time."""
        if not isinstance(raw, Mapping):
            raise ClusterValueError(at, "expected a JSON object")
        for key in ("action", "phase", "started", "controller"):
            if key not in raw:
                raise ClusterValueError(at, f"field {key} is missing")
        target = raw.get("target") or {}
        params = raw.get("params") or {}
        if not isinstance(target, Mapping) or len(target) > MAX_TARGET_LABELS:
            raise ClusterValueError(f"{at} field target", "expected an object of a few labels")
        if not isinstance(params, Mapping):
            raise ClusterValueError(f"{at} field params", "expected a JSON object")
        cordoned = raw.get("cordoned", False)
        if not isinstance(cordoned, bool):
            raise ClusterValueError(f"{at} field cordoned", "expected true or false")
        taint = raw.get("taint")
        started = text(raw["started"], f"{at} field started", max_len=64)
        plausible_time(started, f"{at} field started")
        return cls(
            action=text(raw["action"], f"{at} field action", max_len=63),
            phase=text(raw["phase"], f"{at} field phase", max_len=63),
            started=started,
            controller=text(raw["controller"], f"{at} field controller", max_len=253),
            replica=text(raw.get("replica", ""), f"{at} field replica", max_len=253),
            target={
                text(k, f"{at} field target", max_len=63): text(
                    v, f"{at} field target.{k}", max_len=253
                )
                for k, v in target.items()
            },
            params=dict(params),
            cordoned=cordoned,
            taint=text(taint, f"{at} field taint", max_len=400) if taint else None,
            message=text(raw.get("message", ""), f"{at} field message", max_len=4096),
        )

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["message"]:
            del out["message"]
        return out


def read_entries(node: Obj) -> tuple[dict[str, Entry], ClusterValueError | None]:
    """The node's readable remediation entries by rule, and what was wrong with the
    rest (None: nothing). A value that is not bounded JSON yields no entry; a bad
    entry costs only that entry. Either way the annotation holds something we cannot
    read, so ``update_node`` refuses to rewrite it (see ``entries``)."""
    raw = annotations_of(node).get(ANNOTATION)
    if raw is None or raw == "":
        return {}, None
    at = f"{describe({'kind': 'Node', **node})} annotation {ANNOTATION}"
    try:
        data = loads_object(raw, at)
    except ClusterValueError as e:
        return {}, e
    out: dict[str, Entry] = {}
    problem: ClusterValueError | None = None
    for rule, raw_entry in data.items():
        try:
            out[text(rule, at, max_len=253)] = Entry.from_json(
                raw_entry, f"{at} entry {rule[:253]}"
            )
        except ClusterValueError as err:
            problem = problem or err
    return out, problem


def entries(node: Obj) -> dict[str, Entry]:
    """The node's readable remediation entries by rule, for reading (what is ours
    to resume, what to restore). What cannot be read is logged and left out here;
    it is not "absent" for a write: ``update_node`` refuses to rewrite an
    annotation that holds an unreadable entry, since that entry may be another
    owner's claim on the node (``UnknownFact``, which the action answers without
    acting)."""
    out, problem = read_entries(node)
    # Once per node and problem, not on every read of every cycle.
    if problem is not None and _REPORTED.first(str(problem)):
        log.warning("%s; treated as unknown (not ours, and not overwritten)", problem)
    return out


# The unreadable annotations already reported (their messages: bounded, no value).
_REPORTED = Once()


def _writes_entries(patch: Obj) -> bool:
    meta = patch.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and ANNOTATION in annotations


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
        if _writes_entries(patch):
            _, problem = read_entries(node)
            if problem is not None:
                # Rewriting would drop an entry we cannot read: maybe another
                # owner's claim. The action answers "unknown" instead.
                raise UnknownFact("remediation record", problem)
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
    "read_entries",
    "set_phase",
    "update_node",
]
