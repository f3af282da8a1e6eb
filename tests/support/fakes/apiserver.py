"""A fake Kubernetes API server: in-process, stateful, speaking the real JSON API.

Usage::

    async with FakeApiServer() as api:       # or await api.start() / await api.stop()
        api.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        kube = ClientKube.from_config(str(kubeconfig), backoff_min=0.01, backoff_max=0.05)
        api.faults.fail(2, status=500, method="PATCH")  # the next two PATCHes answer 500
        api.faults.fail(1, status=429)                  # then any request: throttled
        api.faults.drop(1, path_regex="/eviction$")     # connection closed, no answer
        api.faults.drop(1, method="POST", after=True)   # done, but the answer is lost
        api.faults.delay(2.0, 1)                        # the next request waits 2 s
        ...
        api.get("nodes", None, "n1")          # the stored object (a copy), or None
        api.objects("pods")                   # every stored pod
        api.remove("pods", "default", "p1")   # as the kubelet would (watchers see it)
        api.evicted                           # [(namespace, name)] evicted, in order
        api.requests                          # RecordedRequest(method, path, query, body,
        api.requests_for("POST", "/eviction$")  #   status (0: dropped), time)

    with running_apiserver(validate=True) as api:  # its own thread and loop: for sync
        ...                                        # tests and controller subprocesses

``add`` is also how a test moves the world on: add a pod again with
``status.phase: Running`` and the PDB accounting counts it healthy.
``FakeApiServer(validate=True)`` checks every object written against the strict
Kubernetes 1.33 schemas (1.34 for ``resource.k8s.io/v1``; CRDs excepted) and
answers 422 on an invalid one; ``add`` raises ``ValueError`` then. Sync callers of
the real client must not call it from the loop that serves: use
``running_apiserver`` or ``asyncio.to_thread``.

Why a fake and why this shape: no API server can be installed here, and a mock of
the client library would test nothing the controller depends on. This one is an
aiohttp server that answers on real HTTP with the paths, query parameters, patch
content types, ``Status`` error objects and status codes of a real API server, so
the official ``kubernetes`` client runs against it unchanged: the serialisation,
the content-type negotiation, the error mapping and the retries under test are the
production ones.

What it serves (everything else answers a 404 ``Status``):

- ``/api/v1``: nodes, pods (namespaced and across namespaces), events, configmaps, the
  pods' ``eviction`` subresource with PodDisruptionBudget accounting (a refusal is
  a 429 ``Status`` naming the budget, cause ``DisruptionBudget``), and ``status``
  subresources (GET, PATCH);
- ``policy/v1`` PodDisruptionBudgets (their ``status`` computed from the pods, as
  the disruption controller would), ``batch/v1`` Jobs, ``coordination.k8s.io/v1``
  Leases;
- Cluster API ``machinedeployments`` (with the ``scale`` subresource) and
  ``machines`` under ``cluster.x-k8s.io/v1beta1``;
- Dynamic Resource Allocation, ``resource.k8s.io/v1``: ResourceClaims (namespaced,
  with a real ``status`` subresource: a create or a write to the claim itself keeps
  no status of its own, ``spec`` is immutable and an allocation may be cleared but
  never changed), ResourceClaimTemplates (namespaced), ResourceSlices (cluster-scoped;
  field selectors ``spec.nodeName``, ``spec.driver``, ``spec.pool.name``) and
  DeviceClasses (cluster-scoped), validated against the 1.34 schemas (the first with
  ``resource.k8s.io/v1``) plus the request and node-selection rules the schema cannot
  say. Nothing allocates: a test writes a claim's ``status.allocation`` as the
  scheduler would (``add``, or PATCH ``.../resourceclaims/<name>/status``);
- the gang owners as custom kinds: ``jobset.x-k8s.io/v1alpha2`` JobSets,
  ``kubeflow.org`` PyTorchJobs (v1) and MPIJobs (v2beta1),
  ``trainer.kubeflow.org/v1alpha1`` TrainJobs, Volcano's ``batch.volcano.sh/v1alpha1``
  Jobs (``api.objects("jobs.batch.volcano.sh")``) and ``bus.volcano.sh/v1alpha1``
  Commands. No operator runs here: ``tests/support/fakes/gangops.py`` plays them;
- Kueue, ``kueue.x-k8s.io/v1beta1``: Workloads and LocalQueues (namespaced),
  ClusterQueues (cluster-scoped), each with a real ``status`` subresource, and
  ResourceFlavors (cluster-scoped, no status: ``.../status`` answers 404); and
  ``autoscaling.x-k8s.io/v1`` ProvisioningRequests (namespaced, ``status``
  subresource), as their CRDs declare them. Kueue itself is
  ``tests/support/fakes/kueueops.py``.

Every kind supports get, list (label and field selectors), watch (JSON lines,
``resourceVersion`` and ``timeoutSeconds`` honoured), create, replace (PUT),
patch (strategic merge, JSON merge, JSON patch) and delete, with ``dryRun=All``.
A write that names a stale ``metadata.resourceVersion`` answers 409 Conflict.

Simplifications, on purpose: a deleted pod disappears at once (no kubelet to finish
a graceful termination; the grace period is recorded in the request log), a created
pod starts ``Pending`` and stays so until the test changes it, strategic merge knows
the merge keys of the fields this project patches, and list items keep no
``kind``/``apiVersion`` (as a real server sends them).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import kubernetes_validate
from aiohttp import web

JSON = dict[str, Any]

log = logging.getLogger(__name__)
_RAW_BODY = web.RequestKey("raw_body", bytes)

# The Kubernetes version whose strict schemas the served objects must satisfy.
SCHEMA_VERSION = "1.33"
# resource.k8s.io/v1 (ResourceClaim, ResourceSlice...) first appears in 1.34's schemas.
DRA_SCHEMA_VERSION = "1.34"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it. ``status`` is 0 for a dropped connection."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    time: float


@dataclass(frozen=True)
class _Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    custom: bool = False  # a CRD: no strategic merge, no schema to validate against
    # The name tests use for it (``objects``, ``get``...) when its plural is taken:
    # Volcano's ``jobs`` beside batch/v1's.
    alias: str = ""
    # The Kubernetes version whose schema validates it, when SCHEMA_VERSION has none
    # (resource.k8s.io/v1 went GA in 1.34).
    schema: str = ""
    # A status subresource as the real server keeps it: writes to the object itself
    # leave its status alone, and a create starts with none.
    status_subresource: bool = False
    # A CRD that declares no status subresource: ``.../status`` is not served
    # (Kueue's ResourceFlavor).
    no_status: bool = False

    @property
    def store(self) -> str:
        return self.alias or self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def qualified(self) -> str:
        """The resource as error messages name it: ``jobs.batch``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


_KINDS = [
    _Kind("", "v1", "nodes", "Node", namespaced=False),
    _Kind("", "v1", "pods", "Pod", namespaced=True),
    _Kind("", "v1", "events", "Event", namespaced=True),
    _Kind("", "v1", "configmaps", "ConfigMap", namespaced=True),
    _Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True),
    _Kind("batch", "v1", "jobs", "Job", namespaced=True),
    _Kind("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    _Kind(
        "cluster.x-k8s.io",
        "v1beta1",
        "machinedeployments",
        "MachineDeployment",
        namespaced=True,
        custom=True,
    ),
    _Kind("cluster.x-k8s.io", "v1beta1", "machines", "Machine", namespaced=True, custom=True),
    _Kind("cluster.x-k8s.io", "v1beta1", "machinesets", "MachineSet", namespaced=True, custom=True),
    _Kind(
        "cluster.x-k8s.io",
        "v1beta1",
        "machinehealthchecks",
        "MachineHealthCheck",
        namespaced=True,
        custom=True,
    ),
    # Gang owners (autoscaler/actions/ops/gangs.py); tests/support/fakes/gangops.py
    # plays their operators.
    _Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", namespaced=True, custom=True),
    _Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", namespaced=True, custom=True),
    _Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", namespaced=True, custom=True),
    _Kind(
        "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", namespaced=True, custom=True
    ),
    _Kind(
        "batch.volcano.sh",
        "v1alpha1",
        "jobs",
        "Job",
        namespaced=True,
        custom=True,
        alias="jobs.batch.volcano.sh",
    ),
    _Kind("bus.volcano.sh", "v1alpha1", "commands", "Command", namespaced=True, custom=True),
    # Kueue (kueue.x-k8s.io/v1beta1) and the ProvisioningRequest (autoscaling.x-k8s.io/v1),
    # scoped and with subresources as their CRDs declare (kubebuilder markers of
    # apis/kueue/v1beta1/*_types.go and cluster-autoscaler's provisioningrequest types).
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "workloads",
        "Workload",
        namespaced=True,
        custom=True,
        status_subresource=True,
    ),
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "localqueues",
        "LocalQueue",
        namespaced=True,
        custom=True,
        status_subresource=True,
    ),
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "clusterqueues",
        "ClusterQueue",
        namespaced=False,
        custom=True,
        status_subresource=True,
    ),
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "resourceflavors",
        "ResourceFlavor",
        namespaced=False,
        custom=True,
        no_status=True,
    ),
    # AdmissionChecks name the controller that answers them (a ProvisioningRequest's:
    # kueue.x-k8s.io/provisioning-request) and its ProvisioningRequestConfig.
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "admissionchecks",
        "AdmissionCheck",
        namespaced=False,
        custom=True,
        status_subresource=True,
    ),
    _Kind(
        "kueue.x-k8s.io",
        "v1beta1",
        "provisioningrequestconfigs",
        "ProvisioningRequestConfig",
        namespaced=False,
        custom=True,
        no_status=True,
    ),
    _Kind(
        "autoscaling.x-k8s.io",
        "v1",
        "provisioningrequests",
        "ProvisioningRequest",
        namespaced=True,
        custom=True,
        status_subresource=True,
    ),
    # medik8s Self Node Remediation (autoscaler/actions/reboot_node.py).
    _Kind(
        "self-node-remediation.medik8s.io",
        "v1alpha1",
        "selfnoderemediations",
        "SelfNodeRemediation",
        namespaced=True,
        custom=True,
    ),
    # Dynamic Resource Allocation (resource.k8s.io/v1).
    _Kind(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        namespaced=True,
        schema=DRA_SCHEMA_VERSION,
        status_subresource=True,
    ),
    _Kind(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        namespaced=True,
        schema=DRA_SCHEMA_VERSION,
    ),
    _Kind(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        namespaced=False,
        schema=DRA_SCHEMA_VERSION,
    ),
    _Kind(
        "resource.k8s.io",
        "v1",
        "deviceclasses",
        "DeviceClass",
        namespaced=False,
        schema=DRA_SCHEMA_VERSION,
    ),
]
_BY_PLURAL = {k.store: k for k in _KINDS}
_BY_PATH = {(k.group, k.version, k.plural): k for k in _KINDS}
# Kueue serves its kinds at v1beta2 too (its storage version since 0.15): one store,
# either version's path (FakeApiServer.kueue_versions says which are served).
_BY_PATH.update({(k.group, "v1beta2", k.plural): k for k in _KINDS if k.group == "kueue.x-k8s.io"})
_BY_TYPE = {(k.api_version, k.kind): k for k in _KINDS}

# Field selectors the real server accepts, beyond metadata.name/namespace.
_FIELDS = {
    "pods": {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "nodes": {"spec.unschedulable"},
    "resourceslices": {"spec.nodeName", "spec.driver", "spec.pool.name"},
    "events": {
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
    },
}

# Strategic merge: lists merged by a key (the patchMergeKey of the Go types) rather
# than replaced. Lists not named here are replaced, as for taints and tolerations.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
}
_MERGE_SETS = {"finalizers"}  # primitive lists merged as sets


class ApiError(Exception):
    """An answer that is a ``Status`` object rather than the object asked for."""

    _REASONS: ClassVar[dict[int, str]] = {
        400: "BadRequest",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }

    def __init__(
        self, code: int, message: str, reason: str = "", details: JSON | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self._REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _not_found(kind: _Kind, name: str) -> ApiError:
    details: JSON = {"name": name, "kind": kind.plural}
    if kind.group:
        details["group"] = kind.group
    return ApiError(404, f'{kind.qualified()} "{name}" not found', details=details)


def _conflict(kind: _Kind, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {kind.qualified()} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        details={
            "name": name,
            "kind": kind.plural,
            **({"group": kind.group} if kind.group else {}),
        },
    )


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- fault injection ---------------------------------------------------------------


@dataclass
class _Fault:
    kind: Literal["fail", "drop", "delay"]
    remaining: int
    status: int = 500
    seconds: float = 0.0
    method: str | None = None
    path_regex: re.Pattern[str] | None = None
    after: bool = False

    def matches(self, method: str, path: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        return self.path_regex is None or self.path_regex.search(path) is not None


class Faults:
    """Scripted misbehaviour for the next matching requests.

    Each call adds a rule that applies to the next ``n`` requests matching
    ``method`` and ``path_regex`` (a regular expression searched in the path; None
    matches all). Delays apply first and the request then goes on; a fail or a drop
    ends it. Rules are consumed in the order they were added.
    """

    def __init__(self) -> None:
        self._rules: list[_Fault] = []
        self._lock = threading.Lock()

    def fail(
        self, n: int, status: int = 500, method: str | None = None, path_regex: str | None = None
    ) -> None:
        """Answer the next ``n`` matching requests with ``status`` and a ``Status`` body."""
        self._add(_Fault("fail", n, status=status, method=method, path_regex=_rx(path_regex)))

    def drop(
        self,
        n: int,
        method: str | None = None,
        path_regex: str | None = None,
        *,
        after: bool = False,
    ) -> None:
        """Close the connection of the next ``n`` matching requests without an answer.
        ``after=True`` carries the request out first and loses only the answer, as
        when a connection breaks after the server committed a write."""
        self._add(_Fault("drop", n, method=method, path_regex=_rx(path_regex), after=after))

    def delay(
        self, seconds: float, n: int, method: str | None = None, path_regex: str | None = None
    ) -> None:
        """Hold the next ``n`` matching requests for ``seconds`` before answering."""
        self._add(_Fault("delay", n, seconds=seconds, method=method, path_regex=_rx(path_regex)))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """How many faulty answers are still to come."""
        with self._lock:
            return sum(max(r.remaining, 0) for r in self._rules)

    def _add(self, rule: _Fault) -> None:
        with self._lock:
            self._rules.append(rule)

    def take(self, method: str, path: str) -> list[_Fault]:
        """The rules this request triggers (each consumed once): delays, then at most
        one fail or drop."""
        taken: list[_Fault] = []
        with self._lock:
            for rule in self._rules:
                if not rule.matches(method, path):
                    continue
                rule.remaining -= 1
                taken.append(rule)
                if rule.kind != "delay":
                    break
            self._rules = [r for r in self._rules if r.remaining > 0]
        return taken


def _rx(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern is not None else None


# --- selectors ------------------------------------------------------------------------

_EXISTS = re.compile(r"^(!?)([A-Za-z0-9_./-]+)$")
_EQUALS = re.compile(r"^([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)$")
_SET = re.compile(r"^([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)$")


def _split_requirements(selector: str) -> list[str]:
    """Split on the commas that are not inside ``in (a,b)`` parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """The label selector grammar of ``kubectl -l`` (=, ==, !=, in, notin, exists, !)."""
    for req in _split_requirements(selector):
        if m := _SET.match(req):
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            present = m.group(1) in labels and labels[m.group(1)] in values
            if present != (m.group(2) == "in"):
                return False
        elif m := _EQUALS.match(req):
            equal = labels.get(m.group(1)) == m.group(3)
            if m.group(2) == "!=":
                if m.group(1) in labels and equal:
                    return False
            elif not equal:
                return False
        elif m := _EXISTS.match(req):
            if (m.group(2) in labels) == (m.group(1) == "!"):
                return False
        else:
            raise ApiError(400, f"unable to parse requirement: {req!r} in labelSelector")
    return True


def _dotted(obj: JSON, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def field_selector_matches(kind: _Kind, selector: str, obj: JSON) -> bool:
    for req in _split_requirements(selector):
        m = re.match(r"^([A-Za-z.]+)\s*(==|=|!=)\s*(.*)$", req)
        if m is None:
            raise ApiError(400, f"invalid field selector requirement: {req!r}")
        path, op, want = m.groups()
        if path not in {"metadata.name", "metadata.namespace"} | _FIELDS.get(kind.plural, set()):
            raise ApiError(400, f'field label not supported: "{path}"')
        equal = _dotted(obj, path) == want
        if equal == (op == "!="):
            return False
    return True


def pod_selector_matches(selector: JSON, labels: dict[str, str]) -> bool:
    """A ``LabelSelector`` object (matchLabels, matchExpressions); empty matches all."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# --- patches ------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """The parts of a strategic merge patch this project's code and the client send:
    merge-keyed lists, ``$patch: delete|replace``, set-like finalizers; the ordering
    directives are accepted and ignored."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, list) and key in _MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, _MERGE_KEYS[key])
        elif isinstance(value, list) and key in _MERGE_SETS:
            merged = list(result.get(key) or [])
            result[key] = merged + [v for v in value if v not in merged]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            return copy.deepcopy(patch)  # not a keyed list after all: replace
        at = next(
            (i for i, c in enumerate(merged) if isinstance(c, dict) and c.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                merged.pop(at)
        elif at is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[at] = strategic_merge_patch(merged[at], item)
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, list):
            doc = doc[int(part)]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            raise ApiError(422, f"the JSON pointer path does not exist: /{'/'.join(parts)}")
    return doc


def json_patch(target: JSON, ops: list[JSON]) -> JSON:
    """RFC 6902 JSON patch."""
    doc: Any = copy.deepcopy(target)
    for op in ops:
        name, parts = op.get("op"), _pointer(str(op.get("path", "")))
        try:
            if name == "test":
                if _container(doc, parts) != op.get("value"):
                    raise ApiError(422, f"testing value {op.get('path')} failed")
                continue
            if name in ("move", "copy"):
                src = _pointer(str(op["from"]))
                value = copy.deepcopy(_container(doc, src))
                if name == "move":
                    doc = _remove(doc, src)
            elif name in ("add", "replace"):
                value = copy.deepcopy(op.get("value"))
            elif name == "remove":
                doc = _remove(doc, parts)
                continue
            else:
                raise ApiError(422, f"unknown JSON patch operation {name!r}")
            if name == "replace":
                _container(doc, parts)  # must exist
                doc = _remove(doc, parts)
            doc = _add(doc, parts, value)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise ApiError(422, f"JSON patch {op} does not apply: {e}") from e
    if not isinstance(doc, dict):
        raise ApiError(422, "a JSON patch must leave an object")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _container(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _container(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        parent.pop(int(last))
    elif last in parent:
        del parent[last]
    else:
        raise ApiError(422, f"the JSON pointer path does not exist: /{'/'.join(parts)}")
    return doc


# --- PodDisruptionBudget accounting ----------------------------------------------


def _keep_status(stored: JSON, updated: JSON) -> None:
    """A write to the object itself leaves the stored status as it is."""
    if "status" in stored:
        updated["status"] = copy.deepcopy(stored["status"])
    else:
        updated.pop("status", None)


def _check_dra(kind: _Kind, obj: JSON) -> None:
    """The resource.k8s.io/v1 rules the JSON schema cannot say (the API server's
    validation.go): a request asks ``exactly`` or ``firstAvailable``, not both or
    neither, ``count`` only under ``ExactCount`` and above zero; a ResourceSlice
    names its nodes in exactly one way."""
    name = obj.get("metadata", {}).get("name", "")
    if kind.plural in ("resourceclaims", "resourceclaimtemplates"):
        spec = obj.get("spec", {})
        if kind.plural == "resourceclaimtemplates":
            spec = spec.get("spec", {})
        for i, req in enumerate(spec.get("devices", {}).get("requests", [])):
            where = f"spec.devices.requests[{i}]"
            if ("exactly" in req) == ("firstAvailable" in req):
                raise ApiError(
                    422,
                    f'{kind.kind} "{name}" is invalid: {where}: exactly one of '
                    f"`exactly` or `firstAvailable` is required",
                )
            for sub in [req.get("exactly") or {}, *req.get("firstAvailable", [])]:
                mode = sub.get("allocationMode", "ExactCount")
                if mode not in ("ExactCount", "All"):
                    raise ApiError(
                        422, f'{kind.kind} "{name}" is invalid: {where}.allocationMode: {mode!r}'
                    )
                count = sub.get("count")
                if count is not None and (mode == "All" or count <= 0):
                    raise ApiError(
                        422,
                        f'{kind.kind} "{name}" is invalid: {where}.count: must be greater '
                        f"than zero, and only with allocationMode ExactCount",
                    )
    elif kind.plural == "resourceslices":
        spec = obj.get("spec", {})
        ways = [
            k
            for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
            if spec.get(k)
        ]
        if len(ways) != 1:
            raise ApiError(
                422,
                f'ResourceSlice "{name}" is invalid: spec: exactly one of `nodeName`, '
                f"`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            )


def _healthy(pod: JSON) -> bool:
    """Counted as healthy by the disruption controller: running, ready, not going."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True  # no Ready condition written: a fake pod that a test set Running


def _scaled(value: int | str, total: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        return int(value)
    exact = int(value[:-1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def pdb_status(pdb: JSON, pods: list[JSON]) -> JSON:
    """``status`` as the disruption controller writes it, from the pods it selects."""
    selector = pdb.get("spec", {}).get("selector") or {}
    matching = [
        p for p in pods if pod_selector_matches(selector, p["metadata"].get("labels") or {})
    ]
    expected = len(matching)
    healthy = sum(1 for p in matching if _healthy(p))
    spec = pdb.get("spec") or {}
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected, round_up=True)
    elif "maxUnavailable" in spec:
        desired = expected - _scaled(spec["maxUnavailable"], expected, round_up=True)
    else:
        desired = 0  # policy/v1 sets no default: a budget without either allows all
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": max(healthy - desired, 0),
        "expectedPods": expected,
    }


# --- the server ---------------------------------------------------------------------


@dataclass
class _Route:
    kind: _Kind
    version: str
    namespace: str | None  # None: cluster-scoped, or a list across all namespaces
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    kind = _BY_PATH.get((group, version, rest[0]))
    if kind is None or (namespace is not None and not kind.namespaced):
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    if kind.namespaced and name is not None and namespace is None:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    return _Route(kind, version, namespace, name, sub)


@dataclass(eq=False)
class _Watcher:
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class FakeApiServer:
    """The fake API server. ``validate=True`` checks every object written against the
    Kubernetes strict schemas (``SCHEMA_VERSION``) and answers 422 on invalid ones."""

    def __init__(self, *, validate: bool = False, host: str = "127.0.0.1", port: int = 0) -> None:
        self.validate = validate
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.faults = Faults()
        # Pods removed by a successful eviction, as (namespace, name), in order.
        self.evicted: list[tuple[str, str]] = []
        # API groups served as if their CRDs were not installed: every path under them
        # answers 404, as a cluster without Kueue answers for kueue.x-k8s.io.
        self.unserved: set[str] = set()
        # The versions of kueue.x-k8s.io served: v1beta1 alone, as Kueue up to 0.14;
        # {"v1beta2"} plays a Kueue that no longer serves v1beta1. Objects are stored
        # once and answered as stored (no conversion: the fields read are the same
        # but for ClusterQueue's spec.cohort, spec.cohortName in v1beta2).
        self.kueue_versions: set[str] = {"v1beta1"}
        self._lock = threading.RLock()
        self._store: dict[str, dict[tuple[str, str], JSON]] = {k.store: {} for k in _KINDS}
        self._rv = 0
        self._log: list[tuple[int, str, str, JSON]] = []  # rv, plural, event type, object
        self._watchers: set[_Watcher] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._closing = False

    # -- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self._closing = True
        self._wake_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig for this server that ``kubernetes.config.load_kube_config``
        loads (JSON is YAML). The token is fake: the server does not authenticate."""
        path = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake"}},
            ],
            "current-context": "fake",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    # -- direct access for tests (thread-safe; these bypass faults and the request log)

    def add(self, obj: JSON) -> JSON:
        """Store ``obj`` (created, or replaced when it exists) and return it as stored,
        with uid, resourceVersion, creationTimestamp and the namespace filled in."""
        kind = _BY_TYPE.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        if kind is None:
            known = ", ".join(f"{k.api_version} {k.kind}" for k in _KINDS)
            raise ValueError(
                f"FakeApiServer.add: unknown apiVersion/kind "
                f"{obj.get('apiVersion')!r}/{obj.get('kind')!r}; known: {known}"
            )
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError(f"FakeApiServer.add: {kind.kind} without metadata.name")
        if kind.namespaced:
            meta.setdefault("namespace", "default")
        with self._lock:
            existing = self._store[kind.store].get(
                self._key(kind, meta.get("namespace"), meta["name"])
            )
            if existing is not None:
                meta["uid"] = existing["metadata"]["uid"]
                meta["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
            try:
                return self._write(kind, obj, "MODIFIED" if existing else "ADDED")
            except ApiError as e:
                raise ValueError(f"FakeApiServer.add: {e.message}") from e

    def get(self, kind_plural: str, namespace: str | None, name: str) -> JSON | None:
        kind = self._kind(kind_plural)
        with self._lock:
            obj = self._store[kind.store].get(self._key(kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind_plural: str) -> list[JSON]:
        kind = self._kind(kind_plural)
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self._store[kind.store].items())]

    def remove(self, kind_plural: str, namespace: str | None, name: str) -> JSON | None:
        """Delete an object as a controller or the kubelet would (a watch sees it)."""
        kind = self._kind(kind_plural)
        with self._lock:
            obj = self._store[kind.store].get(self._key(kind, namespace, name))
            if obj is not None:
                self._delete(kind, obj)
            return obj

    def requests_for(self, method: str, path_regex: str) -> list[RecordedRequest]:
        rx = re.compile(path_regex)
        return [r for r in list(self.requests) if r.method == method and rx.search(r.path)]

    @staticmethod
    def _kind(kind_plural: str) -> _Kind:
        kind = _BY_PLURAL.get(kind_plural)
        if kind is None:
            raise ValueError(f"unknown resource {kind_plural!r}; known: {sorted(_BY_PLURAL)}")
        return kind

    @staticmethod
    def _key(kind: _Kind, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "default") if kind.namespaced else "", name)

    # -- storage (call with the lock held)

    def _write(self, kind: _Kind, obj: JSON, event: str, *, dry_run: bool = False) -> JSON:
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        if kind.plural in ("poddisruptionbudgets", "jobs", "machinedeployments") or (
            kind.custom and kind.status_subresource
        ):
            meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(self._rv + 1)
        if self.validate and not kind.custom:
            self._check(kind, self._served(kind, obj))
        if dry_run:
            meta["resourceVersion"] = str(self._rv)
            return copy.deepcopy(obj)
        self._rv += 1
        self._store[kind.store][self._key(kind, meta.get("namespace"), meta["name"])] = obj
        self._log.append((self._rv, kind.store, event, copy.deepcopy(obj)))
        self._wake_watchers()
        return copy.deepcopy(obj)

    def _delete(self, kind: _Kind, obj: JSON) -> None:
        self._rv += 1
        meta = obj["metadata"]
        del self._store[kind.store][self._key(kind, meta.get("namespace"), meta["name"])]
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._log.append((self._rv, kind.store, "DELETED", gone))
        self._wake_watchers()

    @staticmethod
    def _check(kind: _Kind, obj: JSON) -> None:
        try:
            kubernetes_validate.validate(obj, kind.schema or SCHEMA_VERSION, strict=True)
            _check_dra(kind, obj)
        except kubernetes_validate.ValidationError as e:
            where = ".".join(str(p) for p in e.path) or "<root>"
            name = obj.get("metadata", {}).get("name", "")
            raise ApiError(
                422,
                f'{kind.kind} "{name}" is invalid: {where}: {e.message}',
                details={"name": name, "kind": kind.plural},
            ) from e

    def _served(self, kind: _Kind, obj: JSON) -> JSON:
        """The object as a GET answers it: PDBs get the status the disruption
        controller would have written."""
        if kind.plural != "poddisruptionbudgets":
            return obj
        served = copy.deepcopy(obj)
        ns = obj["metadata"].get("namespace", "default")
        pods = [p for (pns, _), p in self._store["pods"].items() if pns == ns]
        served["status"] = pdb_status(obj, pods)
        return served

    def _wake_watchers(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for w in list(self._watchers):
            loop.call_soon_threadsafe(w.wake.set)

    # -- HTTP

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        request[_RAW_BODY] = raw
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        status = 0
        try:
            for fault in self.faults.take(request.method, request.path):
                if fault.kind == "delay":
                    await asyncio.sleep(fault.seconds)
                elif fault.kind == "drop":
                    if fault.after:
                        await handler(request)  # committed; only the answer is lost
                    if request.transport is not None:
                        request.transport.abort()
                    raise web.HTTPException()  # the answer goes nowhere: no client
                else:
                    status = fault.status
                    err = ApiError(fault.status, f"injected fault: {fault.status}")
                    headers = {"Retry-After": "1"} if fault.status == 429 else None
                    return web.json_response(err.status(), status=fault.status, headers=headers)
            response: web.StreamResponse = await handler(request)
            status = response.status
            return response
        finally:
            self.requests.append(
                RecordedRequest(
                    method=request.method,
                    path=request.path,
                    query=dict(request.query),
                    body=body,
                    status=status,
                    time=time.time(),
                )
            )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            route = _parse_path(request.path)
            if route.kind.group in self.unserved or (
                route.kind.group == "kueue.x-k8s.io" and route.version not in self.kueue_versions
            ):
                raise ApiError(
                    404, f"the server could not find the requested resource ({request.path})"
                )
            if route.subresource == "eviction" and route.kind.plural == "pods":
                if request.method != "POST":
                    raise ApiError(405, f"{request.method} is not allowed on pods/eviction")
                return self._json(201, self._evict(route, request))
            if route.subresource == "scale" and route.kind.plural == "machinedeployments":
                return self._json(200, self._scale(route, request))
            if route.subresource == "status" and route.kind.no_status:
                raise ApiError(
                    404, f"the server could not find the requested resource ({request.path})"
                )
            if route.subresource == "status" and request.method in ("GET", "PATCH"):
                if request.method == "GET":
                    return self._json(200, self._get(route))
                return self._json(200, self._patch(route, request, status_only=True))
            if route.subresource is not None:
                raise ApiError(
                    404, f"the server could not find the requested resource ({request.path})"
                )
            if route.name is None:
                if request.method == "GET":
                    if request.query.get("watch") in ("1", "true"):
                        return await self._watch(route, request)
                    return self._json(200, self._list(route, request))
                if request.method == "POST":
                    return self._json(201, self._create(route, request))
            elif request.method == "GET":
                return self._json(200, self._get(route))
            elif request.method == "PATCH":
                return self._json(200, self._patch(route, request))
            elif request.method == "PUT":
                return self._json(200, self._replace(route, request))
            elif request.method == "DELETE":
                return self._json(200, self._delete_request(route, request))
            raise ApiError(405, f"{request.method} is not allowed on {request.path}")
        except ApiError as e:
            return self._json(e.code, e.status())
        except Exception as e:  # a bug in the fake: answer as a real server's panic would
            logging.getLogger(__name__).exception(
                "fake API server: %s %s", request.method, request.path
            )
            return self._json(500, ApiError(500, f"fake API server error: {e!r}").status())

    @staticmethod
    def _json(status: int, body: JSON) -> web.Response:
        return web.Response(
            status=status,
            text=json.dumps(body, separators=(",", ":")),
            content_type="application/json",
        )

    @staticmethod
    def _body(request: web.Request) -> Any:
        # The sync client sends POST without a Content-Type: the body is JSON anyway.
        raw: bytes = request.get(_RAW_BODY, b"")
        if not raw:
            raise ApiError(400, "the request has no body")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, f"the body is not JSON: {e}") from e

    @staticmethod
    def _dry_run(request: web.Request, body: Any = None) -> bool:
        if request.query.get("dryRun") == "All":
            return True
        opts = body.get("deleteOptions") if isinstance(body, dict) else None
        return isinstance(opts, dict) and opts.get("dryRun") == ["All"]

    def _stored(self, route: _Route) -> JSON:
        assert route.name is not None
        obj = self._store[route.kind.store].get(self._key(route.kind, route.namespace, route.name))
        if obj is None:
            raise _not_found(route.kind, route.name)
        return obj

    def _get(self, route: _Route) -> JSON:
        with self._lock:
            return copy.deepcopy(self._served(route.kind, self._stored(route)))

    def _matching(self, route: _Route, request: web.Request, obj: JSON) -> bool:
        meta = obj["metadata"]
        if route.namespace is not None and meta.get("namespace") != route.namespace:
            return False
        labels = request.query.get("labelSelector")
        if labels and not label_selector_matches(labels, meta.get("labels") or {}):
            return False
        fields = request.query.get("fieldSelector")
        return not fields or field_selector_matches(route.kind, fields, obj)

    def _list(self, route: _Route, request: web.Request) -> JSON:
        kind = route.kind
        with self._lock:
            items = []
            for _, obj in sorted(self._store[kind.store].items()):
                if self._matching(route, request, obj):
                    item = copy.deepcopy(self._served(kind, obj))
                    if not kind.custom:  # a real server strips these from built-in items
                        item.pop("apiVersion", None)
                        item.pop("kind", None)
                    items.append(item)
            rv = str(self._rv)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    async def _watch(self, route: _Route, request: web.Request) -> web.StreamResponse:
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        since = request.query.get("resourceVersion") or "0"
        try:
            last = int(since)
        except ValueError as e:
            raise ApiError(400, f"invalid resourceVersion {since!r}") from e
        watcher = _Watcher()
        with self._lock:
            self._watchers.add(watcher)
            initial: list[tuple[str, JSON]] = []
            if last == 0:  # no version: the current state first, as ADDED events
                initial = [
                    ("ADDED", copy.deepcopy(self._served(route.kind, o)))
                    for _, o in sorted(self._store[route.kind.store].items())
                    if self._matching(route, request, o)
                ]
                last = self._rv
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        deadline = time.monotonic() + timeout
        try:
            for event, obj in initial:
                await self._send(response, event, obj)
            while not self._closing:
                watcher.wake.clear()
                with self._lock:
                    pending = [e for e in self._log if e[0] > last and e[1] == route.kind.store]
                for rv, _, event, obj in pending:
                    last = rv
                    if self._matching(route, request, obj):
                        with self._lock:
                            served = self._served(route.kind, obj)
                        await self._send(response, event, served)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watcher.wake.wait(), timeout=left)
        except (ConnectionResetError, ApiError):
            pass
        finally:
            with self._lock:
                self._watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, event: str, obj: JSON) -> None:
        line = json.dumps({"type": event, "object": obj}, separators=(",", ":")) + "\n"
        await response.write(line.encode())

    def _create(self, route: _Route, request: web.Request) -> JSON:
        kind = route.kind
        body = self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        meta = body.setdefault("metadata", {})
        if kind.namespaced:
            if route.namespace is None:
                raise ApiError(405, f"create {kind.plural} needs a namespace in the path")
            if meta.get("namespace", route.namespace) != route.namespace:
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            meta["namespace"] = route.namespace
        if (
            body.get("apiVersion", kind.api_version) != kind.api_version
            or body.get("kind", kind.kind) != kind.kind
        ):
            raise ApiError(
                400, f"the body is a {body.get('apiVersion')} {body.get('kind')}, not a {kind.kind}"
            )
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(422, f"{kind.kind} is invalid: metadata.name: Required value")
        for server_owned in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(server_owned, None)
        if kind.plural == "pods":
            body["status"] = {"phase": "Pending"}  # the server resets a new pod's status
        elif kind.status_subresource:
            body.pop("status", None)  # only the status subresource writes it
        with self._lock:
            if self._key(kind, meta.get("namespace"), meta["name"]) in self._store[kind.store]:
                raise ApiError(
                    409,
                    f'{kind.qualified()} "{meta["name"]}" already exists',
                    reason="AlreadyExists",
                    details={"name": meta["name"], "kind": kind.plural},
                )
            return self._write(kind, body, "ADDED", dry_run=self._dry_run(request))

    def _patch(self, route: _Route, request: web.Request, *, status_only: bool = False) -> JSON:
        kind = route.kind
        patch = self._body(request)
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        with self._lock:
            stored = self._stored(route)
            updated = self._apply_patch(kind, stored, patch, ctype)
            if status_only:  # the status subresource changes status and nothing else
                version = updated["metadata"].get("resourceVersion")
                updated = {**copy.deepcopy(stored), "status": updated.get("status")}
                updated["metadata"]["resourceVersion"] = version
            elif kind.status_subresource:
                _keep_status(stored, updated)
            self._check_immutable(kind, stored, updated)
            if updated["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
                raise _conflict(kind, stored["metadata"]["name"])
            return self._write(kind, updated, "MODIFIED", dry_run=self._dry_run(request))

    @staticmethod
    def _apply_patch(kind: _Kind, stored: JSON, patch: Any, ctype: str) -> JSON:
        if ctype == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiError(400, "a JSON patch must be a list of operations")
            return json_patch(stored, patch)
        if not isinstance(patch, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        if ctype == "application/merge-patch+json":
            result = merge_patch(stored, patch)
        elif ctype == "application/strategic-merge-patch+json" and not kind.custom:
            result = strategic_merge_patch(stored, patch)
        else:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json"
                f"{'' if kind.custom else ', application/strategic-merge-patch+json'} "
                f"(got {ctype or 'no Content-Type'})",
            )
        if not isinstance(result, dict):
            raise ApiError(422, "the patch must leave an object")
        return result

    @staticmethod
    def _check_immutable(kind: _Kind, stored: JSON, updated: JSON) -> None:
        for key in ("name", "namespace", "uid"):
            if updated.get("metadata", {}).get(key) != stored["metadata"].get(key):
                raise ApiError(422, f"{kind.kind} is invalid: metadata.{key}: field is immutable")
        if kind.plural == "resourceclaims":
            # A claim's spec never changes; its allocation is set once, and may only be
            # cleared (deallocated), never changed to another.
            if updated.get("spec") != stored.get("spec"):
                raise ApiError(422, "ResourceClaim is invalid: spec: field is immutable")
            old = (stored.get("status") or {}).get("allocation")
            new = (updated.get("status") or {}).get("allocation")
            if old is not None and new is not None and old != new:
                raise ApiError(
                    422, "ResourceClaim is invalid: status.allocation: field is immutable"
                )
        updated["metadata"]["creationTimestamp"] = stored["metadata"]["creationTimestamp"]

    def _replace(self, route: _Route, request: web.Request) -> JSON:
        kind = route.kind
        body = self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, "the body must be an object with metadata")
        meta = body["metadata"]
        if meta.get("name") != route.name:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        with self._lock:
            stored = self._stored(route)
            rv = meta.get("resourceVersion")
            if rv is not None and rv != stored["metadata"]["resourceVersion"]:
                raise _conflict(kind, stored["metadata"]["name"])
            meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
            meta.setdefault("namespace", stored["metadata"].get("namespace"))
            meta["uid"] = meta.get("uid") or stored["metadata"]["uid"]
            if kind.status_subresource:
                _keep_status(stored, body)
            self._check_immutable(kind, stored, body)
            return self._write(kind, body, "MODIFIED", dry_run=self._dry_run(request))

    def _delete_request(self, route: _Route, request: web.Request) -> JSON:
        body: Any = None
        if request.get(_RAW_BODY):
            body = self._body(request)
        options = body if isinstance(body, dict) else {}
        with self._lock:
            stored = self._stored(route)
            self._check_preconditions(route.kind, stored, options.get("preconditions"))
            dry = request.query.get("dryRun") == "All" or options.get("dryRun") == ["All"]
            if not dry:
                self._delete(route.kind, stored)
            return copy.deepcopy(stored)

    @staticmethod
    def _check_preconditions(kind: _Kind, stored: JSON, pre: Any) -> None:
        if not isinstance(pre, dict):
            return
        meta = stored["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {meta['uid']}",
                details={"name": meta["name"], "kind": kind.plural},
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise ApiError(
                409,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
                details={"name": meta["name"], "kind": kind.plural},
            )

    def _evict(self, route: _Route, request: web.Request) -> JSON:
        body = self._body(request)
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise ApiError(400, "the body must be a policy/v1 Eviction")
        if body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
            raise ApiError(400, f"unsupported Eviction apiVersion {body.get('apiVersion')!r}")
        if (body.get("metadata") or {}).get("name") != route.name:
            raise ApiError(400, "name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        with self._lock:
            pod = self._stored(route)
            self._check_preconditions(route.kind, pod, options.get("preconditions"))
            self._check_budget(pod)
            if not self._dry_run(request, body):
                self._delete(route.kind, pod)
                self.evicted.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _check_budget(self, pod: JSON) -> None:
        """Refuse as the eviction subresource does when a PDB has no disruption left."""
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            return  # not counted by any budget: always evictable
        ns = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        pdbs = [
            pdb
            for (pns, _), pdb in sorted(self._store["poddisruptionbudgets"].items())
            if pns == ns and pod_selector_matches(pdb.get("spec", {}).get("selector") or {}, labels)
        ]
        if len(pdbs) > 1:
            raise ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if not pdbs:
            return
        pdb = pdbs[0]
        pods = [p for (pns, _), p in self._store["pods"].items() if pns == ns]
        status = pdb_status(pdb, pods)
        if status["disruptionsAllowed"] > 0 or not _healthy(pod):
            return
        name = pdb["metadata"]["name"]
        cause = (
            f"The disruption budget {name} needs {status['desiredHealthy']} healthy pods "
            f"and has {status['currentHealthy']} currently"
        )
        raise ApiError(
            429,
            f"Cannot evict pod as it would violate the pod's disruption budget. ({cause})",
            reason="TooManyRequests",
            details={"causes": [{"reason": "DisruptionBudget", "message": cause}]},
        )

    def _scale(self, route: _Route, request: web.Request) -> JSON:
        kind = route.kind
        with self._lock:
            md = self._stored(route)
            if request.method in ("PATCH", "PUT"):
                body = self._body(request)
                ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
                current = self._scale_of(md)
                if request.method == "PATCH":
                    wanted = self._apply_patch(kind, current, body, ctype)
                else:
                    wanted = body if isinstance(body, dict) else {}
                rv = (wanted.get("metadata") or {}).get("resourceVersion")
                if rv is not None and rv != md["metadata"]["resourceVersion"]:
                    raise _conflict(kind, md["metadata"]["name"])
                replicas = (wanted.get("spec") or {}).get("replicas")
                if not isinstance(replicas, int) or replicas < 0:
                    raise ApiError(422, f"Scale is invalid: spec.replicas: {replicas!r}")
                updated = copy.deepcopy(md)
                updated.setdefault("spec", {})["replicas"] = replicas
                md = self._write(kind, updated, "MODIFIED", dry_run=self._dry_run(request))
            elif request.method != "GET":
                raise ApiError(405, f"{request.method} is not allowed on the scale subresource")
            return self._scale_of(md)

    @staticmethod
    def _scale_of(md: JSON) -> JSON:
        meta = md["metadata"]
        spec_replicas = int((md.get("spec") or {}).get("replicas", 1))
        status = md.get("status") or {}
        scale_status: JSON = {"replicas": int(status.get("replicas", spec_replicas))}
        if status.get("selector"):
            scale_status["selector"] = status["selector"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": spec_replicas},
            "status": scale_status,
        }


@contextlib.contextmanager
def running_apiserver(**kw: Any) -> Iterator[FakeApiServer]:
    """A ``FakeApiServer`` on its own thread and event loop, for sync tests and for
    tests that run the controller as a subprocess. Stopped on exit."""
    server = FakeApiServer(**kw)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as e:  # reported to the caller below
            failure.append(e)
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=serve, name="fake-apiserver", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the fake API server did not start within 10 s")
    if failure:
        raise RuntimeError(f"the fake API server failed to start: {failure[0]}") from failure[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.asynccontextmanager
async def started_apiserver(**kw: Any) -> AsyncIterator[FakeApiServer]:
    """``async with started_apiserver() as api``: the same, on the running loop."""
    server = FakeApiServer(**kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


__all__ = [
    "SCHEMA_VERSION",
    "ApiError",
    "FakeApiServer",
    "Faults",
    "RecordedRequest",
    "field_selector_matches",
    "json_patch",
    "label_selector_matches",
    "merge_patch",
    "pdb_status",
    "pod_selector_matches",
    "running_apiserver",
    "started_apiserver",
    "strategic_merge_patch",
]
