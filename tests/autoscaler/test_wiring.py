"""The one builder of what the evaluation cycle is wired to (``autoscaler/wiring.py``):
what a source keeps history for is decided once from ``Rule.expressions()``, so the
controller keeps a ladder step's recover window as the simulator does; the
executor it builds reports a ladder step's outcome into the engine state and gives
a resumed entry its step back; and capabilities are asked with ``isinstance``, so a
source without them is left alone. The executor runs the real cordon action
through the real client against the fake API server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autoscaler.actions.context import ActionContext
from autoscaler.controller import Controller
from autoscaler.decision import Decision
from autoscaler.engine.cycle import NODES_QUERY
from autoscaler.engine.state import Ladder
from autoscaler.kube.client import ClientKube
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import LOOKBACK_DELTA
from autoscaler.rhythm import READS as RHYTHM_READS
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.base import Retaining, StoreBacked
from autoscaler.sources.store import StoreSource
from autoscaler.types import QueryResult, Vector, labels_of
from autoscaler.wiring import retain, retained, wire
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node

pytestmark = pytest.mark.timeout(60)

NOW = 1_800_000_000.0
FATAL = 'accel_fault_events_total{severity="fatal"}'
EXPR = f"increase({FATAL}[5m]) > 0"
RECOVER = f"increase({FATAL}[30m]) == 0"
# Only a ladder step's own recover reads three hours back.
STEP_RECOVER = f"increase({FATAL}[3h]) == 0"

LADDER = f"""\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 15s
  rules:
    - name: fault
      expr: '{EXPR}'
      target: device
      escalate:
        - action: {{type: cordon}}
          timeout: 15m
        - action: {{type: taint, taint: "accel-fleet.io/faulty=true:NoSchedule"}}
          timeout: 20m
          recover: {{expr: '{STEP_RECOVER}', for: 5m}}
        - action: {{type: cordon}}
          timeout: 30m
          recover: {{expr: '{STEP_RECOVER}', for: 5m}}
      cooldown: 30m
      recover: {{expr: '{RECOVER}', for: 0s}}
"""


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(LADDER)
    return path


def test_a_rule_names_every_expression_it_may_be_asked(rules: Path) -> None:
    ruleset = load_ruleset([str(rules)], source="scrape")
    (rule,) = ruleset.rules
    assert rule.expressions() == (EXPR, RECOVER, STEP_RECOVER, STEP_RECOVER)
    # Each once, for the set; the breaker's nodes first.
    assert ruleset.expressions() == (EXPR, RECOVER, STEP_RECOVER)
    # Then what the rhythm learner asks itself (no action here asks a window).
    assert retained(ruleset) == [NODES_QUERY, EXPR, RECOVER, STEP_RECOVER, *RHYTHM_READS]


async def test_the_controller_keeps_the_history_a_ladder_steps_recover_reads(
    rules: Path,
) -> None:
    """Under ``--source scrape`` the controller once kept only the rule's expression
    and recover: a step's own three-hour recover then read a store trimmed to 30
    minutes. It now retains what the simulator retains."""
    store = SeriesStore()
    source = StoreSource(store)
    controller = Controller(
        RuleWatcher([str(rules)], source="scrape"), source, AlertReceiver(), clock=lambda: NOW
    )
    await controller.cycle()
    assert store.retention == 3 * 3600 + LOOKBACK_DELTA
    # The same the simulator's store is told (``retain``, with its own floor).
    sim = StoreSource(SeriesStore())
    retain(sim, controller.ruleset)
    assert sim.store.retention == store.retention


class BareSource:
    """A source with none of the optional capabilities (as Prometheus has none)."""

    name = "bare"

    async def refresh(self, at: float) -> bool:
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        return Vector(())

    async def close(self) -> None:
        return None


def test_capabilities_are_asked_not_probed(rules: Path) -> None:
    ruleset = load_ruleset([str(rules)], source="scrape")
    bare = BareSource()
    assert not isinstance(bare, Retaining) and not isinstance(bare, StoreBacked)
    retain(bare, ruleset)  # left alone: nothing to tell, nothing raised
    assert wire(bare, lambda: ruleset).store is None
    store = StoreSource(SeriesStore())
    assert isinstance(store, Retaining) and isinstance(store, StoreBacked)
    assert wire(store, lambda: ruleset).store is store.store


async def test_the_built_executor_reports_a_ladder_step_and_resumes_one(
    api: FakeApiServer, kube: ClientKube, rules: Path
) -> None:
    api.add(node("n1"))
    watcher = RuleWatcher([str(rules)], source="scrape")
    source = StoreSource(SeriesStore())
    ctx = ActionContext(kube=kube, replica="test", clock=lambda: NOW, retry_interval=0.05)
    wiring = wire(source, lambda: watcher.current, ctx)
    assert wiring.executor is not None
    target = {"node": "n1", "device": "nvidia0"}
    key = ("fault", labels_of(target))
    wiring.state.ladders[key] = Ladder(step=1, since=NOW, started=NOW)

    # The controller is handed the wiring and rewires nothing.
    controller = Controller(watcher, source, AlertReceiver(), wiring=wiring)
    assert controller.state is wiring.state and controller.executor is wiring.executor
    assert controller.kube is kube

    wiring.executor.submit(
        Decision(
            rule="fault",
            kind="act",
            action="cordon",
            params={},
            target=target,
            sample_labels=(),
            sample_value=1.0,
            at=NOW,
            dry_run=False,
            extra={"step": 1, "incident": NOW},
        )
    )
    await asyncio.wait_for(wiring.executor.wait(), 10)
    assert [r.outcome.status for r in wiring.executor.history] == ["done"]
    assert wiring.state.ladders[key].outcome == "done"

    # A resumed in-flight cordon gets its ladder step back; another action does not,
    # and neither does a target with no ladder.
    hook = wiring.executor.ladder_step
    assert hook is not None
    assert hook("fault", target, "cordon") == {"step": 1, "incident": NOW}
    assert hook("fault", target, "taint") is None
    assert hook("fault", {"node": "n2", "device": "nvidia0"}, "cordon") is None
