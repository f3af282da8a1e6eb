"""Every Kubernetes name this project reads or writes: its own ``accel-fleet.io/``
annotation, label and taint keys, the Cluster API and Kubernetes keys it relies on,
and the extended resources that each vendor's device plugin advertises.

Why one module: these strings are a wire format shared with things we do not ship
(device plugins, Cluster API, the scheduler, people's pod specs and rule files). A
key spelled twice drifts: the controller would write an annotation that placement
no longer reads, and nothing fails until a node is remediated in production. So each
name is written here once, the exporter, the controller, placement, the simulator
and the generators import it, and ``tests/accel_common/test_names.py`` fails on
any string literal elsewhere that spells one (docstrings and comments aside). This module sits in
``accel_common`` because the exporter (which may not import the autoscaler) names
extended resources too.

Vendor resource names, and why these forms:

- **NVIDIA** (``NVIDIA/k8s-device-plugin``): a whole GPU is ``nvidia.com/gpu``. With
  MIG, the plugin's ``--mig-strategy`` decides. ``single`` advertises every MIG
  instance as ``nvidia.com/gpu`` too; ``mixed`` advertises one resource per MIG
  profile, ``nvidia.com/mig-<G>g.<M>gb`` (``"mig-" + profile``, e.g.
  ``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``), with a profile's
  attributes after a dot (NVML's ``1g.10gb+me`` becomes ``mig-1g.10gb.me``: ``+`` is
  not allowed in a resource name). ``mixed`` is the only form that names a MIG
  instance as such, so it is the one this project writes (``nvidia_mig_resource``),
  and it is the form the exporter's kubelet matching and ``accel_pool_pending_device_
  requests{resource}`` carry. Time-slicing and MPS sharing may rename a GPU to
  ``nvidia.com/gpu.shared``: still a device under ``nvidia.com/``.
- **AMD** (``ROCm/k8s-device-plugin``): ``amd.com/gpu`` for a GPU, and for a compute
  partition under the default ``single`` naming strategy; ``mixed`` names partitions
  after their mode, ``amd.com/cpx_nps4``, ``amd.com/spx_nps1``. Every device
  resource of that plugin lives under ``amd.com/``.
- **Intel** (``intel/intel-device-plugins-for-kubernetes``, GPU plugin):
  ``gpu.intel.com/i915`` for a GPU on the i915 kernel driver, ``gpu.intel.com/xe``
  on the xe driver. Its other resources are not devices: ``millicores``,
  ``memory.max`` and ``tiles`` are shares of one GPU (for GPU Aware Scheduling),
  and ``*_monitoring`` grants read access to all of them.
- **Intel Gaudi** (``HabanaAI/gaudi-device-plugin``): ``habana.ai/gaudi`` for a
  whole Gaudi; the plugin advertises nothing else, so the whole ``habana.ai/``
  domain is devices.
- **Huawei Ascend** (MindCluster/MindX DL Ascend Device Plugin): a whole training
  NPU is ``huawei.com/Ascend910`` (910B and 910C too), an inference card
  ``huawei.com/Ascend310P`` (or ``huawei.com/Ascend310``). With static
  virtualisation (AVI) the plugin advertises vNPUs of an Ascend 910 as
  ``huawei.com/Ascend910-<n>c`` (``Ascend910-2c``, ``Ascend910-8c.32g``...): AI-core
  slices of one NPU, counted as devices the way MIG instances are. HAMi's Ascend
  plugin names chips ``huawei.com/Ascend910B`` and their memory
  ``huawei.com/Ascend910B-memory``: the first is a device, the second a share.
- **Google TPU** (GKE's TPU device plugin): ``google.com/tpu`` counts TPU chips.

Placement and the fleet simulator hand out whole devices (``WHOLE_DEVICE_RESOURCES``,
``VENDOR_RESOURCE``); a pod that asks only for MIG instances is left to the
scheduler (placement counts it as asking for no device), while the controller's
cluster state counts every device resource, MIG profiles included
(``DEVICE_RESOURCE_DOMAINS``, ``INTEL_DEVICE_RESOURCES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# ---------------------------------------------------------------- accel-fleet.io

DOMAIN: Final = "accel-fleet.io"
# Every key this project owns starts with this. Placement refuses a node with any
# taint under it: whatever this controller marked is not a place for new work.
PREFIX: Final = f"{DOMAIN}/"

# Node annotations, written by the controller.
#
# The controller's ownership record: JSON, one entry per rule acting on the node
# (owner, phase, params, whether we cordoned it, the taint we set). Written with a
# resourceVersion precondition, so a restart or a new leader resumes the work
# instead of repeating it, and uncordon only undoes what this controller did.
REMEDIATION_ANNOTATION: Final = f"{PREFIX}remediation"
# When rebalance last moved a pod to or from the node (ISO time): its per-node
# cooldown, kept on the node so that it survives a restart.
REBALANCED_ANNOTATION: Final = f"{PREFIX}rebalanced"
# The bare pods that migrate_jobs is moving off the node: JSON by "ns/name", each
# with the original's uid, its replacement's name and its spec (no status, no
# nodeName, no uid). Written before the eviction and removed once the replacement
# exists, so a controller that dies in between still has the spec to finish with.
BARE_PODS_ANNOTATION: Final = f"{PREFIX}bare-pods"

# The controller's own record of what is not per node (autoscaler/engine/restore.py):
# a ConfigMap named ``<controller-name>`` + this suffix, in the controller's namespace,
# holding one JSON document under ``STATE_DATA_KEY``: whether the circuit breaker is
# open and why, the per-target cooldowns (also of targets whose remediation ended)
# and the last hour's actions. Rebuilt from, with the remediation annotations, at
# start and at every leadership gain.
STATE_CONFIGMAP_SUFFIX: Final = "-state"
STATE_DATA_KEY: Final = "state.json"

# Pod annotations, written by the people who submit jobs.
#
# The job's run-time limit, a duration ("2h"): accel_job_timeout_seconds, which the
# requeue rules compare with the job's age. Else the Job's activeDeadlineSeconds.
TIMEOUT_ANNOTATION: Final = f"{PREFIX}timeout"
# Any value but "false": rebalance never moves this pod (a job that cannot restart).
NO_REBALANCE_ANNOTATION: Final = f"{PREFIX}no-rebalance"
# Placement hints (autoscaler/placement/score.py): the vendors the job accepts
# ("nvidia,amd"), substrings of the model it wants, its work in FLOPs, the
# precision it runs at, and node labels where its data lives ("zone=a,rack=3").
VENDORS_ANNOTATION: Final = f"{PREFIX}vendors"
MODELS_ANNOTATION: Final = f"{PREFIX}models"
FLOPS_ANNOTATION: Final = f"{PREFIX}flops"
PRECISION_ANNOTATION: Final = f"{PREFIX}precision"
DATA_LOCATION_ANNOTATION: Final = f"{PREFIX}data-location"
# Checkpointing, as a training job declares it (pod annotations; for a gang, every
# member carries the same values): how often it saves ("30m"), how long one save
# pauses the devices ("2m"), and when it last saved (RFC 3339, written by the job or
# its framework). The stall detector waits out a declared pause before it calls an
# idle gang stalled; rebalance weighs the work since the last save.
CHECKPOINT_INTERVAL_ANNOTATION: Final = f"{PREFIX}checkpoint-interval"
CHECKPOINT_PAUSE_ANNOTATION: Final = f"{PREFIX}checkpoint-pause"
LAST_CHECKPOINT_ANNOTATION: Final = f"{PREFIX}last-checkpoint"
# Pods with the same value of this label (in one namespace) are one gang: they run
# together and restart together, for workloads whose owner is none of the gang
# kinds the actions know (JobSet, PyTorchJob, TrainJob, Volcano Job, MPIJob).
GANG_LABEL: Final = f"{PREFIX}gang"

# Pod and Job annotations, written by the controller.
#
# The devices the extender chose for the pod ("nvidia0,nvidia1"), for a device
# plugin or an admission hook that honours a preference.
PREFERRED_DEVICES_ANNOTATION: Final = f"{PREFIX}preferred-devices"
# On a pod that migrate_jobs recreated: where it came from ("ns/name@node").
MIGRATED_FROM_ANNOTATION: Final = f"{PREFIX}migrated-from"
# On a Job: how many times requeue_job restarted it, and when (JSON), so that a job
# that always times out is not requeued forever.
REQUEUES_ANNOTATION: Final = f"{PREFIX}requeues"
# On a gang's owner (JobSet, PyTorchJob, MPIJob, Volcano Job; a label gang's first
# Job): the restarts the actions made of the whole gang (JSON: count, last, the
# member uids), written before the restart so that it happens once
# (autoscaler/actions/ops/gangs.py).
GANG_RESTARTS_ANNOTATION: Final = f"{PREFIX}gang-restarts"

# The node agent's channel (nodeagent/, docs/agent.md): the controller asks by an
# annotation on the node, the agent on that node answers by another. Each value is
# JSON with an ``id`` that the answer repeats, so a request is carried out once and
# a restarted controller finds the answer to what it asked.
#
# On a node, from the controller (reset_devices): reset these devices (UUIDs).
RESET_REQUEST_ANNOTATION: Final = f"{PREFIX}reset-request"
# On a node, from the agent: pending, refused, resetting, done or failed, and why.
RESET_STATUS_ANNOTATION: Final = f"{PREFIX}reset-status"
# On a node, from the agent at start: "node" when its GPUs can only reset together
# (NVSwitch systems), "device" when each resets alone.
RESET_SCOPE_ANNOTATION: Final = f"{PREFIX}reset-scope"
# On a node, from the controller (reboot_node, method agent) and the agent's answer.
REBOOT_REQUEST_ANNOTATION: Final = f"{PREFIX}reboot-request"
REBOOT_STATUS_ANNOTATION: Final = f"{PREFIX}reboot-status"
# On a node, from the agent: the partition layout it applied, and how it went
# (JSON: layout, state, message, devices, at).
PARTITION_STATE_ANNOTATION: Final = f"{PREFIX}partition-state"
# On a node, from the controller (mark_for_return, the ``isolate`` class): the
# parts to return to the vendor (JSON by device UUID: device, uuid, reason, rule,
# at, by), and a label that selects such nodes. No recover removes either: a
# person does, once the part is replaced.
RETURN_ANNOTATION: Final = f"{PREFIX}return-to-vendor-parts"
RETURN_LABEL: Final = f"{PREFIX}return-to-vendor"

# Labels.
#
# On the leading controller replica's pod: the webhook Service selects it, so
# Alertmanager's notifications reach the replica that acts.
LEADER_LABEL: Final = f"{PREFIX}leader"
# On a node: the node pool it belongs to (the simulator's nodes carry it; real
# clusters may name pools by Cluster API's deployment label instead).
POOL_LABEL: Final = f"{PREFIX}pool"
# On a node: the accelerator vendor it carries, as the exporter's ``vendor`` label.
VENDOR_LABEL: Final = f"{PREFIX}vendor"

# On a node: the partition layout it should have (a name in the layouts file,
# e.g. "h100-all-1g"), set by people or by the repartition action; the agent on the
# node applies it. And the layout the agent last applied, as a label so that
# selectors and the scheduler can use it.
PARTITION_LAYOUT_LABEL: Final = f"{PREFIX}partition-layout"
PARTITION_APPLIED_LABEL: Final = f"{PREFIX}partition-layout-applied"

# Taints. Rules may set any taint; this is the default of the taint and
# migrate_jobs actions, so that a failed device keeps new work away.
FAULTY_TAINT: Final = f"{PREFIX}faulty"
DEFAULT_TAINT: Final = f"{FAULTY_TAINT}=true:NoSchedule"

# ---------------------------------------------------------------- Cluster API

# The spare nodes scale_node_pool keeps in a pool beyond its demand (an integer),
# written on the pool's MachineDeployment so that people, and the simulator, can
# see the buffer and what it costs.
SPARE_NODES_ANNOTATION: Final = f"{PREFIX}spare-nodes"
# The ProvisioningRequest class the controller answers (autoscaler/provreq.py:
# a gang's nodes at once, or none), and the MachineDeployment annotation that
# records each scale-up it made for one, by the request's uid.
PROVISIONING_CLASS: Final = f"{PREFIX}atomic-scale-up"
PROVISIONING_ANNOTATION: Final = f"{PREFIX}provisioning"

# Gang owners' own labels on their pods, as their controllers set them.
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_RESTART_ATTEMPT_LABEL: Final = "jobset.sigs.k8s.io/restart-attempt"
KUBEFLOW_JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
VOLCANO_JOB_NAME_LABEL: Final = "volcano.sh/job-name"
# Gang owners' API groups, as their ownerReferences' apiVersion starts
# (accel_common/gangs.py recognises a gang by them).
JOBSET_GROUP: Final = "jobset.x-k8s.io"
KUBEFLOW_GROUP: Final = "kubeflow.org"
TRAINER_GROUP: Final = "trainer.kubeflow.org"
VOLCANO_BATCH_GROUP: Final = "batch.volcano.sh"
# Volcano's bus group: a Command (action RestartJob) restarts a Volcano Job.
VOLCANO_BUS_GROUP: Final = "bus.volcano.sh"

# The keys Cluster API's own autoscaler reads, so that a MachineDeployment sized for
# the cluster-autoscaler needs no second set of bounds for us.
CAPI_MIN_SIZE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
CAPI_MAX_SIZE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
# On a Machine: delete this one first when the MachineDeployment shrinks.
CAPI_DELETE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/delete-machine"
# On a Node: the Machine behind it.
CAPI_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/machine"
# On a Machine (and its Node): the MachineDeployment it belongs to; on both, the cluster.
CAPI_DEPLOYMENT_LABEL: Final = "cluster.x-k8s.io/deployment-name"
CAPI_CLUSTER_LABEL: Final = "cluster.x-k8s.io/cluster-name"

# On a Machine: remediate this one (Cluster API's MachineHealthCheck-compatible
# manual remediation); replace_machine sets it or deletes the Machine.
CAPI_REMEDIATE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/remediate-machine"
# On a MachineDeployment or MachineSet: what one of its nodes offers, for scale from
# zero (the cluster-autoscaler's Cluster API provider reads the same keys).
CAPI_CAPACITY_PREFIX: Final = "capacity.cluster-autoscaler.kubernetes.io/"
CAPI_CAPACITY_GPU_COUNT: Final = f"{CAPI_CAPACITY_PREFIX}gpu-count"
CAPI_CAPACITY_GPU_TYPE: Final = f"{CAPI_CAPACITY_PREFIX}gpu-type"
CAPI_CAPACITY_CPU: Final = f"{CAPI_CAPACITY_PREFIX}cpu"
CAPI_CAPACITY_MEMORY: Final = f"{CAPI_CAPACITY_PREFIX}memory"
CAPI_CAPACITY_LABELS: Final = f"{CAPI_CAPACITY_PREFIX}labels"
CAPI_CAPACITY_TAINTS: Final = f"{CAPI_CAPACITY_PREFIX}taints"
# On a MachineSet: the MachineDeployment it belongs to.
CAPI_MACHINESET_LABEL: Final = "cluster.x-k8s.io/set-name"
# On a Node (Cluster API's Machine controller sets it with CAPI_MACHINE_ANNOTATION):
# the namespace of the cluster, and so of the Machine.
CAPI_CLUSTER_NAMESPACE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-namespace"
# On a MachineDeployment or MachineSet, for scale from zero with DRA: the DRA driver
# whose devices gpu-count counts (the cluster-autoscaler's Cluster API provider).
CAPI_CAPACITY_DRA_DRIVER: Final = f"{CAPI_CAPACITY_PREFIX}dra-driver"
# On a Node (kubelet --node-labels): it carries accelerators, so a Ready node without
# allocatable devices is still coming up (the cluster-autoscaler's Cluster API
# provider's label for GPU nodes).
CAPI_ACCELERATOR_LABEL: Final = "cluster-api/accelerator"
# On a Machine: replace_machine's record of the replacement it asked for (JSON: id,
# mode, rule, node, at, by), so that a replayed decision does not ask twice.
REPLACE_REQUEST_ANNOTATION: Final = f"{PREFIX}replace-request"

# ---------------------------------------------------------------- medik8s

# Self Node Remediation's CR: one per node, named after it, reboots that node.
SNR_GROUP: Final = "self-node-remediation.medik8s.io"
# ---------------------------------------------------------------- Dynamic Resource Allocation

DRA_GROUP: Final = "resource.k8s.io"
# DRA driver names (ResourceSlice spec.driver, allocation results' driver) and the
# DeviceClass names the drivers' charts install, each -> the exporter's vendor label
# (accel_common/dra.py): NVIDIA/k8s-dra-driver-gpu (driver and class gpu.nvidia.com,
# class mig.nvidia.com for MIG devices of the same driver), ROCm/k8s-gpu-dra-driver
# (gpu.amd.com), intel/intel-resource-drivers-for-kubernetes (gpu.intel.com,
# gaudi.intel.com), GKE's TPU driver (tpu.google.com).
DRA_NVIDIA_GPU: Final = "gpu.nvidia.com"
DRA_NVIDIA_MIG_CLASS: Final = "mig.nvidia.com"
DRA_AMD_GPU: Final = "gpu.amd.com"
DRA_INTEL_GPU: Final = "gpu.intel.com"
DRA_INTEL_GAUDI: Final = "gaudi.intel.com"
DRA_GOOGLE_TPU: Final = "tpu.google.com"
DRA_VENDORS: Final[Mapping[str, str]] = {
    DRA_NVIDIA_GPU: "nvidia",
    DRA_NVIDIA_MIG_CLASS: "nvidia",
    DRA_AMD_GPU: "amd",
    DRA_INTEL_GPU: "oneapi",
    DRA_INTEL_GAUDI: "gaudi",
    DRA_GOOGLE_TPU: "tpu",
}
# Kubernetes' standard device attribute (k8s.io/dynamic-resource-allocation
# deviceattribute) for a device's PCI address, in ResourceSlices (exporter/dra.py).
DRA_PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"

# ---------------------------------------------------------------- Kubernetes

# Set by the kubelet on every node.
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
# Set by the Job controller on its pods: the current key and the legacy one that
# older clients still select on.
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL: Final = "job-name"
# The kubelet's own pod annotations (config source, hash, mirror): they describe one
# kubelet's copy of a pod and must not be copied onto a new pod.
KUBELET_CONFIG_PREFIX: Final = "kubernetes.io/config."
# A static pod's API mirror: it cannot be evicted or moved through the API.
MIRROR_POD_ANNOTATION: Final = f"{KUBELET_CONFIG_PREFIX}mirror"

# ---------------------------------------------------------------- vendor resources

NVIDIA_DOMAIN: Final = "nvidia.com/"
NVIDIA_GPU: Final = f"{NVIDIA_DOMAIN}gpu"
AMD_DOMAIN: Final = "amd.com/"
AMD_GPU: Final = f"{AMD_DOMAIN}gpu"
INTEL_I915: Final = "gpu.intel.com/i915"
INTEL_XE: Final = "gpu.intel.com/xe"
GAUDI_DOMAIN: Final = "habana.ai/"
GAUDI: Final = f"{GAUDI_DOMAIN}gaudi"
# Every Ascend resource starts with this: chips, vNPUs, and HAMi's memory shares.
ASCEND_PREFIX: Final = "huawei.com/Ascend"
ASCEND_910: Final = f"{ASCEND_PREFIX}910"
ASCEND_310P: Final = f"{ASCEND_PREFIX}310P"
# HAMi's per-chip memory resource (``huawei.com/Ascend910B-memory``): megabytes of
# one NPU, not devices.
ASCEND_MEMORY_SUFFIX: Final = "-memory"
TPU: Final = "google.com/tpu"

# Where every NVIDIA, AMD and Gaudi device resource lives (whole GPUs, MIG profiles,
# shared GPUs, AMD partitions, Gaudis), and Intel's two device resources (its others
# are shares).
DEVICE_RESOURCE_DOMAINS: Final = (NVIDIA_DOMAIN, AMD_DOMAIN, GAUDI_DOMAIN)
INTEL_DEVICE_RESOURCES: Final = frozenset({INTEL_I915, INTEL_XE})

# A whole device's resource -> the exporter's ``vendor`` label: what placement
# places. Both Intel kernel drivers are the exporter's ``oneapi`` backend.
WHOLE_DEVICE_RESOURCES: Final[Mapping[str, str]] = {
    NVIDIA_GPU: "nvidia",
    AMD_GPU: "amd",
    INTEL_I915: "oneapi",
    INTEL_XE: "oneapi",
    GAUDI: "gaudi",
    ASCEND_910: "ascend",
    ASCEND_310P: "ascend",
    TPU: "tpu",
}
# The exporter's ``vendor`` label -> the resource a whole device of it is requested
# as: what the simulator's pods ask for and its nodes offer. Intel's is i915, the
# driver of the Data Center GPU Max that the simulator models; Ascend's is the 910's.
VENDOR_RESOURCE: Final[Mapping[str, str]] = {
    "nvidia": NVIDIA_GPU,
    "amd": AMD_GPU,
    "oneapi": INTEL_I915,
    "gaudi": GAUDI,
    "ascend": ASCEND_910,
    "tpu": TPU,
}


def nvidia_mig_resource(profile: str) -> str:
    """The resource the NVIDIA device plugin's ``mixed`` MIG strategy advertises for
    a MIG profile as NVML names it: ``1g.10gb`` -> ``nvidia.com/mig-1g.10gb``,
    ``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``."""
    return f"{NVIDIA_DOMAIN}mig-{profile.replace('+', '.')}"


def is_device_resource(name: str) -> bool:
    """Whether an extended resource counts accelerator devices (whole GPUs, MIG
    instances, partitions, Ascend vNPUs, TPU chips), as opposed to shares of one
    (Intel's ``millicores``, HAMi's ``huawei.com/Ascend910B-memory``)."""
    if name.startswith(ASCEND_PREFIX):
        return not name.endswith(ASCEND_MEMORY_SUFFIX)
    return name.startswith(DEVICE_RESOURCE_DOMAINS) or name in INTEL_DEVICE_RESOURCES or name == TPU
