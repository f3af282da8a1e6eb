"""The agent channel under a second writer and under bad values, with the real agent
loop, the real ``kubernetes`` client and the fake API server.

The close race: the controller gives up on a request (``_give_up`` in reset_devices.py
and reboot_node.py writes a final ``failed``) between the agent's read of the Node
and its write of "resetting" / "rebooting". The controller's write is slipped in
deterministically, inside the agent's PATCH call and before the request leaves, so
the agent's conditional write meets a 409; it must read again, find the request
closed, and never reset or reboot. Then unreadable requests and statuses (nested,
non-finite, wrong types, huge): answered ``failed`` with reason ``unreadable``, the
agent keeps running, and the next valid request is served."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from autoscaler.actions import ACTIONS, reboot_node, reset_devices
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops import agent
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import labels_of
from nodeagent.agent import Agent, NodeAPI
from nodeagent.reboot import RebootTask
from nodeagent.reset import ResetTask
from nodeagent.tasks import AgentContext, NodePatch
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.nvml import FakeNVML
from tests.support.kubeobjs import node

pytestmark = pytest.mark.timeout(60)

NODE = "n1"


class Interleaved:
    """The agent's NodeAPI, with ``before`` run once inside the first PATCH whose
    ``key`` annotation says ``state``, before that PATCH is sent: another writer's
    change lands between the agent's read and its write, every time, with no sleep."""

    def __init__(self, inner: NodeAPI, key: str, state: str, before: Callable[[], None]) -> None:
        self.inner = inner
        self.key = key
        self.state = state
        self.before: Callable[[], None] | None = before

    def get(self, name: str) -> dict[str, Any]:
        return self.inner.get(name)

    def patch(
        self, name: str, patch: NodePatch, resource_version: str | None = None
    ) -> dict[str, Any]:
        raw = patch.annotations.get(self.key)
        if self.before is not None and raw and json.loads(raw).get("state") == self.state:
            before, self.before = self.before, None
            before()
        return self.inner.patch(name, patch, resource_version)

    def close(self) -> None:
        self.inner.close()


class Host:
    """Reboots and resets asked of the node."""

    def __init__(self) -> None:
        self.reboots = 0

    def reboot(self) -> None:
        self.reboots += 1


def context(fake: FakeNVML | None, host: Host) -> AgentContext:
    return AgentContext(
        node_name=NODE,
        nvml=fake,
        amdsmi=None,
        sysfs_root=Path("/nonexistent"),
        holders=list,
        clock=lambda: 1_800_000_000.0,
        boot_id=lambda: "boot-1",
        reboot=host.reboot,
        nvidia_reset=fake.gpu_reset if fake is not None else None,
    )


def pcie() -> FakeNVML:
    fake: FakeNVML = FakeNVML.pcie_node()
    fake.nvmlInit()
    return fake


def annotate(api: FakeApiServer, key: str, value: str) -> None:
    n = api.get("nodes", None, NODE)
    assert n is not None
    n["metadata"].setdefault("annotations", {})[key] = value
    api.add(n)


def said(api: FakeApiServer, key: str) -> dict[str, Any]:
    n = api.get("nodes", None, NODE)
    assert n is not None
    return dict(json.loads(n["metadata"]["annotations"][key]))


def reset_request(rid: str, devices: list[str]) -> str:
    body = {"id": rid, "devices": devices, "requestedAt": "2026-12-01T19:00:00Z", "by": "t"}
    return json.dumps(body)


def decision(action: str) -> Decision:
    params, problems = ACTIONS[action].validate({"wait": "1s"})
    assert not problems
    return Decision(
        rule="fatal-device-fault",
        kind="act",
        action=action,
        params=params,
        target={"node": NODE},
        sample_labels=labels_of({"node": NODE}),
        sample_value=1.0,
        at=0.0,
    )


def controller(kube: ClientKube) -> ActionContext:
    return ActionContext(kube=kube, replica="test")


def on_loop(loop: asyncio.AbstractEventLoop, make: Callable[[], Any]) -> Callable[[], None]:
    """A callable for the agent's thread that runs the coroutine ``make()`` on the
    test's loop (where the controller's client lives) and waits for it."""

    def run() -> None:
        asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=20)

    return run


async def test_a_reset_the_controller_closed_before_the_agent_wrote_resetting_never_runs(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    api.add(node(NODE))
    fake = pcie()
    gpu = fake.gpus[1].uuid
    annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r1", [gpu]))
    loop = asyncio.get_running_loop()
    close = on_loop(
        loop,
        lambda: reset_devices._give_up(
            controller(kube), decision("reset_devices"), NODE, "r1", None, 1.0
        ),
    )
    inner = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(
        Interleaved(inner, RESET_STATUS_ANNOTATION, "resetting", close),
        context(fake, Host()),
        [ResetTask()],
    )
    try:
        for _ in range(3):
            assert await asyncio.to_thread(agent.round_safely)
        assert fake.resets == []
        status = said(api, RESET_STATUS_ANNOTATION)
        assert status["state"] == "failed" and "closed by accel-autoscaler" in status["message"]
        patches = api.requests_for("PATCH", f"/nodes/{NODE}$")
        # The agent's "resetting" met the controller's close as a Conflict, and was
        # not sent again.
        assert 409 in [p.status for p in patches]
        assert not [p for p in patches if p.status == 200 and "resetting" in json.dumps(p.body)]

        # The channel still works: the next request is carried out.
        annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r2", [gpu]))
        assert await asyncio.to_thread(agent.round_safely)
        assert said(api, RESET_STATUS_ANNOTATION)["state"] == "done"
        assert fake.resets == [(fake.gpus[1].bus_id,)]
    finally:
        agent.api.close()


async def test_a_reboot_the_controller_closed_before_the_agent_wrote_rebooting_never_runs(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    api.add(node(NODE))
    record = {"id": "b1", "requestedAt": "2026-12-01T19:00:00Z", "by": "t", "bootID": "boot-1"}
    annotate(api, REBOOT_REQUEST_ANNOTATION, json.dumps(record))
    params = reboot_node.RebootNodeParams(method="agent", wait=1.0)
    asked = reboot_node.Asked("agent", 1_800_000_000.0, "boot-1", rid="b1")
    loop = asyncio.get_running_loop()
    close = on_loop(
        loop,
        lambda: reboot_node._give_up(
            controller(kube), decision("reboot_node"), params, NODE, "b1", asked, ""
        ),
    )
    host = Host()
    inner = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(
        Interleaved(inner, REBOOT_STATUS_ANNOTATION, "rebooting", close),
        context(None, host),
        [RebootTask()],
    )
    try:
        for _ in range(3):
            assert await asyncio.to_thread(agent.round_safely)
        assert host.reboots == 0
        status = said(api, REBOOT_STATUS_ANNOTATION)
        assert status["state"] == "failed" and "closed by accel-autoscaler" in status["message"]

        annotate(api, REBOOT_REQUEST_ANNOTATION, json.dumps({**record, "id": "b2"}))
        assert await asyncio.to_thread(agent.round_safely)
        assert host.reboots == 1
        assert said(api, REBOOT_STATUS_ANNOTATION)["state"] == "rebooting"
    finally:
        agent.api.close()


DEEP = "[" * 20_000 + "]" * 20_000

# (value, the id the answer must carry): nested, non-finite, wrong types, huge.
BAD_REQUESTS = [
    pytest.param('{"id": "r1", "devices": ' + DEEP + "}", "r1", id="nested-devices"),
    pytest.param(DEEP, "", id="nested-whole"),
    pytest.param('{"id": "r1", "devices": [], "requestedAt": NaN}', "r1", id="nan"),
    pytest.param('{"id": "r1", "devices": [1e999]}', "r1", id="infinite"),
    pytest.param('{"id": "r1", "devices": [-Infinity]}', "r1", id="minus-infinity"),
    pytest.param('{"id": 7, "devices": []}', "", id="id-a-number"),
    pytest.param('{"id": "r1", "devices": {"a": 1}}', "r1", id="devices-an-object"),
    pytest.param('{"id": "r1", "devices": [["GPU-1"]]}', "r1", id="device-a-list"),
    pytest.param('"r1"', "", id="a-string"),
    pytest.param(json.dumps({"id": "r1", "devices": ["x" * 70_000]}), "r1", id="huge"),
    pytest.param(json.dumps({"id": "r1", "devices": ["GPU-1"] * 2000}), "r1", id="many"),
]

BAD_STATUSES = [
    pytest.param(DEEP, id="nested-whole"),
    pytest.param('{"id": "r1", "state": "done", "devices": ' + DEEP + "}", id="nested-devices"),
    pytest.param('{"id": "r1", "state": "failed", "at": Infinity}', id="infinite"),
    pytest.param('{"id": "r1", "state": ["failed"]}', id="state-a-list"),
    pytest.param('{"id": "r1", "state": "failed", "message": 1e999}', id="message-infinite"),
    pytest.param("[]", id="an-array"),
]


def reset_agent(api: FakeApiServer, tmp_path: Path, fake: FakeNVML) -> Agent:
    inner = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    return Agent(inner, context(fake, Host()), [ResetTask()])


@pytest.mark.parametrize(("raw", "rid"), BAD_REQUESTS)
async def test_an_unreadable_reset_request_is_answered_and_the_next_one_served(
    api: FakeApiServer, tmp_path: Path, raw: str, rid: str
) -> None:
    api.add(node(NODE))
    fake = pcie()
    annotate(api, RESET_REQUEST_ANNOTATION, raw)
    agent = reset_agent(api, tmp_path, fake)
    try:
        assert await asyncio.to_thread(agent.round_safely)
        status = said(api, RESET_STATUS_ANNOTATION)
        assert (status["id"], status["state"], status["reason"]) == (rid, "failed", "unreadable")
        assert "reset-request" in status["message"] and "nothing was reset" in status["message"]
        writes = len(api.requests_for("PATCH", f"/nodes/{NODE}$"))
        assert await asyncio.to_thread(agent.round_safely)
        assert len(api.requests_for("PATCH", f"/nodes/{NODE}$")) == writes  # said once
        annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r2", [fake.gpus[0].uuid]))
        assert await asyncio.to_thread(agent.round_safely)
        assert said(api, RESET_STATUS_ANNOTATION)["state"] == "done"
        assert fake.resets == [(fake.gpus[0].bus_id,)]
    finally:
        agent.api.close()


@pytest.mark.parametrize("raw", BAD_STATUSES)
async def test_an_unreadable_reset_status_fails_its_request_and_frees_the_channel(
    api: FakeApiServer, tmp_path: Path, raw: str
) -> None:
    api.add(node(NODE))
    fake = pcie()
    annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r1", [fake.gpus[0].uuid]))
    annotate(api, RESET_STATUS_ANNOTATION, raw)
    agent = reset_agent(api, tmp_path, fake)
    try:
        assert await asyncio.to_thread(agent.round_safely)
        status = said(api, RESET_STATUS_ANNOTATION)
        # It may have been the controller's "failed": the request is not carried out.
        assert (status["id"], status["state"], status["reason"]) == ("r1", "failed", "unreadable")
        assert "reset-status" in status["message"]
        assert fake.resets == []
        annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r2", [fake.gpus[0].uuid]))
        assert await asyncio.to_thread(agent.round_safely)
        assert said(api, RESET_STATUS_ANNOTATION)["state"] == "done"
        assert fake.resets == [(fake.gpus[0].bus_id,)]
    finally:
        agent.api.close()


@pytest.mark.parametrize(("raw", "rid"), BAD_REQUESTS[:6])
async def test_an_unreadable_reboot_request_is_answered_and_the_next_one_served(
    api: FakeApiServer, tmp_path: Path, raw: str, rid: str
) -> None:
    api.add(node(NODE))
    host = Host()
    annotate(api, REBOOT_REQUEST_ANNOTATION, raw.replace('"devices"', '"bootID"'))
    inner = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(inner, context(None, host), [RebootTask()])
    try:
        assert await asyncio.to_thread(agent.round_safely)
        status = said(api, REBOOT_STATUS_ANNOTATION)
        assert (status["id"], status["state"], status["reason"]) == (rid, "failed", "unreadable")
        assert "not rebooting" in status["message"] and host.reboots == 0
        annotate(api, REBOOT_STATUS_ANNOTATION, DEEP)  # and a status nobody can read
        assert await asyncio.to_thread(agent.round_safely)
        assert host.reboots == 0
        annotate(api, REBOOT_REQUEST_ANNOTATION, json.dumps({"id": "b2", "by": "t"}))
        assert await asyncio.to_thread(agent.round_safely)
        assert host.reboots == 1
    finally:
        agent.api.close()


def test_the_controller_reads_a_nested_answer_as_unknown() -> None:
    n = node(NODE)
    n["metadata"]["annotations"] = {RESET_STATUS_ANNOTATION: DEEP}
    assert agent.annotation_json(n, RESET_STATUS_ANNOTATION) is None


async def test_what_the_agent_did_is_written_even_when_the_node_changed_meanwhile(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.add(node(NODE))
    fake = pcie()
    annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r1", [fake.gpus[2].uuid]))

    def someone_labels_the_node() -> None:
        n = api.get("nodes", None, NODE)
        assert n is not None
        n["metadata"]["labels"]["example.com/team"] = "ml"
        api.add(n)

    inner = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(
        Interleaved(inner, RESET_STATUS_ANNOTATION, "done", someone_labels_the_node),
        context(fake, Host()),
        [ResetTask()],
    )
    try:
        assert await asyncio.to_thread(agent.round_safely)
    finally:
        agent.api.close()
    assert said(api, RESET_STATUS_ANNOTATION)["state"] == "done"
    n = api.get("nodes", None, NODE)
    assert n is not None and n["metadata"]["labels"]["example.com/team"] == "ml"
    assert fake.resets == [(fake.gpus[2].bus_id,)]  # once, though its answer met a 409
    statuses = [p.status for p in api.requests_for("PATCH", f"/nodes/{NODE}$")]
    assert statuses == [200, 409, 200]  # claim, answer (Conflict), answer again


async def test_a_node_that_keeps_changing_fails_the_round_and_nothing_is_done(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.add(node(NODE))
    fake = pcie()
    annotate(api, RESET_REQUEST_ANNOTATION, reset_request("r1", [fake.gpus[0].uuid]))
    api.faults.fail(5, status=409, method="PATCH")
    agent = reset_agent(api, tmp_path, fake)
    try:
        assert not await asyncio.to_thread(agent.round_safely)
        assert fake.resets == []
        assert agent.rounds["error"] == 1
        assert await asyncio.to_thread(agent.round_safely)  # the next round gets through
        assert fake.resets == [(fake.gpus[0].bus_id,)]
    finally:
        agent.api.close()
