"""Moving a bare pod (one with no owner to recreate it) without ever running it
twice and without ever losing it: what ``migrate_jobs`` does for such a pod.

Why evict first. The other order, creating the replacement and then evicting the
original, has two copies running from the create until the eviction, and for good
when a PodDisruptionBudget or a 403 refuses the eviction; deleting the replacement
on a refusal only shortens that window, and a controller that dies before the
delete leaves it open. Evicting first leaves at most one copy at every moment:
the original until the eviction succeeds, then (for the original's grace period)
a terminating original or nothing, then the replacement. "Nothing" is the state a
crash may leave behind, so the spec is written down before the eviction:

1. **save** the original's spec (``sanitised``: no status, no ``nodeName``, no uid,
   resourceVersion or managed fields) in the node annotation
   ``accel-fleet.io/bare-pods``, keyed ``namespace/name``, with the original's uid
   and the replacement's name;
2. **evict** the original (the Eviction API; a refusal is retried until the
   deadline, as for every pod);
3. once the original is **gone** from the API (not merely terminating: its
   containers may still be running), **create** the replacement from the record;
4. **drop** the record.

Every cut point is safe. Before 1 nothing has happened. Between 1 and 2, and when
the eviction is refused until the deadline, the original still runs: the record is
dropped when the action ends (``settle(final=True)``), one copy. Between 2 and 3
the original is gone and the record holds its spec: the next run (the executor
resumes every in-flight ``migrating`` entry on start and on taking the lead)
creates the replacement from it. Between 3 and 4 the create of the next run answers
AlreadyExists (the replacement's name is derived from the original's uid), so
there is never a second copy, and the record is dropped.

Size: Kubernetes refuses an object whose annotations together exceed 256 KiB. A
pod whose record would take the node past that is left where it is, and the
outcome says why: a bare pod is never evicted unless its spec is kept.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from accel_common.clusterjson import (
    ClusterValueError,
    annotations_of,
    describe,
    loads_object,
    number,
    text,
)
from accel_common.names import BARE_PODS_ANNOTATION, KUBELET_CONFIG_PREFIX
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import MIGRATED_FROM, event, update_node
from autoscaler.actions.ops.pods import is_finished, is_terminating, meta, pod_key
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

# The API server's limit on all of one object's annotations together
# (apimachinery's TotalAnnotationSizeLimitB): keys and values, in bytes.
ANNOTATIONS_LIMIT = 256 * 1024
# How long past its grace period a terminating original is waited for before the
# action gives up for now (the record stays: the next run finishes it).
TERMINATION_SLACK = 30.0
DEFAULT_GRACE = 30.0

# Metadata a new pod may carry over from the original (and its annotations, but the
# kubelet's); the rest (uid, resourceVersion, creationTimestamp, managedFields, ...)
# belongs to one incarnation.
_KEPT_METADATA = ("name", "namespace", "labels")


@dataclass(frozen=True)
class Record:
    """One bare pod being moved: what ``accel-fleet.io/bare-pods`` holds for it."""

    uid: str
    rule: str
    # The replacement's name (same namespace as the original).
    replacement: str
    # The original, sanitised: apiVersion, kind, metadata (name, namespace, labels,
    # annotations) and spec without nodeName.
    pod: Obj

    def as_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "rule": self.rule,
            "replacement": self.replacement,
            "pod": self.pod,
        }

    @classmethod
    def from_json(cls, raw: Any, at: str) -> Record:
        """One record as the bounded reader gave it; ``ClusterValueError`` naming
        ``at`` when it is not one we wrote (a replacement is made from it)."""
        if not isinstance(raw, Mapping):
            raise ClusterValueError(at, "expected a JSON object")
        pod = raw.get("pod")
        if not isinstance(pod, Mapping):
            raise ClusterValueError(f"{at} field pod", "expected the saved pod, an object")
        for part in ("metadata", "spec"):
            if not isinstance(pod.get(part) or {}, Mapping):
                raise ClusterValueError(f"{at} field pod.{part}", "expected an object")
        m = pod.get("metadata") or {}
        for part in ("labels", "annotations"):
            if not isinstance(m.get(part) or {}, Mapping):
                raise ClusterValueError(f"{at} field pod.metadata.{part}", "expected an object")
        spec = pod.get("spec") or {}
        grace = spec.get("terminationGracePeriodSeconds")
        if grace is not None:
            number(grace, f"{at} field pod.spec.terminationGracePeriodSeconds", lo=0, hi=86400)
        return cls(
            uid=text(raw.get("uid") or "", f"{at} field uid", max_len=64),
            rule=text(raw.get("rule") or "", f"{at} field rule", max_len=253),
            replacement=text(raw.get("replacement"), f"{at} field replacement", max_len=253),
            pod=dict(pod),
        )


def sanitised(pod: Obj) -> Obj:
    """The part of a pod that a new copy of it is made from."""
    m = meta(pod)
    metadata: Obj = {k: copy.deepcopy(m[k]) for k in _KEPT_METADATA if m.get(k)}
    annotations = {
        k: v
        for k, v in (m.get("annotations") or {}).items()
        if not k.startswith(KUBELET_CONFIG_PREFIX)
    }
    if annotations:
        metadata["annotations"] = annotations
    spec = copy.deepcopy(pod.get("spec") or {})
    spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def replacement_name(pod: Obj) -> str:
    """Derived from the original's uid: creating it twice is a Conflict, never a
    second copy."""
    m = meta(pod)
    uid = str(m.get("uid") or pod_key(pod))
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:6]
    return f"{str(m.get('name', ''))[:240]}-m{suffix}"


def replacement(record: Record, key: str, node: str) -> Obj:
    """The replacement's body: the saved spec plus a required node affinity that
    excludes ``node``, and ``accel-fleet.io/migrated-from``."""
    saved = record.pod
    spec = copy.deepcopy(saved.get("spec") or {})
    spec.pop("nodeName", None)
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term.setdefault("matchFields", []).append(dict(avoid))
    required["nodeSelectorTerms"] = terms
    m = meta(saved)
    annotations = dict(m.get("annotations") or {})
    annotations[MIGRATED_FROM] = f"{key}@{node}"
    metadata: Obj = {
        "name": record.replacement,
        "namespace": m.get("namespace", "default"),
        "annotations": annotations,
    }
    if m.get("labels"):
        metadata["labels"] = dict(m["labels"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def records(node: Obj) -> dict[str, Record]:
    """The node's records by ``namespace/name``. Raises ``ClusterValueError``
    (naming the node, the key and the entry) when the annotation is not one we
    wrote: the callers keep it as it is (never overwritten by ``save`` or
    ``drop``) and move no bare pod while it stands."""
    raw = annotations_of(node).get(BARE_PODS_ANNOTATION)
    if raw is None or raw == "":
        return {}
    at = f"{describe({'kind': 'Node', **node})} annotation {BARE_PODS_ANNOTATION}"
    data = loads_object(raw, at)
    return {
        text(k, at, max_len=317): Record.from_json(v, f"{at} entry {k[:317]}")
        for k, v in data.items()
    }


def _value(rs: Mapping[str, Record]) -> str | None:
    if not rs:
        return None
    return json.dumps({k: r.as_json() for k, r in sorted(rs.items())}, sort_keys=True)


def annotations_size(annotations: Mapping[str, str]) -> int:
    """As the API server counts it: every key and value, in bytes."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


async def save(ctx: ActionContext, node: str, pod: Obj, rule: str) -> str | None:
    """Write ``pod``'s record on ``node`` before it is evicted. None when it is
    written (or already there); otherwise why the pod must stay where it is."""
    key = pod_key(pod)
    record = Record(str(meta(pod).get("uid") or ""), rule, replacement_name(pod), sanitised(pod))
    why: list[str] = []

    def mutate(n: Obj) -> Obj | None:
        why.clear()
        try:
            rs = records(n)
        except ClusterValueError as e:
            why.append(f"the node's {BARE_PODS_ANNOTATION} annotation is unreadable ({e})")
            return None
        if rs.get(key) == record:
            return None
        rs[key] = record
        value = _value(rs) or ""
        others = {k: v for k, v in (meta(n).get("annotations") or {}).items()}
        others[BARE_PODS_ANNOTATION] = value
        size = annotations_size(others)
        if size > ANNOTATIONS_LIMIT:
            why.append(
                f"keeping its spec ({len(json.dumps(record.pod)) // 1024} KiB) would take the "
                f"node's annotations to {size // 1024} KiB, past Kubernetes' limit of "
                f"{ANNOTATIONS_LIMIT // 1024} KiB; a bare pod is never evicted without its "
                "spec kept"
            )
            return None
        return {"metadata": {"annotations": {BARE_PODS_ANNOTATION: value}}}

    try:
        await update_node(ctx.kube, node, mutate)
    except KubeError as e:
        return f"could not keep its spec on node {node} before evicting it: {e}"
    return why[0] if why else None


async def drop(ctx: ActionContext, node: str, keys: Mapping[str, str]) -> None:
    """Remove the records ``keys`` (``namespace/name`` -> the uid recorded); a
    record that names another uid (saved again since) stays."""

    def mutate(n: Obj) -> Obj | None:
        try:
            rs = records(n)
        except ClusterValueError as e:
            log.warning("%s; its records are left as they are", e)
            return None
        left = {k: r for k, r in rs.items() if not (k in keys and keys[k] == r.uid)}
        if len(left) == len(rs):
            return None
        return {"metadata": {"annotations": {BARE_PODS_ANNOTATION: _value(left)}}}

    await update_node(ctx.kube, node, mutate)


State = Literal["recreated", "exists", "running", "terminating", "finished"]


async def complete(ctx: ActionContext, node: str, key: str, record: Record) -> State:
    """Create ``record``'s replacement if its original is gone from the API (not
    when it is still there, even terminating). Does not drop the record."""
    namespace, _, name = key.partition("/")
    try:
        original: Obj | None = await ctx.kube.get_pod(namespace, name)
    except NotFound:
        original = None
    if original is not None and (not record.uid or meta(original).get("uid") == record.uid):
        if is_terminating(original):
            return "terminating"
        return "finished" if is_finished(original) else "running"
    return await create(ctx, node, key, record)


async def create(ctx: ActionContext, node: str, key: str, record: Record) -> State:
    body = replacement(record, key, node)
    namespace = body["metadata"]["namespace"]
    try:
        created = await ctx.kube.create_pod(namespace, body)
    except Conflict as e:
        if not e.already_exists:
            raise
        log.info("replacement %s/%s already exists", namespace, record.replacement)
        return "exists"
    await event(
        ctx,
        created if created.get("metadata") else body,
        "Recreated",
        f"replaces bare pod {key} moved off node {node} by rule {record.rule}",
        action="Create",
    )
    return "recreated"


@dataclass
class Settled:
    """What ``settle`` did: replacements it created, and the records it left."""

    recreated: list[str] = field(default_factory=list)
    # namespace/name of the original -> why its record stays.
    waiting: dict[str, str] = field(default_factory=dict)


async def settle(ctx: ActionContext, node: str, *, final: bool, read: Obj | None = None) -> Settled:
    """Finish the records on ``node`` (``read``: the node as just read, to save a
    GET): create the replacements whose original is gone, and drop the records
    that are done. A record whose original still runs stays before the evictions
    (``final`` False: they will evict it) and is dropped after them (the eviction
    was refused: the original is the one copy). With ``final`` a terminating
    original is waited for, up to its grace period and ``TERMINATION_SLACK``."""
    out = Settled()
    n = read if read is not None else await ctx.kube.get_node(node)
    try:
        pending = records(n)
    except ClusterValueError as e:
        log.warning("%s; no bare pod is recreated from it", e)
        out.waiting["*"] = f"unreadable {BARE_PODS_ANNOTATION} annotation: {e}"
        return out
    if not pending:
        return out
    deadline: float | None = None
    while pending:
        done: dict[str, str] = {}
        terminating: dict[str, Record] = {}
        for key, record in pending.items():
            state = await complete(ctx, node, key, record)
            if state == "recreated":
                out.recreated.append(f"{meta(record.pod).get('namespace')}/{record.replacement}")
            if state == "terminating":
                terminating[key] = record
            elif state != "running" or final:
                done[key] = record.uid
        if done and not ctx.dry_run:
            await drop(ctx, node, done)
        if not final or not terminating or not ctx.leading():
            break
        if deadline is None:
            grace = max(_grace(r) for r in terminating.values())
            deadline = ctx.clock() + grace + TERMINATION_SLACK
        if ctx.clock() >= deadline:
            break
        await ctx.sleep(min(ctx.retry_interval, max(0.0, deadline - ctx.clock())) or 0.001)
        pending = terminating
    for key in terminating:
        out.waiting[key] = (
            "its original is still terminating; the replacement is created once it is gone"
        )
    return out


def _grace(record: Record) -> float:
    # Checked finite and at most a day when the record was read.
    value = (record.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, int | float) else DEFAULT_GRACE


__all__ = [
    "ANNOTATIONS_LIMIT",
    "Record",
    "Settled",
    "annotations_size",
    "complete",
    "create",
    "drop",
    "records",
    "replacement",
    "replacement_name",
    "sanitised",
    "save",
    "settle",
]
