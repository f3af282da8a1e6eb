"""Repairs in the fleet simulator: the emulated node agent answers reset and reboot
requests on the Node as the contract says (once per id, refusing while a pod holds
a device, a reboot changing the boot id), Cluster API replaces a remediated or
deleted Machine with a fresh node after ``replace.duration``, faults that need a
repair stay until one fixes them, and the summary books every fault under the
step that closed it, with its time to healthy capacity. The escalation ladder
drives the same production actions end to end. Small fleets, a few simulated
hours: seconds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from autoscaler.kube.protocol import CAPI_GROUP, CAPI_VERSION, MACHINES
from autoscaler.simulate import run as sim
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.machines import CAPI_NAMESPACE, FAULTY, OK
from autoscaler.simulate.repairs import REPORT_INTERVAL
from autoscaler.simulate.results import RunResult, summary_section
from autoscaler.simulate.scenario import RepairSpec, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from tests.support.paths import REPO

# Two NVSwitch H100 nodes (reset scope "node") and one PCIe L40S node (scope
# "device"); no jobs unless a test asks for some; a fatal fault at 10m on
# h100-0000's nvidia2.
TINY = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: DURATION
  evaluationInterval: 30s
  seed: SEED
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 2, min: 2, max: 3,
       provisionTime: 10m}
    - {name: l40s, vendor: nvidia, model: NVIDIA L40S, topology: pcie, devicesPerNode: 8,
       initial: 1, min: 1, max: 1, provisionTime: 10m}
  workload:
    arrivalsPerHour: ARRIVALS
    initialJobs: INITIAL
    pools: {h100: 1}
    sizes: {8: 1}
    duration: {distribution: fixed, value: 20h}
    checkpointInterval: 15m
    restartOverhead: 2m
  faults:
    events:
      - {at: 10m, kind: fatal, node: h100-0000, device: nvidia2}
REPAIRS"""

H = 3600.0
DEVICE = 2  # nvidia2 of h100-0000: global device 2


def _scenario(
    tmp_path: Path,
    repairs: str | None = "",
    *,
    duration: str = "4h",
    seed: int = 5,
    arrivals: int = 0,
    initial: int = 0,
) -> Any:
    text = (
        TINY.replace("DURATION", duration)
        .replace("SEED", str(seed))
        .replace("ARRIVALS", str(arrivals))
        .replace("INITIAL", str(initial))
        .replace("REPAIRS", "" if repairs is None else f"  repairs: {{{repairs}}}\n")
    )
    path = tmp_path / "tiny-repairs.yaml"
    path.write_text(text)
    return load_scenario(path)


def _run(fleet: Fleet, steps: dict[float, Callable[[], Any]]) -> None:
    """Runs the fleet, calling each step (a function, or one returning a coroutine,
    which is awaited) at its simulated time in seconds."""
    for t, fn in steps.items():
        fleet.at(EPOCH + t, fn)
    asyncio.run(fleet.run())


def _status(fleet: Fleet, node: str, key: str) -> dict[str, Any]:
    raw = fleet.kube.nodes[node]["metadata"]["annotations"].get(key)
    return {} if raw is None else dict(json.loads(raw))


def _request(fleet: Fleet, node: str, key: str, body: dict[str, Any]) -> Callable[[], Any]:
    return lambda: fleet.kube.patch_node(
        node, {"metadata": {"annotations": {key: json.dumps(body)}}}
    )


def test_scenario_repairs_defaults_and_errors(tmp_path: Path) -> None:
    assert _scenario(tmp_path, None).repairs == RepairSpec()
    assert not RepairSpec().needed
    spec = _scenario(tmp_path, "reset: {fixes: 1}, replace: {duration: 1h}").repairs
    assert spec.needed and spec.reset.fixes == 1.0 and spec.reset.duration == 180.0
    assert spec.reboot == RepairSpec().reboot and spec.replace.duration == H
    with pytest.raises(ScenarioError) as e:
        _scenario(tmp_path, "reset: {fixes: 1.5, time: 3m}, selfHeals: -1, reboot: 2")
    text = str(e.value)
    assert "tiny-repairs.yaml:23:" in text
    assert "fixes must be a number from 0 to 1, got 1.5" in text
    assert "time" in text and "selfHeals must be a number from 0 to 1" in text
    assert "repairs.reboot" in text


def test_without_repairs_a_fatal_fault_heals_on_its_own(tmp_path: Path) -> None:
    """Today's model: a freed device is back ``resetTime`` after its fault."""
    fleet = Fleet(_scenario(tmp_path, None), FirstFit(), static_pools=True)
    _run(fleet, {})
    s = summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))
    assert s["faults_closed_by"]["self"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 300.0
    assert fleet.dev_state[DEVICE] == OK


def test_a_fault_that_needs_repair_stays_and_is_reported_again(tmp_path: Path) -> None:
    fleet = Fleet(_scenario(tmp_path), FirstFit(), static_pools=True)
    _run(fleet, {})
    assert fleet.dev_state[DEVICE] == FAULTY
    # The fault and one report every REPORT_INTERVAL after it, to the end.
    assert fleet.dev_fatal[DEVICE] == 1 + int((4 * H - 600) // REPORT_INTERVAL)
    s = summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))
    assert s["faults_closed_by"]["open"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 4 * H - 600
    assert s["unhealthy_node_hours"] == round((4 * H - 600) / H, 3)
    # Only the faulty device was kept from work: the node was never tainted.
    assert s["unhealthy_device_hours"] == s["unhealthy_node_hours"]


def test_a_reset_that_fixes(tmp_path: Path) -> None:
    """The agent answers once per id: resetting, then done after the duration; on an
    NVSwitch node every device resets with the faulty one."""
    scenario = _scenario(tmp_path, "reset: {fixes: 1, duration: 3m}")
    fleet = Fleet(scenario, FirstFit(), static_pools=False)
    seen: list[tuple[str, list[int]]] = []
    req = {"id": "r1", "devices": ["SIM-h100-0000-nvidia2"], "by": "test"}

    def during() -> None:
        status = _status(fleet, "h100-0000", RESET_STATUS_ANNOTATION)
        seen.append((status["state"], list(fleet.slots[0].free)))

    _run(
        fleet,
        {
            1200: _request(fleet, "h100-0000", RESET_REQUEST_ANNOTATION, req),
            1260: during,
            # The same id again after it is done: not carried out twice.
            1500: _request(fleet, "h100-0000", RESET_REQUEST_ANNOTATION, req),
            1510: during,
        },
    )
    annotations = fleet.kube.nodes["h100-0000"]["metadata"]["annotations"]
    assert annotations[RESET_SCOPE_ANNOTATION] == "node"
    assert fleet.kube.nodes["l40s-0000"]["metadata"]["annotations"][RESET_SCOPE_ANNOTATION] == (
        "device"
    )
    # Resetting: every device of the node taken; done, and not done again: all back.
    assert seen == [("resetting", []), ("done", list(range(8)))]
    done = _status(fleet, "h100-0000", RESET_STATUS_ANNOTATION)
    assert done["state"] == "done" and done["id"] == "r1" and len(done["devices"]) == 8
    assert fleet.dev_state[DEVICE] == OK
    s = summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))
    assert s["faults_closed_by"]["reset"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 1200 + 180 - 600
    # The faulty device until the reset, then all eight for its three minutes.
    assert s["unhealthy_device_hours"] == round((600 + 8 * 180) / H, 3)


def test_a_device_scope_reset_takes_only_the_device(tmp_path: Path) -> None:
    """On the PCIe-only L40S node (scope "device") the reset takes the requested
    device and leaves the others offered."""
    scenario = _scenario(tmp_path, "reset: {fixes: 1, duration: 3m}")
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    seen: list[list[int]] = []
    req = {"id": "r1", "devices": ["SIM-l40s-0000-nvidia1"]}

    def free() -> None:
        s = fleet.slots[fleet.machines.node_slot["l40s-0000"]]
        seen.append(list(s.free))

    _run(
        fleet,
        {
            600: partial(fleet.faults._explicit_fault, "fatal", "l40s-0000", 1),
            900: _request(fleet, "l40s-0000", RESET_REQUEST_ANNOTATION, req),
            960: free,
            1200: free,
        },
    )
    others = [0, 2, 3, 4, 5, 6, 7]
    assert seen == [others, list(range(8))]
    done = _status(fleet, "l40s-0000", RESET_STATUS_ANNOTATION)
    assert done["state"] == "done" and done["devices"] == ["SIM-l40s-0000-nvidia1"]


def test_a_reset_waits_while_a_pod_holds_a_device(tmp_path: Path) -> None:
    """Refused while the stalled job's pod is on the node, looked at again every
    agent pass; the reset runs once the pod is gone."""
    scenario = _scenario(tmp_path, "reset: {fixes: 1, duration: 3m}", initial=1)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    seen: dict[str, Any] = {}

    def refused() -> None:
        seen["refused"] = _status(fleet, "h100-0000", RESET_STATUS_ANNOTATION)

    async def evict() -> None:
        for ns, name in list(fleet.kube.pods_by_node["h100-0000"]):
            await fleet.kube.delete_pod(ns, name)

    _run(
        fleet,
        {
            1200: _request(fleet, "h100-0000", RESET_REQUEST_ANNOTATION, {"id": "r1"}),
            1230: refused,
            # The job's new pod must not come back to the node: cordon it first.
            1299: lambda: fleet.kube.patch_node("h100-0000", {"spec": {"unschedulable": True}}),
            1300: evict,
        },
    )
    assert seen["refused"]["state"] == "refused"
    assert "a pod still holds" in seen["refused"]["message"]
    done = _status(fleet, "h100-0000", RESET_STATUS_ANNOTATION)
    assert done["state"] == "done"
    assert fleet.dev_state[DEVICE] == OK


def test_reset_fails_then_reboot_fixes(tmp_path: Path) -> None:
    """fixes 0: the reset is done but the fault shows again at once; the reboot
    takes the node NotReady, changes its boot id and fixes it."""
    repairs = "reset: {fixes: 0, duration: 3m}, reboot: {fixes: 1, duration: 10m}"
    fleet = Fleet(_scenario(tmp_path, repairs), FirstFit(), static_pools=False)
    seen: dict[str, Any] = {}

    def after_reset() -> None:
        seen["state"] = int(fleet.dev_state[DEVICE])
        seen["fatal"] = float(fleet.dev_fatal[DEVICE])
        seen["boot"] = fleet.kube.nodes["h100-0000"]["status"]["nodeInfo"]["bootID"]

    def rebooting() -> None:
        seen["rebooting"] = _status(fleet, "h100-0000", REBOOT_STATUS_ANNOTATION)
        seen["ready"] = fleet.kube.nodes["h100-0000"]["status"]["conditions"][0]["status"]
        seen["scraped"] = "h100-0000" in fleet.scraped_nodes()

    _run(
        fleet,
        {
            900: _request(fleet, "h100-0000", RESET_REQUEST_ANNOTATION, {"id": "r1"}),
            1090: after_reset,
            1200: _request(fleet, "h100-0000", REBOOT_REQUEST_ANNOTATION, {"id": "b1"}),
            1260: rebooting,
        },
    )
    # The fault, its report 5m later, and again as the reset brought it back.
    assert seen["state"] == FAULTY and seen["fatal"] == 3.0
    assert seen["rebooting"]["state"] == "rebooting" and seen["rebooting"]["bootID"] == seen["boot"]
    assert seen["ready"] == "Unknown" and not seen["scraped"]
    done = _status(fleet, "h100-0000", REBOOT_STATUS_ANNOTATION)
    node = fleet.kube.nodes["h100-0000"]
    assert done["state"] == "done" and done["bootID"] != seen["boot"]
    assert node["status"]["nodeInfo"]["bootID"] == done["bootID"]
    assert node["status"]["conditions"][0]["status"] == "True"
    assert fleet.dev_state[DEVICE] == OK and fleet.dev_fatal[DEVICE] == 0
    s = summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))
    assert s["faults_closed_by"]["reboot"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 1200 + 600 - 600
    # One device, then eight for the reset, one again, eight while rebooting.
    assert s["unhealthy_device_hours"] == round((300 + 8 * 180 + 120 + 8 * 600) / H, 3)


@pytest.mark.parametrize("how", ["remediate", "delete"])
def test_replacement_brings_a_fresh_node_after_its_duration(tmp_path: Path, how: str) -> None:
    fleet = Fleet(_scenario(tmp_path, "replace: {duration: 30m}"), FirstFit(), static_pools=False)
    seen: dict[str, Any] = {}

    async def replace() -> None:
        args = (CAPI_GROUP, CAPI_VERSION, CAPI_NAMESPACE, MACHINES, "h100-0000")
        if how == "remediate":
            patch = {"metadata": {"annotations": {CAPI_REMEDIATE_MACHINE_ANNOTATION: ""}}}
            await fleet.kube.patch_custom(*args, patch)
        else:
            await fleet.kube.delete_custom(*args)

    def away() -> None:
        seen["nodes"] = sorted(fleet.kube.nodes)
        seen["machines"] = sorted(k[2] for k in fleet.kube.custom if k[0] == MACHINES)

    _run(fleet, {1200: replace, 1201: away, 1200 + 1799: away, 1200 + 1800: lambda: None})
    assert "h100-0000" not in seen["nodes"]
    new = [m for m in seen["machines"] if m.startswith("h100") and m != "h100-0001"]
    assert len(new) == 1 and new[0] not in seen["nodes"]
    assert new[0] in fleet.kube.nodes  # joined after 30m, fault-free
    assert fleet.dev_state[DEVICE] == OK and fleet.dev_fatal[DEVICE] == 0
    s = summary_section(RunResult("rules", fleet.stats, fleet.timeline, 0.0))
    assert s["faults_closed_by"]["replace"] == 1
    assert s["time_to_healthy_capacity_seconds"]["max"] == 1200 + 1800 - 600
    assert s["unhealthy_device_hours"] == round((600 + 8 * 1800) / H, 3)


def test_the_repair_draws_are_seeded(tmp_path: Path) -> None:
    """Whether a reset fixes a fault is drawn from the run's seed: the same seed
    gives the same answers, and fixes 0.5 fixes some faults and not others."""

    def outcomes(seed: int) -> list[int]:
        fleet = Fleet(
            _scenario(tmp_path, "reset: {fixes: 0.5, duration: 1m}", seed=seed),
            FirstFit(),
            static_pools=True,
        )
        got: list[int] = []
        steps: dict[float, Callable[[], Any]] = {}
        for i in range(8):
            t = 1200 + i * 600
            # A fault on h100-0001's device i (global 8 + i), then a reset of it.
            steps[t] = partial(fleet.faults._explicit_fault, "fatal", "h100-0001", i)
            steps[t + 60] = _request(fleet, "h100-0001", RESET_REQUEST_ANNOTATION, {"id": f"{i}"})
            steps[t + 300] = partial(lambda g: got.append(int(fleet.dev_state[g])), 8 + i)
        _run(fleet, steps)
        return got

    first = outcomes(5)
    assert first == outcomes(5)
    assert OK in first and FAULTY in first


# The escalation ladder as issue 18 describes it, with a success condition that a
# fixed device meets within the reset step's timeout: no fatal fault for 10 minutes
# (an unrepaired one is reported every 5) and the device answering.
LADDER = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  limits: {maxUnhealthyNodes: 3, maxConcurrentDrains: 2}
  rules:
    - name: fatal-device-fault
      expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
      target: device
      escalate:
        - action:
            type: migrate_jobs
            taint: accel-fleet.io/faulty=true:NoSchedule
            drainTimeout: 10m
          timeout: 15m
        - action: {type: reset_devices}
          timeout: 20m
        - action: {type: reboot_node}
          timeout: 30m
        - action: {type: replace_machine}
      recover:
        expr: >-
          increase(accel_fault_events_total{severity="fatal"}[10m]) == 0
          and on (node, device) accel_up == 1
        for: 2m
"""


SHIPPED = str(REPO / "rules")


def _ladder(tmp_path: Path, repairs: str, rules: str) -> dict[str, Any]:
    if rules == "issue":
        path = tmp_path / "ladder.yaml"
        path.write_text(LADDER)
        rules = str(path)
    scenario = _scenario(tmp_path, repairs, duration="3h", initial=1)
    result = sim.simulate(scenario, [rules], baseline=False)["rules"]
    return summary_section(result)


# The ladder, and the shipped rules (whose fatal-device-fault escalates).
@pytest.mark.parametrize("rules", ["issue", SHIPPED], ids=["issue", "shipped"])
def test_the_ladder_stops_at_a_reset_that_fixes(tmp_path: Path, rules: str) -> None:
    s = _ladder(tmp_path, "reset: {fixes: 1, duration: 3m}", rules)
    acted = {k: v for k, v in s["actions"].items() if not k.endswith(":recover")}
    assert acted == {"migrate_jobs": 1, "reset_devices": 1}
    assert s["faults_closed_by"]["reset"] == 1
    assert sum(s["faults_closed_by"].values()) == 1
    # The migrate step (the reset follows as soon as the move is done and the fault
    # is still seen, 15m at the latest), the reset's 3m: healthy (and untainted)
    # within the hour.
    assert 3 * 60 < s["time_to_healthy_capacity_seconds"]["max"] < H


@pytest.mark.parametrize("rules", ["issue", SHIPPED], ids=["issue", "shipped"])
def test_the_ladder_escalates_to_reboot_then_replace(tmp_path: Path, rules: str) -> None:
    repairs = (
        "reset: {fixes: 0, duration: 3m}, reboot: {fixes: 0, duration: 10m},"
        " replace: {duration: 30m}"
    )
    s = _ladder(tmp_path, repairs, rules)
    acted = {k: v for k, v in s["actions"].items() if not k.endswith(":recover")}
    assert acted == {
        "migrate_jobs": 1,
        "reset_devices": 1,
        "reboot_node": 1,
        "replace_machine": 1,
    }
    assert s["faults_closed_by"]["replace"] == 1
    # The move (done within minutes), the reset's 3m (the agent answers failed,
    # unfixed, and the reboot follows at once rather than after the reset step's
    # 20m), the reboot's 30m, then the new machine's 30m.
    assert 63 * 60 <= s["time_to_healthy_capacity_seconds"]["max"] < 75 * 60
    assert s["jobs_lost"] == 0
