"""The watch cache behind the cluster-state series: one list, then changes only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autoscaler.kube.cache import CachedKube
from tests.support.fakes.apiserver import running_apiserver
from tests.support.kubeobjs import client, node, pod
from tests.support.procs import until

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
