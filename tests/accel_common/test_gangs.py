"""The gang recogniser: every row of the issue-16 table, the order in which owners
and labels are tried, and malformed pods that must not raise."""

from __future__ import annotations

from typing import Any

import pytest

from accel_common.gangs import GangRef, gang_of
from accel_common.names import (
    GANG_LABEL,
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    VOLCANO_JOB_NAME_LABEL,
)


def pod(labels: dict[str, str] | None = None, *owners: tuple[str, str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml", "labels": labels or {}}
    meta["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": name, "uid": f"u-{name}", "controller": True}
        for api, kind, name in owners
    ]
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (
            pod({JOBSET_NAME_LABEL: "llm"}, ("batch/v1", "Job", "llm-workers-0")),
            GangRef("JobSet", "ml", "llm"),
        ),
        (pod({}, ("kubeflow.org/v1", "PyTorchJob", "bert")), GangRef("PyTorchJob", "ml", "bert")),
        (
            pod({KUBEFLOW_JOB_NAME_LABEL: "bert", KUBEFLOW_REPLICA_TYPE_LABEL: "worker"}),
            GangRef("PyTorchJob", "ml", "bert"),
        ),
        (
            pod({KUBEFLOW_JOB_NAME_LABEL: "bert", KUBEFLOW_REPLICA_TYPE_LABEL: "Master"}),
            GangRef("PyTorchJob", "ml", "bert"),
        ),
        (pod({}, ("kubeflow.org/v2beta1", "MPIJob", "hpc")), GangRef("MPIJob", "ml", "hpc")),
        (pod({}, ("batch.volcano.sh/v1alpha1", "Job", "vj")), GangRef("VolcanoJob", "ml", "vj")),
        (pod({VOLCANO_JOB_NAME_LABEL: "vj"}), GangRef("VolcanoJob", "ml", "vj")),
        (pod({GANG_LABEL: "mine"}), GangRef("label", "ml", "mine")),
        # An owner wins over our label: its operator is what restarts the pod.
        (
            pod({GANG_LABEL: "mine"}, ("kubeflow.org/v1", "PyTorchJob", "bert")),
            GangRef("PyTorchJob", "ml", "bert"),
        ),
    ],
)
def test_each_kind_is_recognised(obj: dict[str, Any], want: GangRef) -> None:
    assert gang_of(obj) == want


@pytest.mark.parametrize(
    "obj",
    [
        pod({}, ("batch/v1", "Job", "single")),
        pod({}, ("apps/v1", "ReplicaSet", "web")),
        # A TFJob's worker is not a PyTorchJob; a batch Job is not a Volcano Job.
        pod({KUBEFLOW_JOB_NAME_LABEL: "tf", KUBEFLOW_REPLICA_TYPE_LABEL: "ps"}),
        pod({}, ("batch/v1", "Job", "vj")),
        {"metadata": None},
        {"metadata": {"labels": ["not", "a", "map"], "ownerReferences": "nope"}},
        {"metadata": {"labels": {JOBSET_NAME_LABEL: 7}}},
        {},
    ],
)
def test_others_are_single_pod_jobs(obj: dict[str, Any]) -> None:
    assert gang_of(obj) is None


def test_the_controlling_owner_is_tried_first() -> None:
    obj = pod({}, ("kubeflow.org/v2beta1", "MPIJob", "other"))
    obj["metadata"]["ownerReferences"][0]["controller"] = False
    obj["metadata"]["ownerReferences"].append(
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "controller": True}
    )
    assert gang_of(obj) == GangRef("PyTorchJob", "ml", "bert")
