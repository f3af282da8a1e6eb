"""The controller counts acts that acted, and the count survives a restart
(issue 30): in process, against the fake API server through the real client and
the real state record. A rebalance that finds nothing to weigh (no metrics
source: skipped) gives its place in ``maxActionsPerHour`` back and is left out of
the record's next write; two cordons of one evaluation (done) stay two after a
restart, so the new process does not cordon a third node in the same hour."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import STATE_DATA_KEY
from autoscaler.actions.context import ActionContext
from autoscaler.controller import Controller, StateRecord
from autoscaler.kube.client import ClientKube
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.wiring import wire
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node
from tests.support.sources import HealthySource

pytestmark = pytest.mark.timeout(60)

NAMESPACE = "accel-fleet"
RECORD = "accel-autoscaler-state"
NODES = [f"n{i}" for i in range(6)]

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: hot
      alertname: NodeHot
      target: node
      action: {type: rebalance}
      cooldown: 1h
      limits: {maxActionsPerHour: 2}
    - name: broken
      alertname: NodeBroken
      target: node
      action: {type: cordon}
      cooldown: 1h
      limits: {maxActionsPerHour: 2}
"""


def _controller(tmp: Path, kube: ClientKube) -> Controller:
    """A fresh controller process's worth of state: nothing in memory, the same
    state record on the cluster. Its actions have no metrics source, so a
    rebalance has no load to weigh and is skipped."""
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    ctx = ActionContext(kube=kube, controller="accel-autoscaler", replica="test")
    watcher = RuleWatcher([str(rules)], source="prometheus")
    source = HealthySource()
    return Controller(
        watcher,
        source,
        AlertReceiver(),
        wiring=wire(source, lambda: watcher.current, ctx),
        record=StateRecord(kube, NAMESPACE, RECORD),
    )


def _alerts(c: Controller, alertname: str, nodes: Sequence[str]) -> None:
    c.alerts.ingest(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": alertname, "node": n},
                    "startsAt": "2026-11-29T10:00:00Z",
                }
                for n in nodes
            ],
        },
        time.time(),
    )


async def _cycle(c: Controller) -> list[tuple[str, str]]:
    """One evaluation and its actions to their end: (rule, node) of its acts."""
    decisions = await c.cycle()
    assert c.executor is not None
    await asyncio.wait_for(c.executor.wait(), 10)
    return [(d.rule, d.target["node"]) for d in decisions if d.kind == "act"]


def _recorded(api: FakeApiServer) -> list[str]:
    cm = api.get("configmaps", NAMESPACE, RECORD)
    assert cm is not None
    doc: dict[str, Any] = json.loads(cm["data"][STATE_DATA_KEY])
    return sorted(str(a["rule"]) for a in doc["actions"])


def _cordoned(api: FakeApiServer) -> list[str]:
    return sorted(
        n["metadata"]["name"]
        for n in api.objects("nodes")
        if (n.get("spec") or {}).get("unschedulable")
    )


async def test_skipped_acts_give_their_places_back_and_done_ones_survive_a_restart(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    for name in NODES:
        api.add(node(name))
    c = _controller(tmp_path, kube)
    _alerts(c, "NodeHot", NODES)
    # Two rebalances an evaluation (the limit holds the third of the same
    # evaluation), each skipped, each place given back: every hot node within the
    # hour, where a count by decision stopped after two.
    acted = [await _cycle(c) for _ in range(4)]
    assert [len(a) for a in acted] == [2, 2, 2, 0]
    assert sorted(n for a in acted for _, n in a) == NODES
    assert c.executor is not None
    assert {s for (_, a, s) in c.executor.outcomes if a == "rebalance"} == {"skipped"}
    assert c.state.actions == []
    assert _recorded(api) == []

    _alerts(c, "NodeBroken", NODES[:4])
    assert await _cycle(c) == [("broken", "n0"), ("broken", "n1")]
    await _cycle(c)  # held by the limit; the record is written after the cycle
    assert _cordoned(api) == ["n0", "n1"]
    assert _recorded(api) == ["broken", "broken"]

    # A restart: nothing in memory, the record and the node entries on the cluster.
    again = _controller(tmp_path, kube)
    _alerts(again, "NodeBroken", NODES[:4])
    _alerts(again, "NodeHot", NODES)
    assert await _cycle(again) == []  # rebuilt first, then evaluated
    assert sorted(rule for _, rule in again.state.actions) == ["broken", "broken"]
    assert await _cycle(again) == []
    assert _cordoned(api) == ["n0", "n1"]
