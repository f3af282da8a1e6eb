"""Nodes and pods kept current by list and watch, for the cluster-state series.

Each evaluation cycle turns the cluster into series (autoscaler/clusterstate.py).
Listing every pod of a 1,000-node cluster every 15 seconds costs the API server a
full read each time; client-go's informers answer that with one list and then a
watch that streams only the changes. This is the same idea, kept small: one
thread per resource lists it, then watches from the list's ``resourceVersion``,
applying ADDED, MODIFIED and DELETED events to a dict keyed by namespace and name.
A watch that ends (``timeoutSeconds``, a dropped connection) resumes from the last
version it saw; a 410 Gone (the version has been compacted away) lists again. A
failure never stops the loop: it waits and starts over, and ``synced`` stays
false until a list has succeeded, so the caller can tell "empty" from "unknown".
While a watch is failing its snapshot is stale, so the lists go to the API server
instead (``Informer.current``); one failing for ``LOST_AFTER`` seconds is *lost*,
and the controller's ``/healthz`` says so.

Only the cluster-state collector and the controller's own node reads use the cache
(through ``CachedKube``); actions read the API directly, because what they change
must be current, not a few milliseconds old.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from autoscaler.kube.client import ClientKube
from autoscaler.kube.errors import KubeError
from autoscaler.kube.protocol import Kube, Obj

log = logging.getLogger("accel_autoscaler.kube")

PATHS = {"nodes": "/api/v1/nodes", "pods": "/api/v1/pods"}
KINDS = {"nodes": ("v1", "Node"), "pods": ("v1", "Pod")}
WATCH_SECONDS = 60
# A watch failing this long is lost: two retries are a blip, a minute is not.
LOST_AFTER = 60.0


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class Informer:
    """One resource's list-and-watch loop on its own thread."""

    def __init__(self, client: ClientKube, resource: str, *, retry: float = 2.0) -> None:
        self.client = client
        self.resource = resource
        self.path = PATHS[resource]
        self.retry = retry
        self.items: dict[tuple[str, str], Obj] = {}
        self.version = ""
        self.synced = threading.Event()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._loop, name=f"watch-{resource}", daemon=True)
        self.events = 0
        self.relists = 0
        # Failed list or watch attempts, and since when (monotonic) the latest run of
        # them lasts; None while the watch follows the server.
        self.failures = 0
        self.failing_since: float | None = None
        self.last_error = ""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following. A watch blocked in a read ends at its ``timeoutSeconds``
        at the latest; the thread is a daemon, so it never holds up an exit."""
        self._stop.set()
        response = self._response
        if response is not None:
            # Shut the socket down under the reader: closing the response from this
            # thread would wait for the reader's lock.
            with contextlib.suppress(Exception):
                sock = response.response._fp.fp.raw._sock
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=2)

    def snapshot(self) -> list[Obj]:
        with self.lock:
            return list(self.items.values())

    def current(self) -> bool:
        """Whether the snapshot follows the server: synced, and no failure since the
        last list or watch began. A failing watch's snapshot is stale: callers ask
        the API server instead (and get its error when it is down)."""
        return self.synced.is_set() and self.failing_since is None

    def lost(self, after: float) -> str | None:
        """Why this watch counts as lost (failing for ``after`` seconds or more)."""
        since = self.failing_since
        if since is None or time.monotonic() - since < after:
            return None
        return (
            f"the watch of {self.resource} has failed for {time.monotonic() - since:.0f}s "
            f"({self.failures} failures in all; the last: {self.last_error})"
        )

    # -- the loop (its own thread)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.version:
                    self._list()
                self._watch()
            except _Gone:
                log.info(
                    "watch of %s: version %s is gone; listing again", self.resource, self.version
                )
                self.version = ""
            except Exception as e:  # the API server may be down; keep trying
                if self._stop.is_set():
                    return
                self.failures += 1
                self.last_error = str(e)[:300]
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                log.warning("watch of %s failed, retrying in %gs: %s", self.resource, self.retry, e)
                self._stop.wait(self.retry)

    def _request(self, query: list[tuple[str, str]], timeout: float) -> Any:
        api = self.client.api
        method, url, headers, _body, _post = api.param_serialize(
            method="GET",
            resource_path=self.path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
        status = int(response.status)
        self.client._count("watch" if ("watch", "1") in query else "list", self.resource, status)
        if status == 410:
            raise _Gone()
        if not 200 <= status < 300:
            data = response.read() or b""  # type: ignore[no-untyped-call]
            raise KubeError(f"GET {self.path}: {status} {data[:200]!r}", status=status)
        return response

    def _list(self) -> None:
        response = self._request([], self.client.request_timeout)
        listing = json.loads(response.read() or b"{}")
        api_version, kind = KINDS[self.resource]
        items: dict[tuple[str, str], Obj] = {}
        for item in listing.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items[_key(item)] = item
        with self.lock:
            self.items = items
        self.version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        self.relists += 1
        self.failing_since = None
        self.synced.set()

    def _watch(self) -> None:
        query = [
            ("watch", "1"),
            ("resourceVersion", self.version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        response = self._request(query, WATCH_SECONDS + 10)
        self.failing_since = None  # following again
        self._response = response
        try:
            for line in _lines(response.response):
                if self._stop.is_set():
                    return
                self._apply(json.loads(line))
        finally:
            self._response = None

    def _apply(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise KubeError(f"watch of {self.resource}: {obj.get('message', obj)}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.version = str(version)
        if kind == "BOOKMARK":
            return
        api_version, k = KINDS[self.resource]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", k)
        with self.lock:
            if kind == "DELETED":
                self.items.pop(_key(obj), None)
            else:
                self.items[_key(obj)] = obj
        self.events += 1


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _lines(raw: Any) -> Iterator[bytes]:
    """Newline-separated JSON events from a streaming urllib3 response."""
    pending = b""
    for chunk in raw.stream(64 * 1024, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class CachedKube:
    """A ``Kube`` whose unfiltered node and pod lists come from informers once they
    have synced; every other call, and any list before the first sync, goes to the
    API server."""

    def __init__(self, client: ClientKube, inner: Kube | None = None) -> None:
        self.client = client
        # What every other call goes to: the client, or a dry-run wrapper in front of it.
        self.inner: Kube = inner if inner is not None else client
        self.informers = {r: Informer(client, r) for r in PATHS}

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def lost(self, after: float = LOST_AFTER) -> list[str]:
        """The watches lost for ``after`` seconds or more, with why (``/healthz``)."""
        return [r for r in (i.lost(after) for i in self.informers.values()) if r]

    async def wait_synced(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(i.synced.is_set() for i in self.informers.values()):
                return True
            await asyncio.sleep(0.05)
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list_nodes(self, label_selector: str | None = None) -> list[Obj]:
        informer = self.informers["nodes"]
        if label_selector is None and informer.current():
            return informer.snapshot()
        result: list[Obj] = await self.inner.list_nodes(label_selector)
        return result

    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        informer = self.informers["pods"]
        if label_selector is None and informer.current():
            pods = informer.snapshot()
            return [
                p
                for p in pods
                if (namespace is None or (p.get("metadata") or {}).get("namespace") == namespace)
                and (node is None or (p.get("spec") or {}).get("nodeName") == node)
            ]
        result: list[Obj] = await self.inner.list_pods(
            namespace=namespace, node=node, label_selector=label_selector
        )
        return result


__all__ = ["CachedKube", "Informer"]
