"""Whether a pending pod would fit a node of a pool: the node's labels (for the pod's
``nodeSelector`` and required node affinity), its devices, and, for a node a pool
would add (its declared shape), the taints it would start with.

Why a module of its own: the pool series (``autoscaler/clusterstate.py``) ask it of
every pending pod against every pool each cycle, for registered nodes and for the
shapes that let a pool at 0 nodes scale up, and it is pure matching with no API in
it, the same rules the scheduler applies (terms ORed, expressions ANDed,
``matchFields`` only knowing ``metadata.name``). Free capacity and the taints of
registered nodes are not weighed: the pod is pending because those nodes are full.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.kube.protocol import Obj
from autoscaler.pools.base import NodeShape
from autoscaler.pools.capacity import DraView, node_devices, template_labels, tolerated


def expression_holds(expr: Obj, labels: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key", "")), expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def affinity_holds(pod_spec: Obj, node_name: str, labels: Mapping[str, str]) -> bool:
    """The pod's required node affinity: terms ORed, expressions within one ANDed
    (``matchFields`` only knows ``metadata.name``, as in Kubernetes)."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": node_name}
    return any(
        all(expression_holds(e, labels) for e in term.get("matchExpressions") or ())
        and all(expression_holds(e, fields) for e in term.get("matchFields") or ())
        and (term.get("matchExpressions") or term.get("matchFields"))
        for term in terms
    )


@dataclass(frozen=True)
class NodeOffer:
    """What one node offers a pending pod: its labels and devices, and, for a pool's
    declared shape (a node it would add), the taints the node would start with."""

    name: str
    labels: Mapping[str, str]
    devices: Mapping[str, int]
    taints: tuple[tuple[str, str, str], ...] = ()

    def fits(self, pod_spec: Obj, wants: Mapping[str, int]) -> bool:
        selector = pod_spec.get("nodeSelector") or {}
        if any(self.labels.get(k) != v for k, v in selector.items()):
            return False
        if any(self.devices.get(r, 0) < n for r, n in wants.items()):
            return False
        if self.taints and not tolerated(pod_spec, self.taints):
            return False
        return affinity_holds(pod_spec, self.name, self.labels)


def node_offer(node: Obj, dra: DraView | None) -> NodeOffer:
    meta = node.get("metadata") or {}
    return NodeOffer(str(meta.get("name", "")), meta.get("labels") or {}, node_devices(node, dra))


def shape_offer(shape: NodeShape) -> NodeOffer:
    return NodeOffer("", template_labels(shape), shape.devices, shape.taints)


def pending(pod: Obj) -> bool:
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (
        (pod.get("status") or {}).get("phase") == "Pending"
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and not spec.get("schedulingGates")
    )


__all__ = ["NodeOffer", "affinity_holds", "node_offer", "pending", "shape_offer"]
