"""The shipped fatal-device-fault ladder escalates on evidence, never on garbage
(issue 27): the controller's real cycle, executor and actions, the real
``kubernetes`` client against the fake API server, on the test's clock, with the
world of ``test_ladder.py`` (Cluster API, the node agent and the exporter played by
the test).

- An unknown fact in a step (the device's UUID: the exporter never said it) is an
  ``unknown`` outcome: the ladder waits for the step's timeout instead of going to
  the reboot at once, and a device whose exporter went away (not observed faulty,
  not recovered) is never rebooted or replaced.
- The state record deleted mid-ladder is written again, so that after a ``kill -9``
  the hourly limit still holds; corrupted between two steps (deleted, nested,
  non-finite, garbage), the restarted controller goes on from the node entries at
  the step it was on, repeats nothing, and escalates no earlier than the timeouts.
- ``/healthz`` turns red when the state cannot be rebuilt from the cluster, with the
  reason, and green again once it can.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from accel_common.names import STATE_DATA_KEY
from autoscaler.server import make_app
from tests.autoscaler.controller.test_ladder import (
    NS,
    STARTS,
    TICK,
    Running,
    World,
    acts,
    shipped_rule,
    start_fault,
    tick,
)
from tests.support.fakes.apiserver import FakeApiServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RECORD = "accel-autoscaler-state"


@pytest.fixture
def world(api: FakeApiServer) -> World:
    return World(api)


def without_uuid(world: World) -> None:
    """The exporter as it was before it knew the device's UUID: no ``uuid`` label and
    no ``accel_device_info``, so the reset step cannot name the device."""
    original = world.store.add

    def add(labels: Mapping[str, str], t: float, v: float) -> bool:
        if labels.get("__name__") == "accel_device_info":
            return False
        return original({k: x for k, x in labels.items() if k != "uuid"}, t, v)

    world.store.add = add  # type: ignore[method-assign]


def silence(world: World) -> None:
    """The exporter stops answering: no more samples from now on."""
    world.scrape = lambda: None  # type: ignore[method-assign]


async def test_an_unknown_uuid_holds_the_reset_step_until_its_timeout(
    world: World, tmp_path: Path
) -> None:
    without_uuid(world)
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    first = await start_fault(world, running)
    made: list[tuple[float, int, str]] = []
    for _ in range(STARTS[2] + 3):
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, running))]
    # No request could be written (which device?): the outcome is unknown, not
    # failed, so the reboot waits for the reset step's 20 minutes, and comes then
    # only because the device is still observed down after its fatal fault.
    assert world.device.requests == []
    assert [(s, a) for _, s, a in made] == [(2, "reset_devices"), (3, "reboot_node")]
    assert made[1][0] == STARTS[2] * TICK
    outcomes = [r.outcome for r in running.executor.history if r.decision.action == "reset_devices"]
    assert [o.status for o in outcomes] == ["unknown"]
    assert "UUID of nvidia0 is unknown" in outcomes[0].message
    await running.kill()


async def test_a_device_whose_exporter_went_away_is_never_rebooted(
    world: World, tmp_path: Path
) -> None:
    # The agent answers only 8 minutes into the reset, after the exporter went away
    # right after the move (its series are stale, 5m, by then).
    world.device.reset_answer = None
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    await start_fault(world, running)
    silence(world)
    made: list[tuple[int, str]] = []
    for i in range(STARTS[-1] + 30):
        if i == 8:
            world.device.reset_answer = "failed"
        made += acts(await tick(world, running))
    # The reset failed (evidence), but nothing shows the fault any more: neither a
    # reboot nor a replacement, however long the ladder waits. The reset itself
    # still knew the device: its UUID came with the sample that started the ladder.
    assert made == [(2, "reset_devices")]
    assert len(world.device.requests) == 1
    assert world.device.reboots == 0 and len(world.capi.created) == 3
    notes = [n.reason for n in running.controller.state.notes]
    assert any("the fault is not observed now" in n for n in notes) or not (
        running.controller.state.ladders
    )
    await running.kill()


def limited_rule(tmp: Path, per_hour: int) -> Path:
    path = shipped_rule(tmp)
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["limits"]["maxActionsPerHour"] = per_hour
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


async def test_a_record_deleted_mid_ladder_is_written_again_so_limits_hold_after_kill_9(
    world: World, tmp_path: Path, api: FakeApiServer
) -> None:
    """Two actions an hour: the migrate (0m) and the reset (15m) use them, so the
    reboot that the failed reset asks for waits until the migrate is an hour old.
    The record is deleted after the reset and the controller killed a cycle later:
    the restarted one must still hold the reboot until then."""
    rules = limited_rule(tmp_path, 2)
    world.device.reset_answer = "failed"
    running = Running(world, rules, tmp_path)
    first = await start_fault(world, running)
    made: list[tuple[float, int, str]] = []
    while not made:
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, running))]
    assert made == [(STARTS[1] * TICK, 2, "reset_devices")]
    assert api.get("configmaps", NS, RECORD) is not None
    api.remove("configmaps", NS, RECORD)
    await tick(world, running)
    stored = api.get("configmaps", NS, RECORD)
    assert stored is not None, "the deleted record was not written again"
    assert len(json.loads(stored["data"][STATE_DATA_KEY])["actions"]) == 2
    await running.kill()

    again = Running(world, rules, tmp_path)
    for _ in range(70 - STARTS[1]):
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, again))]
    reboots = [t for t, _, a in made if a == "reboot_node"]
    assert reboots and reboots[0] >= 3600.0, made
    await again.kill()


NESTED = "[" * 100_000 + "]" * 100_000


def corrupt(api: FakeApiServer, how: str) -> None:
    cm = api.get("configmaps", NS, RECORD)
    assert cm is not None
    if how == "deleted":
        api.remove("configmaps", NS, RECORD)
        return
    doc: dict[str, Any] = json.loads(cm["data"][STATE_DATA_KEY])
    if how == "nested":
        text = NESTED
    elif how == "infinite cooldown":
        for c in doc["cooldowns"]:
            c["lastActedAt"] = "__INF__"
        text = json.dumps(doc).replace('"__INF__"', "Infinity")
    elif how == "a cooldown of 1e300":
        for c in doc["cooldowns"]:
            c["lastActedAt"] = 1e300
        text = json.dumps(doc)
    elif how == "garbage ladder":
        for ladder in doc["ladders"]:
            ladder.update(step=10**6, since=[[[]]], outcome="failed")
        text = json.dumps(doc)
    else:
        raise AssertionError(how)
    cm["data"][STATE_DATA_KEY] = text
    api.add(cm)


@pytest.mark.parametrize(
    "how", ["deleted", "nested", "infinite cooldown", "a cooldown of 1e300", "garbage ladder"]
)
async def test_a_record_corrupted_between_steps_repeats_nothing_and_hurries_nothing(
    world: World, tmp_path: Path, api: FakeApiServer, how: str
) -> None:
    rules = shipped_rule(tmp_path)
    running = Running(world, rules, tmp_path)
    first = await start_fault(world, running)
    made: list[tuple[float, int, str]] = []
    while not made:
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, running))]
    await running.kill()
    corrupt(api, how)

    again = Running(world, rules, tmp_path)
    for _ in range(STARTS[-1] + 5 - STARTS[1]):
        made += [(world.now - first, s, a) for s, a in acts(await tick(world, again))]
        assert again.controller.health() == []
    steps = [(s, a) for _, s, a in made]
    # Each later step once, in order, none before its timeout: the reset's entry on
    # the node says where the ladder stands, whatever the record says.
    assert steps == [(2, "reset_devices"), (3, "reboot_node"), (4, "replace_machine")], made
    assert made[1][0] >= STARTS[2] * TICK and made[2][0] >= STARTS[3] * TICK
    assert len(set(world.device.requests)) == 1 and world.device.reboots == 1
    assert len(world.capi.created) == 4
    stored = api.get("configmaps", NS, RECORD)
    assert stored is not None and "Infinity" not in stored["data"][STATE_DATA_KEY]
    assert "1e+300" not in stored["data"][STATE_DATA_KEY]
    await again.kill()


async def test_healthz_is_red_while_the_state_cannot_be_rebuilt(
    world: World, tmp_path: Path, api: FakeApiServer
) -> None:
    running = Running(world, shipped_rule(tmp_path), tmp_path)
    c = running.controller
    api.faults.fail(100, status=500, path_regex=r"/configmaps/")
    async with TestClient(TestServer(make_app(c))) as http:
        for _ in range(3):
            await tick(world, running)
        r = await http.get("/healthz")
        body = await r.text()
        assert r.status == 503, body
        assert "3 evaluation cycles in a row failed" in body
        assert "rebuild the remediation state" in body
        metrics = await (await http.get("/metrics")).text()
        assert "accel_autoscaler_healthy 0" in metrics
        assert "accel_autoscaler_failed_cycles_total 3" in metrics
        api.faults.clear()
        await tick(world, running)
        r = await http.get("/healthz")
        assert (r.status, await r.text()) == (200, "ok\n")
    await running.kill()
