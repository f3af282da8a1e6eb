"""The ``Kube`` protocol: every call the controller makes to the Kubernetes API.

Actions, the leader election, the node-pool providers and the cluster-state
collector depend on this protocol and nothing else. Three things implement it:

- ``ClientKube`` (``autoscaler/kube/client.py``): the official ``kubernetes``
  client, with bounded tenacity retries;
- ``DryRunKube`` (``autoscaler/kube/dryrun.py``): reads pass through, writes are
  recorded and logged, and sent with ``dryRun=All`` when there is a real server
  behind it;
- the fleet simulator's in-memory cluster (``autoscaler/simulate/``), so that the
  simulation runs the production actions unchanged.

Objects are plain ``dict``s in the API's own JSON shape (camelCase keys, as
``kubectl get -o json`` prints them), not the client library's model classes:
that is what the server sends, what the simulator keeps, and it costs nothing to
decode. Patches are JSON merge patches (RFC 7386) unless a method says otherwise;
lists in a merge patch replace the whole list, so a caller that changes one taint
sends the node's full taint list together with ``metadata.resourceVersion`` and
handles ``Conflict`` by reading again (``autoscaler.actions.ops.ownership.update_node``).

Errors are the typed ones in ``autoscaler.kube.errors``. Every method may raise
``KubeError``; an implementation retries ``Transient`` and throttling ``429``
itself (bounded) before raising.

The verbs each method needs are listed in ``VERBS`` (resource → verbs); the
deploy/ Role is checked against it by a test, so the RBAC holds exactly these.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol, runtime_checkable

from accel_common.names import (
    DRA_GROUP,
    GANG_RESTARTS_ANNOTATION,
    JOBSET_GROUP,
    KUBEFLOW_GROUP,
    LEADER_LABEL,
    PROVISIONING_ANNOTATION,
    PROVISIONING_CLASS,
    REMEDIATION_ANNOTATION,
    SNR_GROUP,
    SPARE_NODES_ANNOTATION,
    VOLCANO_BATCH_GROUP,
    VOLCANO_BUS_GROUP,
)

Obj = dict[str, Any]

# Cluster API, the first node-pool provider (autoscaler/pools/clusterapi.py).
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta1"
MACHINE_DEPLOYMENTS = "machinedeployments"
MACHINES = "machines"
MACHINE_SETS = "machinesets"
MACHINE_HEALTH_CHECKS = "machinehealthchecks"

# Kueue (autoscaler/kube/kueue.py reads it; its names are listed there).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
# The versions tried, in order: v1beta1, which every Kueue release so far serves
# (0.19 stores v1beta2 and serves v1beta1 deprecated), then v1beta2, for a Kueue
# that no longer serves v1beta1.
KUEUE_VERSIONS = (KUEUE_VERSION, "v1beta2")
WORKLOADS = "workloads"
CLUSTER_QUEUES = "clusterqueues"
LOCAL_QUEUES = "localqueues"
RESOURCE_FLAVORS = "resourceflavors"


@runtime_checkable
class Kube(Protocol):
    # Nodes.
    async def get_node(self, name: str) -> Obj: ...
    async def list_nodes(self, label_selector: str | None = None) -> list[Obj]: ...
    async def patch_node(self, name: str, patch: Obj) -> Obj:
        """JSON merge patch. Put ``metadata.resourceVersion`` in the patch to make it
        conditional (``Conflict`` when the node changed since it was read)."""
        ...

    # Pods.
    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        """All namespaces when ``namespace`` is None; ``node`` is the field selector
        ``spec.nodeName=<node>``."""
        ...

    async def get_pod(self, namespace: str, name: str) -> Obj: ...
    async def create_pod(self, namespace: str, body: Obj) -> Obj: ...
    async def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj: ...
    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        """``uid`` is a precondition: the delete only applies to that incarnation of
        the pod (``Conflict`` otherwise), so a retried delete never hits its
        replacement."""
        ...

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        """policy/v1 Eviction. ``TooManyRequests`` when a PodDisruptionBudget refuses;
        ``NotFound`` when the pod is already gone."""
        ...

    # Jobs (batch/v1).
    async def get_job(self, namespace: str, name: str) -> Obj: ...
    async def patch_job(self, namespace: str, name: str, patch: Obj) -> Obj: ...

    # Events (core/v1): every action writes one on the object it acted on.
    async def create_event(self, namespace: str, body: Obj) -> Obj: ...

    # Leases (coordination.k8s.io/v1), for leader election.
    async def get_lease(self, namespace: str, name: str) -> Obj: ...
    async def create_lease(self, namespace: str, body: Obj) -> Obj: ...
    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        """PUT with the body's ``metadata.resourceVersion``: ``Conflict`` when another
        replica wrote the Lease in between."""
        ...

    # ConfigMaps (core/v1): the controller's own state record, in its namespace
    # (autoscaler/engine/restore.py).
    async def get_configmap(self, namespace: str, name: str) -> Obj: ...
    async def create_configmap(self, namespace: str, body: Obj) -> Obj: ...
    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        """PUT with the body's ``metadata.resourceVersion``: ``Conflict`` when another
        writer changed the ConfigMap in between."""
        ...

    # Custom resources (Cluster API MachineDeployments and Machines; the gang owners
    # of autoscaler/actions/ops/gangs.py: JobSet, PyTorchJob, MPIJob, Volcano Job and
    # Command).
    async def get_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj: ...
    async def list_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        label_selector: str | None = None,
    ) -> list[Obj]:
        """``namespace`` empty: a cluster-scoped kind, or every namespace's objects of
        a namespaced one (Kueue's ClusterQueues and Workloads)."""
        ...

    async def patch_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj: ...
    async def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> Obj:
        """POST a custom object (Volcano's restart ``Command``). ``Conflict`` with
        ``already_exists`` when its name is taken."""
        ...

    async def delete_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        uid: str | None = None,
    ) -> None:
        """DELETE a custom object (replace_machine's ``mode: delete`` of a Machine).
        ``uid`` is a precondition, as for ``delete_pod``: ``Conflict`` when the name
        now belongs to another object; ``NotFound`` when it is gone."""
        ...

    async def get_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        """The ``scale`` subresource (autoscaling/v1 Scale)."""
        ...

    # Dynamic Resource Allocation (resource.k8s.io/v1), read only: which devices a
    # pod's ResourceClaims hold, what pending pods ask for, what nodes offer.
    async def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        """All namespaces when ``namespace`` is None."""
        ...

    async def get_resource_claim(self, namespace: str, name: str) -> Obj: ...
    async def list_resource_claim_templates(self, namespace: str | None = None) -> list[Obj]: ...
    async def list_resource_slices(self, node: str | None = None) -> list[Obj]:
        """Cluster-scoped; ``node`` is the field selector ``spec.nodeName=<node>``."""
        ...

    async def list_device_classes(self) -> list[Obj]: ...

    async def patch_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str, replicas: int
    ) -> Obj: ...


# What some handles can do beyond ``Kube``, asked with ``isinstance`` by whoever holds
# one (the dry-run wrapper, a command closing its client), never probed by name.


@runtime_checkable
class ServerDryRun(Protocol):
    """A handle that can send its writes with ``dryRun=All`` (``ClientKube``):
    ``dry_run`` says whether it does, so that a wrapper in front of it still lets
    the server validate what a dry run would write."""

    dry_run: bool


@runtime_checkable
class PatchesStatus(Protocol):
    """A handle that can write a custom object's ``status`` subresource (``ClientKube``,
    the dry-run wrapper and the simulator's ``SimKube``): a Workload is evicted
    through its status, which a write to the object itself leaves alone. A handle
    without it cannot requeue through Kueue, and an action says so."""

    async def patch_custom_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj: ...


@runtime_checkable
class CountsRequests(Protocol):
    """A handle that counts its API requests by (verb, resource, status), for
    ``/metrics`` (``ClientKube``)."""

    request_counts: Counter[tuple[str, str, int]]


@runtime_checkable
class Closable(Protocol):
    """A handle that holds connections to close when its user is done (its
    ``close`` may be a coroutine function)."""

    def close(self) -> object: ...


# resource (as RBAC names it, "group/resource" for non-core) → the verbs the
# controller uses on it, and which part of the controller needs each. The deploy/
# ClusterRole is generated from and tested against this table.
VERBS: dict[str, dict[str, str]] = {
    "nodes": {
        "get": "every node action reads the node before changing it",
        "list": "cluster-state metrics (nodes per pool); resuming work on start; spare nodes",
        "watch": "cluster-state metrics stay current between lists",
        "patch": f"cordon, taint, uncordon, and the {REMEDIATION_ANNOTATION} annotation",
    },
    "pods": {
        "get": "requeue_job and migrate_jobs re-read a pod before acting on it",
        "list": "drain, migrate_jobs, rebalance: a node's pods; gang members; spares; metrics",
        "watch": "cluster-state metrics stay current between lists",
        "create": "migrate_jobs recreates a bare pod (no owner) on another node",
        "delete": "requeue_job deletes a stuck pod; a gang restart deletes its members at once",
        "patch": f"the leader labels its own pod {LEADER_LABEL} for the webhook Service",
    },
    "pods/eviction": {
        "create": "drain, migrate_jobs and rebalance evict through the Eviction API (PDBs)",
    },
    "events": {"create": "every action records an Event on the object it acted on"},
    "batch/jobs": {
        "get": "job timeouts (activeDeadlineSeconds) and requeue_job's suspend toggle",
        "patch": "requeue_job toggles spec.suspend and counts attempts; a label gang's record",
    },
    "coordination.k8s.io/leases": {
        "get": "leader election reads the Lease",
        "create": "leader election creates the Lease the first time",
        "update": "leader election renews and takes over the Lease",
    },
    "configmaps": {
        "get": "start and leadership gain read the controller's state record",
        "create": "the state record is created the first time there is state to keep",
        "update": "the leader writes the breaker and the cooldowns to its state record",
    },
    f"{CAPI_GROUP}/{MACHINE_DEPLOYMENTS}": {
        "get": "scale_node_pool reads a pool's min/max annotations",
        "list": "scale_node_pool and pool metrics find the pools",
        "patch": f"scale_node_pool writes the spare buffer ({SPARE_NODES_ANNOTATION}); "
        f"ProvisioningRequest scale-ups are recorded there ({PROVISIONING_ANNOTATION})",
    },
    f"{CAPI_GROUP}/{MACHINE_DEPLOYMENTS}/scale": {
        "get": "scale_node_pool reads the current replicas",
        "patch": "scale_node_pool sets replicas",
    },
    f"{CAPI_GROUP}/{MACHINES}": {
        "get": "replace_machine reads the Machine that the node's annotation names",
        "list": "scale_node_pool maps nodes to pools and counts provisioning machines",
        "patch": "scale-down marks the drained node's Machine with delete-machine; "
        "replace_machine marks it with remediate-machine",
        "delete": "replace_machine with mode: delete deletes the node's Machine",
    },
    f"{CAPI_GROUP}/{MACHINE_HEALTH_CHECKS}": {
        "list": "replace_machine (mode remediate) checks that a MachineHealthCheck selects "
        "the Machine",
    },
    f"{CAPI_GROUP}/{MACHINE_SETS}": {
        "list": "scale from zero reads the capacity annotations of a pool's MachineSets",
    },
    # Gang owners (autoscaler/actions/ops/gangs.py): read to find the restart path and
    # its limits, patched only for the restart record on the owner.
    f"{JOBSET_GROUP}/jobsets": {
        "get": "gang restarts read the JobSet's restarts and failure policy",
        "patch": f"gang restarts record the restart on the JobSet ({GANG_RESTARTS_ANNOTATION})",
    },
    f"{KUBEFLOW_GROUP}/pytorchjobs": {
        "get": "gang restarts read the PyTorchJob",
        "patch": f"gang restarts record the restart ({GANG_RESTARTS_ANNOTATION})",
    },
    f"{KUBEFLOW_GROUP}/mpijobs": {
        "get": "gang restarts read the MPIJob",
        "patch": f"gang restarts record the restart ({GANG_RESTARTS_ANNOTATION})",
    },
    f"{VOLCANO_BATCH_GROUP}/jobs": {
        "get": "gang restarts read the Volcano Job's status.version",
        "patch": f"gang restarts record the restart ({GANG_RESTARTS_ANNOTATION})",
    },
    f"{VOLCANO_BUS_GROUP}/commands": {
        "create": "a Volcano Job is restarted through a RestartJob Command",
    },
    # Dynamic Resource Allocation: read only.
    f"{DRA_GROUP}/resourceclaims": {
        "get": "migrate_jobs, rebalance and requeue_job read a pod's claims for its devices",
        "list": "cluster-state metrics count the devices pods hold or wait for through claims",
    },
    f"{DRA_GROUP}/resourceclaimtemplates": {
        "list": "pool pressure counts a pending pod whose claim is not generated yet",
    },
    f"{DRA_GROUP}/resourceslices": {
        "list": "pool metrics count the devices a node offers through DRA drivers",
    },
    f"{DRA_GROUP}/deviceclasses": {
        "list": "pool pressure maps a claim's DeviceClass to the vendor of its devices",
    },
    # Kueue (autoscaler/kube/kueue.py): read for the queue series; a Workload's status
    # written only to evict it for a requeue through its queue.
    f"{KUEUE_GROUP}/{CLUSTER_QUEUES}": {
        "list": "queue series: quotas per ClusterQueue, flavor and resource",
    },
    f"{KUEUE_GROUP}/{LOCAL_QUEUES}": {
        "list": "queue series: which ClusterQueue a pending Workload waits in",
    },
    f"{KUEUE_GROUP}/{RESOURCE_FLAVORS}": {
        "list": "queue series: which node pool a flavor's node labels select",
    },
    f"{KUEUE_GROUP}/{WORKLOADS}": {
        "get": "a ProvisioningRequest's gang is read from the Workload that owns it",
        "list": "queue series: pending and admitted Workloads and their devices; "
        "requeue_job finds a Kueue-managed job's Workload",
    },
    f"{KUEUE_GROUP}/admissionchecks": {
        "list": "queue series: which ClusterQueues get capacity through ProvisioningRequests",
    },
    "autoscaling.x-k8s.io/provisioningrequests": {
        "list": f"ProvisioningRequests of {PROVISIONING_CLASS} are answered",
    },
    "autoscaling.x-k8s.io/provisioningrequests/status": {
        "patch": "a ProvisioningRequest's Accepted, Provisioned, Failed, BookingExpired",
    },
    f"{KUEUE_GROUP}/{WORKLOADS}/status": {
        "patch": "requeue_job evicts a Kueue-managed job's Workload (Evicted, requeueState)",
    },
    f"{SNR_GROUP}/selfnoderemediations": {
        "get": "reboot_node finds the SelfNodeRemediation it created, after a restart",
        "list": "reboot_node (method auto) learns whether Self Node Remediation is served",
        "create": "reboot_node asks Self Node Remediation to reboot a node",
        "delete": "reboot_node removes its SelfNodeRemediation once the node is back",
    },
}

__all__ = [
    "CAPI_GROUP",
    "CAPI_VERSION",
    "CLUSTER_QUEUES",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "KUEUE_VERSIONS",
    "LOCAL_QUEUES",
    "MACHINES",
    "MACHINE_DEPLOYMENTS",
    "MACHINE_HEALTH_CHECKS",
    "MACHINE_SETS",
    "RESOURCE_FLAVORS",
    "VERBS",
    "WORKLOADS",
    "Closable",
    "CountsRequests",
    "Kube",
    "Obj",
    "PatchesStatus",
    "ServerDryRun",
]
