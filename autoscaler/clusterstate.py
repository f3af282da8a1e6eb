"""Cluster state as metrics: the series the controller derives from the Kubernetes
API, so that every rule, including "this job ran past its timeout" and "this pool
has pending device requests", is one PromQL expression over one kind of data.

The controller exports these on its own ``/metrics`` and feeds them to the
built-in evaluator; with the ``prometheus`` source, Prometheus scrapes them from
the controller like any other target. Names live here, as the exporter's live in
``exporter/schema.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterMetric:
    name: str
    help: str
    labels: tuple[str, ...]


JOB_AGE = ClusterMetric(
    "accel_job_age_seconds",
    "Seconds since a device-using pod started running.",
    ("namespace", "pod", "node", "job"),
)
JOB_TIMEOUT = ClusterMetric(
    "accel_job_timeout_seconds",
    "The pod's run-time limit from its accel-fleet.io/timeout annotation (or its "
    "activeDeadlineSeconds).",
    ("namespace", "pod", "node", "job"),
)
POD_DEVICE = ClusterMetric(
    "accel_pod_device_info",
    "A device-using pod and a device it holds, from the kubelet's assignment; always 1.",
    ("namespace", "pod", "node", "device"),
)
POOL_PENDING = ClusterMetric(
    "accel_pool_pending_device_requests",
    "Devices requested by pending pods that only this node pool can satisfy.",
    ("pool",),
)
POOL_NODES = ClusterMetric("accel_pool_nodes", "Ready nodes in a node pool.", ("pool",))
POOL_NODES_MIN = ClusterMetric("accel_pool_nodes_min", "A node pool's minimum size.", ("pool",))
POOL_NODES_MAX = ClusterMetric("accel_pool_nodes_max", "A node pool's maximum size.", ("pool",))
POOL_DEVICES_ALLOCATED = ClusterMetric(
    "accel_pool_devices_allocated_ratio",
    "Share of a node pool's devices that pods hold (0-1).",
    ("pool",),
)
NODE_POOL = ClusterMetric(
    "accel_node_pool_info", "The node pool a node belongs to; always 1.", ("node", "pool")
)

CATALOGUE: tuple[ClusterMetric, ...] = (
    JOB_AGE,
    JOB_TIMEOUT,
    POD_DEVICE,
    POOL_PENDING,
    POOL_NODES,
    POOL_NODES_MIN,
    POOL_NODES_MAX,
    POOL_DEVICES_ALLOCATED,
    NODE_POOL,
)
