"""reboot_node against the fake API server through the real ``kubernetes`` client, both
methods: a SelfNodeRemediation CR where that API is served (created once, deleted when
the node is back with a new boot id), the node agent's annotation where it is not (the
real reboot task answering); device pods move first, a silent reboot ends ``failed``,
and a ``kill -9`` resumes without a second CR or a second move."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import REBOOT_REQUEST_ANNOTATION, REBOOT_STATUS_ANNOTATION
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import ANNOTATION
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from nodeagent.agent import Agent, NodeAPI
from nodeagent.reboot import RebootTask
from nodeagent.tasks import AgentContext
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)

SNR = "selfnoderemediations"
NS = "medik8s"


T0 = 1_800_000_000.0  # the fake clock's start, a plausible wall-clock time


def decide(**raw: Any) -> Decision:
    raw.setdefault("snrNamespace", NS)
    params, problems = ACTIONS["reboot_node"].validate(raw)
    assert not problems, problems
    return Decision(
        rule="fatal-device-fault",
        kind="act",
        action="reboot_node",
        params=params,
        target={"node": "n1"},
        sample_labels=(),
        sample_value=1.0,
        at=0.0,
    )


async def fast_sleep(seconds: float) -> None:
    await asyncio.sleep(min(seconds, 0.02))


def ctx(kube: ClientKube, clock: FakeClock | None = None) -> ActionContext:
    """The action's context; on ``clock`` (fake time, moved by the test) when given,
    else on real time with short sleeps, for the test with a real node agent."""
    if clock is not None:
        return ActionContext(
            kube=kube, replica="test", retry_interval=0.05, clock=clock, sleep=clock.sleep
        )
    return ActionContext(kube=kube, replica="test", retry_interval=0.05, sleep=fast_sleep)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


async def drive(clock: FakeClock, work: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run an action to its end on fake time."""
    task = asyncio.create_task(work)
    await clock.run_out(task.done)
    return await task


async def run(c: ActionContext, d: Decision) -> Outcome:
    execute = ACTIONS["reboot_node"].execute
    assert execute is not None
    return await execute(c, d)


def booted(name: str, boot: str, ready: bool = True) -> dict[str, Any]:
    n = node(name)
    n["status"]["nodeInfo"] = {
        "machineID": "m",
        "systemUUID": "s",
        "bootID": boot,
        "kernelVersion": "6.8.0",
        "osImage": "Ubuntu 24.04",
        "containerRuntimeVersion": "containerd://2.0.0",
        "kubeletVersion": "v1.33.0",
        "kubeProxyVersion": "v1.33.0",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    n["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return n


def come_back(api: FakeApiServer, boot: str) -> None:
    """The node reboots: same object (annotations, taints) with a new boot id."""
    n = api.get("nodes", None, "n1")
    assert n is not None
    n["status"] = booted("n1", boot)["status"]
    api.add(n)


class Host:
    def __init__(self) -> None:
        self.boot = "boot-1"
        self.reboots = 0

    def reboot(self) -> None:
        self.reboots += 1


def not_served(api: FakeApiServer) -> None:
    """What a server without the Self Node Remediation CRD answers for its paths."""
    api.faults.fail(10_000, status=404, path_regex=f"/{SNR}")


async def test_self_node_remediation_cr_when_served(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(booted("n1", "boot-1"))
    api.add(pod("train-0", "n1"))
    api.add(pod("web", "n1", owner="ReplicaSet", gpus=0))
    task = asyncio.create_task(run(ctx(kube, clock), decide(wait="20s")))
    await until(lambda: api.get(SNR, NS, "n1") is not None)
    cr = api.get(SNR, NS, "n1")
    assert cr is not None and cr["kind"] == "SelfNodeRemediation"
    record = json.loads(cr["metadata"]["annotations"][REBOOT_REQUEST_ANNOTATION])
    assert record["bootID"] == "boot-1"
    assert api.evicted == [("ml", "train-0")]  # device pods moved before the CR
    await clock.parked(task.done)
    clock.wake_next()  # a poll later, the node has not come back: it still waits
    await clock.parked(task.done)
    assert not task.done()
    come_back(api, "boot-2")  # the operator rebooted it
    await clock.run_out(task.done)
    outcome = await task
    assert outcome.status == "done" and "boot-1 -> boot-2" in outcome.message
    assert api.get(SNR, NS, "n1") is None  # removed once the node is back
    assert api.get("pods", "ml", "web") is not None
    n = api.get("nodes", None, "n1")
    assert n is not None
    rec = json.loads(n["metadata"]["annotations"][ANNOTATION])
    assert rec["fatal-device-fault"]["phase"] == "rebooted"


async def test_a_reboot_that_never_comes_fails_and_removes_the_cr(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(booted("n1", "boot-1"))
    outcome = await drive(
        clock, run(ctx(kube, clock), decide(wait="1s", method="selfNodeRemediation"))
    )
    assert outcome.status == "failed" and "did not come back rebooted" in outcome.message
    assert api.get(SNR, NS, "n1") is None


async def test_kill_9_resumes_without_a_second_cr_or_move(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(booted("n1", "boot-1"))
    api.add(pod("train-0", "n1"))
    d = decide(wait="30s")
    first = asyncio.create_task(run(ctx(kube, clock), d))
    await until(lambda: api.get(SNR, NS, "n1") is not None)
    await clock.parked(first.done)  # waiting for the node to come back
    assert not first.done()
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    again = asyncio.create_task(run(ctx(kube, clock), d))
    await clock.parked(again.done)  # resumed, and waiting again
    assert not again.done()
    come_back(api, "boot-2")
    await clock.run_out(again.done)
    assert (await again).status == "done"
    assert len(api.requests_for("POST", f"/{SNR}$")) == 1
    assert api.evicted == [("ml", "train-0")]


async def test_someone_elses_cr_is_not_reused(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(booted("n1", "boot-1"))
    api.add(
        {
            "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
            "kind": "SelfNodeRemediation",
            "metadata": {"name": "n1", "namespace": NS},
            "spec": {},
        }
    )
    outcome = await drive(clock, run(ctx(kube, clock), decide(wait="1s")))
    assert outcome.status == "unknown" and "already exists" in outcome.message


async def test_the_agent_reboots_where_the_api_is_not_served(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    not_served(api)
    api.add(booted("n1", "boot-1"))
    api.add(pod("train-0", "n1"))
    host = Host()

    def agent() -> Agent:
        c = AgentContext(
            node_name="n1",
            nvml=None,
            amdsmi=None,
            sysfs_root=tmp_path,
            holders=list,
            clock=time.time,
            boot_id=lambda: host.boot,
            reboot=host.reboot,
            nvidia_reset=None,
        )
        api_ = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "agent-kubeconfig")))
        return Agent(api_, c, [RebootTask()], interval=0.05)

    stop = asyncio.Event()
    running = asyncio.create_task(agent().run(stop))
    task = asyncio.create_task(run(ctx(kube), decide(wait="20s")))
    await until(lambda: host.reboots == 1)
    assert api.evicted == [("ml", "train-0")]
    stop.set()
    await running
    # The host comes back on a new boot; the agent starts again and says so. The
    # node stays NotReady here, so only the agent's "done" can end the wait.
    host.boot = "boot-2"
    n = api.get("nodes", None, "n1")
    assert n is not None
    n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    api.add(n)
    stop = asyncio.Event()
    running = asyncio.create_task(agent().run(stop))
    outcome = await task
    stop.set()
    await running
    assert outcome.status == "done", outcome.message
    n = api.get("nodes", None, "n1")
    assert n is not None
    status = json.loads(n["metadata"]["annotations"][REBOOT_STATUS_ANNOTATION])
    assert (status["state"], status["bootID"]) == ("done", "boot-2")
    assert host.reboots == 1
    assert not api.requests_for("POST", f"/{SNR}$")


async def test_agent_silence_ends_failed_and_closes_the_request(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(booted("n1", "boot-1"))
    outcome = await drive(clock, run(ctx(kube, clock), decide(wait="1s", method="agent")))
    assert outcome.status == "failed"
    n = api.get("nodes", None, "n1")
    assert n is not None
    status = json.loads(n["metadata"]["annotations"][REBOOT_STATUS_ANNOTATION])
    assert status["state"] == "failed" and "closed by" in status["message"]


def test_parameters_are_validated() -> None:
    spec = ACTIONS["reboot_node"]
    params, problems = spec.validate({})
    assert not problems and params["method"] == "auto" and params["wait"] == 1200.0
    _, problems = spec.validate({"method": "ipmi", "snrNamespace": "Bad_NS", "wait": "0s"})
    assert {p.param for p in problems} == {"method", "snrNamespace", "wait"}


async def test_the_executor_resumes_a_ladder_step_without_a_second_cr(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    from autoscaler.executor import Executor

    api.add(booted("n1", "boot-1"))
    d = decide(wait="30s")
    step = Decision(**{**d.__dict__, "extra": {"step": 3, "since": 1_800_000_000.0}})
    first = asyncio.create_task(run(ctx(kube, clock), step))
    await until(lambda: api.get(SNR, NS, "n1") is not None)
    first.cancel()  # kill -9
    await asyncio.gather(first, return_exceptions=True)
    executor = Executor(ctx(kube, clock))
    assert await executor.resume({"fatal-device-fault"}) == 1
    await clock.parked(lambda: executor.in_flight == 0)  # resumed, and waiting
    assert executor.in_flight == 1
    come_back(api, "boot-2")
    await clock.run_out(lambda: executor.in_flight == 0)
    await executor.wait(timeout=20)
    (record,) = executor.history
    assert record.outcome.status == "done", record.outcome.message
    assert len(api.requests_for("POST", f"/{SNR}$")) == 1
