"""mark_for_return against the fake API server through the real ``kubernetes``
client: the node gets the return-to-vendor label and the device's mark (UUID, the
fault, why), a Warning Event says so, a second run changes nothing, a recover does
not undo it, and an unreadable mark annotation is replaced rather than trusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from accel_common.names import RETURN_ANNOTATION, RETURN_LABEL
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import labels_of
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import events, node

pytestmark = pytest.mark.timeout(60)

T0 = 1_800_000_000.0


def decide(kind: str = "act", **labels: str) -> Decision:
    target = {"node": "n1", "device": "nvidia0"}
    return Decision(
        rule="fatal-device-fault",
        kind=kind,  # type: ignore[arg-type]
        action="mark_for_return",
        params={},
        target=target,
        sample_labels=labels_of({**target, **labels}),
        sample_value=1.0,
        at=T0,
        reason="escalated to step 5 of 5: recurrence cap: ladder 3 for this target",
    )


async def run(kube: ClientKube, d: Decision, **extra: Any) -> Outcome:
    execute = ACTIONS["mark_for_return"].execute
    assert execute is not None
    clock = FakeClock(T0)
    return await execute(ActionContext(kube=kube, clock=clock, sleep=clock.sleep, **extra), d)


def metadata(api: FakeApiServer) -> dict[str, Any]:
    n = api.get("nodes", None, "n1")
    assert n is not None
    return dict(n["metadata"])


async def test_the_device_is_marked_for_return_with_its_uuid_and_why(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    d = decide(uuid="GPU-0", code="remap_failure", action="isolate", vendor="nvidia")
    outcome = await run(kube, d)
    assert outcome.status == "done", outcome.message
    meta = metadata(api)
    assert meta["labels"][RETURN_LABEL] == "true"
    mark = json.loads(meta["annotations"][RETURN_ANNOTATION])["GPU-0"]
    assert mark["device"] == "nvidia0" and mark["uuid"] == "GPU-0"
    assert mark["reason"].startswith("code=remap_failure, action=isolate, vendor=nvidia: ")
    assert "recurrence cap" in mark["reason"]
    [ev] = events(api, "MarkedForReturn")
    assert ev["type"] == "Warning" and "GPU-0" in ev["message"]
    # Again (a restart resumed it): nothing new is written, and it is done.
    version = meta["resourceVersion"]
    assert (await run(kube, d)).status == "done"
    assert metadata(api)["resourceVersion"] == version


async def test_a_recover_never_undoes_it(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1"))
    await run(kube, decide(uuid="GPU-0"))
    outcome = await run(kube, decide("recover", uuid="GPU-0"))
    assert outcome.status == "skipped"
    assert metadata(api)["labels"][RETURN_LABEL] == "true"
    assert "GPU-0" in json.loads(metadata(api)["annotations"][RETURN_ANNOTATION])


async def test_an_unreadable_mark_is_replaced_and_other_marks_are_kept(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n = node("n1")
    n["metadata"]["annotations"] = {RETURN_ANNOTATION: "[" * 10_000}
    api.add(n)
    await run(kube, decide(uuid="GPU-0"))
    await run(kube, decide(uuid="GPU-1"))
    marks = json.loads(metadata(api)["annotations"][RETURN_ANNOTATION])
    assert sorted(marks) == ["GPU-0", "GPU-1"]


async def test_without_a_uuid_the_device_name_keys_the_mark(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    outcome = await run(kube, decide())
    assert outcome.status == "done" and "UUID unknown" in outcome.message
    assert "nvidia0" in json.loads(metadata(api)["annotations"][RETURN_ANNOTATION])


async def test_a_node_that_is_gone_is_skipped(kube: ClientKube) -> None:
    assert (await run(kube, decide(uuid="GPU-0"))).status == "skipped"
