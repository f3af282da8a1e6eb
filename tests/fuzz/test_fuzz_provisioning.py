"""The ProvisioningRequest answerer's readers (``autoscaler/provisioning.py``),
fuzzed with hypothesis: a ProvisioningRequest as anyone who may create one writes
it, and the booking record on a MachineDeployment as anyone who may patch it
writes it.

Structure-aware cases start from valid objects with one to three places replaced
by a value of any type. Every case must read or be refused with ``Malformed``
(skipped and counted by the caller), never raise anything else; what is read is
bounded.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from autoscaler import provisioning as prov
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import tree_paths, wrong_values

REQUEST: dict[str, Any] = {
    "metadata": {
        "name": "job-train-gang-1",
        "namespace": "ml",
        "uid": "u-1",
        "generation": 1,
        "ownerReferences": [{"kind": "Workload", "name": "job-train", "controller": True}],
    },
    "spec": {
        "provisioningClassName": prov.CLASS,
        "parameters": {"a": "b"},
        "podSets": [
            {"podTemplateRef": {"name": "ppt-job-train-gang-1-main"}, "count": 8},
            {"podTemplateRef": {"name": "ppt-job-train-gang-1-side"}, "count": 1},
        ],
    },
    "status": {"conditions": [{"type": "Accepted", "status": "True"}]},
}
GPU = "nvidia.com/gpu"
RECORD: dict[str, Any] = {
    "u-1": {"request": "ml/a", "nodes": 8, "replicas": 8, "at": 1.8e9},
    "u-2": {
        "request": "ml/b",
        "nodes": 2,
        "replicas": 10,
        "at": 1.8e9,
        "release": ["n1", "n2"],
        "releaseTo": 8,
        "unborn": 0,
        "held": True,
    },
}


@st.composite
def damaged(draw: st.DrawFn, seed: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = json.loads(json.dumps(seed))
    for _ in range(draw(st.integers(1, 3))):
        *parent_at, key = draw(st.sampled_from([p for p in tree_paths(tree) if p]))
        parent: Any = tree
        for p in parent_at:
            parent = parent[p]
        parent[key] = draw(wrong_values)
    return tree


@budget(300)
@given(obj=damaged(REQUEST))
def test_read_request(obj: dict[str, Any]) -> None:
    def read() -> None:
        r = prov.read_request(obj)
        if r is not None:
            assert 0 < len(r.pod_sets) <= prov.MAX_POD_SETS
            assert all(0 < n <= prov.MAX_COUNT for _, n in r.pod_sets)
            assert len(r.conditions) <= 16

    check("provisioning read_request", read, (prov.Malformed,))


@budget(300)
@given(record=damaged(RECORD))
def test_read_records(record: dict[str, Any]) -> None:
    try:
        text = json.dumps(record)
    except (TypeError, ValueError):  # a value JSON cannot hold: written as a string
        text = repr(record)
    md = {"metadata": {"annotations": {prov.RECORD: text}}}

    def read() -> None:
        for b in prov.read_records(md).values():
            assert 0 <= b.nodes <= prov.MAX_COUNT and 0 <= b.replicas <= prov.MAX_COUNT
            assert b.unborn >= 0 and all(isinstance(n, str) for n in b.release)
            b.as_json()

    check("provisioning read_records", read, (prov.Malformed,))


WORKLOAD: dict[str, Any] = {
    "spec": {
        "podSets": [
            {
                "name": "main",
                "count": 8,
                "template": {
                    "spec": {"containers": [{"name": "m", "resources": {"limits": {GPU: "8"}}}]}
                },
            }
        ]
    },
    "status": {
        "admission": {
            "clusterQueue": "team-a",
            "podSetAssignments": [{"name": "main", "flavors": {GPU: "h100"}}],
        }
    },
}


@budget(300)
@given(wl=damaged(WORKLOAD))
def test_gang_of(wl: dict[str, Any]) -> None:
    r = prov.read_request(REQUEST)
    assert r is not None

    def read() -> None:
        per_pod, flavor = prov.gang_of(wl, r)
        assert len(per_pod) == len(r.pod_sets) and flavor

    check("provisioning gang_of", read, (prov.Unanswerable,))
