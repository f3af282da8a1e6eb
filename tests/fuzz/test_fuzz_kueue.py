"""The controller's reader of Kueue's objects (``autoscaler/queues.py``), fuzzed with
hypothesis: ClusterQueues, LocalQueues, ResourceFlavors and Workloads as a cluster's
tenants and Kueue write them.

Structure-aware cases start from valid objects (two cohort queues, two flavors,
Workloads pending, reserved and admitted) with one to three places replaced by a
value of any type, so that the cases get past the first check. Every case must
give rows: what is malformed is left out and counted, never raised, and every
value is a finite, non-negative number.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from autoscaler import clusterstate as cs
from autoscaler import queues
from autoscaler.kube.kueue import KueueObjects
from autoscaler.pools.base import NodeShape, Pool
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import copy_tree, tree_paths, wrong_values

GPU = "nvidia.com/gpu"
H100 = {"accel.example/gpu": "h100"}


def _cq(name: str, cohort: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": GPU, "nominalQuota": "16", "borrowingLimit": 8}],
                        },
                        {"name": "a100", "resources": [{"name": GPU, "nominalQuota": 32}]},
                    ],
                }
            ],
        },
    }


def _wl(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {
            "queueName": "a",
            "priority": 5,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "nodeSelector": H100,
                            "containers": [{"name": "m", "resources": {"limits": {GPU: "8"}}}],
                        }
                    },
                }
            ],
        },
    }
    if status is not None:
        wl["status"] = status
    return wl


def _held(admitted: bool) -> dict[str, Any]:
    conds = [{"type": "QuotaReserved", "status": "True"}]
    if admitted:
        conds.append({"type": "Admitted", "status": "True"})
    return {
        "conditions": conds,
        "admission": {
            "clusterQueue": "team-a",
            "podSetAssignments": [{"name": "main", "flavors": {GPU: "h100"}}],
        },
        "requeueState": {"count": 1, "requeueAt": "2026-12-01T10:01:00Z"},
    }


SEED: dict[str, list[Any]] = {
    "cluster_queues": [_cq("team-a", "c"), _cq("team-b", "c")],
    "local_queues": [
        {"metadata": {"name": "a", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}
    ],
    "flavors": [
        {"metadata": {"name": "h100"}, "spec": {"nodeLabels": H100}},
        {"metadata": {"name": "a100"}, "spec": {"nodeLabels": {"accel.example/gpu": "a100"}}},
    ],
    "workloads": [_wl("p1"), _wl("p2"), _wl("r", _held(False)), _wl("a", _held(True))],
}


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, list[Any]]:
    tree: dict[str, list[Any]] = copy_tree(SEED)
    for _ in range(draw(st.integers(1, 3))):
        # Below an object of a list: the lists themselves are what read_kueue bounds.
        places = [p for p in tree_paths(tree) if len(p) > 2]
        *parent_at, key = draw(st.sampled_from(places))
        parent: Any = tree
        for p in parent_at:
            parent = parent[p]
        parent[key] = draw(wrong_values)
    return tree


POOLS = [Pool("pool-h100", 0, 4, 2, ("n1", "n2"), 0, NodeShape(devices={GPU: 8}, labels=H100))]
# Two Ready nodes, one half held: the free room that queued pods are placed on
# (a hostile pod set's count or requests must not blow it up).
NODES = [
    {
        "metadata": {"name": name, "labels": H100},
        "status": {
            "allocatable": {GPU: "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for name in ("n1", "n2")
]
PODS = [
    {
        "metadata": {"name": "held", "namespace": "ml"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "m", "resources": {"limits": {GPU: "4"}}}],
        },
        "status": {"phase": "Running"},
    }
]


@budget(300)
@given(tree=damaged())
def test_queue_rows(tree: dict[str, list[Any]]) -> None:
    def read() -> list[Any]:
        objs = KueueObjects(
            cluster_queues=tuple(tree["cluster_queues"]),
            local_queues=tuple(tree["local_queues"]),
            flavors=tuple(tree["flavors"]),
            workloads=tuple(tree["workloads"]),
            skipped={},
        )
        rows = queues.queue_rows(objs, cs.device_requests, POOLS, NODES, PODS)
        assert all(math.isfinite(v) and v >= 0 for _, _, v in rows)
        return rows

    check("kueue queue_rows", read, ())
