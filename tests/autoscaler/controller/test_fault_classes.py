"""The shipped rules act as each fault's class asks (issue 34), end to end: the
controller's real cycle, executor and actions, the real ``kubernetes`` client
against the fake API server, on the test's clock, in the world of
``test_ladder.py`` (Cluster API, the node agent and the exporter played by the
test), with the exporter's ``action`` label on its fault events.

- An Xid 79 (class ``reboot``) reboots the node after the move, and no reset is
  ever asked for.
- A GPU with a row remap pending (``reset_when_idle``) is tainted and reset once the
  job on it finished by itself: nothing is evicted, one reset request.
- A remap failure (``isolate``) is marked for return (label, annotation with the
  UUID, Event) and never returned to service: its taint and mark stay however long
  it then looks healthy, also after a ``kill -9``.
- A device lost without any Xid (code ``lost``, class ``reboot``) starts the ladder.
- The third ladder for one device within the recurrence window isolates it, also
  across a ``kill -9`` between the second and the third.
- A Gaudi's reset step is skipped at once (the agent cannot reset it): no request,
  a ``ResetUnsupported`` Event, and the reboot at the next cycle.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from accel_common.names import (
    REMEDIATION_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_STATUS_ANNOTATION,
    RETURN_ANNOTATION,
    RETURN_LABEL,
)
from autoscaler.actions.ops.ownership import iso
from tests.autoscaler.controller.test_ladder import (
    DEVICE,
    UUID,
    Running,
    World,
    acts,
    tick,
)
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import events
from tests.support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FAULT_RULE = "fatal-device-fault"


def rules_named(tmp: Path, names: Sequence[str]) -> Path:
    """rules/remediation.yaml with only the named rules."""
    doc = yaml.safe_load((REPO / "rules" / "remediation.yaml").read_text())
    doc["spec"]["rules"] = [r for r in doc["spec"]["rules"] if r["name"] in names]
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class ClassWorld(World):
    """The world of test_ladder.py with an exporter that grades its faults (``code``
    and ``action`` labels, the device's ``vendor``), row-remap gauges, and an agent
    that refuses a reset while a pod runs on the node and heals the device when a
    reboot or reset repairs it."""

    def __init__(
        self, api: FakeApiServer, *, klass: str, code: str, vendor: str = "nvidia"
    ) -> None:
        super().__init__(api)
        self.klass, self.code, self.vendor = klass, code, vendor
        self.pending = 0.0
        self.failure = 0.0
        self.reboot_fixes = False
        self.refusals = 0

    def scrape(self) -> None:
        present = {n["metadata"]["name"] for n in self.api.objects("nodes")}
        for name in sorted(present):
            mine = name == self.node
            base = {
                "node": name,
                "device": DEVICE,
                "vendor": self.vendor,
                "uuid": UUID if mine else f"GPU-{name}",
            }
            self.store.add(
                {"__name__": "accel_up", **base}, self.now, self.device.up if mine else 1
            )
            self.store.add({"__name__": "accel_device_info", **base}, self.now, 1.0)
            self.store.add(
                {
                    "__name__": "accel_fault_events_total",
                    **base,
                    "code": self.code,
                    "severity": "recoverable" if self.klass == "reset_when_idle" else "fatal",
                    "action": self.klass,
                },
                self.now,
                self.device.faults if mine else 0.0,
            )
            for kind, value in (("pending", self.pending), ("failure", self.failure)):
                self.store.add(
                    {"__name__": "accel_remapped_rows", **base, "type": kind},
                    self.now,
                    value if mine else 0.0,
                )

    def agent(self) -> None:
        boots = self.device.reboots
        if not self._refuse():
            super().agent()
        if self.device.reboots > boots and self.reboot_fixes:
            self.device.up = 1.0
        if self.device.requests and self.device.reset_answer == "done":
            self.pending = 0.0  # the reset applied the pending remap

    def _refuse(self) -> bool:
        """The real agent's rule: no reset while a pod holds the device."""
        node = self.api.get("nodes", None, self.node)
        if node is None:
            return False
        notes = node["metadata"].get("annotations") or {}
        request = json.loads(notes.get(RESET_REQUEST_ANNOTATION) or "null")
        status = json.loads(notes.get(RESET_STATUS_ANNOTATION) or "null")
        held = [p for p in self.api.objects("pods") if p["spec"].get("nodeName") == self.node]
        if not request or (status or {}).get("state") in ("done", "failed"):
            return False
        state = "refused" if held else "done"
        if held:
            self.refusals += 1
        elif (status or {}).get("id") == request["id"]:
            # Refused until now; the device is idle: the reset runs.
            self.device.requests.append(request["id"])
        else:
            return False  # a fresh request on an idle device: the plain agent
        notes[RESET_STATUS_ANNOTATION] = json.dumps(
            {
                "id": request["id"],
                "state": state,
                "devices": request.get("devices") or [],
                "message": "a pod holds the device" if held else "reset by the test's agent",
                "at": iso(self.now),
            }
        )
        self.api.add(node)
        return True


def made_by(decisions: list[tuple[float, int, str]], action: str) -> list[float]:
    return [t for t, _, a in decisions if a == action]


async def run(world: ClassWorld, running: Running, ticks: int) -> list[tuple[float, int, str]]:
    made: list[tuple[float, int, str]] = []
    for _ in range(ticks):
        made += [(world.now, s, a) for s, a in acts(await tick(world, running))]
    return made


def taints(world: World) -> list[str]:
    node = world.api.get("nodes", None, world.node)
    assert node is not None
    return [t["key"] for t in node["spec"].get("taints") or []]


async def test_an_xid_79_reboots_the_node_without_a_reset_attempt(
    api: FakeApiServer, tmp_path: Path
) -> None:
    world = ClassWorld(api, klass="reboot", code="79")
    world.reboot_fixes = True
    running = Running(world, rules_named(tmp_path, [FAULT_RULE]), tmp_path)
    world.scrape()
    await running.controller.cycle()
    world.fault()
    made = await run(world, running, 45)
    assert [(s, a) for _, s, a in made] == [(1, "migrate_jobs"), (3, "reboot_node")]
    # The reboot follows the move at the next cycle, not 15 minutes later.
    assert made[1][0] - made[0][0] == 60.0
    assert world.device.requests == [] and world.device.reboots == 1
    assert not any(
        RESET_REQUEST_ANNOTATION in (n["metadata"].get("annotations") or {})
        for n in api.objects("nodes")
    )
    # Back after the reboot: the reboot step succeeds and the taint comes off.
    assert taints(world) == [] and not running.controller.state.ladders
    await running.kill()


async def test_a_device_lost_without_any_xid_starts_the_ladder(
    api: FakeApiServer, tmp_path: Path
) -> None:
    # The exporter's one event for a lost device: code lost, class reboot, whatever
    # the vendor (an AMD GPU has no Xid at all).
    world = ClassWorld(api, klass="reboot", code="lost", vendor="amd")
    running = Running(world, rules_named(tmp_path, [FAULT_RULE]), tmp_path)
    world.scrape()
    await running.controller.cycle()
    world.fault()
    made = await run(world, running, 5)
    assert [(s, a) for _, s, a in made] == [(1, "migrate_jobs"), (3, "reboot_node")]
    assert world.device.reboots == 1 and world.device.requests == []
    await running.kill()


async def test_a_remap_pending_gpu_is_reset_once_idle_with_no_job_moved(
    api: FakeApiServer, tmp_path: Path
) -> None:
    world = ClassWorld(api, klass="reset_when_idle", code="63")
    running = Running(world, rules_named(tmp_path, ["remap-pending"]), tmp_path)
    world.scrape()
    await running.controller.cycle()
    world.device.faults, world.pending = 1.0, 1.0  # Xid 63: a remap pending
    made = await run(world, running, 10)
    assert [(s, a) for _, s, a in made] == [(0, "reset_devices")]
    # New work stays off; the job runs on, and the agent refuses meanwhile.
    assert "accel-fleet.io/repair-pending" in taints(world)
    assert world.refusals >= 5 and world.device.requests == []
    # The job finishes by itself: the agent resets, once; nothing was evicted.
    api.remove("pods", "ml", "train-0")
    made += await run(world, running, 15)
    assert api.evicted == []
    assert len(world.device.requests) == 1
    assert [a for _, _, a in made] == ["reset_devices"]
    # The remap applied (no longer pending): the taint comes off after 5 minutes.
    assert "accel-fleet.io/repair-pending" not in taints(world)
    assert [e["reason"] for e in events(api, "DevicesReset")] == ["DevicesReset"]
    await running.kill()


async def test_a_remap_failure_goes_to_isolation_and_is_never_returned_to_service(
    api: FakeApiServer, tmp_path: Path
) -> None:
    world = ClassWorld(api, klass="isolate", code="remap_failure")
    rules = rules_named(tmp_path, [FAULT_RULE])
    running = Running(world, rules, tmp_path)
    world.scrape()
    await running.controller.cycle()
    world.device.faults, world.failure = 1.0, 1.0  # the device keeps answering
    made = await run(world, running, 5)
    assert [(s, a) for _, s, a in made] == [(1, "migrate_jobs"), (5, "mark_for_return")]
    node = api.get("nodes", None, world.node)
    assert node is not None
    assert node["metadata"]["labels"][RETURN_LABEL] == "true"
    marks = json.loads(node["metadata"]["annotations"][RETURN_ANNOTATION])
    assert marks[UUID]["uuid"] == UUID and "code=remap_failure" in marks[UUID]["reason"]
    [marked] = events(api, "MarkedForReturn")
    assert UUID in marked["message"] and marked["type"] == "Warning"
    # The ladder's entry on the node now says so: a restarted controller (kill -9)
    # leaves it alone rather than resume a ladder that would reset or recover it.
    entry = json.loads(node["metadata"]["annotations"][REMEDIATION_ANNOTATION])[FAULT_RULE]
    assert (entry["action"], entry["phase"]) == ("mark_for_return", "marked-for-return")
    await running.kill()
    running = Running(world, rules, tmp_path)
    # Two hours of a device that looks fine (no new event, the gauge cleared by a
    # person's mistake even): nothing undoes the isolation.
    world.failure = 0.0
    later = await run(world, running, 120)
    assert later == []
    assert "accel-fleet.io/faulty" in taints(world)
    node = api.get("nodes", None, world.node)
    assert node is not None and node["metadata"]["labels"][RETURN_LABEL] == "true"
    assert world.device.requests == [] and world.device.reboots == 0
    assert not running.controller.state.active
    await running.kill()


async def test_the_third_ladder_for_one_device_in_the_window_isolates_it(
    api: FakeApiServer, tmp_path: Path
) -> None:
    world = ClassWorld(api, klass="reset", code="48")
    world.device.reset_fixes = True
    rules = rules_named(tmp_path, [FAULT_RULE])
    running = Running(world, rules, tmp_path)
    world.scrape()
    await running.controller.cycle()
    made: list[tuple[float, int, str]] = []
    for ladder in range(3):
        if ladder == 2:
            # kill -9 between the second ladder and the third: the count lives in
            # the state record on the cluster.
            await running.kill()
            running = Running(world, rules, tmp_path)
        world.fault()
        made += await run(world, running, 45)
        world.device.requests.clear()
    steps = [(s, a) for _, s, a in made]
    assert steps == [
        (1, "migrate_jobs"),
        (2, "reset_devices"),
        (1, "migrate_jobs"),
        (2, "reset_devices"),
        (1, "migrate_jobs"),
        (5, "mark_for_return"),
    ], made
    [marked] = events(api, "MarkedForReturn")
    assert "recurrence cap: ladder 3" in marked["message"], marked["message"]
    await running.kill()


async def test_a_gaudi_reset_step_is_skipped_at_once(api: FakeApiServer, tmp_path: Path) -> None:
    world = ClassWorld(api, klass="reset", code="critical_error", vendor="gaudi")
    running = Running(world, rules_named(tmp_path, [FAULT_RULE]), tmp_path)
    world.scrape()
    await running.controller.cycle()
    world.fault()
    made = await run(world, running, 4)
    assert [(s, a) for _, s, a in made] == [
        (1, "migrate_jobs"),
        (2, "reset_devices"),
        (3, "reboot_node"),
    ]
    # Each a cycle after the one before: the skipped reset did not wait 20 minutes.
    assert made[2][0] - made[1][0] == 60.0
    assert world.device.requests == []
    outcomes = [r.outcome for r in running.executor.history if r.decision.action == "reset_devices"]
    assert [(o.status, o.details.get("reason")) for o in outcomes] == [("skipped", "unsupported")]
    assert len(events(api, "ResetUnsupported")) == 1
    await running.kill()
