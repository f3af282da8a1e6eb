"""The controller's reads of Kueue (``kueue.x-k8s.io/v1beta1``): ClusterQueues,
LocalQueues, ResourceFlavors and Workloads, listed through the ``Kube`` protocol,
and the names of Kueue's API that the queue series (``autoscaler/queues.py``) and
requeues through a Workload (``autoscaler/actions/ops/kueue.py``) rely on.

Why a module of its own: like DRA (``autoscaler/kube/dra.py``) Kueue is an API a
cluster may not serve. A cluster without Kueue's CRDs answers 404: no queues, no
series, nothing logged. A controller that may not read them (403) says so once,
not every cycle. Other API errors propagate, as for the node and pod lists.

The names are those of Kueue's Go types (``apis/kueue/v1beta1/*_types.go``; read
at ``v1beta1``, else at ``v1beta2``, whose only difference in what is read here
is ClusterQueue's ``spec.cohortName`` for ``spec.cohort``):
Workload ``spec.podSets[].{name,count,template}``, ``spec.queueName``,
``spec.active``, ``spec.priority``; ``status.admission.clusterQueue`` and
``status.admission.podSetAssignments[].flavors`` (resource name to flavor);
``status.conditions`` of types ``QuotaReserved``, ``Admitted``, ``Evicted``,
``Requeued`` and ``Finished``; ``status.requeueState.{count,requeueAt}``.
ClusterQueue ``spec.cohort`` and ``spec.resourceGroups[].flavors[].{name,
resources[].{name,nominalQuota,borrowingLimit,lendingLimit}}`` (cluster-scoped),
LocalQueue ``spec.clusterQueue`` (namespaced), ResourceFlavor ``spec.nodeLabels``
(cluster-scoped), AdmissionCheck ``spec.controllerName`` (cluster-scoped: which
of a ClusterQueue's ``spec.admissionChecks`` are ProvisioningRequests). A job
joins a queue through the label ``kueue.x-k8s.io/queue-name``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from accel_common.logs import Once
from autoscaler.kube.errors import Forbidden, NotFound
from autoscaler.kube.protocol import (
    CLUSTER_QUEUES,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_VERSIONS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Kube,
    Obj,
)

log = logging.getLogger(__name__)

# AdmissionChecks: their plural, and the controller name of Kueue's provisioning
# admission check (a ProvisioningRequest per Workload, autoscaler/provisioning.py).
ADMISSION_CHECKS: Final = "admissionchecks"
PROVISIONING_CHECK_CONTROLLER: Final = "kueue.x-k8s.io/provisioning-request"

# The label that puts a Job, JobSet or other job into a LocalQueue (Kueue's
# constants.QueueLabel).
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"

# Workload condition types and the reasons this project writes or reads.
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
REQUEUED: Final = "Requeued"
FINISHED: Final = "Finished"
# The eviction reason Kueue backs off after (its waitForPodsReady requeuing
# strategy): the reason a job that stopped making progress is evicted with.
PODS_READY_TIMEOUT: Final = "PodsReadyTimeout"

# What one read may hold: beyond these the rest of a list is left out and counted
# (a cluster of a thousand nodes runs a few thousand Workloads).
MAX_WORKLOADS: Final = 50_000
MAX_QUEUES: Final = 2_000
MAX_FLAVORS: Final = 1_000

# Reads the controller may not make (403), logged once each, not every cycle.
_REPORTED = Once()


@dataclass(frozen=True)
class KueueObjects:
    """One read of Kueue's objects. ``skipped`` counts, by kind, what a list held
    beyond its bound (what was malformed is counted by whoever reads the fields);
    ``version`` is the API version they were read at."""

    cluster_queues: tuple[Obj, ...]
    local_queues: tuple[Obj, ...]
    flavors: tuple[Obj, ...]
    workloads: tuple[Obj, ...]
    skipped: dict[str, int]
    version: str = KUEUE_VERSION
    # Absent (404) or not readable: none, and every check counts as some other kind.
    admission_checks: tuple[Obj, ...] = ()


def condition(obj: Obj, kind: str) -> Obj | None:
    """The status condition of type ``kind``, or None (also when ``status`` or its
    ``conditions`` are not what the API says they are)."""
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conds, list):
        return None
    for c in conds[:64]:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def is_true(obj: Obj, kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


class _Forbidden(Exception):
    """The Role may not list a Kueue kind (logged once)."""


async def read_kueue(kube: Kube) -> KueueObjects | None:
    """Kueue's objects, or None where Kueue is not installed (its ClusterQueue API
    answers 404 at every version of ``KUEUE_VERSIONS``) or may not be read (403,
    logged once). The ClusterQueues are read first: a cluster without any has
    nothing to queue, and the other three lists are not made."""

    async def listed(version: str, plural: str) -> list[Obj] | None:
        """The list; None when the API answers 404 (not installed, or not at this
        version)."""
        try:
            return await kube.list_custom(KUEUE_GROUP, version, "", plural)
        except NotFound:
            return None
        except Forbidden as e:
            if _REPORTED.first(plural):
                log.warning(
                    "cannot list %s.%s (%s): no queue series; grant list on it "
                    "(deploy/base/rbac.yaml)",
                    plural,
                    KUEUE_GROUP,
                    e,
                )
            raise _Forbidden() from e

    try:
        for version in KUEUE_VERSIONS:
            queues = await listed(version, CLUSTER_QUEUES)
            if queues is not None:
                break
        if not queues:
            return None
        local, flavors, workloads = await asyncio.gather(
            *(listed(version, p) for p in (LOCAL_QUEUES, RESOURCE_FLAVORS, WORKLOADS))
        )
        checks = await listed(version, ADMISSION_CHECKS)
    except _Forbidden:
        return None
    skipped: dict[str, int] = {}

    def bounded(kind: str, items: list[Obj] | None, most: int) -> tuple[Obj, ...]:
        items = [o for o in items or () if isinstance(o, dict)]
        skipped[kind] = max(len(items) - most, 0)
        return tuple(items[:most])

    return KueueObjects(
        cluster_queues=bounded("ClusterQueue", queues, MAX_QUEUES),
        local_queues=bounded("LocalQueue", local, MAX_QUEUES),
        flavors=bounded("ResourceFlavor", flavors, MAX_FLAVORS),
        workloads=bounded("Workload", workloads, MAX_WORKLOADS),
        skipped=skipped,
        version=version,
        admission_checks=bounded("AdmissionCheck", checks, MAX_QUEUES),
    )


def rfc3339_seconds(value: object) -> float | None:
    """A Kueue time (``creationTimestamp``, ``requeueAt``, a condition's
    ``lastTransitionTime``: RFC 3339 with a zone) in Unix seconds; None when it is
    not one (not a string, longer than any such time, or without a zone)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


__all__ = [
    "ADMISSION_CHECKS",
    "ADMITTED",
    "CLUSTER_QUEUES",
    "EVICTED",
    "FINISHED",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "LOCAL_QUEUES",
    "PODS_READY_TIMEOUT",
    "PROVISIONING_CHECK_CONTROLLER",
    "QUEUE_NAME_LABEL",
    "QUOTA_RESERVED",
    "REQUEUED",
    "RESOURCE_FLAVORS",
    "WORKLOADS",
    "KueueObjects",
    "condition",
    "is_true",
    "read_kueue",
    "rfc3339_seconds",
]
