"""Which gang a pod belongs to, from the pod alone: its labels and ownerReferences.

Why this module: three parts of the project must agree on what a gang is. The
controller's cluster state turns gang membership into series (``accel_gang_info``)
that the stall rule joins on, the actions restart a gang as one, and the fleet
simulator emits the same series from its in-memory cluster (a test compares the
two). A membership rule written three times drifts; written once here, it cannot.
It reads nothing but the pod, so ``collect`` can classify every pod of a large
cluster in its single pass without an API call per pod. It lives in
``accel_common`` (the floor of the import layers) because the cluster state sits
below the actions and the simulator above both.

A gang is the set of pods of one namespace that share one gang owner:

======================  ==========================================================
kind                    how a pod is recognised (first match wins, in this order)
======================  ==========================================================
``PyTorchJob``          ownerReference kind ``PyTorchJob`` in ``kubeflow.org``
``MPIJob``              ownerReference kind ``MPIJob`` in ``kubeflow.org``
``VolcanoJob``          ownerReference kind ``Job`` in ``batch.volcano.sh``
``JobSet``              label ``jobset.sigs.k8s.io/jobset-name`` (the pod's owner is
                        a child batch Job; the label names the JobSet)
``PyTorchJob``          label ``training.kubeflow.org/job-name`` with replica type
                        master or worker (older operators, owner not set on the pod)
``VolcanoJob``          label ``volcano.sh/job-name``
``label``               label ``accel-fleet.io/gang``, for any other workload
======================  ==========================================================

Owners first: a controller's ownerReference is what its operator acts on, and a
pod that carries our label as well as an owner belongs to that owner's gang. A
TrainJob (``trainer.kubeflow.org``) runs as a JobSet of its own name, so its pods
are recognised by the JobSet label with kind ``JobSet``; telling it apart needs the
JobSet's own ownerReference (one API read), which the actions do and the cluster
state does not. The gang name is the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from accel_common.names import (
    GANG_LABEL,
    JOBSET_NAME_LABEL,
    KUBEFLOW_GROUP,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    VOLCANO_BATCH_GROUP,
    VOLCANO_JOB_NAME_LABEL,
)

# The ``kind`` label values of ``accel_gang_info``.
JOBSET: Final = "JobSet"
TRAINJOB: Final = "TrainJob"
PYTORCHJOB: Final = "PyTorchJob"
MPIJOB: Final = "MPIJob"
VOLCANOJOB: Final = "VolcanoJob"
LABELLED: Final = "label"
KINDS: Final = (JOBSET, TRAINJOB, PYTORCHJOB, MPIJOB, VOLCANOJOB, LABELLED)

# The longest object name Kubernetes allows: a longer one is no gang's (a label
# value is at most 63, so the API server never hands over longer ones).
MAX_NAME = 253

# Replica types of a PyTorchJob, as training-operator v1 writes them into the
# replica-type label (lower case; older releases wrote "Master", "Worker").
_PYTORCH_REPLICAS: Final = frozenset({"master", "worker"})


@dataclass(frozen=True)
class GangRef:
    """One gang: its kind (one of ``KINDS``), namespace and name."""

    kind: str
    namespace: str
    name: str


def _group(api_version: str) -> str:
    """The API group of an apiVersion (``kubeflow.org/v1`` -> ``kubeflow.org``);
    the core group ("v1") is empty."""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _owner_gang(ref: Mapping[str, Any]) -> str | None:
    """The gang kind an ownerReference makes, or None."""
    kind, group = str(ref.get("kind", "")), _group(str(ref.get("apiVersion", "")))
    if group == KUBEFLOW_GROUP and kind in (PYTORCHJOB, MPIJOB):
        return kind
    if group == VOLCANO_BATCH_GROUP and kind == "Job":
        return VOLCANOJOB
    return None


def gang_of(pod: Mapping[str, Any]) -> GangRef | None:
    """The gang ``pod`` (a Kubernetes Pod as a dict) belongs to, or None for a
    single-pod job. Reads only ``metadata``: no API call, no exception on a
    malformed object (a field of the wrong type counts as absent)."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) and len(namespace) <= MAX_NAME else ""
    refs = meta.get("ownerReferences")
    if isinstance(refs, list):
        # The controlling owner first: it is the one that recreates the pod.
        ordered = sorted(
            (r for r in refs if isinstance(r, Mapping)),
            key=lambda r: r.get("controller") is not True,
        )
        for ref in ordered:
            kind = _owner_gang(ref)
            name = ref.get("name")
            if kind is not None and isinstance(name, str) and 0 < len(name) <= MAX_NAME:
                return GangRef(kind, namespace, name)
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        return None

    def label(key: str) -> str:
        value = labels.get(key)
        return value if isinstance(value, str) and len(value) <= MAX_NAME else ""

    if jobset := label(JOBSET_NAME_LABEL):
        return GangRef(JOBSET, namespace, jobset)
    kubeflow = label(KUBEFLOW_JOB_NAME_LABEL)
    if kubeflow and label(KUBEFLOW_REPLICA_TYPE_LABEL).lower() in _PYTORCH_REPLICAS:
        return GangRef(PYTORCHJOB, namespace, kubeflow)
    if volcano := label(VOLCANO_JOB_NAME_LABEL):
        return GangRef(VOLCANOJOB, namespace, volcano)
    if labelled := label(GANG_LABEL):
        return GangRef(LABELLED, namespace, labelled)
    return None
