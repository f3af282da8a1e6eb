"""Fault classes in the fleet simulator (issue 34): which repair fixes which fault
comes from the fault's action class, as the vendors say, not from one probability
for every fatal fault. A reset never fixes a ``reboot``-class fault (and the agent
says so: the device still does not answer); an ``isolate``-class fault survives
resets and reboots until the machine is replaced; a reset on a vendor the agent
cannot reset (Gaudi, Ascend, TPU, Intel) is answered failed/unsupported at once,
as ``nodeagent/reset.py`` answers it; a lost device is a fatal fault event of class
``reboot`` and waits for a reboot; a pending remap lets its job run and is applied
by a reset once the device is free. The simulated exporter publishes the class as
the ``action`` label, and the summary's figures follow. Small fleets, a few
simulated hours: seconds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accel_common.agentsupport import reset_unsupported
from accel_common.names import (
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from accel_common.remedies import ACTION_CLASSES, RESETTABLE_VENDORS
from autoscaler.kube.protocol import CAPI_GROUP, CAPI_VERSION, MACHINES
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate import run as sim
from autoscaler.simulate.classes import ClassMix
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.machines import CAPI_NAMESPACE, FAULTY, LOST, OK
from autoscaler.simulate.results import RunResult, summary_section
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from autoscaler.simulate.telemetry import Telemetry
from autoscaler.sources.store import StoreSource
from autoscaler.types import Vector
from tests.support.paths import REPO

# One pool of two 4-device nodes of VENDOR; one fault at 10m on p-0000's device 1.
SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 3h
  evaluationInterval: 30s
  seed: 5
  pools:
    - {name: p, vendor: VENDOR, devicesPerNode: 4, initial: 2, min: 2, max: 3,
       provisionTime: 10m}
  workload:
    arrivalsPerHour: 0
    initialJobs: INITIAL
    sizes: {4: 1}
    duration: {distribution: fixed, value: 20h}
    checkpointInterval: 15m
    restartOverhead: 2m
  faults:
    events:
      - {at: 10m, kind: KIND, node: p-0000, device: DEVICE1ACTION}
  repairs: {reset: {fixes: 1, duration: 3m}, reboot: {fixes: 1, duration: 10m},
            replace: {duration: 30m}}
"""
G = 1  # p-0000's device 1: global device 1
H = 3600.0


def _scenario(
    tmp_path: Path,
    *,
    vendor: str = "nvidia",
    kind: str = "fatal",
    action: str | None = None,
    initial: int = 0,
) -> Any:
    text = (
        SCENARIO.replace("VENDOR", vendor)
        .replace("KIND", kind)
        .replace("DEVICE", vendor)
        .replace("ACTION", "" if action is None else f", action: {action}")
        .replace("INITIAL", str(initial))
    )
    path = tmp_path / "classes.yaml"
    path.write_text(text)
    return load_scenario(path)


def _run(fleet: Fleet, steps: dict[float, Callable[[], Any]]) -> None:
    for t, fn in steps.items():
        fleet.at(EPOCH + t, fn)
    asyncio.run(fleet.run())


def _status(fleet: Fleet, node: str, key: str) -> dict[str, Any]:
    raw = fleet.kube.nodes[node]["metadata"]["annotations"].get(key)
    return {} if raw is None else dict(json.loads(raw))


def _request(fleet: Fleet, key: str, rid: str) -> Callable[[], Any]:
    body = json.dumps({"id": rid, "by": "test"})
    return lambda: fleet.kube.patch_node("p-0000", {"metadata": {"annotations": {key: body}}})


def _events(fleet: Fleet, severity: str, action: str) -> float:
    return float(fleet.dev_events[fleet.event_keys.index((severity, action)), G])


def _summary(fleet: Fleet) -> dict[str, Any]:
    return summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))


@pytest.mark.parametrize("action", ["reset", "reboot"])
def test_a_reset_never_fixes_a_reboot_class_fault(tmp_path: Path, action: str) -> None:
    """The same fault, with reset.fixes 1: of class reset, the reset fixes it; of
    class reboot (Xid 79), the reset runs, the device still does not answer, the
    agent answers failed, and only the reboot brings it back."""
    fleet = Fleet(_scenario(tmp_path, action=action), FirstFit(), static_pools=True)
    seen: dict[str, Any] = {}

    def after_reset() -> None:
        seen["reset"] = _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)
        seen["state"] = int(fleet.dev_state[G])

    _run(
        fleet,
        {
            900: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"),
            1200: after_reset,
            1300: _request(fleet, REBOOT_REQUEST_ANNOTATION, "b1"),
        },
    )
    s = _summary(fleet)
    if action == "reset":
        assert seen["reset"]["state"] == "done" and seen["state"] == OK
        assert s["faults_closed_by"]["reset"] == 1
        return
    assert seen["reset"]["state"] == "failed"
    assert "SIM-p-0000-nvidia1 still does not answer after the reset" in seen["reset"]["message"]
    assert seen["state"] == FAULTY
    assert _status(fleet, "p-0000", REBOOT_STATUS_ANNOTATION)["state"] == "done"
    assert fleet.dev_state[G] == OK and fleet.dev_class[G] == -1
    assert s["faults_closed_by"] == {**dict.fromkeys(s["faults_closed_by"], 0), "reboot": 1}
    # Healthy once the reboot (at 1300, 10m) is done: the reset bought nothing.
    assert s["time_to_healthy_capacity_seconds"]["max"] == 1300 + 600 - 600


def test_an_isolate_class_fault_stays_until_the_machine_is_replaced(tmp_path: Path) -> None:
    """A part to be returned (a row-remap failure): the reset and the reboot both run
    (the reset answers failed, unfixed: the fault is still there), and the fault
    is still there after each; only a new machine ends it."""
    fleet = Fleet(_scenario(tmp_path, action="isolate"), FirstFit(), static_pools=False)
    seen: dict[str, Any] = {}

    def look(name: str) -> Callable[[], None]:
        def at() -> None:
            seen[name] = (int(fleet.dev_state[G]), ACTION_CLASSES[int(fleet.dev_class[G])])

        return at

    async def replace() -> None:
        patch = {"metadata": {"annotations": {CAPI_REMEDIATE_MACHINE_ANNOTATION: ""}}}
        args = (CAPI_GROUP, CAPI_VERSION, CAPI_NAMESPACE, MACHINES, "p-0000")
        await fleet.kube.patch_custom(*args, patch)

    _run(
        fleet,
        {
            900: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"),
            1200: look("reset"),
            1300: _request(fleet, REBOOT_REQUEST_ANNOTATION, "b1"),
            2400: look("reboot"),
            2500: replace,
        },
    )
    assert "p-0000" not in fleet.kube.nodes
    assert seen["reset"] == (FAULTY, "isolate") and seen["reboot"] == (FAULTY, "isolate")
    s = _summary(fleet)
    assert s["faults_closed_by"]["replace"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 2500 + 1800 - 600


@pytest.mark.parametrize("vendor", ["gaudi", "ascend", "tpu", "oneapi", "nvidia", "amd"])
def test_a_reset_answers_as_the_agent_would_for_each_vendor(tmp_path: Path, vendor: str) -> None:
    """On a vendor the agent cannot reset, the answer is failed, reason
    unsupported, at once, and nothing is reset (the device stays faulty); on
    NVIDIA and AMD the reset runs and fixes the reset-class fault."""
    fleet = Fleet(_scenario(tmp_path, vendor=vendor), FirstFit(), static_pools=True)
    seen: dict[str, Any] = {}

    def answered() -> None:
        seen["status"] = _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)
        seen["state"] = int(fleet.dev_state[G])

    _run(fleet, {900: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"), 901: answered})
    if vendor in RESETTABLE_VENDORS:
        assert seen["status"]["state"] == "resetting"
        assert _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)["state"] == "done"
        assert fleet.dev_state[G] == OK
        return
    assert seen["status"]["state"] == "failed"
    assert seen["status"]["reason"] == "unsupported"
    assert f"{reset_unsupported(vendor)}; nothing was reset" == seen["status"]["message"]
    assert seen["state"] == FAULTY and fleet.dev_state[G] == FAULTY
    assert _summary(fleet)["faults_closed_by"]["open"] == 1


async def _query(store: SeriesStore, expr: str, t: float) -> dict[str | None, float]:
    result = await StoreSource(store).query(expr, t)
    assert isinstance(result, Vector), result
    return {s.get("action") or s.get("type") or None: s.value for s in result.samples}


def test_a_lost_device_is_a_fatal_reboot_event_and_waits_for_a_reboot(tmp_path: Path) -> None:
    """What every backend reports for a lost device: accel_up 0 and a fatal fault
    event of class reboot, still exposed while the device is silent. It does not
    come back after deviceLostRecovery (30m) without a reboot; a reset fails."""
    scenario = _scenario(tmp_path, kind="device_lost")
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    store = SeriesStore()
    telemetry = Telemetry(
        fleet, store, ["accel_up", "accel_fault_events_total{node='p-0000'}"], seed=1
    )
    seen: dict[str, Any] = {}

    def scrape() -> None:
        telemetry.scrape(fleet.now)

    for t in range(0, 3 * 3600, 60):
        fleet.at(EPOCH + t, scrape)

    async def look() -> None:
        at = fleet.now
        seen["events"] = await _query(
            store,
            'increase(accel_fault_events_total{node="p-0000",device="nvidia1"}[5m])',
            at,
        )
        seen["up"] = await _query(store, 'accel_up{node="p-0000",device="nvidia1"} + 0', at)
        seen["state"] = int(fleet.dev_state[G])

    _run(
        fleet,
        {
            600 + 120: look,
            3000: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"),
            3300: _request(fleet, REBOOT_REQUEST_ANNOTATION, "b1"),
        },
    )
    assert seen["up"] == {None: 0.0}
    assert seen["events"]["reboot"] > 0
    assert seen["events"]["reset"] == 0
    assert seen["state"] == LOST
    reset = _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)
    assert reset["state"] == "failed" and "still does not answer" in reset["message"]
    assert fleet.dev_state[G] == OK
    s = _summary(fleet)
    assert s["faults_closed_by"]["reboot"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 3300 + 600 - 600


def test_a_pending_remap_lets_the_job_run_and_a_reset_applies_it(tmp_path: Path) -> None:
    """reset_when_idle: the job on the device goes on; the exporter publishes a
    recoverable event of class reset_when_idle and accel_remapped_rows pending; a
    reset is refused while the pod holds the device and applies the remap once
    it is gone."""
    scenario = _scenario(tmp_path, kind="remap_pending", initial=1)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    store = SeriesStore()
    telemetry = Telemetry(
        fleet, store, ["accel_remapped_rows", "accel_fault_events_total{node='p-0000'}"], seed=1
    )
    seen: dict[str, Any] = {}
    for t in range(0, 3 * 3600, 60):
        fleet.at(EPOCH + t, lambda: telemetry.scrape(fleet.now))

    async def look() -> None:
        seen["events"] = await _query(
            store,
            'increase(accel_fault_events_total{node="p-0000",device="nvidia1",'
            'severity="recoverable"}[5m])',
            fleet.now,
        )
        seen["pending"] = await _query(
            store, 'accel_remapped_rows{node="p-0000",device="nvidia1"} + 0', fleet.now
        )
        seen["held"] = int(fleet.machines.dev_job[G])
        seen["running"] = [j.state for j in fleet.jobs.values()]

    def refused() -> None:
        seen["refused"] = _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)

    async def evict() -> None:
        for ns, name in list(fleet.kube.pods_by_node["p-0000"]):
            await fleet.kube.delete_pod(ns, name)

    _run(
        fleet,
        {
            720: look,
            900: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"),
            960: refused,
            1199: lambda: fleet.kube.patch_node("p-0000", {"spec": {"unschedulable": True}}),
            1200: evict,
            1500: lambda: fleet.kube.patch_node("p-0000", {"spec": {"unschedulable": False}}),
        },
    )
    assert seen["events"]["reset_when_idle"] > 0 and seen["events"]["watch"] == 0
    assert seen["pending"] == {"pending": 1.0, "failure": 0.0}
    assert seen["held"] >= 0 and seen["running"] == ["running"]
    assert seen["refused"]["state"] == "refused"
    assert _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)["state"] == "done"
    assert fleet.dev_state[G] == OK and fleet.dev_class[G] == -1
    s = _summary(fleet)
    assert s["faults_closed_by"]["reset"] == 1
    # Unhealthy from the fault until the node was uncordoned after the reset.
    assert s["time_to_healthy_capacity_seconds"]["max"] == 1500 - 600
    # The pending device alone until the cordon (the job went on using it), then
    # the four devices of the cordoned node.
    assert s["unhealthy_device_hours"] == round((1199 - 600 + 4 * (1500 - 1199)) / H, 3)


def test_scenario_classes_and_their_problems(tmp_path: Path) -> None:
    text = SCENARIO.replace("VENDOR", "nvidia").replace("INITIAL", "0")
    good = text.replace("KIND", "fatal").replace("DEVICE", "nvidia").replace("ACTION", "")
    good = good.replace(
        "  faults:\n", "  faults:\n    classes: {fatal: {reset: 6, reboot: 3, isolate: 1}}\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(good)
    faults = load_scenario(path).faults
    assert faults.classes["fatal"] == ClassMix(
        "fatal", (("reset", 6.0), ("reboot", 3.0), ("isolate", 1.0))
    )
    assert faults.classes["device_lost"] == ClassMix("device_lost", (("reboot", 1.0),))
    assert [faults.classes["fatal"].draw(u) for u in (0.0, 0.59, 0.61, 0.95)] == [
        "reset",
        "reset",
        "reboot",
        "isolate",
    ]
    bad = text.replace("KIND", "remap_pending").replace("DEVICE", "nvidia")
    bad = bad.replace("ACTION", ", action: reboot").replace(
        "  faults:\n",
        "  faults:\n    classes: {fatal: {reset: -1, app: 1}, stall: reset, fatl: reset}\n",
    )
    path.write_text(bad)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    text = str(e.value)
    assert "c.yaml:18:" in text
    assert "classes.fatal: the weight of reset must be a number >= 0, got -1" in text
    assert "a fatal fault's action must be one of reset, reboot, isolate, got 'app'" in text
    assert "a stall fault's action must be one of app, got 'reset'" in text
    assert "unknown fault kind 'fatl'" in text
    assert "a remap_pending fault's action must be one of reset_when_idle, got 'reboot'" in text


# A ladder with the classic order and no class (so that it runs whatever the
# shipped rules become): the simulated benefit of each step, by fault class. The
# sums: a device has a fault-event series per (severity, action) pair, as the
# exporter has (one at 0 would make a recover hold over another that rises).
LADDER = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  limits: {maxUnhealthyNodes: 3, maxConcurrentDrains: 2}
  rules:
    - name: fatal-device-fault
      expr: sum by (node, device) (increase(accel_fault_events_total{severity="fatal"}[5m])) > 0
      target: device
      escalate:
        - action: {type: migrate_jobs, taint: accel-fleet.io/faulty=true:NoSchedule,
                   drainTimeout: 10m}
          timeout: 15m
        - action: {type: reset_devices}
          timeout: 20m
        - action: {type: reboot_node}
          timeout: 30m
        - action: {type: replace_machine}
      recover:
        expr: >-
          sum by (node, device) (increase(accel_fault_events_total{severity="fatal"}[10m])) == 0
          and on (node, device) accel_up == 1
        for: 2m
"""


@pytest.mark.parametrize(
    ("vendor", "action", "closed_by"),
    [
        ("nvidia", "reset", "reset"),
        ("nvidia", "reboot", "reboot"),
        ("gaudi", "reset", "reboot"),
        ("nvidia", "isolate", "replace"),
    ],
)
def test_the_summary_follows_the_class(
    tmp_path: Path, vendor: str, action: str, closed_by: str
) -> None:
    """The same ladder, the same fault, reset and reboot fixing all they can: what
    closes the fault, and the steps taken, follow its class and its vendor. Before
    classes, all four were fixed by the reset."""
    rules = tmp_path / "ladder.yaml"
    rules.write_text(LADDER)
    scenario = _scenario(tmp_path, vendor=vendor, action=action, initial=1)
    s = summary_section(sim.simulate(scenario, [str(rules)], baseline=False)["rules"])
    assert s["faults_closed_by"][closed_by] == 1
    assert sum(s["faults_closed_by"].values()) == 1
    acted = {k: v for k, v in s["actions"].items() if not k.endswith(":recover")}
    steps = ["migrate_jobs", "reset_devices", "reboot_node", "replace_machine"]
    taken = {"reset": 2, "reboot": 3, "replace": 4}[closed_by]
    assert acted == dict.fromkeys(steps[:taken], 1)
    assert s["jobs_lost"] == 0
    if closed_by == "reboot":
        # The reset answered failed (silent device) or unsupported without waiting
        # for its 20m timeout: the migrate step's 15m, the reset's 3m at most, the
        # reboot's 10m and the recover's look.
        assert s["time_to_healthy_capacity_seconds"]["max"] < 40 * 60


SHIPPED = str(REPO / "rules")


@pytest.mark.parametrize(
    ("vendor", "action", "acted", "closed_by"),
    [
        # A reset-class fault: move the jobs, reset, done.
        ("nvidia", "reset", {"migrate_jobs", "reset_devices"}, "reset"),
        # Xid 79: the ladder enters at the reboot, no reset is tried.
        ("nvidia", "reboot", {"migrate_jobs", "reboot_node"}, "reboot"),
        # Gaudi: the reset step is skipped at once (the agent cannot reset it).
        ("gaudi", "reset", {"migrate_jobs", "reset_devices", "reboot_node"}, "reboot"),
        # A part to return: moved off and marked, never returned to service.
        ("nvidia", "isolate", {"migrate_jobs", "mark_for_return"}, "open"),
    ],
)
def test_the_shipped_rules_follow_the_class_in_the_simulated_cluster(
    tmp_path: Path, vendor: str, action: str, acted: set[str], closed_by: str
) -> None:
    """The shipped fatal-device-fault ladder against the simulated cluster: which
    steps run, and what ends the fault, follow the class the exporter publishes."""
    scenario = _scenario(tmp_path, vendor=vendor, action=action, initial=1)
    result = sim.simulate(scenario, [SHIPPED], baseline=False)["rules"]
    s = summary_section(result)
    steps = {k for k in s["actions"] if not k.endswith(":recover")}
    assert steps == acted
    assert s["faults_closed_by"][closed_by] == 1
    assert sum(s["faults_closed_by"].values()) == 1
    assert s["jobs_lost"] == 0
    if vendor == "gaudi":
        assert result.outcomes.get("reset_devices:skipped") == 1


def test_classes_do_not_move_the_faults(tmp_path: Path) -> None:
    """The classes come from a stream of their own: a scenario's random faults fall
    at the same times on the same devices with or without a class mix (without
    repairs every fault heals on its own whatever its class, so every incident,
    and so every time to healthy capacity, must be the same)."""
    base = (REPO / "scenarios" / "small.yaml").read_text()
    base = base.replace("duration: 24h", "duration: 8h").replace("fatal: 0.0004", "fatal: 0.004")
    base = base[: base.index("  repairs:")]  # without repairs
    mixed = base.replace(
        "    resetTime: 5m\n",
        "    resetTime: 5m\n    classes: {fatal: {reset: 1, reboot: 1, isolate: 1}}\n",
    )
    assert mixed != base
    runs = []
    for i, text in enumerate((base, mixed)):
        path = tmp_path / f"s{i}.yaml"
        path.write_text(text)
        fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)
        asyncio.run(fleet.run())
        runs.append(fleet)
    plain, classed = runs
    assert plain.stats.faults == classed.stats.faults
    assert plain.stats.faults.get("fatal", 0) >= 3
    assert sorted(plain.stats.time_to_healthy) == sorted(classed.stats.time_to_healthy)
    # ...and the mix was drawn: the fatal faults published more than one class.
    rows = [classed.event_keys.index(("fatal", a)) for a in ("reset", "reboot", "isolate")]
    assert sum(int(classed.dev_events[r].sum() > 0) for r in rows) >= 2


@pytest.mark.parametrize("kind", ["app", "stall"])
def test_an_application_fault_is_requeued_at_once_a_silent_stall_later(
    tmp_path: Path, kind: str
) -> None:
    """An application fault (Xid 13, 31, 68, 69: class app) hangs the job on a
    healthy device and is published as an info event of class app: the shipped
    application-fault rule requeues the job within an evaluation or two. The same
    hang without an event (a stall) waits for the stall rules' 10 idle minutes (a
    job that declares nothing and has shown no rhythm yet, docs/rules.md). Neither
    opens an incident: the device stays healthy."""
    scenario = _scenario(tmp_path, kind=kind, initial=1)
    result = sim.simulate(scenario, [SHIPPED], baseline=False)["rules"]
    s = summary_section(result)
    ttr = s["time_to_remediate_seconds_by_kind"][kind]["max"]
    # One requeue done (a second decision, for the new pod on the same device
    # while the event is still in the rule's window, is held by the backoff).
    assert result.outcomes.get("requeue_job:done") == 1
    assert s["restarts_per_job"] == {"1": 1}
    assert sum(s["faults_closed_by"].values()) == 0
    assert s["jobs_lost"] == 0
    if kind == "app":
        assert ttr <= 2 * 30  # two evaluation intervals
    else:
        # The conservative window of a job too young to have a rhythm, and sooner
        # than stalled-job's 30 minutes.
        assert 10 * 60 <= ttr < 30 * 60


def test_a_remap_failure_stands_until_replacement_and_is_marked_for_return(
    tmp_path: Path,
) -> None:
    """A row that could not be remapped: one fatal event of class isolate, and
    accel_remapped_rows{type="failure"} 1 for as long as the part is in the
    machine, repairs or not. A reset and a reboot both leave it; the shipped
    rules move the job off and mark the part for return."""
    scenario = _scenario(tmp_path, kind="remap_failure", initial=1)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    store = SeriesStore()
    telemetry = Telemetry(
        fleet, store, ["accel_remapped_rows", "accel_fault_events_total{node='p-0000'}"], seed=1
    )
    seen: dict[str, Any] = {}
    for t in range(0, 3 * 3600, 60):
        fleet.at(EPOCH + t, lambda: telemetry.scrape(fleet.now))

    async def look() -> None:
        seen["failure"] = await _query(
            store, 'accel_remapped_rows{node="p-0000",device="nvidia1"} + 0', fleet.now
        )
        seen["events"] = await _query(
            store,
            'increase(accel_fault_events_total{node="p-0000",device="nvidia1",'
            'severity="fatal"}[2h])',
            fleet.now,
        )

    async def evict() -> None:
        for ns, name in list(fleet.kube.pods_by_node["p-0000"]):
            await fleet.kube.delete_pod(ns, name)

    _run(
        fleet,
        {
            899: lambda: fleet.kube.patch_node("p-0000", {"spec": {"unschedulable": True}}),
            900: evict,
            960: _request(fleet, RESET_REQUEST_ANNOTATION, "r1"),
            1300: _request(fleet, REBOOT_REQUEST_ANNOTATION, "b1"),
            2400: look,
        },
    )
    # The reset's look sees the failed remap, as the real agent's NVML look does.
    reset = _status(fleet, "p-0000", RESET_STATUS_ANNOTATION)
    assert (reset["state"], reset["reason"]) == ("failed", "unfixed")
    assert "row remapping failed" in reset["message"]
    assert _status(fleet, "p-0000", REBOOT_STATUS_ANNOTATION)["state"] == "done"
    assert seen["failure"] == {"pending": 0.0, "failure": 1.0}
    # One event, and one more from the exporter that the reboot started afresh.
    assert seen["events"]["isolate"] > 0
    assert fleet.dev_state[G] == FAULTY and fleet.dev_remap_failed[G]

    result = sim.simulate(scenario, [SHIPPED], baseline=False)["rules"]
    s = summary_section(result)
    assert {k for k in s["actions"] if not k.endswith(":recover")} == {
        "migrate_jobs",
        "mark_for_return",
    }
    assert s["faults_closed_by"]["open"] == 1
