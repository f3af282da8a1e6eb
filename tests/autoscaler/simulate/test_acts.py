"""Acts are what acted, in the simulator and the controller alike (issue 30): a
rule whose action is skipped every time (``migrate_jobs`` with ``deviceOnly`` on a
device no pod holds: who holds it is unknown, so nothing is evicted) is never
held by its ``maxActionsPerHour``, while one whose action is done is; the
summary counts the decisions (``actions``, unchanged) and what their actions
answered (``actions_by_outcome``). The controller, replaying the simulator's
samples at the simulator's evaluations with the real executor against the fake
API server, makes the same decisions and gets the same outcomes: both are wired
by ``autoscaler/wiring.py``."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from pathlib import Path

import pytest

from autoscaler.actions.context import ActionContext
from autoscaler.controller import Controller
from autoscaler.kube.client import ClientKube
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.simulate import run as sim_run
from autoscaler.simulate.results import summary_section
from autoscaler.simulate.scenario import Scenario, load_scenario
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.store import StoreSource
from autoscaler.wiring import wire
from tests.support.cycles import RecordingCycle, keeping_the_past
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node

pytestmark = pytest.mark.timeout(120)

# No job arrives: no pod ever holds a device. Four fatal faults on four devices
# within the hour, each an incident of its own target.
SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 1h
  evaluationInterval: 30s
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 2, initial: 2, min: 2, max: 2,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 0
    sizes: {1: 1}
    duration: {distribution: fixed, value: 1h}
  faults:
    events:
      - {at: 5m, kind: fatal, node: h100-0000, device: nvidia0}
      - {at: 15m, kind: fatal, node: h100-0000, device: nvidia1}
      - {at: 25m, kind: fatal, node: h100-0001, device: nvidia0}
      - {at: 35m, kind: fatal, node: h100-0001, device: nvidia1}
"""

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  rules:
    - name: fatal
      expr: increase(accel_fault_events_total{{severity="fatal"}}[5m]) > 0
      target: device
      action: {action}
      cooldown: 1h
      limits: {{maxActionsPerHour: 1}}
"""

# Skipped every time: which pods hold the device is unknown (no series), so a
# deviceOnly move evicts nothing.
SKIPPING = "{type: migrate_jobs, deviceOnly: true}"
DONE = "{type: cordon}"


def _files(tmp_path: Path, action: str) -> tuple[Scenario, Path]:
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(action=action))
    return load_scenario(tmp_path / "scenario.yaml"), rules


@pytest.mark.parametrize(
    ("action", "acts", "by_outcome"),
    [
        (SKIPPING, {"migrate_jobs": 4}, {"migrate_jobs:skipped": 4}),
        (DONE, {"cordon": 1}, {"cordon:done": 1}),
    ],
    ids=["skipped", "done"],
)
def test_the_summary_counts_decisions_and_their_outcomes(
    tmp_path: Path, action: str, acts: dict[str, int], by_outcome: dict[str, int]
) -> None:
    scenario, rules = _files(tmp_path, action)
    result = sim_run.simulate(scenario, [str(rules)], baseline=False, parallel=False)["rules"]
    section = summary_section(result)
    # A skipped move gives its place back: every fault is acted on within the
    # hour, though maxActionsPerHour is 1; a done cordon fills the hour.
    assert section["actions"] == acts
    assert section["actions_by_outcome"] == by_outcome
    assert section["breaker_trips"] == 0


async def test_the_controller_and_the_simulator_count_the_same_acts(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario, rules = _files(tmp_path, SKIPPING)

    # 1. The simulator (in a thread: it runs its own event loop), keeping the past
    # that the replay below reads.
    in_sim = RecordingCycle()
    monkeypatch.setattr(sim_run, "run_cycle", in_sim)
    keeping_the_past(monkeypatch)
    sim = await asyncio.to_thread(
        sim_run.simulate, scenario, [str(rules)], baseline=False, parallel=False
    )
    sim_acts = in_sim.acts()
    assert len(sim_acts) == 4
    store: SeriesStore = in_sim.source.store

    # The controller below replays the run on this store, which already holds the
    # rhythm learner's rows of every evaluation (the simulator's learner wrote
    # them). A second learner writing its rows into the store's past (a controller
    # only ever writes at its newest time) left the replay's later fault windows
    # empty: the replay reads the simulator's rows instead of learning again.
    async def read_only(state: object, source: object, now: float) -> None:
        return None

    monkeypatch.setattr("autoscaler.engine.cycle._learn", read_only)

    # 2. The controller over the same samples, at the same evaluations, acting
    # through the real executor on the fake API server's copy of the two nodes.
    for name in ("h100-0000", "h100-0001"):
        api.add(node(name))
    now = [in_sim.calls[0][0]]
    source = StoreSource(store)
    ctx = ActionContext(
        kube=kube, replica="test", clock=lambda: now[0], query=source.query, retry_interval=0.05
    )
    watcher = RuleWatcher([str(rules)], source="scrape")
    wiring = wire(source, lambda: watcher.current, ctx)
    in_controller = RecordingCycle()
    monkeypatch.setattr("autoscaler.controller.run_cycle", in_controller)
    controller = Controller(watcher, source, AlertReceiver(), clock=lambda: now[0], wiring=wiring)
    assert wiring.executor is not None
    last = sim_acts[-1][0]
    for t, _ in in_sim.calls:
        if t > last + 120:
            break
        now[0] = t
        await controller.cycle()
        # Each action finishes before the next evaluation, as in simulated time.
        await asyncio.wait_for(wiring.executor.wait(), 10)
    assert in_controller.acts() == sim_acts
    statuses = Counter(
        {f"{a}:{s}": n for (a, k, s), n in wiring.executor.by_kind.items() if k == "act"}
    )
    assert dict(statuses) == sim["rules"].by_outcome == {"migrate_jobs:skipped": 4}
    assert wiring.state.actions == []


def test_a_run_collects_its_garbage_in_batches_and_gives_the_collector_back(
    tmp_path: Path,
) -> None:
    """``batch_collection``: the thresholds hold while the fleet runs (each
    decision sees them) and are the caller's again after, failed run or not."""
    scenario, rules = _files(tmp_path, DONE)
    before = gc.get_threshold()
    during: list[tuple[int, ...]] = []
    sim_run.run_rules(
        scenario, [str(rules)], on_decision=lambda t, d: during.append(gc.get_threshold())
    )
    assert during and set(during) == {sim_run.BATCH_GC_THRESHOLDS}
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError, match="boom"), sim_run.batch_collection():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
