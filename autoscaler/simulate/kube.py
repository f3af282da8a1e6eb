"""An in-memory Kubernetes API: the ``Kube`` protocol over plain dicts.

The fleet simulator runs the production actions and the Cluster API node-pool
provider against this class, so it behaves like the API server where they can
tell the difference:

- objects are the API's JSON shape, with ``metadata.uid`` and a
  ``metadata.resourceVersion`` that changes on every write;
- patches are JSON merge patches (RFC 7386); a ``metadata.resourceVersion`` in a
  patch is a precondition (``Conflict`` when stale), as is ``uid`` on a delete;
- creating an existing name is ``Conflict(reason="AlreadyExists")``, a missing
  object ``NotFound``;
- an eviction that a PodDisruptionBudget refuses is ``TooManyRequests``;
- a custom object's ``status`` is written through its subresource too
  (``patch_custom_status``: a Workload evicted); a list in namespace "" lists all;
- callers get copies: changing a returned object changes nothing here. A list
  returns snapshots cached per object and ``resourceVersion`` (a listing of 2,500
  pods would otherwise cost more than the action that asked for it); a snapshot
  is shared by the lists until the object changes, which is safe for callers
  that read what they list and write through the API, as every caller in this
  repository does.

Custom objects are kept by plural: Cluster API's MachineDeployments and Machines,
and the gang owners (JobSets, PyTorchJobs, and whatever ``create_custom`` is
given, such as a Volcano ``Command``). A group no operator serves here
(``UNSERVED``: medik8s' Self Node Remediation) answers 404, as the API server does.

What the cluster's own controllers would do next (the Job controller starting a
replacement pod, the JobSet controller and the PyTorchJob operator restarting a
gang, the MachineSet controller creating Machines, the scheduler) is
not this module's business: every write that such a controller reacts to is
reported to a ``Reactor`` (the fleet), which does it in simulated time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Protocol, cast

from accel_common.names import CAPI_CLUSTER_LABEL as CLUSTER_LABEL
from accel_common.names import CAPI_DELETE_MACHINE_ANNOTATION as DELETE_ANNOTATION
from accel_common.names import CAPI_DEPLOYMENT_LABEL as DEPLOYMENT_LABEL
from accel_common.names import CAPI_MAX_SIZE_ANNOTATION as MAX_ANNOTATION
from accel_common.names import CAPI_MIN_SIZE_ANNOTATION as MIN_ANNOTATION
from accel_common.names import POOL_LABEL, SNR_GROUP
from autoscaler.kube.errors import Conflict, NotFound, TooManyRequests
from autoscaler.kube.jsonmerge import copy_obj, merge_patch
from autoscaler.kube.protocol import CAPI_GROUP, MACHINE_DEPLOYMENTS, Obj

# Cluster API's version, as the provider reads it (its keys are in accel_common.names).
CAPI_API_VERSION = "cluster.x-k8s.io/v1beta1"
# API groups the simulated cluster does not serve (no operator for them runs here).
UNSERVED = frozenset({SNR_GROUP})


class Reactor(Protocol):
    """What the rest of the simulated cluster does when the API changes."""

    def pod_removed(self, pod: Obj, reason: str) -> None:
        """A pod was deleted (``Deleted``) or evicted (``Evicted``)."""
        ...

    def pod_created(self, pod: Obj) -> None: ...

    def node_changed(self, node: Obj) -> None:
        """Taints, ``unschedulable`` or labels may have changed."""
        ...

    def job_changed(self, job: Obj) -> None: ...

    def replicas_changed(self, deployment: Obj) -> None: ...

    def custom_changed(self, plural: str, obj: Obj) -> None:
        """A custom object (a gang owner: JobSet, PyTorchJob; a Machine) was created,
        patched, or deleted (then with ``metadata.deletionTimestamp``)."""
        ...

    def eviction_allowed(self, pod: Obj) -> bool:
        """Whether the pod's PodDisruptionBudget (if any) allows evicting it now."""
        ...


def timestamp(t: float) -> str:
    """RFC 3339, as the API server writes times."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``,
    comma-separated (all must hold), parsed once for a whole list."""
    terms: list[tuple[str, str, str]] = []  # (op, key, value)
    for term in (t.strip() for t in (selector or "").split(",")):
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            terms.append(("!=", k.strip(), v.strip()))
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            terms.append(("=", k.strip(), v.strip()))
        elif term.startswith("!"):
            terms.append(("!", term[1:].strip(), ""))
        else:
            terms.append(("", term, ""))

    def match(labels: dict[str, str]) -> bool:
        for op, k, v in terms:
            if op == "=":
                ok = labels.get(k) == v
            elif op == "!=":
                ok = labels.get(k) != v
            elif op == "!":
                ok = k not in labels
            else:
                ok = k in labels
            if not ok:
                return False
        return True

    return match


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (see ``label_matcher``)."""
    return label_matcher(selector)(labels)


class SimKube:
    """The ``Kube`` protocol over dictionaries; see the module docstring."""

    def __init__(self, clock: Callable[[], float], reactor: Reactor | None = None) -> None:
        self.clock = clock
        self.reactor = reactor
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.pods_by_node: dict[str, dict[tuple[str, str], Obj]] = {}
        self.jobs: dict[tuple[str, str], Obj] = {}
        self.leases: dict[tuple[str, str], Obj] = {}
        self.configmaps: dict[tuple[str, str], Obj] = {}
        self.custom: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name)
        self.events: list[Obj] = []
        self.event_count = 0
        self.calls: dict[str, int] = {}
        self._version = 0
        self._uid = 0
        self._snapshots: dict[int, tuple[str, Obj]] = {}

    # -- bookkeeping ------------------------------------------------------------

    def _snapshot(self, obj: Obj) -> Obj:
        """A copy of ``obj`` for a list, reused while its resourceVersion holds."""
        rv = obj["metadata"]["resourceVersion"]
        cached = self._snapshots.get(id(obj))
        if (
            cached is not None
            and cached[0] == rv
            and cached[1]["metadata"]["name"] == (obj["metadata"]["name"])
        ):
            return cached[1]
        snap: Obj = copy_obj(obj)
        self._snapshots[id(obj)] = (rv, snap)
        return snap

    def _forget(self, obj: Obj | None) -> None:
        if obj is not None:
            self._snapshots.pop(id(obj), None)

    def _count(self, verb: str) -> None:
        self.calls[verb] = self.calls.get(verb, 0) + 1

    def _stamp(self, obj: Obj, *, new: bool = False) -> None:
        self._version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._version)
        if new:
            self._uid += 1
            meta.setdefault("uid", f"00000000-0000-4000-8000-{self._uid:012d}")
            meta.setdefault("creationTimestamp", timestamp(self.clock()))

    def _patch(self, current: Obj, patch: Obj, what: str) -> Obj:
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != current["metadata"]["resourceVersion"]:
            raise Conflict(
                f"Operation cannot be fulfilled on {what}: the object has been modified; "
                "please apply your changes to the latest version and try again",
                status=409,
            )
        merged: Obj = merge_patch(current, patch)
        # Identity is not patchable.
        merged["metadata"]["name"] = current["metadata"]["name"]
        merged["metadata"]["uid"] = current["metadata"]["uid"]
        current.clear()
        current.update(merged)
        self._stamp(current)
        return current

    # -- objects the simulation itself puts in (not part of the protocol) -------

    def touch(self, obj: Obj) -> None:
        """A controller (the simulation) changed ``obj`` in place: a new version."""
        self._stamp(obj)

    def add_node(self, node: Obj) -> Obj:
        self._stamp(node, new=True)
        self.nodes[node["metadata"]["name"]] = node
        self.pods_by_node.setdefault(node["metadata"]["name"], {})
        return node

    def remove_node(self, name: str) -> None:
        self._forget(self.nodes.pop(name, None))
        self.pods_by_node.pop(name, None)

    def add_job(self, job: Obj) -> Obj:
        self._stamp(job, new=True)
        meta = job["metadata"]
        self.jobs[(meta["namespace"], meta["name"])] = job
        return job

    def remove_job(self, namespace: str, name: str) -> None:
        self._forget(self.jobs.pop((namespace, name), None))

    def add_pod(self, pod: Obj) -> Obj:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in self.pods:
            raise Conflict(
                f'pods "{meta["name"]}" already exists', status=409, reason="AlreadyExists"
            )
        self._stamp(pod, new=True)
        self.pods[key] = pod
        node = pod.get("spec", {}).get("nodeName")
        if node:
            self.pods_by_node.setdefault(node, {})[key] = pod
        return pod

    def bind_pod(self, namespace: str, name: str, node: str, phase: str = "Running") -> Obj:
        pod = self.pods[(namespace, name)]
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = phase
        pod["status"]["startTime"] = timestamp(self.clock())
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        self.pods_by_node.setdefault(node, {})[(namespace, name)] = pod
        self._stamp(pod)
        return pod

    def remove_pod(self, namespace: str, name: str) -> Obj | None:
        """The pod leaves the API (finished, or its node is gone); no reaction."""
        pod = self.pods.pop((namespace, name), None)
        self._forget(pod)
        if pod is not None:
            node = pod["spec"].get("nodeName")
            if node and node in self.pods_by_node:
                self.pods_by_node[node].pop((namespace, name), None)
        return pod

    def add_custom(self, plural: str, obj: Obj) -> Obj:
        self._stamp(obj, new=True)
        meta = obj["metadata"]
        self.custom[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def remove_custom(self, plural: str, namespace: str, name: str) -> None:
        self._forget(self.custom.pop((plural, namespace, name), None))

    # -- nodes -------------------------------------------------------------------

    async def get_node(self, name: str) -> Obj:
        self._count("get_node")
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found', status=404, reason="NotFound")
        result: Obj = copy_obj(node)
        return result

    async def list_nodes(self, label_selector: str | None = None) -> list[Obj]:
        self._count("list_nodes")
        match = label_matcher(label_selector)
        return [
            self._snapshot(n) for n in self.nodes.values() if match(n["metadata"].get("labels", {}))
        ]

    async def patch_node(self, name: str, patch: Obj) -> Obj:
        self._count("patch_node")
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found', status=404, reason="NotFound")
        self._patch(node, patch, f'nodes "{name}"')
        if self.reactor is not None:
            self.reactor.node_changed(node)
        result: Obj = copy_obj(node)
        return result

    # -- pods --------------------------------------------------------------------

    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        self._count("list_pods")
        pods = self.pods_by_node.get(node, {}).values() if node is not None else self.pods.values()
        match = label_matcher(label_selector)
        return [
            self._snapshot(p)
            for p in pods
            if (namespace is None or p["metadata"]["namespace"] == namespace)
            and match(p["metadata"].get("labels", {}))
        ]

    def _pod(self, namespace: str, name: str) -> Obj:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise NotFound(f'pods "{name}" not found', status=404, reason="NotFound")
        return pod

    async def get_pod(self, namespace: str, name: str) -> Obj:
        self._count("get_pod")
        result: Obj = copy_obj(self._pod(namespace, name))
        return result

    async def create_pod(self, namespace: str, body: Obj) -> Obj:
        self._count("create_pod")
        pod: Obj = copy_obj(body)
        pod.setdefault("metadata", {})["namespace"] = namespace
        pod.setdefault("spec", {})
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        pod["metadata"].pop("resourceVersion", None)
        pod["metadata"].pop("uid", None)
        self.add_pod(pod)
        if self.reactor is not None:
            self.reactor.pod_created(pod)
        result: Obj = copy_obj(pod)
        return result

    async def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        self._count("patch_pod")
        pod = self._pod(namespace, name)
        self._patch(pod, patch, f'pods "{name}"')
        result: Obj = copy_obj(pod)
        return result

    def _check_uid(self, pod: Obj, uid: str | None) -> None:
        if uid is not None and pod["metadata"]["uid"] != uid:
            raise Conflict(
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {pod['metadata']['uid']}",
                status=409,
            )

    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        self._count("delete_pod")
        pod = self._pod(namespace, name)
        self._check_uid(pod, uid)
        self.remove_pod(namespace, name)
        if self.reactor is not None:
            self.reactor.pod_removed(pod, "Deleted")

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        self._count("evict_pod")
        pod = self._pod(namespace, name)
        self._check_uid(pod, uid)
        if self.reactor is not None and not self.reactor.eviction_allowed(pod):
            raise TooManyRequests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                status=429,
                reason="TooManyRequests",
            )
        self.remove_pod(namespace, name)
        if self.reactor is not None:
            self.reactor.pod_removed(pod, "Evicted")

    # -- jobs --------------------------------------------------------------------

    def _job(self, namespace: str, name: str) -> Obj:
        job = self.jobs.get((namespace, name))
        if job is None:
            raise NotFound(f'jobs.batch "{name}" not found', status=404, reason="NotFound")
        return job

    async def get_job(self, namespace: str, name: str) -> Obj:
        self._count("get_job")
        result: Obj = copy_obj(self._job(namespace, name))
        return result

    async def patch_job(self, namespace: str, name: str, patch: Obj) -> Obj:
        self._count("patch_job")
        job = self._job(namespace, name)
        self._patch(job, patch, f'jobs.batch "{name}"')
        if self.reactor is not None:
            self.reactor.job_changed(job)
        result: Obj = copy_obj(job)
        return result

    # -- events ------------------------------------------------------------------

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        self._count("create_event")
        event: Obj = copy_obj(body)
        event.setdefault("metadata", {})["namespace"] = namespace
        self._stamp(event, new=True)
        self.event_count += 1
        # The last thousand, like a cluster's event TTL: enough to look at.
        self.events.append(event)
        if len(self.events) > 1000:
            del self.events[:500]
        result: Obj = copy_obj(event)
        return result

    # -- leases ------------------------------------------------------------------

    async def get_lease(self, namespace: str, name: str) -> Obj:
        self._count("get_lease")
        lease = self.leases.get((namespace, name))
        if lease is None:
            raise NotFound(f'leases "{name}" not found', status=404, reason="NotFound")
        result: Obj = copy_obj(lease)
        return result

    async def create_lease(self, namespace: str, body: Obj) -> Obj:
        self._count("create_lease")
        name = body["metadata"]["name"]
        if (namespace, name) in self.leases:
            raise Conflict(f'leases "{name}" already exists', status=409, reason="AlreadyExists")
        lease: Obj = copy_obj(body)
        lease["metadata"]["namespace"] = namespace
        self._stamp(lease, new=True)
        self.leases[(namespace, name)] = lease
        result: Obj = copy_obj(lease)
        return result

    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        self._count("replace_lease")
        current = self.leases.get((namespace, name))
        if current is None:
            raise NotFound(f'leases "{name}" not found', status=404, reason="NotFound")
        if (
            body.get("metadata", {}).get("resourceVersion")
            != current["metadata"]["resourceVersion"]
        ):
            raise Conflict(f'Operation cannot be fulfilled on leases "{name}"', status=409)
        lease: Obj = copy_obj(body)
        lease["metadata"]["uid"] = current["metadata"]["uid"]
        lease["metadata"]["namespace"] = namespace
        self._stamp(lease)
        self.leases[(namespace, name)] = lease
        result: Obj = copy_obj(lease)
        return result

    # -- configmaps (the controller's state record) -------------------------------

    async def get_configmap(self, namespace: str, name: str) -> Obj:
        self._count("get_configmap")
        cm = self.configmaps.get((namespace, name))
        if cm is None:
            raise NotFound(f'configmaps "{name}" not found', status=404, reason="NotFound")
        result: Obj = copy_obj(cm)
        return result

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        self._count("create_configmap")
        name = body["metadata"]["name"]
        if (namespace, name) in self.configmaps:
            raise Conflict(
                f'configmaps "{name}" already exists', status=409, reason="AlreadyExists"
            )
        cm: Obj = copy_obj(body)
        cm["metadata"]["namespace"] = namespace
        self._stamp(cm, new=True)
        self.configmaps[(namespace, name)] = cm
        result: Obj = copy_obj(cm)
        return result

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        self._count("replace_configmap")
        current = self.configmaps.get((namespace, name))
        if current is None:
            raise NotFound(f'configmaps "{name}" not found', status=404, reason="NotFound")
        if (
            body.get("metadata", {}).get("resourceVersion")
            != current["metadata"]["resourceVersion"]
        ):
            raise Conflict(f'Operation cannot be fulfilled on configmaps "{name}"', status=409)
        cm: Obj = copy_obj(body)
        cm["metadata"]["uid"] = current["metadata"]["uid"]
        cm["metadata"]["namespace"] = namespace
        self._stamp(cm)
        self.configmaps[(namespace, name)] = cm
        result: Obj = copy_obj(cm)
        return result

    # -- custom resources (Cluster API) -----------------------------------------

    def _served(self, group: str, plural: str) -> None:
        """An API group this cluster does not serve answers 404 to every request, as
        the API server does: no medik8s operator runs in the simulator, so
        ``reboot_node``'s ``method: auto`` finds no SelfNodeRemediation API and asks
        the (emulated) node agent."""
        if group in UNSERVED:
            raise NotFound(
                f"the server could not find the requested resource ({plural}.{group})",
                status=404,
                reason="NotFound",
            )

    def _custom(self, plural: str, namespace: str, name: str, group: str = CAPI_GROUP) -> Obj:
        obj = self.custom.get((plural, namespace, name))
        if obj is None:
            raise NotFound(f'{plural}.{group} "{name}" not found', status=404, reason="NotFound")
        return obj

    async def get_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        self._count("get_custom")
        self._served(group, plural)
        result: Obj = copy_obj(self._custom(plural, namespace, name, group))
        return result

    async def list_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        label_selector: str | None = None,
    ) -> list[Obj]:
        self._count("list_custom")
        self._served(group, plural)
        match = label_matcher(label_selector)
        return [
            self._snapshot(o)
            for (p, ns, _), o in self.custom.items()
            # "" lists every namespace (and is a cluster-scoped kind's own).
            if p == plural and namespace in ("", ns) and match(o["metadata"].get("labels", {}))
        ]

    async def patch_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        self._count("patch_custom")
        return self._patch_custom(group, namespace, plural, name, patch)

    def _patch_custom(self, group: str, namespace: str, plural: str, name: str, patch: Obj) -> Obj:
        """``patch_custom``'s work, uncounted: ``patch_custom_status`` shares it."""
        self._served(group, plural)
        obj = self._custom(plural, namespace, name, group)
        before = obj.get("spec", {}).get("replicas")
        self._patch(obj, patch, f'{plural}.{group} "{name}"')
        if self.reactor is not None and plural != MACHINE_DEPLOYMENTS:
            self.reactor.custom_changed(plural, obj)
        elif self.reactor is not None and obj.get("spec", {}).get("replicas") != before:
            self.reactor.replicas_changed(obj)
        return cast(Obj, copy_obj(obj))

    async def patch_custom_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        """The status subresource: only ``patch``'s status and resourceVersion apply."""
        self._count("patch_custom_status")
        meta = {k: v for k, v in (patch.get("metadata") or {}).items() if k == "resourceVersion"}
        body = {"metadata": meta, "status": patch.get("status")}
        return self._patch_custom(group, namespace, plural, name, body)

    async def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> Obj:
        """Stores the object (a Volcano ``Command``: no Volcano controller runs in the
        simulator, whose gangs are JobSets and PyTorchJobs)."""
        self._count("create_custom")
        self._served(group, plural)
        name = body.get("metadata", {}).get("name", "")
        if (plural, namespace, name) in self.custom:
            raise Conflict(
                f'{plural}.{group} "{name}" already exists', status=409, reason="AlreadyExists"
            )
        obj: Obj = copy_obj(body)
        obj.setdefault("metadata", {})["namespace"] = namespace
        obj["metadata"].pop("resourceVersion", None)
        obj["metadata"].pop("uid", None)
        self.add_custom(plural, obj)
        if self.reactor is not None:
            self.reactor.custom_changed(plural, obj)
        result: Obj = copy_obj(obj)
        return result

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
        """Removes the object (replace_machine's ``mode: delete`` of a Machine) and
        reports it to the reactor with ``metadata.deletionTimestamp`` set, so that
        the MachineSet emulation can replace it."""
        self._count("delete_custom")
        self._served(group, plural)
        obj = self._custom(plural, namespace, name, group)
        self._check_uid(obj, uid)
        gone: Obj = copy_obj(obj)
        self.remove_custom(plural, namespace, name)
        gone["metadata"]["deletionTimestamp"] = timestamp(self.clock())
        if self.reactor is not None:
            self.reactor.custom_changed(plural, gone)

    def _scale_of(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        replicas = int(obj.get("spec", {}).get("replicas", 0))
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
            },
            "spec": {"replicas": replicas},
            "status": {
                "replicas": int(obj.get("status", {}).get("replicas", replicas)),
                "selector": f"{DEPLOYMENT_LABEL}={meta['name']}",
            },
        }

    async def get_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        self._count("get_scale")
        return self._scale_of(self._custom(plural, namespace, name))

    async def patch_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str, replicas: int
    ) -> Obj:
        self._count("patch_scale")
        obj = self._custom(plural, namespace, name)
        before = obj.get("spec", {}).get("replicas")
        obj.setdefault("spec", {})["replicas"] = int(replicas)
        self._stamp(obj)
        if self.reactor is not None and before != int(replicas):
            self.reactor.replicas_changed(obj)
        return self._scale_of(obj)

    # -- Dynamic Resource Allocation: the simulated fleet has no DRA driver, so no
    # claims, slices or classes (its pods ask for devices as extended resources).

    async def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        return []

    async def get_resource_claim(self, namespace: str, name: str) -> Obj:
        raise NotFound(
            f'resourceclaims.resource.k8s.io "{name}" not found', status=404, reason="NotFound"
        )

    async def list_resource_claim_templates(self, namespace: str | None = None) -> list[Obj]:
        return []

    async def list_resource_slices(self, node: str | None = None) -> list[Obj]:
        return []

    async def list_device_classes(self) -> list[Obj]:
        return []


__all__ = [
    "CAPI_API_VERSION",
    "CLUSTER_LABEL",
    "DELETE_ANNOTATION",
    "DEPLOYMENT_LABEL",
    "MAX_ANNOTATION",
    "MIN_ANNOTATION",
    "POOL_LABEL",
    "UNSERVED",
    "Reactor",
    "SimKube",
    "copy_obj",
    "label_matcher",
    "merge_patch",
    "selector_matches",
    "timestamp",
]
