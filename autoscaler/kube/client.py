"""``ClientKube``: the ``Kube`` protocol on the official ``kubernetes`` client.

Why it is built this way:

- The sync client runs in a worker thread (``asyncio.to_thread``), so a slow API
  server never blocks the controller's loop, and the client's own TLS, token
  refresh and connection pool are the ones used in production.
- Requests go through the client's generic request path (``ApiClient.param_serialize``
  and ``call_api``, which every generated method calls) with the response left
  undecoded, rather than through the generated methods. Those validate bodies with
  pydantic models that refuse JSON the server accepts (``"nvidia.com/gpu": 1``, a
  field newer than the client) and turn every answer into model objects; callers
  want the API's own JSON, and decoding it with ``json.loads`` is fast (1,000 nodes
  in milliseconds).
- urllib3's own retries are off (``Configuration.retries = False``): tenacity is
  the one retry layer, so the number of attempts is bounded and known. It retries
  ``Transient`` (5xx, no answer, timeouts) and throttling 429s with exponential
  backoff. An eviction's 429 is not retried: it is a PodDisruptionBudget saying
  "not now", and the drain waits on it within its own ``drainTimeout``. Conflicts
  are not retried here either: only the caller can re-read and decide again.
- Names are checked before they go into a path or a field selector
  (``autoscaler/kube/names.py``): a name no object can have is ``InvalidName``,
  raised before any request, so a metric label such as ``n1/status`` never reaches
  a subresource.
- Lease writes are never dry-run: leader election is how replicas agree who acts,
  and a dry-run replica must still hold the Lease so that two of them do not both
  report what they would do.

``DryRunKube`` (``dryrun.py``) wraps a ``ClientKube`` (or any ``Kube``) for
``--dry-run``; with ``dry_run=True`` this client sends writes with ``dryRun=All``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from accel_common.names import DRA_GROUP
from autoscaler.kube import names
from autoscaler.kube.errors import KubeError, TooManyRequests, Transient, from_status
from autoscaler.kube.protocol import Obj

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_CONTENT = "application/json"
LEASES = "coordination.k8s.io/leases"
DRA_PREFIX = f"/apis/{DRA_GROUP}/v1"
CLAIMS = "resourceclaims"
CLAIM_TEMPLATES = "resourceclaimtemplates"
SLICES = "resourceslices"
DEVICE_CLASSES = "deviceclasses"


class KubeConfigError(Exception):
    """No usable Kubernetes configuration; the message names everything tried."""


def _q(part: str) -> str:
    return quote(part, safe="")


# Every name goes into a path through these two, and each is checked first
# (autoscaler/kube/names.py): ``n1/status`` must not reach a subresource, whoever
# asks. ``InvalidName`` is raised before any request, so nothing is counted either.


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{_q(names.check('node', name))}"


def _ns_path(prefix: str, namespace: str, plural: str, name: str | None = None) -> str:
    path = f"{prefix}/namespaces/{_q(names.check('namespace', namespace))}/{plural}"
    if name is None:
        return path
    return f"{path}/{_q(names.check(plural.removesuffix('s'), name))}"


def _status_of(data: bytes) -> tuple[str, str]:
    """(message, reason) from a ``Status`` body, or the raw text when it is none."""
    try:
        body = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")[:500], ""
    if isinstance(body, dict) and body.get("kind") == "Status":
        return str(body.get("message", "")), str(body.get("reason", ""))
    return data.decode("utf-8", "replace")[:500], ""


def _with_kinds(listing: Obj) -> list[Obj]:
    """List items as ``kubectl get -o json`` prints them: a real server leaves
    ``kind`` and ``apiVersion`` off built-in items; put them back from the list's."""
    kind = str(listing.get("kind", ""))
    kind = kind.removesuffix("List")
    api_version = listing.get("apiVersion")
    items: list[Obj] = listing.get("items") or []
    for item in items:
        if kind:
            item.setdefault("kind", kind)
        if api_version:
            item.setdefault("apiVersion", api_version)
    return items


class ClientKube:
    """The ``Kube`` protocol over the official client. ``request_counts`` counts every
    answer by (verb, resource, HTTP status; 0 for no answer) for ``/metrics``."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        dry_run: bool = False,
        attempts: int = 5,
        backoff_min: float = 0.2,
        backoff_max: float = 5.0,
        request_timeout: float = 30.0,
    ) -> None:
        self.api = api_client
        self.dry_run = dry_run
        self.attempts = attempts
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self.request_counts: Counter[tuple[str, str, int]] = Counter()
        self._count_lock = threading.Lock()

    @classmethod
    def from_config(cls, kubeconfig: str | None, *, dry_run: bool = False, **kw: Any) -> ClientKube:
        """An explicit ``kubeconfig`` path first; else the in-cluster service account
        when running in a pod (``KUBERNETES_SERVICE_HOST``); else ``$KUBECONFIG``,
        then ``~/.kube/config``. ``kw`` goes to the constructor."""
        configuration = load_configuration(kubeconfig)
        configuration.retries = False  # tenacity is the one retry layer
        return cls(k8s.ApiClient(configuration), dry_run=dry_run, **kw)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # -- the request path

    async def _send(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        write: bool = False,
        retry_throttled: bool = True,
    ) -> Any:
        query = list(query or [])
        if write and self.dry_run and resource != LEASES:
            query.append(("dryRun", "All"))

        def worth_retrying(e: BaseException) -> bool:
            if isinstance(e, TooManyRequests):
                return retry_throttled
            return isinstance(e, Transient)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential_jitter(
                multiplier=self.backoff_min, max=self.backoff_max, jitter=self.backoff_min
            ),
            retry=retry_if_exception(worth_retrying),
            before_sleep=_log_retry,
            reraise=True,
        )
        return await retrying(
            asyncio.to_thread,
            self._once,
            verb,
            resource,
            method,
            path,
            query,
            body,
            content_type,
        )

    def _once(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: Any,
        content_type: str | None,
    ) -> Any:
        headers: dict[str, str] = {"Accept": JSON_CONTENT}
        if body is not None:
            headers["Content-Type"] = content_type or JSON_CONTENT
        where = f"{method} {path}"
        try:
            m, url, h, b, post = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                m,
                url,
                header_params=h,
                body=b,
                post_params=post,
                _request_timeout=self.request_timeout,
            )
            data: bytes = response.read() or b""  # type: ignore[no-untyped-call]
        except ApiException as e:  # the client's own refusals (TLS): no HTTP answer
            self._count(verb, resource, 0)
            raise from_status(e.status or 0, f"{where}: {e.reason}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            self._count(verb, resource, 0)
            raise Transient(f"{where}: no answer from the API server: {e}", status=0) from e
        status = int(response.status)
        self._count(verb, resource, status)
        if not 200 <= status < 300:
            message, reason = _status_of(data)
            raise from_status(status, f"{where}: {status} {message}", reason)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise KubeError(f"{where}: the answer is not JSON: {e}", status=status) from e

    def _count(self, verb: str, resource: str, status: int) -> None:
        with self._count_lock:
            self.request_counts[(verb, resource, status)] += 1

    async def _get(self, resource: str, path: str) -> Obj:
        obj: Obj = await self._send("get", resource, "GET", path)
        return obj

    async def _list(self, resource: str, path: str, query: list[tuple[str, str]]) -> list[Obj]:
        listing: Obj = await self._send("list", resource, "GET", path, query=query)
        return _with_kinds(listing)

    async def _patch(self, resource: str, path: str, patch: Obj) -> Obj:
        obj: Obj = await self._send(
            "patch", resource, "PATCH", path, body=patch, content_type=MERGE_PATCH, write=True
        )
        return obj

    async def _create(self, resource: str, path: str, body: Obj) -> Obj:
        obj: Obj = await self._send("create", resource, "POST", path, body=body, write=True)
        return obj

    # -- nodes

    async def get_node(self, name: str) -> Obj:
        return await self._get("nodes", _node_path(name))

    async def list_nodes(self, label_selector: str | None = None) -> list[Obj]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return await self._list("nodes", "/api/v1/nodes", query)

    async def patch_node(self, name: str, patch: Obj) -> Obj:
        return await self._patch("nodes", _node_path(name), patch)

    # -- pods

    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        path = _ns_path("/api/v1", namespace, "pods") if namespace else "/api/v1/pods"
        query: list[tuple[str, str]] = []
        if node is not None:  # a field selector is as good as a path for mischief
            query.append(("fieldSelector", f"spec.nodeName={names.check('node', node)}"))
        if label_selector:
            query.append(("labelSelector", label_selector))
        return await self._list("pods", path, query)

    async def get_pod(self, namespace: str, name: str) -> Obj:
        return await self._get("pods", _ns_path("/api/v1", namespace, "pods", name))

    async def create_pod(self, namespace: str, body: Obj) -> Obj:
        return await self._create("pods", _ns_path("/api/v1", namespace, "pods"), body)

    async def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        return await self._patch("pods", _ns_path("/api/v1", namespace, "pods", name), patch)

    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        options = _delete_options(grace_period_seconds, uid, dry_run=False)
        await self._send(
            "delete",
            "pods",
            "DELETE",
            _ns_path("/api/v1", namespace, "pods", name),
            body={"apiVersion": "v1", "kind": "DeleteOptions", **options},
            write=True,
        )

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        eviction: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        options = _delete_options(grace_period_seconds, uid, dry_run=self.dry_run)
        if options:
            eviction["deleteOptions"] = options
        await self._send(
            "create",
            "pods/eviction",
            "POST",
            _ns_path("/api/v1", namespace, "pods", name) + "/eviction",
            body=eviction,
            retry_throttled=False,  # a PDB refusal: the caller waits on its own clock
        )

    # -- jobs

    async def get_job(self, namespace: str, name: str) -> Obj:
        return await self._get("batch/jobs", _ns_path("/apis/batch/v1", namespace, "jobs", name))

    async def patch_job(self, namespace: str, name: str, patch: Obj) -> Obj:
        path = _ns_path("/apis/batch/v1", namespace, "jobs", name)
        return await self._patch("batch/jobs", path, patch)

    # -- events

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return await self._create("events", _ns_path("/api/v1", namespace, "events"), body)

    # -- leases

    async def get_lease(self, namespace: str, name: str) -> Obj:
        return await self._get(LEASES, _lease_path(namespace, name))

    async def create_lease(self, namespace: str, body: Obj) -> Obj:
        return await self._create(LEASES, _lease_path(namespace, None), body)

    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        obj: Obj = await self._send(
            "update", LEASES, "PUT", _lease_path(namespace, name), body=body, write=True
        )
        return obj

    # -- configmaps

    async def get_configmap(self, namespace: str, name: str) -> Obj:
        return await self._get("configmaps", _ns_path("/api/v1", namespace, "configmaps", name))

    async def create_configmap(self, namespace: str, body: Obj) -> Obj:
        path = _ns_path("/api/v1", namespace, "configmaps")
        return await self._create("configmaps", path, body)

    async def replace_configmap(self, namespace: str, name: str, body: Obj) -> Obj:
        path = _ns_path("/api/v1", namespace, "configmaps", name)
        obj: Obj = await self._send("update", "configmaps", "PUT", path, body=body, write=True)
        return obj

    # -- custom resources

    async def get_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural, name)
        return await self._get(f"{group}/{plural}", path)

    async def list_custom(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        label_selector: str | None = None,
    ) -> list[Obj]:
        prefix = f"/apis/{group}/{version}"
        # No namespace: a cluster-scoped kind, or a namespaced one across namespaces.
        path = _ns_path(prefix, namespace, plural) if namespace else f"{prefix}/{plural}"
        query = [("labelSelector", label_selector)] if label_selector else []
        return await self._list(f"{group}/{plural}", path, query)

    async def patch_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural, name)
        return await self._patch(f"{group}/{plural}", path, patch)

    async def patch_custom_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, patch: Obj
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural, name) + "/status"
        return await self._patch(f"{group}/{plural}/status", path, patch)

    async def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural)
        return await self._create(f"{group}/{plural}", path, body)

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
        options = _delete_options(None, uid, dry_run=False)
        await self._send(
            "delete",
            f"{group}/{plural}",
            "DELETE",
            _ns_path(f"/apis/{group}/{version}", namespace, plural, name),
            body={"apiVersion": "v1", "kind": "DeleteOptions", **options},
            write=True,
        )

    async def get_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural, name) + "/scale"
        return await self._get(f"{group}/{plural}/scale", path)

    async def patch_scale(
        self, group: str, version: str, namespace: str, plural: str, name: str, replicas: int
    ) -> Obj:
        path = _ns_path(f"/apis/{group}/{version}", namespace, plural, name) + "/scale"
        return await self._patch(f"{group}/{plural}/scale", path, {"spec": {"replicas": replicas}})

    # -- Dynamic Resource Allocation (resource.k8s.io/v1), read only

    async def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        return await self._list(f"{DRA_GROUP}/{CLAIMS}", _dra_path(namespace, CLAIMS), [])

    async def get_resource_claim(self, namespace: str, name: str) -> Obj:
        path = _ns_path(DRA_PREFIX, namespace, CLAIMS, name)
        return await self._get(f"{DRA_GROUP}/{CLAIMS}", path)

    async def list_resource_claim_templates(self, namespace: str | None = None) -> list[Obj]:
        path = _dra_path(namespace, CLAIM_TEMPLATES)
        return await self._list(f"{DRA_GROUP}/{CLAIM_TEMPLATES}", path, [])

    async def list_resource_slices(self, node: str | None = None) -> list[Obj]:
        query: list[tuple[str, str]] = []
        if node is not None:
            query.append(("fieldSelector", f"spec.nodeName={names.check('node', node)}"))
        return await self._list(f"{DRA_GROUP}/{SLICES}", f"{DRA_PREFIX}/{SLICES}", query)

    async def list_device_classes(self) -> list[Obj]:
        path = f"{DRA_PREFIX}/{DEVICE_CLASSES}"
        return await self._list(f"{DRA_GROUP}/{DEVICE_CLASSES}", path, [])


def _dra_path(namespace: str | None, plural: str) -> str:
    return _ns_path(DRA_PREFIX, namespace, plural) if namespace else f"{DRA_PREFIX}/{plural}"


def _lease_path(namespace: str, name: str | None) -> str:
    return _ns_path("/apis/coordination.k8s.io/v1", namespace, "leases", name)


def _delete_options(grace: int | None, uid: str | None, *, dry_run: bool) -> Obj:
    options: Obj = {}
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    if dry_run:
        options["dryRun"] = ["All"]
    return options


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    delay = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning(
        "API call failed (attempt %d), retrying in %.2fs: %s", state.attempt_number, delay, error
    )


def load_configuration(kubeconfig: str | None) -> k8s.Configuration:
    """The client configuration, from the first source that works (see
    ``ClientKube.from_config``); ``KubeConfigError`` names every source tried."""
    configuration = k8s.Configuration()
    tried: list[str] = []
    if kubeconfig:
        _load_file(kubeconfig, configuration, f"--kubeconfig {kubeconfig}")
        return configuration
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return configuration
        except ConfigException as e:
            tried.append(f"the in-cluster service account ({e})")
    else:
        tried.append("the in-cluster service account (KUBERNETES_SERVICE_HOST is not set)")
    candidates = []
    if os.environ.get("KUBECONFIG"):
        candidates.append((os.environ["KUBECONFIG"], f"$KUBECONFIG={os.environ['KUBECONFIG']}"))
    candidates.append((str(Path("~/.kube/config").expanduser()), "~/.kube/config"))
    for path, label in candidates:
        if not any(Path(p).is_file() for p in path.split(os.pathsep) if p):
            tried.append(f"{label} (no such file)")
            continue
        try:
            _load_file(path, configuration, label)
            return configuration
        except KubeConfigError as e:
            tried.append(str(e))
    raise KubeConfigError(
        "no Kubernetes configuration found; tried "
        + "; ".join(tried)
        + ". Pass --kubeconfig PATH, set $KUBECONFIG, or run in a pod with a service account."
    )


def _load_file(path: str, configuration: k8s.Configuration, label: str) -> None:
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=configuration
        )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        raise KubeConfigError(f"{label}: cannot load it as a kubeconfig: {e}") from e


__all__ = ["ClientKube", "KubeConfigError", "load_configuration"]
