"""reset_devices against the fake API server through the real ``kubernetes`` client: the
pods move first (all of an NVSwitch node's, only the device's on a PCIe node), the
request is written once and answered by the real node agent on fake NVML; "failed",
refusals and silence end ``failed``; and after a ``kill -9`` the same decision only
waits: no second request, no second eviction."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import ANNOTATION
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Sample, Vector, labels_of
from exporter.model import PodAssignment
from nodeagent.agent import Agent, NodeAPI
from nodeagent.reset import ResetTask
from nodeagent.tasks import AgentContext
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.nvml import FakeNVML
from tests.support.kubeobjs import node, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


T0 = 1_800_000_000.0  # the fake clock's start, a plausible wall-clock time


def decide(target: dict[str, str], uuid: str = "", **raw: Any) -> Decision:
    params, problems = ACTIONS["reset_devices"].validate(raw)
    assert not problems, problems
    labels = {**target, **({"uuid": uuid} if uuid else {})}
    return Decision(
        rule="fatal-device-fault",
        kind="act",
        action="reset_devices",
        params=params,
        target=target,
        sample_labels=labels_of(labels),
        sample_value=1.0,
        at=0.0,
    )


async def fast_sleep(seconds: float) -> None:
    await asyncio.sleep(min(seconds, 0.02))


def ctx(kube: ClientKube, query: Any = None, clock: FakeClock | None = None) -> ActionContext:
    """The action's context; on ``clock`` (fake time, moved by the test) when given,
    else on real time with short sleeps, for the tests with a real agent."""
    if clock is not None:
        return ActionContext(
            kube=kube,
            replica="test",
            retry_interval=0.05,
            clock=clock,
            sleep=clock.sleep,
            query=query,
        )
    return ActionContext(
        kube=kube, replica="test", retry_interval=0.05, sleep=fast_sleep, query=query
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


async def run(c: ActionContext, d: Decision) -> Outcome:
    execute = ACTIONS["reset_devices"].execute
    assert execute is not None
    return await execute(c, d)


def node_annotations(api: FakeApiServer, name: str = "n1") -> dict[str, str]:
    n = api.get("nodes", None, name)
    assert n is not None
    return dict(n["metadata"].get("annotations") or {})


def requests_written(api: FakeApiServer) -> int:
    """PATCHes of the node that wrote a reset request."""
    return sum(
        1
        for r in api.requests_for("PATCH", r"/nodes/n1$")
        if RESET_REQUEST_ANNOTATION in json.dumps(r.body)
    )


class RealAgent:
    """The node agent's loop with a reset task on fake NVML, in its own thread, as on
    the node; a pod of ``pods`` holds its GPU while the API server still has it."""

    def __init__(self, api: FakeApiServer, tmp_path: Path, fake: FakeNVML) -> None:
        self.api = api
        self.fake = fake
        self.pods: dict[str, str] = {}  # pod name -> GPU UUID it holds
        ctx = AgentContext(
            node_name="n1",
            nvml=fake,
            amdsmi=None,
            sysfs_root=tmp_path,
            holders=self.holders,
            clock=time.time,
            boot_id=lambda: "boot-1",
            reboot=lambda: None,
            nvidia_reset=fake.gpu_reset,
        )
        node_api = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "agent-kubeconfig")))
        self.agent = Agent(node_api, ctx, [ResetTask()], interval=0.05)

    def holders(self) -> list[PodAssignment]:
        present = {p["metadata"]["name"] for p in self.api.objects("pods")}
        return [
            PodAssignment("ml", name, "main", "nvidia.com/gpu", uuid)
            for name, uuid in self.pods.items()
            if name in present
        ]


@pytest.fixture
async def start_agent() -> AsyncIterator[Callable[[RealAgent], None]]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[bool]] = []

    def start(agent: RealAgent) -> None:
        tasks.append(asyncio.create_task(agent.agent.run(stop)))

    yield start
    stop.set()
    await asyncio.gather(*tasks)


def fake_nvml(kind: str) -> FakeNVML:
    fake: FakeNVML = getattr(FakeNVML, kind)()
    fake.nvmlInit()
    return fake


async def test_nvswitch_node_moves_every_device_pod_then_the_agent_resets_all(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path, start_agent: Any
) -> None:
    fake = fake_nvml("h100_node")
    api.add(node("n1"))
    api.add(node("n2"))
    api.add(pod("train-0", "n1"))
    api.add(pod("train-5", "n1"))
    api.add(pod("web", "n1", owner="ReplicaSet", gpus=0))
    agent = RealAgent(api, tmp_path, fake)
    agent.pods = {"train-0": fake.gpus[0].uuid, "train-5": fake.gpus[5].uuid}
    start_agent(agent)
    await until(lambda: node_annotations(api).get(RESET_SCOPE_ANNOTATION) == "node")
    fake.lose(3)

    d = decide({"node": "n1", "device": "nvidia3"}, uuid=fake.gpus[3].uuid, wait="20s")
    outcome = await run(ctx(kube), d)

    assert outcome.status == "done", outcome.message
    assert sorted(api.evicted) == [("ml", "train-0"), ("ml", "train-5")]
    assert api.get("pods", "ml", "web") is not None  # no device: it stays
    assert fake.resets == [tuple(g.bus_id for g in fake.gpus)]
    assert requests_written(api) == 1
    assert json.loads(node_annotations(api)[RESET_REQUEST_ANNOTATION])["devices"] == [
        fake.gpus[3].uuid
    ]
    rec = json.loads(node_annotations(api)[ANNOTATION])["fatal-device-fault"]
    assert rec["phase"] == "reset" and rec["taint"] == "accel-fleet.io/faulty=true:NoSchedule"
    reasons = [e["reason"] for e in api.objects("events")]
    assert "ResetRequested" in reasons and "DevicesReset" in reasons


async def test_device_scope_moves_only_the_devices_pods(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path, start_agent: Any
) -> None:
    fake = fake_nvml("pcie_node")
    api.add(node("n1"))
    api.add(pod("holder", "n1"))
    api.add(pod("neighbour", "n1"))
    agent = RealAgent(api, tmp_path, fake)
    agent.pods = {"holder": fake.gpus[1].uuid, "neighbour": fake.gpus[3].uuid}
    start_agent(agent)
    await until(lambda: node_annotations(api).get(RESET_SCOPE_ANNOTATION) == "device")

    async def query(expr: str, at: float) -> QueryResult:
        if expr.startswith("accel_device_info"):
            # The vendor, asked first: one the agent can reset.
            return Vector((Sample(labels_of({"vendor": "nvidia"}), 1, at),))
        assert "accel_device_pod_info" in expr and 'device="nvidia1"' in expr
        return Vector(
            (Sample(labels_of({"namespace": "ml", "pod": "holder", "device": "nvidia1"}), 1, at),)
        )

    d = decide({"node": "n1", "device": "nvidia1"}, uuid=fake.gpus[1].uuid, wait="20s")
    outcome = await run(ctx(kube, query), d)

    assert outcome.status == "done", outcome.message
    assert api.evicted == [("ml", "holder")]
    assert fake.resets == [(fake.gpus[1].bus_id,)]


async def emulate(
    api: FakeApiServer,
    clock: FakeClock,
    finished: Callable[[], bool],
    answers: list[tuple[str, str]],
) -> None:
    """An agent that answers the reset request with ``answers`` (state, message), one
    per poll of the node, on the test's clock: once the action has asked and waits,
    it writes an answer and moves time to the action's next poll; then time runs on,
    a poll at a time, until the action ends (``finished``)."""
    await until(
        lambda: (
            finished()
            or (RESET_REQUEST_ANNOTATION in node_annotations(api) and clock.sleepers >= 1)
        ),
        what="the reset request, and the action waiting for its answer",
    )
    if finished():
        return
    rid = json.loads(node_annotations(api)[RESET_REQUEST_ANNOTATION])["id"]
    for state, message in answers:
        if finished():
            return  # it ended before hearing them all: the test's asserts say so
        n = api.get("nodes", None, "n1")
        assert n is not None
        n["metadata"]["annotations"][RESET_STATUS_ANNOTATION] = json.dumps(
            {"id": rid, "state": state, "devices": [], "message": message, "at": "x"}
        )
        api.add(n)
        clock.wake_next()
        await clock.parked(finished)
    await clock.run_out(finished)  # bounded: the action's own deadline ends it


@pytest.mark.parametrize(
    ("answers", "says"),
    [
        ([("resetting", "resetting"), ("failed", "nvidia-smi exited 15")], "nvidia-smi exited 15"),
        (
            [("refused", "pod ml/x holds GPU-1")],
            "still said refused after 20s: pod ml/x holds GPU-1",
        ),
        ([], "no answer from the node agent within 20s"),
    ],
)
async def test_failed_refused_or_silent_agent_ends_failed(
    api: FakeApiServer,
    kube: ClientKube,
    clock: FakeClock,
    answers: list[tuple[str, str]],
    says: str,
) -> None:
    api.add(node("n1"))
    action = asyncio.create_task(run(ctx(kube, clock=clock), decide({"node": "n1"}, wait="20s")))
    await emulate(api, clock, action.done, answers)
    outcome = await action
    assert outcome.status == "failed" and says in outcome.message, outcome.message
    rec = json.loads(node_annotations(api)[ANNOTATION])["fatal-device-fault"]
    assert rec["phase"] == "reset-failed"
    status = json.loads(node_annotations(api)[RESET_STATUS_ANNOTATION])
    assert status["state"] == "failed"  # closed: the agent never carries it out later


async def test_kill_9_while_waiting_resumes_without_asking_or_moving_again(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(node("n1"))
    api.add(pod("train-0", "n1"))
    d = decide({"node": "n1"}, wait="30s")
    first = asyncio.create_task(run(ctx(kube, clock=clock), d))
    await until(lambda: RESET_REQUEST_ANNOTATION in node_annotations(api))
    await clock.parked(first.done)  # waiting for the agent's answer
    assert not first.done()
    first.cancel()  # kill -9: nothing after this point of the first run happens
    await asyncio.gather(first, return_exceptions=True)
    assert (
        json.loads(node_annotations(api)[ANNOTATION])["fatal-device-fault"]["phase"] == "resetting"
    )

    again = replace_at(d, 1234.0)  # the same decision, made again after the restart
    action = asyncio.create_task(run(ctx(kube, clock=clock), again))
    await emulate(api, clock, action.done, [("done", "reset 8 GPUs")])
    outcome = await action
    assert outcome.status == "done", outcome.message
    assert requests_written(api) == 1
    assert api.evicted == [("ml", "train-0")]


def replace_at(d: Decision, at: float) -> Decision:
    from dataclasses import replace

    return replace(d, at=at)


async def test_a_ladder_step_keeps_one_id_per_incident(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(node("n1"))
    d = decide({"node": "n1"}, wait="1s")
    step = Decision(**{**d.__dict__, "extra": {"step": 2, "since": 1_800_000_000.0}})
    action = asyncio.create_task(run(ctx(kube, clock=clock), step))
    await emulate(api, clock, action.done, [("done", "ok")])
    assert (await action).status == "done"
    rid = json.loads(node_annotations(api)[RESET_REQUEST_ANNOTATION])["id"]
    assert (await run(ctx(kube, clock=clock), step)).status == "done"  # answered: not asked again
    assert requests_written(api) == 1
    later = Decision(**{**d.__dict__, "extra": {"step": 2, "since": 1_800_009_999.0}})
    task = asyncio.create_task(run(ctx(kube, clock=clock), later))
    await until(lambda: json.loads(node_annotations(api)[RESET_REQUEST_ANNOTATION])["id"] != rid)
    await emulate(api, clock, task.done, [])  # unanswered: its wait runs out
    await task


def test_parameters_are_validated() -> None:
    spec = ACTIONS["reset_devices"]
    params, problems = spec.validate({})
    assert params == {
        "taint": "accel-fleet.io/faulty=true:NoSchedule",
        "drainTimeout": 600.0,
        "wait": 600.0,
        "moveJobs": True,
    }
    _, problems = spec.validate({"wait": "0s", "taint": "x", "wiat": "1m"})
    said = {p.param: p.message for p in problems}
    assert set(said) == {"wait", "taint", "wiat"}
    assert "did you mean" in said["wiat"]


async def test_the_executor_resumes_a_ladder_step_from_the_node_alone(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    from autoscaler.executor import Executor

    api.add(node("n1"))
    api.add(pod("train-0", "n1"))
    d = decide({"node": "n1"}, wait="30s")
    step = Decision(**{**d.__dict__, "extra": {"step": 2, "since": 1_800_000_000.0}})
    first = asyncio.create_task(run(ctx(kube, clock=clock), step))
    await until(lambda: RESET_REQUEST_ANNOTATION in node_annotations(api))
    first.cancel()  # kill -9
    await asyncio.gather(first, return_exceptions=True)

    # A new controller: the executor rebuilds the decision from the node's entry, which
    # knows nothing of the ladder's incident; it must still find the request it wrote.
    executor = Executor(ctx(kube, clock=clock))
    assert await executor.resume({"fatal-device-fault"}) == 1
    await emulate(api, clock, lambda: executor.in_flight == 0, [("done", "reset")])
    await executor.wait(timeout=20)
    (record,) = executor.history
    assert record.outcome.status == "done", record.outcome.message
    assert requests_written(api) == 1
    assert api.evicted == [("ml", "train-0")]


async def test_a_vendor_the_agent_cannot_reset_is_skipped_before_anything_is_touched(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    """A Gaudi (any vendor outside accel_common.remedies.RESETTABLE_VENDORS): no
    claim, no taint, no eviction, no request; ``skipped`` with reason
    ``unsupported``, which a ladder takes to go on at once."""
    api.add(node("n1"))
    api.add(pod("holder", "n1"))
    target = {"node": "n1", "device": "gaudi0"}
    d = decide(target, uuid="HL-0")
    d = Decision(**{**d.__dict__, "sample_labels": labels_of({**target, "vendor": "gaudi"})})
    outcome = await run(ctx(kube, clock=clock), d)
    assert (outcome.status, outcome.details.get("reason")) == ("skipped", "unsupported")
    assert "gaudi device, which the node agent cannot reset" in outcome.message
    annotations = node_annotations(api)
    assert ANNOTATION not in annotations and RESET_REQUEST_ANNOTATION not in annotations
    n = api.get("nodes", None, "n1")
    assert n is not None and not n["spec"].get("taints")
    assert api.evicted == []


async def test_the_vendor_comes_from_the_exporter_when_the_sample_lacks_it(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    api.add(node("n1"))

    async def query(expr: str, at: float) -> QueryResult:
        assert expr.startswith("accel_device_info") and 'device="npu0"' in expr
        return Vector((Sample(labels_of({"vendor": "ascend"}), 1, at),))

    outcome = await run(ctx(kube, query, clock=clock), decide({"node": "n1", "device": "npu0"}))
    assert (outcome.status, outcome.details.get("reason")) == ("skipped", "unsupported")


async def test_the_agents_unsupported_answer_is_a_skip_not_a_failure(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    """The vendor was unknown here (no label, no exporter): the agent is asked, and
    its ``failed`` with ``reason: unsupported`` (the same rule, on the node) ends the
    step ``skipped``."""
    api.add(node("n1"))
    action = asyncio.create_task(run(ctx(kube, clock=clock), decide({"node": "n1"}, wait="20s")))
    await until(
        lambda: RESET_REQUEST_ANNOTATION in node_annotations(api) and clock.sleepers >= 1,
        what="the request",
    )
    rid = json.loads(node_annotations(api)[RESET_REQUEST_ANNOTATION])["id"]
    n = api.get("nodes", None, "n1")
    assert n is not None
    n["metadata"]["annotations"][RESET_STATUS_ANNOTATION] = json.dumps(
        {
            "id": rid,
            "state": "failed",
            "devices": [],
            "message": "no device to reset",
            "at": "x",
            "reason": "unsupported",
        }
    )
    api.add(n)
    clock.wake_next()
    outcome = await action
    assert (outcome.status, outcome.details.get("reason")) == ("skipped", "unsupported")


async def test_move_jobs_false_evicts_nothing_and_waits_for_the_idle_reset(
    api: FakeApiServer, kube: ClientKube, clock: FakeClock
) -> None:
    """reset_when_idle: the taint goes on, the job stays, the agent refuses while it
    runs and resets once it finished; one request."""
    api.add(node("n1"))
    api.add(pod("holder", "n1"))
    d = decide(
        {"node": "n1", "device": "nvidia0"},
        uuid="GPU-0",
        moveJobs=False,
        wait="1h",
        taint="accel-fleet.io/repair-pending=true:NoSchedule",
    )
    labels = {**d.target, "uuid": "GPU-0", "vendor": "nvidia"}
    d = Decision(**{**d.__dict__, "sample_labels": labels_of(labels)})
    action = asyncio.create_task(run(ctx(kube, clock=clock), d))
    answers = [("refused", "pod ml/holder holds GPU-0")] * 3 + [("done", "reset")]
    await emulate(api, clock, action.done, answers)
    outcome = await action
    assert outcome.status == "done", outcome.message
    assert api.evicted == [] and requests_written(api) == 1
    n = api.get("nodes", None, "n1")
    assert n is not None
    assert [t["key"] for t in n["spec"]["taints"]] == ["accel-fleet.io/repair-pending"]
