"""The running agent: its Node through the API server, the tasks every interval, metrics.

Why it is built this way:

* The agent talks to the API server about one object, its own Node: GET it, and
  merge-patch its labels and annotations. RBAC grants it exactly that (get and
  patch on nodes), so ``NodeAPI`` is two calls on the ``kubernetes`` client's
  generic request path, with the API's own JSON (no model objects that refuse
  fields newer than the client).
* **Every write is conditional.** The merge-patch carries the resourceVersion of the
  Node the tasks decided on, as the controller's ``update_node`` does; a 409 Conflict
  (the controller closed a request, a person edited the Node) reads the Node again
  and lets the tasks decide again, up to ``CAS_ATTEMPTS`` times. Work that needs its
  answer on the Node first (``NodePatch.after``: a reset, a reboot) runs only after
  that conditional write succeeded, and what it did is written the same way.
* Nothing the cluster or the hardware does ends the agent: a failed GET or PATCH is
  logged and retried with exponential backoff (up to ``max_backoff``), a task that
  raises is skipped for the round (``nodeagent.loop``). An agent that exits leaves
  a node whose requests nobody answers, which is worse than one that says why it
  cannot answer yet.
* The tasks and the API run in a worker thread: NVML and sysfs calls block, and
  the /metrics listener must keep answering while a MIG layout is being built.
* ``/metrics`` is the agent's own small listener (127.0.0.1:9837 by default: the
  exporter owns the node's public metrics port, and the agent's series are few),
  rendered through ``prometheus-client`` from a frozen status (``status``), with
  the names in the agent's catalogue (``nodeagent/metrics.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import quote

from accel_common.ownmetrics import CONTENT_TYPE
from nodeagent.loop import reconcile_tasks, start_tasks
from nodeagent.metrics import AgentStatus
from nodeagent.metrics import render as render_status
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext, NodePatch, Task, Work

log = logging.getLogger("accel_node_agent")

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = 30.0
# Conditional writes in a row that may meet a Conflict before the round gives up (and
# backs off): the Node changes under the agent only when someone else writes it.
CAS_ATTEMPTS = 5


class NodeAPIError(Exception):
    """A GET or PATCH of the Node that did not succeed; the message says which."""


class NodeConflict(NodeAPIError):
    """A conditional PATCH answered 409 Conflict: the Node changed since it was read."""


class NodeClient(Protocol):
    """What the loop needs of the API: ``NodeAPI``, or a test's wrapper of it."""

    def get(self, name: str) -> dict[str, Any]: ...

    def patch(
        self, name: str, patch: NodePatch, resource_version: str | None = None
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


class NodeAPI:
    """GET and merge-PATCH of one Node with the official ``kubernetes`` client."""

    def __init__(self, api_client: Any, timeout: float = REQUEST_TIMEOUT) -> None:
        self.api = api_client
        self.timeout = timeout

    @classmethod
    def from_config(cls, kubeconfig: str = "") -> NodeAPI:
        """In-cluster when running in a pod (and no ``kubeconfig`` is given), else the
        kubeconfig file (``kubeconfig``, $KUBECONFIG, ~/.kube/config)."""
        import os

        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        configuration = k8s.Configuration()
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig or None, client_configuration=configuration
            )
        configuration.retries = False  # the agent's loop is the one retry layer
        return cls(k8s.ApiClient(configuration))

    def _call(self, method: str, name: str, body: Any = None) -> dict[str, Any]:
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH
        try:
            m, url, h, b, post = self.api.param_serialize(
                method=method,
                resource_path=path,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                m, url, header_params=h, body=b, post_params=post, _request_timeout=self.timeout
            )
            data = response.read() or b""
        except Exception as e:  # TLS, connection refused, timeouts: all retried
            raise NodeAPIError(f"{method} {path}: no answer from the API server: {e}") from e
        status = int(response.status)
        if status == 409:
            raise NodeConflict(f"{method} {path}: 409 Conflict: the Node changed since it was read")
        if not 200 <= status < 300:
            text = data.decode("utf-8", "replace")[:300]
            raise NodeAPIError(f"{method} {path}: {status} {text}")
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as e:  # a broken proxy's answer, not a Node
            raise NodeAPIError(f"{method} {path}: the answer is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise NodeAPIError(f"{method} {path}: the answer is not an object")
        return obj

    def get(self, name: str) -> dict[str, Any]:
        return self._call("GET", name)

    def patch(
        self, name: str, patch: NodePatch, resource_version: str | None = None
    ) -> dict[str, Any]:
        """A merge-patch of the Node's labels and annotations; with
        ``resource_version``, applied only when the Node still has it (NodeConflict
        otherwise)."""
        metadata: dict[str, Any] = {}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        if patch.labels:
            metadata["labels"] = patch.labels
        if patch.annotations:
            metadata["annotations"] = patch.annotations
        return self._call("PATCH", name, {"metadata": metadata})

    def close(self) -> None:
        self.api.close()


def changes(node: dict[str, Any], patch: NodePatch) -> NodePatch:
    """The part of ``patch`` that changes ``node``: a key set to what it already
    holds, or deleted when absent, is left out, so a steady node is never written.
    A patch with ``after`` work is kept whole: its write is the check that the Node
    is still as the tasks saw it."""
    if patch.after:
        return patch
    meta = node.get("metadata") or {}
    out = NodePatch()
    for mine, theirs, now in (
        (patch.labels, out.labels, meta.get("labels") or {}),
        (patch.annotations, out.annotations, meta.get("annotations") or {}),
    ):
        for key, value in mine.items():
            if now.get(key) != value:
                theirs[key] = value
    return out


def version_of(node: Mapping[str, Any]) -> str:
    """The Node's resourceVersion, the precondition of the write that answers it."""
    meta = node.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    if not isinstance(version, str) or not version:
        raise NodeAPIError("the API server answered a Node without metadata.resourceVersion")
    return version


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    return str(meta.get("name", "?"))[:253] if isinstance(meta, Mapping) else "?"


class Agent:
    """The loop of one node's agent; ``round`` is one pass, ``run`` repeats it."""

    def __init__(
        self,
        api: NodeClient,
        ctx: AgentContext,
        tasks: list[Task],
        *,
        interval: float = 30.0,
        max_backoff: float = 300.0,
    ) -> None:
        self.api = api
        self.ctx = ctx
        self.tasks = tasks
        self.interval = interval
        self.max_backoff = max_backoff
        self.started = False
        self.failures = 0  # consecutive failed rounds
        self.rounds: dict[str, int] = {"ok": 0, "error": 0}
        self.last_success = 0.0
        self._lock = threading.Lock()

    def round(self) -> None:
        """Reads the Node, runs the tasks (``start`` first, once), patches the Node
        when a task has something to say, conditionally on what was read; on a
        Conflict, reads and decides again. Raises NodeAPIError when the API fails."""
        with self._lock:
            started = NodePatch() if self.started else start_tasks(self.tasks, self.ctx)
            for _ in range(CAS_ATTEMPTS):
                node = self.api.get(self.ctx.node_name)
                patch = NodePatch()
                patch.update(started)
                patch.update(reconcile_tasks(self.tasks, node, self.ctx))
                patch = changes(node, patch)
                if patch.empty():
                    self.started = True
                    return
                try:
                    written = self.api.patch(self.ctx.node_name, patch, version_of(node))
                except NodeConflict:
                    log.info(
                        "node %s changed while the agent decided; deciding again", node_name(node)
                    )
                    continue
                self.started = True
                self._follow(written, patch.after)
                return
            raise NodeAPIError(
                f"node {self.ctx.node_name} changed under {CAS_ATTEMPTS} conditional writes "
                "in a row; trying again next round"
            )

    def _follow(self, node: dict[str, Any], work: list[Work]) -> None:
        """Runs the work that waited for its patch to be on the Node, each after the
        other, and writes what each did (a fact: on a Conflict, written again on the
        Node as read again)."""
        for item in work:
            try:
                said = item(node)
            except Exception:
                log.exception("work after the node's update failed; its task answers next round")
                continue
            said = NodePatch(labels=said.labels, annotations=said.annotations)
            for _ in range(CAS_ATTEMPTS):
                if said.empty():
                    break
                try:
                    node = self.api.patch(self.ctx.node_name, said, version_of(node))
                    break
                except NodeConflict:
                    node = self.api.get(self.ctx.node_name)
            else:
                raise NodeAPIError(
                    f"node {self.ctx.node_name} kept changing; what the agent did is said "
                    "again next round"
                )

    def next_delay(self) -> float:
        """The interval, or while the API fails, a doubling backoff up to max_backoff."""
        if self.failures == 0:
            return self.interval
        return float(min(self.max_backoff, self.interval * 2 ** min(self.failures, 16)))

    def round_safely(self) -> bool:
        try:
            self.round()
        except Exception as e:
            self.failures += 1
            self.rounds["error"] += 1
            log.warning(
                "round failed (%d in a row), next try in %.0fs: %s",
                self.failures,
                self.next_delay(),
                e,
            )
            return False
        self.failures = 0
        self.rounds["ok"] += 1
        self.last_success = self.ctx.clock()
        return True

    async def run(self, stop: asyncio.Event, *, once: bool = False) -> bool:
        """Rounds until ``stop`` is set (or one round with ``once``); returns whether
        the last round succeeded."""
        while True:
            ok = await asyncio.to_thread(self.round_safely)
            if once or stop.is_set():
                return ok
            try:
                await asyncio.wait_for(stop.wait(), self.next_delay())
                return ok
            except TimeoutError:
                continue

    def status(self) -> AgentStatus:
        """What the agent's series say now, copied without its lock: a round may
        hold that for as long as a MIG layout takes, and a scrape never waits."""
        layouts = tuple(
            task.last
            for task in self.tasks
            if isinstance(task, PartitionTask) and task.last is not None
        )
        return AgentStatus(
            node=self.ctx.node_name,
            layouts=layouts,
            rounds=tuple(self.rounds.items()),
            last_success=self.last_success,
        )

    def metrics(self) -> str:
        """The agent's exposition: its partition state and its own health."""
        return render_status(self.status())


def metrics_app(render: Callable[[], str]) -> Any:
    """An aiohttp application serving ``render()`` at /metrics and "ok" at /healthz."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
