"""``migrate_jobs``'s "unknown holders ... deviceOnly evicts nothing" is routine,
so it logs at info: every simulator run began with it as a warning, which read
like an error. The outcome (``skipped``, with the reason) still says it all."""

from __future__ import annotations

import logging

import pytest

from autoscaler.kube.client import ClientKube
from autoscaler.types import Vector
from tests.autoscaler.actions.test_actions_kube import ctx, decide, run
from tests.autoscaler.actions.test_device_only_unknown import answer
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod

pytestmark = pytest.mark.timeout(60)


async def test_unknown_holders_log_at_info(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    api.add(node("n1"))
    api.add(pod("a", "n1"))
    d = decide("migrate_jobs", {"node": "n1", "device": "nvidia3"}, rule="ecc", deviceOnly=True)
    with caplog.at_level(logging.DEBUG):
        outcome = await run(ctx(kube, query=answer(Vector(()))), d)
    assert outcome.status == "skipped" and "unknown holders" in outcome.message
    said = [r for r in caplog.records if "unknown holders" in r.getMessage()]
    assert said, "the condition is still logged"
    assert {r.levelno for r in said} == {logging.INFO}
