"""The watch cache behind the cluster-state series: one list, then changes only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autoscaler.kube.cache import CachedKube
from autoscaler.kube.errors import KubeError
from tests.support.fakes.apiserver import running_apiserver
from tests.support.kubeobjs import client, node, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


async def test_lists_once_then_follows_changes_through_the_watch(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add(node("n1"))
        api.add(pod("p1", "n1"))
        kube = client(api, tmp_path)
        cached = CachedKube(kube)
        cached.start()
        try:
            assert await cached.wait_synced(10)
            assert [n["metadata"]["name"] for n in await cached.list_nodes()] == ["n1"]
            assert (await cached.list_nodes())[0]["kind"] == "Node"

            api.add(node("n2"))
            api.add(pod("p2", "n2"))

            async def seen() -> list[str]:
                return sorted(n["metadata"]["name"] for n in await cached.list_nodes())

            await until(lambda: len(cached.informers["nodes"].snapshot()) == 2)
            # Nodes and pods are watched on separate streams: wait for the pod too.
            await until(lambda: len(cached.informers["pods"].snapshot()) == 2)
            names = await seen()
            assert names == ["n1", "n2"]
            on_n2 = await cached.list_pods(node="n2")
            assert [p["metadata"]["name"] for p in on_n2] == ["p2"]

            api.remove("pods", "ml", "p1")
            await until(lambda: len(cached.informers["pods"].snapshot()) == 1)
            # A selector is not cached: it goes to the server.
            selected = await cached.list_nodes("kubernetes.io/hostname=n2")
            assert [n["metadata"]["name"] for n in selected] == ["n2"]
        finally:
            await asyncio.to_thread(cached.stop)

        # The changes came through the watch: one plain list of each, no more.
        # (A watch is in the server's log only when its stream ends.)
        assert cached.informers["nodes"].events >= 1
        assert cached.informers["pods"].events >= 2
        nodes = api.requests_for("GET", r"^/api/v1/nodes$")
        assert len([r for r in nodes if not r.query]) == 1
        pods = api.requests_for("GET", r"^/api/v1/pods$")
        assert len([r for r in pods if not r.query]) == 1
        assert cached.informers["pods"].relists == 1


async def test_a_dropped_watch_resumes_without_losing_changes(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.add(node("n1"))
        kube = client(api, tmp_path)
        cached = CachedKube(kube)
        cached.informers["nodes"].retry = 0.1
        cached.start()
        try:
            assert await cached.wait_synced(10)
            api.faults.drop(2, method="GET", path_regex=r"^/api/v1/nodes$")
            api.faults.fail(1, status=500, method="GET", path_regex=r"^/api/v1/nodes$")
            for i in range(2, 6):
                api.add(node(f"n{i}"))
            await until(lambda: len(cached.informers["nodes"].snapshot()) == 5, timeout=20)
        finally:
            await asyncio.to_thread(cached.stop)


async def test_a_failing_watch_is_lost_and_its_snapshot_not_served(tmp_path: Path) -> None:
    """A watch that keeps failing is reported lost (the controller's /healthz says
    so), and the lists go to the API server meanwhile instead of a stale snapshot;
    once the server answers again it is current and nothing is lost any more."""
    with running_apiserver() as api:
        api.add(node("n1"))
        api.faults.fail(10_000, status=500, method="GET", path_regex=r"^/api/v1/nodes$")
        kube = client(api, tmp_path)
        cached = CachedKube(kube)
        informer = cached.informers["nodes"]
        informer.retry = 0.05
        cached.start()
        try:
            await until(lambda: informer.failures >= 2, timeout=20)
            assert not informer.current()
            (lost,) = cached.lost(after=0.0)
            assert lost.startswith("the watch of nodes has failed for") and "500" in lost
            assert cached.lost(after=3600.0) == []
            before = len(api.requests_for("GET", r"^/api/v1/nodes$"))
            with pytest.raises(KubeError):
                await cached.list_nodes()  # asked of the server, not the cache
            assert len(api.requests_for("GET", r"^/api/v1/nodes$")) > before
            api.faults.clear()
            await until(informer.current, timeout=20)
            assert cached.lost(after=0.0) == []
            assert [n["metadata"]["name"] for n in await cached.list_nodes()] == ["n1"]
        finally:
            await asyncio.to_thread(cached.stop)
