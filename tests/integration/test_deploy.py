"""deploy/ works the first time: every overlay renders with the real kustomize
(``kubectl kustomize``) and validates against the Kubernetes 1.33+ schemas in
strict mode, the RBAC holds exactly the verbs of ``autoscaler.kube.protocol.VERBS``
and the Kube wrapper calls nothing else, the generated copies are current, and the
flags, ports, paths and names that the manifests repeat agree with the code that
reads them (the real argument parsers, promtool, amtool, ``accel-autoscaler check``).

kubectl is required, never skipped: a machine without it fails here with how to
get it, because an untested manifest is the one that breaks an install.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from accel_common.names import STATE_CONFIGMAP_SUFFIX
from autoscaler.kube.protocol import CAPI_GROUP, CAPI_VERSION, VERBS, Kube, PatchesStatus
from tests.support.paths import REPO

# Slow (renders every overlay and runs Alertmanager against the controller):
# `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

DEPLOY = REPO / "deploy"
OVERLAYS = ("nvidia", "amd", "intel", "gaudi", "ascend", "tpu")
# The oldest Kubernetes the manifests promise, and the newest schemas installed.
VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
# Kinds whose schema is a CustomResourceDefinition of the Prometheus Operator, not
# part of Kubernetes: kubernetes-validate has no schema for them.
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
# What each overlay must run: the backend for its vendor, and the node label its
# vendor's operator (or Node Feature Discovery rules) sets.
VENDOR = {
    "nvidia": ("nvidia", "nvidia.com/gpu.present"),
    "amd": ("amd", "feature.node.kubernetes.io/amd-gpu"),
    "intel": ("oneapi", "intel.feature.node.kubernetes.io/gpu"),
    "gaudi": ("gaudi", "intel.feature.node.kubernetes.io/gaudi"),
    "ascend": ("ascend", "accelerator"),
    "tpu": ("tpu", "cloud.google.com/gke-tpu-accelerator"),
}
# The value the node label must have where it is not "true" (the Ascend device
# plugin's label names the chip family), and the overlays that select by the label's
# presence alone (GKE sets it to the TPU type), through a required node affinity.
SELECTOR_VALUE = {"ascend": "huawei-Ascend910"}
SELECTED_BY_AFFINITY = frozenset({"tpu"})
# The overlays whose exporter runs privileged, each for its vendor library's device
# nodes (the reason is beside the setting in the manifest).
PRIVILEGED = frozenset({"amd+amd-smi", "ascend"})

Doc = dict[str, Any]


# --- rendering ---------------------------------------------------------------


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl not found on PATH: deploy/ is rendered with `kubectl kustomize` "
            "(kubectl 1.32 bundles kustomize v5.5). Install kubectl, or Debian's "
            "`apt-get install -y kubernetes-client`, and run the tests again."
        )
    return path


def kustomize(directory: Path) -> list[Doc]:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@functools.cache
def rendered(overlay: str) -> tuple[Doc, ...]:
    """An overlay as `kubectl apply -k deploy/overlays/<overlay>` would send it;
    "amd+amd-smi" is the amd overlay with the amd-smi component added."""
    if overlay == "amd+amd-smi":
        return tuple(_with_component("amd", "amd-smi"))
    return tuple(kustomize(DEPLOY / "overlays" / overlay))


def _with_component(overlay: str, component: str) -> list[Doc]:
    """An overlay with a component added, as the overlay's comment tells a user to,
    from a kustomization outside the repository (kustomize takes relative paths
    only)."""
    with tempfile.TemporaryDirectory(prefix="kustomize-") as tmp:
        rel = os.path.relpath(DEPLOY, tmp)
        (Path(tmp) / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            f"resources: [{rel}/overlays/{overlay}]\n"
            f"components: [{rel}/components/{component}]\n"
        )
        return kustomize(Path(tmp))


def one(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def one_named_like(docs: tuple[Doc, ...], kind: str, prefix: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"expected one {kind} named {prefix}*, found {len(found)}"
    return found[0]


def container(workload: Doc, name: str) -> Doc:
    spec = workload["spec"]["template"]["spec"]
    found = [c for c in spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"{workload['metadata']['name']}: no container {name!r}"
    result: Doc = found[0]
    return result


def expand(args: list[str], env: list[Doc]) -> list[str]:
    """Kubernetes' $(VAR) expansion of args from the container's env, with a
    placeholder for values that come from the downward API."""
    values = {e["name"]: e.get("value", f"<{e['name']}>") for e in env}
    return [re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], m[0]), a) for a in args]


def flag(args: list[str], name: str) -> str:
    found = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(found) == 1, f"expected one {name}=... in {args}"
    return found[0]


# --- every overlay renders and validates --------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", [*OVERLAYS, "amd+amd-smi"])
def test_overlay_validates_strictly(overlay: str, version: str) -> None:
    docs = rendered(overlay)
    problems = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            at = "/".join(str(p) for p in e.absolute_path)
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {at}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{doc['apiVersion']} {doc['kind']}: no schema in Kubernetes {version}")
    assert problems == [], f"deploy/overlays/{overlay} on Kubernetes {version}:\n" + "\n".join(
        problems
    )
    kinds = {d["kind"] for d in docs}
    assert {"DaemonSet", "Deployment", "ClusterRole", "Role", "ConfigMap"} <= kinds
    assert {k for _, k in CRD_KINDS} <= kinds


def test_strict_validation_catches_an_unknown_field() -> None:
    """The check above can fail: a misspelt field is refused."""
    daemonset = dict(one(rendered("nvidia"), "DaemonSet", "accel-exporter"))
    daemonset["spec"] = {**daemonset["spec"], "udpateStrategy": {}}
    with pytest.raises(kubernetes_validate.ValidationError, match="udpateStrategy"):
        kubernetes_validate.validate(daemonset, VERSIONS[0], strict=True)


@pytest.mark.parametrize("overlay", [*OVERLAYS, "amd+amd-smi"])
def test_no_privileged_container_forbids_escalation(overlay: str) -> None:
    """The API server refuses privileged with allowPrivilegeEscalation false, which
    no schema says: check it here. Only the amd-smi component and the ascend overlay
    (DCMI's management devices) run privileged."""
    for doc in rendered(overlay):
        if doc["kind"] not in ("DaemonSet", "Deployment"):
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            sc = c.get("securityContext", {})
            if sc.get("privileged"):
                assert sc.get("allowPrivilegeEscalation") is not False, c["name"]
                # The node agent is privileged by design (deploy/base/agent.yaml).
                agent = doc["metadata"]["name"] == "accel-node-agent"
                assert agent or overlay in PRIVILEGED, f"{overlay}: {c['name']} is privileged"


# --- RBAC == VERBS == what the Kube wrapper calls -----------------------------


def verb_pairs(table: dict[str, dict[str, str]]) -> set[tuple[str, str]]:
    return {(resource, verb) for resource, verbs in table.items() for verb in verbs}


def rbac_pairs(role: Doc) -> set[tuple[str, str]]:
    pairs = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = f"{group}/{resource}" if group else resource
                pairs |= {(key, verb) for verb in rule["verbs"]}
    return pairs


def test_rbac_holds_exactly_the_verbs_of_the_kube_protocol() -> None:
    docs = rendered("nvidia")
    cluster = one(docs, "ClusterRole", "accel-autoscaler")
    lease = one(docs, "Role", "accel-autoscaler-leader-election")
    granted = rbac_pairs(cluster) | rbac_pairs(lease)
    needed = verb_pairs(VERBS)
    assert granted - needed == set(), "granted but in no VERBS entry (remove, or add to VERBS)"
    assert needed - granted == set(), "in VERBS but not granted: run deploy/generate.py"
    for role in (cluster, lease):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    # Leases only in the controller's own namespace, never cluster-wide.
    assert not any(r.startswith("coordination.k8s.io/") for r, _ in rbac_pairs(cluster))


def test_roles_are_bound_to_the_controller_and_the_lease_it_uses() -> None:
    docs = rendered("nvidia")
    deployment = one(docs, "Deployment", "accel-autoscaler")
    namespace = deployment["metadata"]["namespace"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    one(docs, "ServiceAccount", account)
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    for kind, role_kind, name in (
        ("ClusterRoleBinding", "ClusterRole", "accel-autoscaler"),
        ("RoleBinding", "Role", "accel-autoscaler-leader-election"),
    ):
        binding = one(docs, kind, name)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": name,
        }
    role = one(docs, "Role", "accel-autoscaler-leader-election")
    assert role["metadata"]["namespace"] == namespace
    c = container(deployment, "autoscaler")
    args = expand(c["args"], c["env"])
    named = [r for r in role["rules"] if r.get("resourceNames")]
    leases = [r for r in named if r["resources"] == ["leases"]]
    assert leases and all(
        r["resourceNames"] == [flag(args, "--leader-elect.lease-name")] for r in leases
    )
    # The state record is named after --controller-name (run's default when unset).
    owner = next(
        (a.split("=", 1)[1] for a in args if a.startswith("--controller-name=")),
        "accel-autoscaler",
    )
    records = [r for r in named if r["resources"] == ["configmaps"]]
    assert records and all(r["resourceNames"] == [owner + STATE_CONFIGMAP_SUFFIX] for r in records)
    assert len(leases) + len(records) == len(named)
    assert flag(args, "--leader-elect.namespace") == "<POD_NAMESPACE>"


def test_every_rbac_verb_says_why() -> None:
    """Comments do not survive rendering: read them in the source file."""
    text = (DEPLOY / "base" / "rbac.yaml").read_text()
    for resource, verbs in VERBS.items():
        for verb, why in verbs.items():
            line = rf"^\s+- {verb}\s+# {re.escape(why)}$"
            assert re.search(line, text, re.M), f"{resource} {verb}: no line '- {verb}  # {why}'"


# The Kube protocol's methods and the (resource, verb) each needs. Custom-object
# methods are generic in the protocol; these are the Cluster API objects that the
# node-pool provider reads and writes with them. The protocol lists; the watches
# are the cluster-state cache's (autoscaler/kube/cache.py), checked as INFORMERS.
MACHINE_DEPLOYMENTS = f"{CAPI_GROUP}/machinedeployments"
MACHINES = f"{CAPI_GROUP}/machines"
MACHINE_SETS = f"{CAPI_GROUP}/machinesets"
MACHINE_HEALTH_CHECKS = f"{CAPI_GROUP}/machinehealthchecks"
# The gang owners' objects (autoscaler/actions/ops/gangs.py), read and patched with the
# same generic calls, and Volcano's restart Command, created.
GANG_OWNERS = (
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("kubeflow.org", "v1", "pytorchjobs"),
    ("kubeflow.org", "v2beta1", "mpijobs"),
    ("batch.volcano.sh", "v1alpha1", "jobs"),
)
GANG_RESOURCES = {f"{g}/{p}" for g, _, p in GANG_OWNERS}
COMMANDS = "bus.volcano.sh/commands"
# reboot_node's Self Node Remediation CR (medik8s): found, listed, created, deleted.
SNR_GROUP = "self-node-remediation.medik8s.io"
SNR = f"{SNR_GROUP}/selfnoderemediations"
# Kueue (autoscaler/kube/kueue.py): four lists for the queue series, and a
# Workload's status patched to evict it (autoscaler/actions/ops/kueue.py).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_LISTS = ("clusterqueues", "localqueues", "resourceflavors", "workloads", "admissionchecks")
# ProvisioningRequests answered (autoscaler/provisioning.py): listed, status patched.
PROVISIONING_REQUESTS = "autoscaling.x-k8s.io/provisioningrequests"
METHOD_VERBS: dict[str, set[tuple[str, str]]] = {
    "get_node": {("nodes", "get")},
    "list_nodes": {("nodes", "list")},
    "patch_node": {("nodes", "patch")},
    "list_pods": {("pods", "list")},
    "get_pod": {("pods", "get")},
    "create_pod": {("pods", "create")},
    "patch_pod": {("pods", "patch")},
    "delete_pod": {("pods", "delete")},
    "evict_pod": {("pods/eviction", "create")},
    "get_job": {("batch/jobs", "get")},
    "patch_job": {("batch/jobs", "patch")},
    "create_event": {("events", "create")},
    "get_configmap": {("configmaps", "get")},
    "create_configmap": {("configmaps", "create")},
    "replace_configmap": {("configmaps", "update")},
    "get_lease": {("coordination.k8s.io/leases", "get")},
    "create_lease": {("coordination.k8s.io/leases", "create")},
    "replace_lease": {("coordination.k8s.io/leases", "update")},
    "get_custom": {(MACHINE_DEPLOYMENTS, "get"), (MACHINES, "get"), (SNR, "get")}
    | {(r, "get") for r in GANG_RESOURCES}
    | {(f"{KUEUE_GROUP}/workloads", "get")},
    "list_custom": {(MACHINE_DEPLOYMENTS, "list"), (MACHINES, "list"), (MACHINE_SETS, "list")}
    | {(MACHINE_HEALTH_CHECKS, "list")}
    | {(SNR, "list")}
    | {(f"{KUEUE_GROUP}/{p}", "list") for p in KUEUE_LISTS}
    | {(PROVISIONING_REQUESTS, "list")},
    "patch_custom_status": {(f"{KUEUE_GROUP}/workloads/status", "patch")}
    | {(f"{PROVISIONING_REQUESTS}/status", "patch")},
    "delete_custom": {(MACHINES, "delete"), (SNR, "delete")},
    "patch_custom": {(MACHINES, "patch"), (MACHINE_DEPLOYMENTS, "patch")}
    | {(r, "patch") for r in GANG_RESOURCES},
    "create_custom": {(COMMANDS, "create"), (SNR, "create")},
    "get_scale": {(f"{MACHINE_DEPLOYMENTS}/scale", "get")},
    "patch_scale": {(f"{MACHINE_DEPLOYMENTS}/scale", "patch")},
    "list_resource_claims": {("resource.k8s.io/resourceclaims", "list")},
    "get_resource_claim": {("resource.k8s.io/resourceclaims", "get")},
    "list_resource_claim_templates": {("resource.k8s.io/resourceclaimtemplates", "list")},
    "list_resource_slices": {("resource.k8s.io/resourceslices", "list")},
    "list_device_classes": {("resource.k8s.io/deviceclasses", "list")},
}


# What the watch cache behind the cluster-state series sends: a list, then a watch.
INFORMERS: set[tuple[str, str]] = {
    ("nodes", "list"),
    ("nodes", "watch"),
    ("pods", "list"),
    ("pods", "watch"),
}


def protocol_methods() -> set[str]:
    return {
        name
        for protocol in (Kube, PatchesStatus)  # what the acting handle also offers
        for name, member in vars(protocol).items()
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    }


def test_every_protocol_method_has_its_verbs_and_they_make_up_verbs() -> None:
    methods = protocol_methods()
    assert methods - METHOD_VERBS.keys() == set(), "Kube methods missing from METHOD_VERBS"
    assert METHOD_VERBS.keys() - methods == set(), "METHOD_VERBS names methods Kube lacks"
    union = set().union(*METHOD_VERBS.values()) | INFORMERS
    assert union - verb_pairs(VERBS) == set(), "methods need verbs that VERBS lacks"
    assert verb_pairs(VERBS) - union == set(), (
        "VERBS (autoscaler/kube/protocol.py) grants verbs that no Kube method needs: "
        "remove them and run `.venv/bin/python deploy/generate.py`"
    )


def rbac_of(method: str, path: str, query: dict[str, str]) -> tuple[str, str]:
    """The (resource, verb) that RBAC checks for one request, by the API's path
    conventions: /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]] for the core
    group, /apis/GROUP/VERSION/... for the others."""
    parts = [p for p in path.split("/") if p]
    core = parts[0] == "api"
    group = "" if core else parts[1]
    rest = parts[2:] if core else parts[3:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    resource, named, sub = rest[0], len(rest) > 1, rest[2:3]
    key = "/".join([*([group] if group else []), resource, *sub])
    if method == "GET":
        verb = "get" if named else ("watch" if query.get("watch") in ("1", "true") else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return key, verb


def test_rbac_of_reads_the_api_paths() -> None:
    """The path conventions above, on the requests that matter."""
    assert rbac_of("GET", "/api/v1/nodes/n1", {}) == ("nodes", "get")
    assert rbac_of("GET", "/api/v1/nodes", {"watch": "true"}) == ("nodes", "watch")
    assert rbac_of("GET", "/api/v1/pods", {}) == ("pods", "list")
    assert rbac_of("GET", "/api/v1/namespaces/default/pods", {}) == ("pods", "list")
    assert rbac_of("POST", "/api/v1/namespaces/d/pods/p/eviction", {}) == (
        "pods/eviction",
        "create",
    )
    assert rbac_of("PUT", "/apis/coordination.k8s.io/v1/namespaces/d/leases/l", {}) == (
        "coordination.k8s.io/leases",
        "update",
    )
    assert rbac_of("PATCH", "/apis/batch/v1/namespaces/d/jobs/j", {}) == ("batch/jobs", "patch")
    scale = f"/apis/{CAPI_GROUP}/v1beta1/namespaces/d/machinedeployments/md/scale"
    assert rbac_of("PATCH", scale, {}) == (f"{MACHINE_DEPLOYMENTS}/scale", "patch")


def _bind(
    call: Callable[[Kube, str, str, str], Awaitable[object]], g: str, v: str, p: str
) -> Callable[[Kube], Awaitable[object]]:
    """``call`` with one gang owner's group, version and plural fixed (a lambda in
    a loop would see only the last)."""
    return lambda k: call(k, g, v, p)


async def _evict_workload(k: Kube, ns: str) -> object:
    assert isinstance(k, PatchesStatus)
    return await k.patch_custom_status(KUEUE_GROUP, "v1beta1", ns, "workloads", "w1", {})


async def _answer_request(k: Kube, ns: str) -> object:
    assert isinstance(k, PatchesStatus)
    group, plural = "autoscaling.x-k8s.io", "provisioningrequests"
    return await k.patch_custom_status(group, "v1", ns, plural, "pr1", {})


def _protocol_calls() -> list[tuple[str, Callable[[Kube], Awaitable[object]]]]:
    """One call of every Kube method, with the arguments the controller passes
    (Cluster API plurals for the custom-object methods)."""
    md, machines = "machinedeployments", "machines"
    ns = "default"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "accel-autoscaler", "namespace": ns},
        "spec": {"holderIdentity": "a"},
    }
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": ns},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "Test",
        "message": "rbac test",
    }
    new_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p2", "namespace": ns},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    label = {"metadata": {"labels": {"accel-fleet.io/test": "1"}}}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "accel-autoscaler-state", "namespace": ns},
        "data": {"state.json": "{}"},
    }
    return [
        ("get_node", lambda k: k.get_node("n1")),
        ("list_nodes", lambda k: k.list_nodes()),
        ("list_nodes", lambda k: k.list_nodes(label_selector="a=b")),
        ("patch_node", lambda k: k.patch_node("n1", label)),
        ("list_pods", lambda k: k.list_pods()),
        ("list_pods", lambda k: k.list_pods(namespace=ns, node="n1", label_selector="a=b")),
        ("get_pod", lambda k: k.get_pod(ns, "p1")),
        ("create_pod", lambda k: k.create_pod(ns, new_pod)),
        ("patch_pod", lambda k: k.patch_pod(ns, "p1", label)),
        ("delete_pod", lambda k: k.delete_pod(ns, "p2", grace_period_seconds=0, uid="u")),
        ("evict_pod", lambda k: k.evict_pod(ns, "p1", grace_period_seconds=0)),
        ("get_job", lambda k: k.get_job(ns, "j1")),
        ("patch_job", lambda k: k.patch_job(ns, "j1", {"spec": {"suspend": True}})),
        ("create_event", lambda k: k.create_event(ns, event)),
        ("get_configmap", lambda k: k.get_configmap(ns, "accel-autoscaler-state")),
        ("create_configmap", lambda k: k.create_configmap(ns, configmap)),
        (
            "replace_configmap",
            lambda k: k.replace_configmap(ns, "accel-autoscaler-state", configmap),
        ),
        ("get_lease", lambda k: k.get_lease(ns, "accel-autoscaler")),
        ("create_lease", lambda k: k.create_lease(ns, lease)),
        ("replace_lease", lambda k: k.replace_lease(ns, "accel-autoscaler", lease)),
        ("get_custom", lambda k: k.get_custom(CAPI_GROUP, CAPI_VERSION, ns, md, "md1")),
        ("list_custom", lambda k: k.list_custom(CAPI_GROUP, CAPI_VERSION, ns, md)),
        ("list_custom", lambda k: k.list_custom(CAPI_GROUP, CAPI_VERSION, ns, machines, "a=b")),
        (
            "patch_custom",
            lambda k: k.patch_custom(CAPI_GROUP, CAPI_VERSION, ns, machines, "m1", label),
        ),
        ("patch_custom", lambda k: k.patch_custom(CAPI_GROUP, CAPI_VERSION, ns, md, "md1", label)),
        ("get_custom", lambda k: k.get_custom(CAPI_GROUP, CAPI_VERSION, ns, machines, "m1")),
        ("list_custom", lambda k: k.list_custom(CAPI_GROUP, CAPI_VERSION, ns, "machinesets")),
        (
            "list_custom",
            lambda k: k.list_custom(CAPI_GROUP, CAPI_VERSION, ns, "machinehealthchecks"),
        ),
        (
            "delete_custom",
            lambda k: k.delete_custom(CAPI_GROUP, CAPI_VERSION, ns, machines, "m1", uid="u1"),
        ),
        *[
            (method, call)
            for g, v, p in GANG_OWNERS
            for method, call in (
                ("get_custom", _bind(lambda k, g, v, p: k.get_custom(g, v, ns, p, "g1"), g, v, p)),
                (
                    "patch_custom",
                    _bind(lambda k, g, v, p: k.patch_custom(g, v, ns, p, "g1", label), g, v, p),
                ),
            )
        ],
        (
            "create_custom",
            lambda k: k.create_custom(
                "bus.volcano.sh",
                "v1alpha1",
                ns,
                "commands",
                {
                    "apiVersion": "bus.volcano.sh/v1alpha1",
                    "kind": "Command",
                    "metadata": {"name": "c1", "namespace": ns},
                    "action": "RestartJob",
                },
            ),
        ),
        *[
            (method, _bind(call, SNR_GROUP, "v1alpha1", "selfnoderemediations"))
            for method, call in (
                ("get_custom", lambda k, g, v, p: k.get_custom(g, v, ns, p, "n1")),
                ("list_custom", lambda k, g, v, p: k.list_custom(g, v, ns, p)),
                (
                    "create_custom",
                    lambda k, g, v, p: k.create_custom(
                        g,
                        v,
                        ns,
                        p,
                        {
                            "apiVersion": f"{g}/{v}",
                            "kind": "SelfNodeRemediation",
                            "metadata": {"name": "n1", "namespace": ns},
                        },
                    ),
                ),
                ("delete_custom", lambda k, g, v, p: k.delete_custom(g, v, ns, p, "n1")),
            )
        ],
        *[
            ("list_custom", _bind(lambda k, g, v, p: k.list_custom(g, v, "", p), *kueue))
            for kueue in ((KUEUE_GROUP, "v1beta1", p) for p in KUEUE_LISTS)
        ],
        ("patch_custom_status", functools.partial(_evict_workload, ns=ns)),
        # ProvisioningRequests answered (autoscaler/provisioning.py).
        ("get_custom", lambda k: k.get_custom(KUEUE_GROUP, "v1beta1", ns, "workloads", "w1")),
        (
            "list_custom",
            lambda k: k.list_custom("autoscaling.x-k8s.io", "v1", "", "provisioningrequests"),
        ),
        ("patch_custom_status", functools.partial(_answer_request, ns=ns)),
        ("get_scale", lambda k: k.get_scale(CAPI_GROUP, CAPI_VERSION, ns, md, "md1")),
        ("patch_scale", lambda k: k.patch_scale(CAPI_GROUP, CAPI_VERSION, ns, md, "md1", 3)),
        ("list_resource_claims", lambda k: k.list_resource_claims()),
        ("list_resource_claims", lambda k: k.list_resource_claims(ns)),
        ("get_resource_claim", lambda k: k.get_resource_claim(ns, "c1")),
        ("list_resource_claim_templates", lambda k: k.list_resource_claim_templates()),
        ("list_resource_slices", lambda k: k.list_resource_slices(node="n1")),
        ("list_device_classes", lambda k: k.list_device_classes()),
    ]


async def _requests_per_method(tmp_path: Path) -> dict[str, set[tuple[str, str]]]:
    """Every Kube method called once on the real ClientKube, over HTTP, against the
    fake API server; what each sent, as RBAC sees it. A call may fail (NotFound on
    an empty server): the request it sent is what counts."""
    from autoscaler.kube.client import ClientKube
    from autoscaler.kube.errors import KubeError
    from tests.support.fakes.apiserver import FakeApiServer

    sent: dict[str, set[tuple[str, str]]] = {}
    async with FakeApiServer() as api:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        kube = ClientKube.from_config(str(config), attempts=1)
        try:
            for method, call in _protocol_calls():
                before = len(api.requests)
                with contextlib.suppress(KubeError):
                    await call(kube)
                sent.setdefault(method, set()).update(
                    rbac_of(r.method, r.path, r.query) for r in api.requests[before:]
                )
        finally:
            kube.close()
    return sent


async def _informer_requests(tmp_path: Path) -> set[tuple[str, str]]:
    """The requests the cluster-state watch cache makes, as RBAC sees them. Its
    watches are cut to one second so that the server logs them (at their end)."""
    import asyncio

    from autoscaler.kube import cache
    from autoscaler.kube.client import ClientKube
    from tests.support.fakes.apiserver import FakeApiServer

    async with FakeApiServer() as api:
        kube = ClientKube.from_config(str(api.write_kubeconfig(tmp_path / "informer.kubeconfig")))
        saved, cache.WATCH_SECONDS = cache.WATCH_SECONDS, 1
        cached = cache.CachedKube(kube)
        try:
            cached.start()
            assert await cached.wait_synced(10)
            loop = asyncio.get_running_loop()
            end = loop.time() + 10
            while loop.time() < end and not all(
                any("watch" in r.query for r in api.requests_for("GET", path))
                for path in (r"^/api/v1/nodes$", r"^/api/v1/pods$")
            ):
                await asyncio.sleep(0.05)
        finally:
            cache.WATCH_SECONDS = saved
            await asyncio.to_thread(cached.stop)
            kube.close()
        return {rbac_of(r.method, r.path, r.query) for r in api.requests}


async def test_kube_client_sends_exactly_the_verbs_rbac_grants(tmp_path: Path) -> None:
    """The wrapper's requests, as the API server sees them, against the Role. Each
    method sends only what METHOD_VERBS says it needs, every method sends
    something, and all of them together send every verb VERBS (so the rendered
    RBAC) grants."""
    assert {m for m, _ in _protocol_calls()} == protocol_methods()
    sent = await _requests_per_method(tmp_path)
    problems = [
        f"{method}: sent {resource} {verb}, which METHOD_VERBS does not give it"
        for method, pairs in sent.items()
        for resource, verb in sorted(pairs - METHOD_VERBS[method])
    ]
    problems += [f"{method}: sent no request" for method, pairs in sent.items() if not pairs]
    assert problems == [], "autoscaler/kube/client.py:\n" + "\n".join(problems)
    informed = await _informer_requests(tmp_path)
    assert informed == INFORMERS, f"the watch cache sent {sorted(informed)}"
    used = set().union(*sent.values()) | informed
    docs = rendered("nvidia")
    granted = rbac_pairs(one(docs, "ClusterRole", "accel-autoscaler")) | rbac_pairs(
        one(docs, "Role", "accel-autoscaler-leader-election")
    )
    assert used - granted == set(), "the client sends requests the RBAC refuses"
    assert granted - used == set(), (
        "the RBAC grants verbs the client never sends: remove them from VERBS in "
        "autoscaler/kube/protocol.py and run `.venv/bin/python deploy/generate.py`"
    )


# --- generated copies ---------------------------------------------------------


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_generate", DEPLOY / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_current() -> None:
    stale = [str(p.relative_to(REPO)) for p in generator().stale()]
    assert stale == [], (
        f"stale: {stale}; their sources changed (rules/remediation.yaml, rules/prometheus/, "
        "VERBS in autoscaler/kube/protocol.py): run `.venv/bin/python deploy/generate.py`"
    )


def test_rules_copy_is_byte_for_byte() -> None:
    copy = DEPLOY / "base" / "rules" / "remediation.yaml"
    assert copy.read_bytes() == (REPO / "rules" / "remediation.yaml").read_bytes(), (
        "deploy/base/rules/remediation.yaml differs from rules/remediation.yaml: "
        "run `.venv/bin/python deploy/generate.py`"
    )


def test_the_generator_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    """--check exits 1 on a stale copy, and a run rewrites it (all three outputs
    pointed into tmp_path, so the repository is left alone)."""
    gen: Any = generator()
    gen.REMEDIATION_COPY = tmp_path / "rules" / "remediation.yaml"
    gen.PROMETHEUS_RULE = tmp_path / "prometheusrule.yaml"
    gen.RBAC = tmp_path / "rbac.yaml"
    gen.REMEDIATION_COPY.parent.mkdir()
    gen.REMEDIATION_COPY.write_text("stale\n")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert gen.REMEDIATION_COPY.read_bytes() == gen.REMEDIATION_SOURCE.read_bytes()
    assert gen.RBAC.read_bytes() == (DEPLOY / "base" / "rbac.yaml").read_bytes()


def test_rules_configmap_loads_as_mounted(tmp_path: Path) -> None:
    """The ConfigMap as the kubelet mounts it (files are symlinks into a hidden
    ..data directory), checked by the real `accel-autoscaler check`."""
    cm = one_named_like(rendered("nvidia"), "ConfigMap", "accel-autoscaler-rules-")
    deployment = one(rendered("nvidia"), "Deployment", "accel-autoscaler")
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "rules"
    )
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    mount = tmp_path / "rules"
    data = mount / "..2026_11_29_00_00_00.000000000"
    data.mkdir(parents=True)
    for name, text in cm["data"].items():
        (data / name).write_text(text)
        (mount / name).symlink_to(Path("..data") / name)
    (mount / "..data").symlink_to(data.name)
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", str(mount)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    c = container(deployment, "autoscaler")
    mounted = next(m for m in c["volumeMounts"] if m["name"] == "rules")
    assert flag(c["args"], "--rules") == mounted["mountPath"]


def test_prometheus_rule_passes_promtool(tmp_path: Path) -> None:
    rule = one(rendered("nvidia"), "PrometheusRule", "accel-fleet")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make peers` installs Debian's prometheus"
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sources = [yaml.safe_load(p.read_text()) for p in generator().prometheus_rule_files()]
    assert rule["spec"]["groups"] == [g for s in sources for g in s["groups"]]


# --- the flags, ports and paths agree with the code ---------------------------


def parse_exporter(args: list[str]) -> Any:
    from exporter.cli import build_parser

    try:
        return build_parser().parse_args(args)
    except SystemExit as e:
        pytest.fail(f"accel-exporter refuses the DaemonSet's args {args} (exit {e.code})")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_exporter_args_parse_and_match_the_mounts(overlay: str) -> None:
    from exporter.backends import REGISTRY

    daemonset = one(rendered(overlay), "DaemonSet", "accel-exporter")
    c = container(daemonset, "exporter")
    args = expand(c["args"], c.get("env", []))
    parsed = parse_exporter(args)
    backends = flag(args, "--backends").split(",")
    assert set(backends) <= set(REGISTRY), backends
    assert VENDOR[overlay][0] in backends
    spec = daemonset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for option, host in (("--path.sysfs", "/sys"), ("--path.procfs", "/proc")):
        mount = mounts[flag(args, option)]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["hostPath"]["path"] == host
    socket_dir = str(Path(parsed.kubelet_socket).parent)
    mount = mounts[socket_dir]
    assert volumes[mount["name"]]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    if overlay in SELECTED_BY_AFFINITY:
        (term,) = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": VENDOR[overlay][1], "operator": "Exists"}]
    else:
        assert spec["nodeSelector"] == {VENDOR[overlay][1]: SELECTOR_VALUE.get(overlay, "true")}
    assert spec["tolerations"], f"{overlay}: no toleration for tainted GPU nodes"


def test_exporter_resources_follow_the_bench_figures() -> None:
    """docs/performance.md: ~46 MiB RSS, 0.053 ms CPU per scrape."""
    performance = (REPO / "docs" / "performance.md").read_text()
    rss = max(float(x) for x in re.findall(r"(\d+\.\d) MiB \|", performance))
    for overlay in OVERLAYS:
        c = container(one(rendered(overlay), "DaemonSet", "accel-exporter"), "exporter")
        res = c["resources"]
        assert res["requests"]["cpu"] == "50m" and res["requests"]["memory"] == "64Mi"
        limit_mib = int(res["limits"]["memory"].removesuffix("Mi"))
        assert limit_mib >= 2 * rss, f"{overlay}: memory limit leaves too little headroom"


def test_nvidia_overlay_reaches_nvml_through_the_toolkit() -> None:
    spec = one(rendered("nvidia"), "DaemonSet", "accel-exporter")["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    env = {
        e["name"]: e["value"]
        for e in container({"spec": {"template": {"spec": spec}}}, "exporter")["env"]
    }
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_intel_overlay_uses_the_monitoring_resource() -> None:
    c = container(one(rendered("intel"), "DaemonSet", "accel-exporter"), "exporter")
    assert c["resources"]["limits"]["gpu.intel.com/i915_monitoring"] == 1
    assert "privileged" not in c["securityContext"]


def test_amd_smi_component_gives_the_device_nodes() -> None:
    daemonset = one(rendered("amd+amd-smi"), "DaemonSet", "accel-exporter")
    c = container(daemonset, "exporter")
    paths = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/dev/kfd", "/dev/dri", "/opt/rocm"} <= paths
    plain = container(one(rendered("amd"), "DaemonSet", "accel-exporter"), "exporter")
    assert not {"/dev/kfd", "/dev/dri"} & {m["mountPath"] for m in plain["volumeMounts"]}


def test_autoscaler_args_parse(tmp_path: Path) -> None:
    """The Deployment's flags are the ones `accel-autoscaler run` takes. The parser
    checks that the files it names exist, so the pod's mounts are laid out under
    tmp_path: the rules ConfigMap with its data, the token Secret with a token."""
    from autoscaler.cli import build_parser

    docs = rendered("nvidia")
    deployment = one(docs, "Deployment", "accel-autoscaler")
    c = container(deployment, "autoscaler")
    args = expand(c["args"], c["env"])
    assert c["command"] == ["accel-autoscaler"] and args[0] == "run"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    original = list(args)
    # Longest mount path first, so /etc/x/rules wins over a mount at /etc/x.
    for mount in sorted(c["volumeMounts"], key=lambda m: -len(m["mountPath"])):
        here = tmp_path / mount["name"]
        here.mkdir()
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            cm = one(docs, "ConfigMap", volume["configMap"]["name"])
            for name, text in cm["data"].items():
                (here / name).write_text(text)
        for i, arg in enumerate(original):
            option, _, value = arg.partition("=")
            inside = Path(value).is_relative_to(mount["mountPath"]) if value else False
            if inside and args[i] == arg:
                local = here / Path(value).relative_to(mount["mountPath"])
                if "secret" in volume:
                    local.write_text("a-token\n")
                args[i] = f"{option}={local}"
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as e:
        pytest.fail(f"accel-autoscaler refuses the Deployment's args {args} (exit {e.code})")
    assert parsed.source == "prometheus"


def test_leader_election_wiring() -> None:
    deployment = one(rendered("nvidia"), "Deployment", "accel-autoscaler")
    assert deployment["spec"]["replicas"] == 2
    c = container(deployment, "autoscaler")
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    assert "--leader-elect" in c["args"] and "--no-leader-elect" not in c["args"]
    assert flag(c["args"], "--leader-elect.identity") == "$(POD_NAME)"
    durations = [
        flag(c["args"], f"--leader-elect.{k}")
        for k in ("lease-duration", "renew-deadline", "retry-period")
    ]
    seconds = [int(d.removesuffix("s")) for d in durations]
    assert seconds[0] > seconds[1] > seconds[2], "lease duration > renew deadline > retry period"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > seconds[1]
    pdb = one(rendered("nvidia"), "PodDisruptionBudget", "accel-autoscaler")
    assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(
    ("kind", "name", "container_name", "default_port"),
    [
        ("DaemonSet", "accel-exporter", "exporter", 9835),
        ("Deployment", "accel-autoscaler", "autoscaler", 9836),
    ],
)
def test_probes_and_ports_reach_the_listener(
    kind: str, name: str, container_name: str, default_port: int
) -> None:
    docs = rendered("nvidia")
    workload = one(docs, kind, name)
    c = container(workload, container_name)
    listen = int(flag(c["args"], "--web.listen-address").rsplit(":", 1)[1])
    assert listen == default_port
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/healthz" and ports[get["port"]] == listen
    service = one(docs, "Service", name)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    for port in service["spec"]["ports"]:
        target = port.get("targetPort", port["port"])
        assert target in ports or target in ports.values()


def test_monitors_select_what_they_scrape() -> None:
    docs = rendered("nvidia")
    pod_monitor = one(docs, "PodMonitor", "accel-exporter")
    daemonset = one(docs, "DaemonSet", "accel-exporter")
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in container(daemonset, "exporter")["ports"]}
    endpoint = pod_monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] in ports
    # The node label every rule groups by, and no clash with accel_device_pod_info.
    relabel = endpoint["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in relabel
    dropped = [r["regex"] for r in relabel if r.get("action") == "labeldrop"]
    assert dropped and all(re.fullmatch(dropped[0], x) for x in ("namespace", "pod", "container"))
    service_monitor = one(docs, "ServiceMonitor", "accel-autoscaler")
    service = one(docs, "Service", "accel-autoscaler")
    assert (
        service_monitor["spec"]["selector"]["matchLabels"].items()
        <= service["metadata"]["labels"].items()
    )
    assert service_monitor["spec"]["endpoints"][0]["port"] in {
        p["name"] for p in service["spec"]["ports"]
    }


# --- the Alertmanager receiver example -----------------------------------------


def test_alertmanager_receiver_passes_amtool_and_reaches_the_service() -> None:
    path = DEPLOY / "base" / "alertmanager-receiver.yaml"
    amtool = shutil.which("amtool")
    assert amtool, "amtool not found: `make peers` installs Debian's prometheus-alertmanager"
    proc = subprocess.run(
        [amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load(path.read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "accel-autoscaler")
    hook = receiver["webhook_configs"][0]
    docs = rendered("nvidia")
    service = one(docs, "Service", "accel-autoscaler-webhook")
    namespace = service["metadata"]["namespace"]
    port = service["spec"]["ports"][0]["port"]
    assert hook["url"] == f"http://accel-autoscaler-webhook.{namespace}.svc:{port}/api/v1/alerts"
    # Only the leader's pod: the label the controller sets while it holds the Lease.
    from accel_common.names import LEADER_LABEL

    assert service["spec"]["selector"][LEADER_LABEL] == "true"
    # The token Alertmanager sends is the one the controller checks.
    deployment = one(docs, "Deployment", "accel-autoscaler")
    c = container(deployment, "autoscaler")
    token_file = Path(flag(c["args"], "--api.token-file"))
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(token_file.parent))
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    )
    secret = volume["secret"]["secretName"]
    credentials = Path(hook["http_config"]["authorization"]["credentials_file"])
    assert credentials == Path("/etc/alertmanager/secrets") / secret / token_file.name


def _firing(url: str) -> float | None:
    from tests.support.procs import http_get

    try:
        text = http_get(url + "/metrics").decode()
    except OSError:
        return None
    found = re.search(r"^accel_autoscaler_alerts_firing (\S+)$", text, re.M)
    return float(found[1]) if found else None


def test_alertmanager_receiver_delivers_to_the_controller(tmp_path: Path) -> None:
    """The shipped route and receiver in Debian's Alertmanager, posting to a real
    `accel-autoscaler run` that requires the token: a device alert arrives (the
    route matches, the path and bearer token are right), the controller's own alert
    does not (the route keeps it out)."""
    import time
    import urllib.request
    from urllib.parse import urlsplit

    from tests.support.procs import free_port, require, wait_http

    token = tmp_path / "token"
    token.write_text("t0ken-from-a-secret\n")
    config = yaml.safe_load((DEPLOY / "base" / "alertmanager-receiver.yaml").read_text())
    hook = next(r for r in config["receivers"] if r["name"] == "accel-autoscaler")
    hook = hook["webhook_configs"][0]
    port = free_port()
    hook["url"] = f"http://127.0.0.1:{port}{urlsplit(hook['url']).path}"
    hook["http_config"]["authorization"]["credentials_file"] = str(token)
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config: dry-run without an API server
    rules = DEPLOY / "base" / "rules"
    controller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "run",
            f"--rules={rules}",
            "--source=prometheus",
            f"--prometheus.url=http://127.0.0.1:{free_port()}",
            f"--api.token-file={token}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--dry-run",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    am_port, cluster_port = free_port(), free_port()
    (tmp_path / "am-data").mkdir()
    am = subprocess.Popen(
        [
            require("prometheus-alertmanager"),
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            f"--cluster.listen-address=127.0.0.1:{cluster_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url, am_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{am_port}"
        wait_http(url + "/healthz", timeout=30)
        wait_http(am_url + "/-/ready", timeout=30)
        alerts = [
            {"labels": {"alertname": "AccelAutoscalerSourceDown", "instance": "x"}},
            {"labels": {"alertname": "AccelDeviceFatalFault", "node": "n1", "device": "nvidia0"}},
        ]
        request = urllib.request.Request(
            am_url + "/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        deadline = time.monotonic() + 20
        while _firing(url) != 1:
            assert time.monotonic() < deadline, "the device alert never reached the controller"
            time.sleep(0.1)
        time.sleep(2)  # the other alert, had it been routed, went out at the same time
        assert _firing(url) == 1
    finally:
        for proc in (am, controller):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# --- the install page (docs/install.md) follows these files ---------------------


def test_install_page_follows_deploy() -> None:
    section = (REPO / "docs" / "install.md").read_text()
    for overlay in OVERLAYS:
        assert f"deploy/overlays/{overlay}" in section
    assert "accel-autoscaler-api" in section  # the Secret the Deployment mounts
    assert "alertmanager-receiver.yaml" in section
    assert "deploy/generate.py" in section


def _heredocs(section: str) -> list[str]:
    """The bodies of the section's `cat > FILE <<'EOF'` / `cat >> FILE <<'EOF'`
    commands, in order, with the list's indentation removed."""
    bodies = []
    command = r"^( *)[^\n]*cat >>? my-cluster/kustomization\.yaml <<'EOF'\n(.*?)\n *EOF$"
    for match in re.finditer(command, section, re.S | re.M):
        indent = len(match[1])
        bodies.append("\n".join(line[indent:] for line in match[2].splitlines()) + "\n")
    return bodies


def test_install_page_steps_render_and_validate(tmp_path: Path) -> None:
    """Steps 3 and 5 of docs/install.md, as written: the user's overlay (image,
    Prometheus label, the --dry-run patch) renders, validates and parses."""
    section = (REPO / "docs" / "install.md").read_text()
    bodies = _heredocs(section)
    assert len(bodies) == 2, "step 3 writes my-cluster/kustomization.yaml, step 5 appends"
    mine = tmp_path / "my-cluster"
    mine.mkdir()
    rel = os.path.relpath(DEPLOY, mine)
    text = "".join(bodies).replace("../deploy/", f"{rel}/")
    (mine / "kustomization.yaml").write_text(text)
    docs = kustomize(mine)
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS:
            kubernetes_validate.validate(doc, VERSIONS[0], strict=True)
    assert one(tuple(docs), "PodMonitor", "accel-exporter")["metadata"]["labels"]["release"]
    deployment = one(tuple(docs), "Deployment", "accel-autoscaler")
    c = container(deployment, "autoscaler")
    assert c["image"] == "REGISTRY/accel-fleet:0.1.0"
    assert c["args"][-1] == "--dry-run"
    assert (
        "--dry-run"
        not in container(one(rendered("nvidia"), "Deployment", "accel-autoscaler"), "autoscaler")[
            "args"
        ]
    )
