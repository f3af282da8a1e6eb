"""The controller's actions read the node agent's vendor table
(``accel_common.agentsupport``), against the fake API server through the real
``kubernetes`` client: ``repartition`` leaves a node whose vendor takes no partition
layout untouched (skipped, reason unsupported, an Event saying why) and still acts on
one that does; ``reset_devices`` ends ``failed`` with the agent's ``unfixed`` reason
when the real agent on fake NVML finds the GPU not fixed after its reset."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from accel_common.agentsupport import UNFIXED_REASON, UNSUPPORTED_REASON
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    VENDOR_LABEL,
)
from autoscaler.actions.ops.ownership import ANNOTATION
from autoscaler.kube.client import ClientKube
from autoscaler.types import labels_of
from tests.autoscaler.actions.test_actions_kube import ctx, decide, run
from tests.autoscaler.actions.test_reset_devices import (
    RealAgent,
    fake_nvml,
    node_annotations,
    start_agent,
)
from tests.autoscaler.actions.test_reset_devices import ctx as reset_ctx
from tests.autoscaler.actions.test_reset_devices import decide as reset_decision
from tests.autoscaler.actions.test_reset_devices import run as run_reset
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)

__all__ = ["start_agent"]  # the fixture, shared with test_reset_devices.py


@pytest.mark.parametrize(
    ("where", "vendor"),
    [("node label", "gaudi"), ("node label", "tpu"), ("sample", "ascend")],
)
async def test_repartition_skips_a_vendor_that_takes_no_layout(
    api: FakeApiServer, kube: ClientKube, where: str, vendor: str
) -> None:
    n = node("n1")
    if where == "node label":
        n["metadata"]["labels"][VENDOR_LABEL] = vendor
    api.add(n)
    api.add(pod("train-0", "n1", owner="Job"))
    d = decide("repartition", {"node": "n1"}, layout="h100-all-1g")
    if where == "sample":
        d = replace(d, sample_labels=labels_of({"node": "n1", "vendor": vendor}))
    outcome = await run(ctx(kube), d)
    assert outcome.status == "skipped", outcome.message
    assert outcome.details == {"reason": UNSUPPORTED_REASON, "vendor": vendor}
    assert "applies no partition layout" in outcome.message
    after = api.get("nodes", None, "n1")
    assert after is not None
    # Untouched: no cordon, no entry, no label, no eviction.
    assert not after["spec"].get("unschedulable")
    assert ANNOTATION not in (after["metadata"].get("annotations") or {})
    assert PARTITION_LAYOUT_LABEL not in after["metadata"]["labels"]
    assert api.evicted == []
    reasons = [e["reason"] for e in api.objects("events")]
    assert reasons == ["RepartitionUnsupported"]


async def test_repartition_still_acts_on_a_vendor_that_partitions(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """An NVIDIA node whose agent already has the layout: done, not skipped (the
    vendor check lets it through to step 1's answer)."""
    n = node("n1")
    n["metadata"]["labels"].update({VENDOR_LABEL: "nvidia", PARTITION_APPLIED_LABEL: "h100-all-1g"})
    n["metadata"]["annotations"] = {
        PARTITION_STATE_ANNOTATION: json.dumps(
            {"layout": "h100-all-1g", "state": "applied", "message": "", "at": "x"}
        )
    }
    api.add(n)
    outcome = await run(ctx(kube), decide("repartition", {"node": "n1"}, layout="h100-all-1g"))
    assert outcome.status == "done", outcome.message


async def test_a_reset_the_agent_finds_unfixed_ends_failed_with_its_reason(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path, start_agent: Any
) -> None:
    fake = fake_nvml("pcie_node")
    fake.set_recovery_action(1, pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT)
    fake.unfixed.add(1)  # the reset brings it back with the driver's verdict standing
    api.add(node("n1"))
    agent = RealAgent(api, tmp_path, fake)
    start_agent(agent)
    await until(lambda: node_annotations(api).get(RESET_SCOPE_ANNOTATION) == "device")
    d = reset_decision({"node": "n1", "device": "nvidia1"}, uuid=fake.gpus[1].uuid, wait="20s")
    outcome = await run_reset(reset_ctx(kube), d)
    assert outcome.status == "failed", outcome.message
    assert outcome.details.get("reason") == UNFIXED_REASON
    assert "node_reboot" in outcome.message
    assert len(fake.resets) == 1
