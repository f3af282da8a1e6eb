"""``accel-autoscaler extender``: the scorer behind kube-scheduler's extender protocol.

kube-scheduler POSTs ``ExtenderArgs`` to ``<urlPrefix>/filter`` and
``<urlPrefix>/prioritize`` and reads back ``ExtenderFilterResult`` and
``HostPriorityList``. The Go types in ``k8s.io/kube-scheduler/extender/v1`` carry no
JSON tags, so the wire names are the Go field names (``Pod``, ``Nodes``,
``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``, ``Host``,
``Score``); Go decodes them case-insensitively, and so do we on the way in.
Registered with ``nodeCacheCapable: true`` the scheduler sends node names only; the
node objects (labels, taints, annotations) then come from our own cached list of
nodes when a kubeconfig is given, and the devices always come from the metrics.

Why it never blocks scheduling (fail-open): the fleet state is refreshed in the
background; when the source is down, or the state is older than ``--max-age``,
filter passes every node through and prioritize gives every node the same score,
and the reason is logged once per change. A scheduler that cannot reach us at all
carries on because the extender is registered ``ignorable: true``. A body that is
not an ``ExtenderArgs`` gets a 400 that says what is wrong: one larger than
``MAX_BODY``, nested deeper than ``accel_common.jsonread.MAX_DEPTH``, or whose Pod
or Nodes have the wrong shape where the scorer reads them. Nothing in a request
can crash the server, and a pod that the scorer still cannot read fails open.

Scores are integers 0–10 (``MaxExtenderPriority``): the best candidate gets 10 and
the others their total relative to it, so the extender's weight in the scheduler
config sets how much the device placement counts against the scheduler's own
plugins.

The chosen devices go into the pod annotation ``accel-fleet.io/preferred-devices``
(JSON: node → device list, for every node that passed) when ``--annotate`` is on:
the scheduler picks the node after we answer, so we record our choice for each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from accel_common import jsonread
from accel_common.listen import Listener, ListenError
from accel_common.names import PREFERRED_DEVICES_ANNOTATION
from autoscaler.kube.protocol import Kube
from autoscaler.placement.fleet import FleetUnavailable, read_fleet
from autoscaler.placement.score import (
    FleetState,
    Obj,
    PodRequest,
    PodRequestError,
    Ranking,
    Weights,
    pod_request,
    score,
)
from autoscaler.sources.base import Source

log = logging.getLogger("accel_autoscaler.placement.extender")

MAX_PRIORITY = 10  # extenderv1.MaxExtenderPriority
MIN_PRIORITY = 0
MAX_BODY = 16 * 1024 * 1024  # a NodeList of a few thousand nodes fits


class BadArgs(ValueError):
    """The body is not an ExtenderArgs; the message says what is wrong."""


@dataclass(frozen=True)
class ExtenderArgs:
    pod: Obj
    node_names: tuple[str, ...]
    nodes: tuple[Obj, ...] | None  # full Node objects (nodeCacheCapable: false)


def _field(body: Mapping[str, Any], name: str) -> Any:
    """Go's encoding/json matches field names case-insensitively; so do we."""
    for k, v in body.items():
        if k.lower() == name.lower():
            return v
    return None


def _mapping(value: Any, where: str, *, strings: bool = False) -> None:
    """``value`` is absent (None) or an object (of strings, with ``strings``)."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise BadArgs(f"{where} must be an object")
    if strings and not all(isinstance(v, str) for v in value.values()):
        raise BadArgs(f"{where} must map strings to strings")


def _objects(value: Any, where: str) -> list[Obj]:
    """``value`` is absent (None) or a list of objects."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BadArgs(f"{where} must be a list of objects")
    return value


def _string_or_none(value: Any) -> bool:
    # Not ``value or ""``: an empty list or object is no name either.
    return value is None or isinstance(value, str)


def _check_meta(meta: Any, where: str) -> None:
    _mapping(meta, where)
    for key in ("name", "namespace", "generateName"):
        if not _string_or_none((meta or {}).get(key)):
            raise BadArgs(f"{where}.{key} must be a string")
    for key in ("labels", "annotations"):
        _mapping((meta or {}).get(key), f"{where}.{key}", strings=True)


def _check_pod(pod: Obj) -> None:
    """The Pod's shape where the scorer reads it (metadata, containers' resources)."""
    where = "ExtenderArgs.Pod"
    _check_meta(pod.get("metadata"), f"{where}.metadata")
    spec = pod.get("spec")
    _mapping(spec, f"{where}.spec")
    for i, c in enumerate(_objects((spec or {}).get("containers"), f"{where}.spec.containers")):
        here = f"{where}.spec.containers[{i}]"
        if not _string_or_none(c.get("name")):
            raise BadArgs(f"{here}.name must be a string")
        resources = c.get("resources")
        _mapping(resources, f"{here}.resources")
        for key in ("requests", "limits"):
            _mapping((resources or {}).get(key), f"{here}.resources.{key}")


def _check_node(node: Obj, i: int) -> None:
    """A Node's shape where the scorer reads it (metadata, taints)."""
    where = f"ExtenderArgs.Nodes.items[{i}]"
    _check_meta(node.get("metadata"), f"{where}.metadata")
    spec = node.get("spec")
    _mapping(spec, f"{where}.spec")
    _objects((spec or {}).get("taints"), f"{where}.spec.taints")


def parse_args(body: Any) -> ExtenderArgs:
    if not isinstance(body, dict):
        raise BadArgs("the body must be a JSON object (ExtenderArgs: Pod, Nodes, NodeNames)")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict):
        raise BadArgs("ExtenderArgs.Pod is missing or not an object")
    _check_pod(pod)
    nodes_raw = _field(body, "Nodes")
    names_raw = _field(body, "NodeNames")
    nodes: tuple[Obj, ...] | None = None
    if nodes_raw is not None:
        items = nodes_raw.get("items") if isinstance(nodes_raw, dict) else None
        if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
            raise BadArgs("ExtenderArgs.Nodes must be a NodeList with an items list")
        for i, n in enumerate(items):
            _check_node(n, i)
        nodes = tuple(items)
        names = tuple(str((n.get("metadata") or {}).get("name") or "") for n in items)
    elif names_raw is not None:
        if not isinstance(names_raw, list) or not all(isinstance(n, str) for n in names_raw):
            raise BadArgs("ExtenderArgs.NodeNames must be a list of strings")
        names = tuple(names_raw)
    else:
        raise BadArgs("ExtenderArgs has neither Nodes nor NodeNames")
    return ExtenderArgs(pod, names, nodes)


class FleetCache:
    """The latest fleet state and node objects, refreshed in the background so
    that a request never waits on Prometheus."""

    def __init__(
        self,
        source: Source,
        kube: Kube | None = None,
        *,
        interval: float = 15.0,
        max_age: float = 60.0,
    ) -> None:
        self.source = source
        self.kube = kube
        self.interval = interval
        self.max_age = max_age
        self.fleet: FleetState | None = None
        self.nodes: dict[str, Obj] = {}
        self.reason = "not refreshed yet"
        self.refreshed_at = 0.0

    async def refresh(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        try:
            self.fleet = await read_fleet(self.source, now)
            self.refreshed_at = now
            self.reason = ""
        except FleetUnavailable as e:
            self.reason = str(e)
        if self.kube is not None:
            try:
                nodes = await self.kube.list_nodes()
                self.nodes = {str(n["metadata"]["name"]): n for n in nodes}
            except Exception as e:  # a failed list keeps the last one
                log.warning("listing nodes failed, keeping the last list: %s", e)

    def current(self, now: float | None = None) -> tuple[FleetState | None, str]:
        """The state to score against, or None and why not."""
        now = time.time() if now is None else now
        if self.fleet is None:
            return None, self.reason
        if now - self.refreshed_at > self.max_age:
            # No age figure in the text: the reason is logged once per change.
            why = f"fleet state is older than --max-age {self.max_age:g}s"
            return None, f"{why}: {self.reason}" if self.reason else why
        return self.fleet, ""

    async def run_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop outlives any one bad refresh
                log.exception("fleet refresh failed")
            await asyncio.sleep(self.interval)


class Extender:
    def __init__(
        self,
        cache: FleetCache,
        *,
        weights: Weights | None = None,
        annotate: bool = False,
    ) -> None:
        self.cache = cache
        self.weights = weights or Weights()
        self.annotate = annotate and cache.kube is not None
        self._last_open = ""
        self.fail_open_count = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def _fail_open(self, why: str, pod: str) -> None:
        self.fail_open_count += 1
        if why != self._last_open:
            log.warning("fail-open: passing every node with equal scores: %s", why)
            self._last_open = why
        log.debug("fail-open for pod %s: %s", pod, why)

    def _nodes(self, args: ExtenderArgs) -> list[Obj | str]:
        if args.nodes is not None:
            return list(args.nodes)
        return [self.cache.nodes.get(n, n) for n in args.node_names]

    def _rank(self, args: ExtenderArgs) -> tuple[str, PodRequest | None, Ranking | None, str]:
        """The pod's key, request and ranking, or a reason to pass every node."""
        meta = args.pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
        try:
            req = pod_request(args.pod)
        except PodRequestError as e:
            # The pod's own annotations are wrong: say so, and let the scheduler
            # place it without us rather than leave it pending.
            why = f"pod {key}: {e}"
            self._fail_open(why, key)
            return key, None, None, why
        except Exception as e:  # a shape parse_args let through: still never block
            log.exception("pod %s cannot be read", key)
            why = f"pod {key} cannot be read: {type(e).__name__}: {e}"
            self._fail_open(why, key)
            return key, None, None, why
        if req.count == 0:
            return key, req, None, "the pod asks for no accelerator devices"
        fleet, why = self.cache.current()
        if fleet is None:
            self._fail_open(why, key)
            return key, req, None, why
        if args.node_names and not any(n in fleet.nodes for n in args.node_names):
            why = "none of the candidate nodes has device metrics (check the node label)"
            self._fail_open(why, key)
            return key, req, None, why
        if self._last_open:
            log.info("fleet state is back; placing by devices again")
            self._last_open = ""
        try:
            ranking = score(req, self._nodes(args), fleet, self.weights)
        except Exception as e:  # a shape parse_args let through: still never block
            log.exception("scoring pod %s failed", key)
            why = f"scoring pod {key} failed: {type(e).__name__}: {e}"
            self._fail_open(why, key)
            return key, req, None, why
        return key, req, ranking, ""

    def filter(self, args: ExtenderArgs) -> Obj:
        """ExtenderFilterResult."""
        key, req, ranking, why = self._rank(args)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passed = set(args.node_names)
        if ranking is not None:
            passed = {c.node for c in ranking.candidates}
            for r in ranking.rejected:
                (failed if r.resolvable else unresolvable)[r.node] = f"accel-fleet: {r.reason}"
            log.info(
                "filter %s (%d devices): %d of %d nodes fit",
                key,
                req.count if req else 0,
                len(passed),
                len(args.node_names),
            )
        else:
            log.debug("filter %s: all nodes pass: %s", key, why)
        names = [n for n in args.node_names if n in passed]
        nodes_out: Obj | None = None
        if args.nodes is not None:
            items = [n for n in args.nodes if (n.get("metadata") or {}).get("name") in passed]
            nodes_out = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}
        return {
            "Nodes": nodes_out,
            "NodeNames": names if args.nodes is None else None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }

    def prioritize(self, args: ExtenderArgs) -> list[Obj]:
        """HostPriorityList: integers MIN_PRIORITY..MAX_PRIORITY."""
        _, req, ranking, _ = self._rank(args)
        scores = dict.fromkeys(args.node_names, MIN_PRIORITY)
        if ranking is not None and ranking.candidates:
            best = ranking.candidates[0].total
            for c in ranking.candidates:
                rel = c.total / best if best > 0 else 1.0
                scores[c.node] = max(MIN_PRIORITY, min(MAX_PRIORITY, round(MAX_PRIORITY * rel)))
            if self.annotate and req is not None:
                self._record(req, ranking)
        return [{"Host": n, "Score": int(scores[n])} for n in args.node_names]

    def _record(self, req: PodRequest, ranking: Ranking) -> None:
        value = json.dumps({c.node: list(c.devices) for c in ranking.candidates}, sort_keys=True)
        patch = {"metadata": {"annotations": {PREFERRED_DEVICES_ANNOTATION: value}}}
        kube = self.cache.kube
        assert kube is not None

        async def write() -> None:
            try:
                await kube.patch_pod(req.namespace, req.name, patch)
            except Exception as e:  # the annotation is advice; scheduling goes on
                log.warning("could not annotate pod %s: %s", req.key, e)

        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Waits for pending annotation writes (on shutdown, and in tests)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _read_args(request: web.Request) -> ExtenderArgs:
    # read() refuses a body over the app's client_max_size (MAX_BODY) with a 413.
    try:
        raw = await request.read()
    except web.RequestPayloadError as e:  # a Content-Encoding that does not decode
        raise BadArgs(f"cannot read the body: {str(e).strip()}") from e
    except ConnectionError as e:  # the sender went away; there is no one to answer
        raise BadArgs("the connection closed before the body was read") from e
    try:
        body = jsonread.loads(raw, max_bytes=MAX_BODY)
    except jsonread.JSONBodyError as e:
        raise BadArgs(f"the body is not JSON: {e}") from e
    return parse_args(body)


def _bad(message: str) -> web.Response:
    return web.json_response({"Error": message}, status=400)


def make_app(extender: Extender) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)

    async def filter_handler(request: web.Request) -> web.Response:
        try:
            args = await _read_args(request)
            return web.json_response(extender.filter(args))
        except BadArgs as e:
            log.warning("filter: bad request: %s", e)
            return _bad(f"filter: {e}")

    async def prioritize_handler(request: web.Request) -> web.Response:
        try:
            args = await _read_args(request)
            return web.json_response(extender.prioritize(args))
        except BadArgs as e:
            log.warning("prioritize: bad request: %s", e)
            return _bad(f"prioritize: {e}")

    async def healthz(request: web.Request) -> web.Response:
        fleet, why = extender.cache.current()
        body: Obj = {
            "fleet": "ok" if fleet is not None else "unavailable",
            "reason": why,
            "nodes": len(fleet.nodes) if fleet is not None else 0,
            "failOpen": extender.fail_open_count,
        }
        # Always 200: fail-open is a working state, not a reason to restart us.
        return web.json_response(body)

    app.router.add_post("/filter", filter_handler)
    app.router.add_post("/prioritize", prioritize_handler)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(
    extender: Extender, host: str | None, port: int, stop: asyncio.Event | None = None
) -> int:
    try:
        listener = await Listener.start(make_app(extender), host, port, stop=stop)
    except ListenError as e:
        log.error("%s", e)
        return 1
    log.info("extender listening on http://%s:%d (filter, prioritize)", host or "0.0.0.0", port)
    refresher = asyncio.create_task(extender.cache.run_forever())
    try:
        await listener.wait()
    finally:
        refresher.cancel()
        await asyncio.gather(refresher, return_exceptions=True)
        await extender.drain()
        await extender.cache.source.close()
        await listener.close()
    return 0
