"""The shipped fatal-device-fault ladder (migrate_jobs -> reset_devices -> reboot_node
-> replace_machine) end to end: the controller's real cycle, executor and actions,
the real ``kubernetes`` client against the fake API server, Cluster API's MachineSet
from ``tests/support/fakes/capi.py``, and this test playing the node agent (it
answers reset requests in ``accel-fleet.io/reset-status`` and reboots a node by
changing its boot id when a SelfNodeRemediation CR names it) and the exporter (it
writes the faulty device's series into the controller's series store).

Time is the test's: one ``FakeClock`` for the controller and the actions, moved a
minute per tick; every loop is bounded by a tick count. The actions sleep on that
clock too, so after each tick the test waits for the event that every action the
executor runs has finished or parked in its next sleep, never for a guessed
quarter of a second of real time. A ``kill -9`` is the controller,
its executor and its client dropped where they stand (their tasks cancelled, no
cleanup of theirs runs) and a fresh one built from what is on the cluster: the
nodes' remediation entries and the state record ConfigMap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_common.names import (
    CAPI_DEPLOYMENT_LABEL,
    REMEDIATION_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import iso
from autoscaler.controller import Controller, StateRecord
from autoscaler.decision import Decision
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.store import StoreSource
from autoscaler.wiring import wire
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import ClusterAPI, machine_health_check, machine_set
from tests.support.kubeobjs import client, events, pod
from tests.support.paths import REPO
from tests.support.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

T0 = 1_800_000_000.0
TICK = 60.0
NS = "accel-fleet"
CAPI_NS = "capi"
RULE = "fatal-device-fault"
DEVICE = "nvidia0"
UUID = "GPU-0"
STEPS = ("migrate_jobs", "reset_devices", "reboot_node", "replace_machine")
# The steps start at these ticks after the first: the reset at the next cycle (the
# move is done and the fault still seen), then after the shipped timeouts (20m, 30m).
STARTS = (0, 1, 21, 51)


def shipped_rule(tmp: Path) -> Path:
    """rules/remediation.yaml with only its fatal-device-fault rule (the others would
    act on the same series: device-lost taints the node too)."""
    doc = yaml.safe_load((REPO / "rules" / "remediation.yaml").read_text())
    doc["spec"]["rules"] = [r for r in doc["spec"]["rules"] if r["name"] == RULE]
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Device:
    """The exporter's view of the faulty device and the agent's behaviour."""

    faults: float = 0.0
    up: float = 1.0
    # What the agent does with a reset request: None, "done" (and it heals the
    # device when ``reset_fixes``) or "failed".
    reset_answer: str | None = "done"
    reset_fixes: bool = False
    requests: list[str] = field(default_factory=list)
    reboots: int = 0


class World:
    """The cluster around the controller: nodes from a MachineSet, a device that
    faults, the node agent and the exporter, on the test's clock."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.clock = FakeClock(T0)
        self.capi = ClusterAPI(api)
        api.add(machine_set("gpu", CAPI_NS, "gpu", 3))
        # Cluster API remediates a marked Machine only where a MachineHealthCheck
        # selects it (replace_machine's remediate mode checks that first).
        api.add(machine_health_check("gpu", CAPI_NS, **{CAPI_DEPLOYMENT_LABEL: "gpu"}))
        self.capi.reconcile()
        self.nodes = sorted(n["metadata"]["name"] for n in api.objects("nodes"))
        self.node = self.nodes[0]
        for name in self.nodes:
            self._boot(name, f"boot-{name}-0")
        api.add(pod("train-0", self.node))
        self.device = Device()
        self.store = SeriesStore(retention=math.inf)

    @property
    def now(self) -> float:
        return self.clock()

    def _boot(self, name: str, boot: str) -> None:
        node = self.api.get("nodes", None, name)
        assert node is not None
        status = node.setdefault("status", {})
        status["nodeInfo"] = {
            "machineID": name,
            "systemUUID": name,
            "bootID": boot,
            "kernelVersion": "6.8.0",
            "osImage": "Ubuntu 24.04",
            "containerRuntimeVersion": "containerd://2.0.0",
            "kubeletVersion": "v1.33.0",
            "kubeProxyVersion": "v1.33.0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        }
        status["conditions"] = [{"type": "Ready", "status": "True"}]
        self.api.add(node)

    def scrape(self) -> None:
        """The exporter's series of every node that exists now, at ``now``."""
        present = {n["metadata"]["name"] for n in self.api.objects("nodes")}
        for name in sorted(present):
            up = self.device.up if name == self.node else 1.0
            faults = self.device.faults if name == self.node else 0.0
            base = {"node": name, "device": DEVICE, "vendor": "nvidia"}
            base["uuid"] = UUID if name == self.node else f"GPU-{name}"
            self.store.add({"__name__": "accel_up", **base}, self.now, up)
            self.store.add({"__name__": "accel_device_info", **base}, self.now, 1.0)
            self.store.add(
                {"__name__": "accel_fault_events_total", **base, "severity": "fatal"},
                self.now,
                faults,
            )

    def agent(self) -> None:
        """The node agent: answers a new reset request, reboots on a CR."""
        node = self.api.get("nodes", None, self.node)
        if node is None:
            return
        notes = node["metadata"].get("annotations") or {}
        request = json.loads(notes.get(RESET_REQUEST_ANNOTATION) or "null")
        status = json.loads(notes.get(RESET_STATUS_ANNOTATION) or "null")
        answer = self.device.reset_answer
        if request and answer and (status or {}).get("id") != request["id"]:
            self.device.requests.append(request["id"])
            notes[RESET_STATUS_ANNOTATION] = json.dumps(
                {
                    "id": request["id"],
                    "state": answer,
                    "devices": request.get("devices") or [],
                    "message": "reset by the test's agent",
                    "at": iso(self.now),
                }
            )
            self.api.add(node)
            if answer == "done" and self.device.reset_fixes:
                self.device.up = 1.0
        for cr in self.api.objects("selfnoderemediations"):
            done = (cr["metadata"].get("annotations") or {}).get("test/rebooted")
            if cr["metadata"]["name"] == self.node and not done:
                self.device.reboots += 1
                self._boot(self.node, f"boot-{self.node}-{self.device.reboots}")
                cr["metadata"].setdefault("annotations", {})["test/rebooted"] = "1"
                self.api.add(cr)

    def fault(self) -> None:
        """The device falls off the bus (Xid 79): a fatal fault, accel_up 0."""
        self.device.faults += 1
        self.device.up = 0.0


class Running:
    """One controller process: client, executor, controller."""

    def __init__(self, world: World, rules: Path, tmp: Path) -> None:
        self.kube = client(world.api, tmp)
        source = StoreSource(world.store)
        ctx = ActionContext(
            kube=self.kube,
            controller="accel-autoscaler",
            clock=world.clock,
            sleep=world.clock.sleep,
            query=source.query,
            retry_interval=0.01,
            event_namespace=NS,
        )
        watcher = RuleWatcher([rules], clock=world.clock)
        wiring = wire(source, lambda: watcher.current, ctx)
        assert wiring.executor is not None
        self.executor = wiring.executor
        self.controller = Controller(
            watcher,
            source,
            AlertReceiver(),
            clock=world.clock,
            wiring=wiring,
            record=StateRecord(self.kube, NS, "accel-autoscaler-state"),
        )

    async def kill(self) -> None:
        """kill -9: tasks stop where they are; nothing is written on the way out."""
        await self.executor.stop()
        self.kube.close()


@pytest.fixture
def world(api: FakeApiServer) -> Iterator[World]:
    yield World(api)


async def tick(world: World, running: Running) -> list[Decision]:
    world.clock.advance(TICK)
    world.capi.reconcile()
    world.scrape()
    world.agent()
    decisions = await running.controller.cycle()
    await settled(world, running)
    return decisions


async def settled(world: World, running: Running) -> None:
    """Wait until every action the executor runs has finished or parked on the
    test's clock: all they can do at this instant is done."""
    await until(
        lambda: running.executor.in_flight <= world.clock.sleepers,
        what="the actions finished or waiting on the clock",
    )


def acts(decisions: list[Decision]) -> list[tuple[int, str]]:
    return [(int(d.extra.get("step", 0)), d.action) for d in decisions if d.kind == "act"]


async def start_fault(world: World, running: Running) -> float:
    """Ticks until the fault is seen and step 1 acts; the time it acted."""
    world.scrape()
    await running.controller.cycle()
    world.fault()
    for _ in range(5):
        if acts(await tick(world, running)) == [(1, "migrate_jobs")]:
            return world.now
    raise AssertionError("the fatal fault never migrated the jobs")


def entry(world: World) -> dict[str, Any] | None:
    node = world.api.get("nodes", None, world.node)
    raw = ((node or {}).get("metadata", {}).get("annotations") or {}).get(REMEDIATION_ANNOTATION)
    return json.loads(raw).get(RULE) if raw else None


async def test_a_fault_that_never_heals_climbs_every_step_after_its_timeout(
    world: World, tmp_path: Path
) -> None:
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    first = await start_fault(world, running)
    made: list[tuple[float, int, str]] = []
    away_counted = False
    for _ in range(STARTS[-1] + 10):
        for step, action in acts(await tick(world, running)):
            made.append((world.now - first, step, action))
        state = running.controller.state
        if world.api.get("nodes", None, world.node) is None and state.active:
            # The node is away being replaced: the breaker still counts it.
            away_counted = {a.node for a in state.active.values()} == {world.node}
    assert made == [(STARTS[i] * TICK, i + 1, STEPS[i]) for i in range(1, len(STEPS))], (
        "each step starts after the one before it timed out"
    )
    assert away_counted
    assert len(world.device.requests) == 1 and world.device.reboots == 1
    # Exactly one machine replaced: the MachineSet made one more, the node is gone.
    assert len(world.capi.created) == 4
    assert world.api.get("nodes", None, world.node) is None
    steps = [e["message"] for e in events(world.api, "RemediationStep")]
    assert [m.split(":")[0] for m in steps] == [f"rule {RULE} step {i}" for i in (1, 2, 3, 4)]
    await running.kill()


async def test_a_fault_that_the_reset_fixes_stops_at_the_reset(
    world: World, tmp_path: Path
) -> None:
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    world.device.reset_fixes = True
    await start_fault(world, running)
    made: list[tuple[int, str]] = []
    recovered = False
    for _ in range(STARTS[-1] + 10):
        decisions = await tick(world, running)
        made += acts(decisions)
        recovered = recovered or any(d.kind == "recover" for d in decisions)
    assert made == [(2, "reset_devices")]
    assert recovered and world.device.reboots == 0 and len(world.capi.created) == 3
    node = world.api.get("nodes", None, world.node)
    assert node is not None and not (node["spec"].get("taints") or [])
    assert entry(world) is None and not running.controller.state.ladders
    await running.kill()


async def test_a_failed_reset_escalates_to_the_reboot_at_once(world: World, tmp_path: Path) -> None:
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    world.device.reset_answer = "failed"
    first = await start_fault(world, running)
    made: list[tuple[float, int, str]] = []
    for _ in range(STARTS[1] + 5):
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, running))]
    # The reset is asked once the move is done and answered failed within the
    # minute: the reboot follows at the next cycle, not 20 minutes later.
    assert [(s, a) for _, s, a in made] == [(2, "reset_devices"), (3, "reboot_node")]
    assert made[1][0] - made[0][0] <= 2 * TICK
    await running.kill()


@pytest.mark.parametrize("step", [1, 2, 3, 4])
async def test_kill_9_at_any_step_resumes_that_step_and_repeats_none_before(
    world: World, tmp_path: Path, step: int
) -> None:
    rules = shipped_rule(tmp_path)
    running = Running(world, rules, tmp_path)
    await start_fault(world, running)
    ticks = 0
    while running.controller.state.ladders.get(_key(world), None) is None or (
        running.controller.state.ladders[_key(world)].step < step
    ):
        await tick(world, running)
        ticks += 1
        assert ticks < STARTS[-1] + 5, f"step {step} never started"
    await running.kill()

    again = Running(world, rules, tmp_path)
    made: list[tuple[int, str]] = []
    for _ in range(STARTS[-1] + 5 - STARTS[step - 1]):
        made += acts(await tick(world, again))
    ladder = again.controller.state.ladders.get(_key(world))
    assert all(s > step for s, _ in made), f"a step at or before {step} ran again: {made}"
    assert made == [(i + 1, STEPS[i]) for i in range(step, len(STEPS))]
    # Each request went out once: one reset, one reboot, one machine replaced.
    assert len(set(world.device.requests)) <= 1 and world.device.reboots <= 1
    assert len(world.capi.created) == 4
    assert ladder is None or ladder.step == len(STEPS)
    await again.kill()


def _key(world: World) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (RULE, (("device", DEVICE), ("node", world.node)))
