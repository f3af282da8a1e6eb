"""``repartition`` against the fake API server through the real client, with the real
node agent (its loop, its partition task, its own kubernetes client) on fake NVML
playing the node:

- cordon, drain the device pods (only those), label, wait for the agent's state,
  uncordon, with the step recorded in the node's remediation entry meanwhile;
- the seven 1g instances exist on the fake GPUs afterwards;
- a controller killed after ANY of the action's API calls, then restarted (a fresh
  client: ``Executor.resume``, then the same decision again, as the engine would
  fire it) finishes the repartition without a second eviction of any pod;
- an agent that fails, and an agent that never answers, end the action ``failed``
  with the node left cordoned;
- a node that already has the layout is left alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
)
from autoscaler.actions.context import ActionContext
from autoscaler.executor import Executor
from exporter.model import PodAssignment
from nodeagent import layouts
from nodeagent.agent import Agent, NodeAPI
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext
from tests.autoscaler.actions.test_actions_kube import decide, entry, run
from tests.support.dying import Cut, Killed
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.nvml import FakeNVML, h100
from tests.support.kubeobjs import client, events, evictions, node, pod

pytestmark = pytest.mark.timeout(300)

START = 1_800_000_000.0
LAYOUT = "h100-all-1g"
DECISION = decide("repartition", {"node": "n1"}, rule="small-slices", layout=LAYOUT, wait="2m")
DEVICE_PODS = ("train-0", "train-1")


class Node:
    """The node: fake NVML, and the real agent with its own client of the same API
    server. Its kubelet view is the pods the API server still binds to it."""

    def __init__(self, api: FakeApiServer, tmp: Path, *, answers: bool = True) -> None:
        self.api = api
        self.nvml = FakeNVML([h100(0), h100(1)])
        self.nvml.nvmlInit()
        self.answers = answers
        self.now = [START]
        ctx = AgentContext(
            node_name="n1",
            nvml=self.nvml,
            amdsmi=None,
            sysfs_root=tmp / "no-sys",
            holders=self.holders,
            clock=lambda: self.now[0],
            boot_id=lambda: "boot-1",
            reboot=lambda: None,
            nvidia_reset=None,
        )
        self.node_api = NodeAPI.from_config(str(api.write_kubeconfig(tmp / "agent-kubeconfig")))
        self.agent = Agent(self.node_api, ctx, [PartitionTask(layouts.load())], interval=1.0)

    def holders(self) -> list[PodAssignment]:
        out = []
        for p in self.api.objects("pods"):
            limits = p["spec"]["containers"][0].get("resources", {}).get("limits", {})
            if p["spec"].get("nodeName") == "n1" and "nvidia.com/gpu" in limits:
                name = p["metadata"]["name"]
                out.append(PodAssignment("ml", name, "main", "nvidia.com/gpu", f"GPU-{name}"))
        return out

    async def tick(self) -> None:
        if self.answers:
            assert await asyncio.to_thread(self.agent.round_safely), "the agent's round failed"

    def clock(self) -> float:
        return self.now[0]

    def sleeper(self) -> Callable[[float], Awaitable[None]]:
        async def sleep(seconds: float) -> None:
            self.now[0] += seconds
            await self.tick()

        return sleep

    def close(self) -> None:
        self.node_api.close()


def setup(api: FakeApiServer) -> None:
    api.add(node("n1", gpus=2))
    api.add(node("n2", gpus=2))
    for name in DEVICE_PODS:
        api.add(pod(name, "n1"))
    api.add(pod("logger", "n1", gpus=0))  # no device: it stays


def context(kube: Any, n: Node) -> ActionContext:
    return ActionContext(
        kube=kube, replica="test-replica", clock=n.clock, sleep=n.sleeper(), retry_interval=0.25
    )


def node_obj(api: FakeApiServer) -> dict[str, Any]:
    found = api.get("nodes", None, "n1")
    assert found is not None
    return found


def assert_finished(api: FakeApiServer, n: Node, where: str = "") -> None:
    obj = node_obj(api)
    labels = obj["metadata"].get("labels") or {}
    state = json.loads(obj["metadata"]["annotations"][PARTITION_STATE_ANNOTATION])
    assert labels.get(PARTITION_LAYOUT_LABEL) == LAYOUT, where
    assert labels.get(PARTITION_APPLIED_LABEL) == LAYOUT, where
    assert state["state"] == "applied", where
    assert not obj["spec"].get("unschedulable"), where
    assert entry(api, "n1") == {}, where
    assert [len(g.migs) for g in n.nvml.gpus] == [7, 7], where
    # No second drain: each device pod was evicted once, the other pod never.
    assert [evictions(api, p) for p in DEVICE_PODS] == [1, 1], where
    assert evictions(api, "logger") == 0, where


async def test_cordon_drain_label_wait_uncordon(api: FakeApiServer, tmp_path: Path) -> None:
    setup(api)
    n = Node(api, tmp_path)
    kube = client(api, tmp_path)
    try:
        await n.tick()  # before: the agent has nothing to do (no label)
        seen: list[tuple[str, bool]] = []
        recording = n.sleeper()

        async def sleep(seconds: float) -> None:
            e = entry(api, "n1").get("small-slices")
            seen.append((e["phase"] if e else "", bool(node_obj(api)["spec"].get("unschedulable"))))
            await recording(seconds)

        c = ActionContext(kube=kube, replica="r", clock=n.clock, sleep=sleep, retry_interval=0.25)
        outcome = await run(c, DECISION)
    finally:
        kube.close()
        n.close()
    assert outcome.status == "done", outcome.message
    assert outcome.details["devices"] == {"nvidia0": "7x 1g.10gb", "nvidia1": "7x 1g.10gb"}
    assert_finished(api, n)
    # While it waited: recorded as ours, cordoned, in the repartitioning phase.
    assert ("repartitioning", True) in seen
    assert {e["reason"] for e in events(api)} >= {"RepartitionStarted", "Repartitioned", "Evicted"}


async def test_a_node_that_has_the_layout_is_left_alone(api: FakeApiServer, tmp_path: Path) -> None:
    setup(api)
    n = Node(api, tmp_path)
    kube = client(api, tmp_path)
    try:
        assert (await run(context(kube, n), DECISION)).status == "done"
        before = len(api.requests)
        outcome = await run(context(kube, n), DECISION)
        assert outcome.status == "done" and "already has layout" in outcome.message
        assert [r.method for r in api.requests[before:]] == ["GET"]
    finally:
        kube.close()
        n.close()


async def test_an_agent_that_fails_or_never_answers_fails_the_action(
    api: FakeApiServer, tmp_path: Path
) -> None:
    setup(api)
    n = Node(api, tmp_path)
    n.nvml.gpus[1].name = "NVIDIA A100-SXM4-80GB"  # the layout is for H100s only
    kube = client(api, tmp_path)
    try:
        outcome = await run(context(kube, n), DECISION)
        assert outcome.status == "failed"
        assert "the node agent failed" in outcome.message and "A100" in outcome.message
        assert node_obj(api)["spec"].get("unschedulable") is True
        assert entry(api, "n1")["small-slices"]["phase"] == "repartition-failed"
        # The rule firing again does nothing until the cordon is lifted ...
        again = await run(context(kube, n), DECISION)
        assert again.status == "skipped" and "earlier repartition failed" in again.message
        # ... which the rule's recover does (only what the action did).
        recover = decide(
            "repartition", {"node": "n1"}, rule="small-slices", kind="recover", layout=LAYOUT
        )
        assert (await run(context(kube, n), recover)).status == "done"
        assert not node_obj(api)["spec"].get("unschedulable") and entry(api, "n1") == {}
    finally:
        kube.close()
        n.close()
    async with FakeApiServer() as quiet:
        setup(quiet)
        (tmp_path / "quiet").mkdir()
        n = Node(quiet, tmp_path / "quiet", answers=False)
        kube = client(quiet, tmp_path / "quiet")
        try:
            outcome = await run(context(kube, n), DECISION)
        finally:
            kube.close()
            n.close()
        assert outcome.status == "failed"
        assert "is accel-node-agent running?" in outcome.message


async def _clean_run_calls(tmp_path: Path) -> int:
    async with FakeApiServer() as api:
        setup(api)
        d = tmp_path / "clean"
        d.mkdir()
        n = Node(api, d)
        kube = client(api, d)
        try:
            counted = Cut(kube)
            outcome = await run(context(counted, n), DECISION)
            assert outcome.status == "done", outcome.message
            return len(counted.calls)
        finally:
            kube.close()
            n.close()


async def test_killed_after_any_call_then_restarted_finishes_without_a_second_drain(
    tmp_path: Path,
) -> None:
    total = await _clean_run_calls(tmp_path)
    assert total > 8
    for k in range(1, total + 1):
        d = tmp_path / f"cut-{k}"
        d.mkdir()
        async with FakeApiServer() as api:
            setup(api)
            n = Node(api, d)
            (d / "dying").mkdir()
            dying = client(api, d / "dying")
            try:
                with pytest.raises(Killed):
                    await run(context(Cut(dying, after=k), n), DECISION)
            finally:
                dying.close()
            # A restarted controller: a new client and executor, the same cluster;
            # it resumes what the node records, and the engine fires the rule again.
            (d / "fresh").mkdir()
            fresh = client(api, d / "fresh")
            try:
                executor = Executor(context(fresh, n))
                await executor.resume()
                await executor.wait(timeout=60)
                again = await run(context(fresh, n), DECISION)
            finally:
                fresh.close()
                n.close()
            where = f"killed after call {k} of {total}"
            outcomes = [r.outcome for r in executor.history] + [again]
            assert all(o.status == "done" for o in outcomes), (where, [o.message for o in outcomes])
            assert_finished(api, n, where)
