"""Gang jobs in the fleet simulator: placed all or nothing on whole nodes, stalled
together by one member's fault, restarted once per incident the way a JobSet's
controller (or the PyTorchJob operator) restarts them, and checkpoint pauses that
the shipped rules leave alone; and the simulated gang series against what
``clusterstate.collect`` reads from the same in-memory cluster. Small fleets, a
few simulated hours: seconds, not minutes."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import JOBSET_RESTART_ATTEMPT_LABEL, SPARE_NODES_ANNOTATION
from autoscaler import clusterstate
from autoscaler.kube.errors import Conflict
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate import run as sim
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.gangs import JOBSETS
from autoscaler.simulate.jobstate import PAUSE_UTILIZATION, Gang, Member
from autoscaler.simulate.results import SUMMARY_KEYS, summary
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from autoscaler.simulate.telemetry import Telemetry
from tests.support.paths import REPO

RULES = [str(REPO / "rules")]

# Seven nodes; three-hour gangs of two nodes arrive faster than they finish, so
# gangs wait for whole nodes while the seventh stays idle (all or nothing). The
# first gang lands on h100-0000 and h100-0001
# (first fit, name order), and a fatal fault hits h100-0000 at 1h.
GANGS = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 4h
  evaluationInterval: 1m
  seed: 16
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 7, min: 7, max: 7,
       provisionTime: 5m}
  workload:
    gangKind: KIND
    arrivalsPerHour: 3
    sizes: {16: 1}
    duration: {distribution: fixed, value: 3h}
    checkpointInterval: 20m
    checkpointPause: 2m
    restartOverhead: 3m
    timeoutFactor: 4
    deadlineFactor: 8
  faults:
    events:
      - {at: 1h, kind: fatal, node: h100-0000, device: nvidia3}
"""


def _scenario(tmp_path: Path, kind: str = "jobset") -> Any:
    path = tmp_path / f"gangs-{kind}.yaml"
    path.write_text(GANGS.replace("KIND", kind))
    return load_scenario(path)


class _Recorded:
    """Every member bind of the rules run as (gang, pod, node, time, restart-attempt
    label), and that run's fleet, through the fleet's listeners."""

    def __init__(self) -> None:
        self.fleet: Fleet | None = None
        self.binds: list[tuple[str, str, str, float, str]] = []

    def fleet_class(self) -> type[Fleet]:
        recorded = self

        class Recording(Fleet):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                if not self.static_pools:  # the rules run's, not the baseline's
                    recorded.fleet = self
                    self.listeners.append(recorded.listen)

        return Recording

    def listen(self, what: str, payload: Any) -> None:
        if what != "pod_bound" or not isinstance(payload, Member):
            return
        assert self.fleet is not None and payload.pod is not None
        pod = self.fleet.kube.pods[(payload.namespace, payload.pod)]
        attempt = pod["metadata"]["labels"].get(JOBSET_RESTART_ATTEMPT_LABEL, "")
        node = str(self.fleet.slots[payload.slot].node)
        self.binds.append((payload.gang, payload.pod, node, self.fleet.now, attempt))


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> tuple[dict[str, Any], _Recorded]:
    scenario = _scenario(tmp_path, kind)
    recorded = _Recorded()
    monkeypatch.setattr(sim, "Fleet", recorded.fleet_class())
    results = sim.simulate(scenario, RULES, parallel=False)
    return summary(results, scenario, scenario.seed), recorded


def _hit(recorded: _Recorded) -> str:
    """The gang on h100-0000 when the fault came (1h)."""
    at = EPOCH + 3600.0
    on = [b for b in recorded.binds if b[2] == "h100-0000" and b[3] < at]
    return on[-1][0]


@pytest.mark.parametrize("kind", ["jobset", "pytorchjob"])
def test_one_members_fault_restarts_the_whole_gang_once_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    doc, recorded = _run(tmp_path, monkeypatch, kind)
    rules, base = doc["rules"], doc["baseline"]
    fleet = recorded.fleet
    assert fleet is not None
    assert tuple(rules) == SUMMARY_KEYS

    # All or nothing: every run of a gang binds all its members at one instant.
    runs: dict[tuple[str, float], list[str]] = {}
    for gang_name, _, node, t, _ in recorded.binds:
        runs.setdefault((gang_name, t), []).append(node)
    sizes = {len(nodes) for nodes in runs.values()}
    if kind == "jobset":
        assert sizes == {2}
    # A PyTorchJob recreates only the pods that went; the others restarted in
    # place, so its restart may bind fewer than all.
    assert max(sizes) == 2

    name = _hit(recorded)
    gang = fleet.gangs.gangs[name]
    assert gang.restarts == 1  # one incident, one restart
    later = [b for b in recorded.binds if b[0] == name and b[3] >= EPOCH + 3600.0]
    assert later and all(b[2] != "h100-0000" for b in later)  # elsewhere
    if kind == "jobset":
        assert {b[4] for b in later} == {"1"}  # restart attempt 1, one JobSet restart
        owner = fleet.kube.custom.get((JOBSETS, gang.namespace, name))
        assert owner is None or owner["status"]["restarts"] == 1
    else:
        # The operator recreated the pods under their own names.
        first = {b[1] for b in recorded.binds if b[0] == name and b[3] < EPOCH + 3600.0}
        assert {b[1] for b in later} <= first

    # No other gang was restarted: checkpoint pauses were left alone.
    assert rules["false_requeues"] == 0
    assert rules["restarts_per_job"].get("1") == 1
    assert set(rules["restarts_per_job"]) <= {"0", "1"}
    assert rules["jobs_lost"] == 0
    assert rules["time_to_remediate_seconds_by_kind"]["fatal"]["p99"] <= 2 * 60.0
    assert rules["lost_device_hours"]["restart_overhead"] == pytest.approx(16 * 3 / 60, rel=0.01)
    # Without rules the gang hangs on the faulty GPU to the end.
    assert base["time_to_remediate_seconds"]["max"] == pytest.approx(3 * 3600.0)
    assert base["lost_device_hours"]["detection_delay"] == pytest.approx(16 * 3.0)
    assert base["goodput_ratio"] < rules["goodput_ratio"]


def test_a_fault_stalls_every_member_and_a_pause_idles_them_together(tmp_path: Path) -> None:
    """Without a controller: after the fault every member of the gang reads 0 (the
    fault hit one of its 16 GPUs), and a gang writing a checkpoint has every member
    at the pause's load."""
    fleet = Fleet(_scenario(tmp_path), FirstFit(), static_pools=True)
    pauses: list[Any] = []
    after: dict[str, Any] = {}

    def probe(g: Gang) -> None:
        if g.state == "running" and not g.stalled:
            pauses.append(fleet.dev_util[list(g.devices)].copy())

    def listen(what: str, payload: Any) -> None:
        if what == "pod_bound" and isinstance(payload, Member) and payload.index == 0:
            # A first run has no restart overhead: its first pause is from 18 to
            # 20 minutes of work in.
            g = fleet.gangs.gangs[payload.gang]
            fleet.at(fleet.now + 19 * 60.0, lambda: probe(g))

    def look() -> None:
        slot = fleet.slots[fleet.machines.node_slot["h100-0000"]]
        g = fleet.gangs.gangs[
            fleet.jobs[
                fleet.job_controller.job_by_index[int(fleet.machines.dev_job[slot.base])].name
            ].name
        ]
        after["gang"] = g
        after["util"] = fleet.dev_util[list(g.devices)].copy()

    fleet.listeners.append(listen)
    fleet.at(EPOCH + 3601.0, look)
    asyncio.run(fleet.run())
    g = after["gang"]
    assert isinstance(g, Gang) and g.stalled and len(g.devices) == 16
    assert (after["util"] == 0).all()
    assert pauses and all((u == PAUSE_UTILIZATION).all() for u in pauses)


def test_gang_series_equal_what_collect_reads(tmp_path: Path) -> None:
    scenario = dataclasses.replace(_scenario(tmp_path), duration=2 * 3600.0)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    telemetry = Telemetry(fleet, SeriesStore(), [clusterstate.GANG_INFO.name], seed=1)

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        theirs = await clusterstate.collect(fleet.kube, sim.pool_provider(fleet), fleet.now)
        return telemetry.gang_rows(), theirs

    ours, theirs = asyncio.run(go())

    def keyed(rows: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in rows}

    gang_names = {
        m.name for m in clusterstate.CATALOGUE if "gang" in m.name or "checkpoint" in m.name
    }
    expected = {k: v for k, v in keyed(theirs).items() if k[0] in gang_names}
    assert keyed(ours) == expected
    assert any(k[0] == clusterstate.GANG_INFO.name for k in expected)


def test_gang_sizes_are_validated(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GANGS.replace("sizes: {16: 1}", "sizes: {12: 1}").replace("KIND", "jobset"))
    with pytest.raises(ScenarioError, match="a gang takes whole nodes: use a multiple of 8"):
        load_scenario(bad)
    bad.write_text(GANGS.replace("    gangKind: KIND\n", ""))
    with pytest.raises(ScenarioError, match="set gangKind"):
        load_scenario(bad)
    bad.write_text(GANGS.replace("KIND", "mpijob"))
    with pytest.raises(ScenarioError, match="gangKind"):
        load_scenario(bad)
    bad.write_text(
        GANGS.replace("checkpointPause: 2m", "checkpointPause: 20m").replace("KIND", "jobset")
    )
    with pytest.raises(ScenarioError, match="checkpointPause"):
        load_scenario(bad)


@pytest.mark.parametrize("kind", ["jobset", "pytorchjob"])
def test_the_operators_restart_a_gang_once_however_many_members_go(
    tmp_path: Path, kind: str
) -> None:
    """Deleting every member pod in one pass (uid preconditions, as the actions do)
    restarts the gang once; deleting one member later is a second incident. A
    stale uid is refused and changes nothing."""
    scenario = dataclasses.replace(_scenario(tmp_path, kind), duration=2 * 3600.0)
    fleet = Fleet(scenario, FirstFit(), static_pools=False)
    seen: dict[str, Any] = {}

    def first() -> Gang:
        return min(fleet.gangs.gangs.values(), key=lambda g: g.index)

    async def delete(members: list[Member]) -> None:
        g = first()
        pods = [fleet.kube.pods[(g.namespace, str(m.pod))] for m in members]
        for pod in pods:
            meta = pod["metadata"]
            await fleet.kube.delete_pod(meta["namespace"], meta["name"], uid=meta["uid"])

    async def all_members() -> None:
        g = first()
        seen["running"] = g.state
        old = {str(m.pod): fleet.kube.pods[(g.namespace, str(m.pod))] for m in g.members}
        stale = dict(next(iter(old.values()))["metadata"])
        with pytest.raises(Conflict):
            await fleet.kube.delete_pod(stale["namespace"], stale["name"], uid="not-its-uid")
        await delete(list(g.members))
        seen["old"] = set(old)

    async def one_member() -> None:
        g = first()
        seen["restarts_before"] = g.restarts
        await delete(g.members[:1])

    fleet.at(EPOCH + 1800.0, all_members)
    fleet.at(EPOCH + 3600.0, one_member)
    asyncio.run(fleet.run())
    g = first()
    assert seen["running"] == "running"
    assert seen["restarts_before"] == 1  # the whole pass: one restart
    assert g.restarts == 2  # the single member later: a second incident
    assert g.state == "running"
    if kind == "jobset":
        owner = fleet.kube.custom[(JOBSETS, g.namespace, g.name)]
        assert owner["status"]["restarts"] == 2
        assert {m.pod for m in g.members}.isdisjoint(seen["old"])
        labels = fleet.kube.pods[(g.namespace, str(g.members[0].pod))]["metadata"]["labels"]
        assert labels[JOBSET_RESTART_ATTEMPT_LABEL] == "2"
    else:
        assert {m.pod for m in g.members} == seen["old"]  # recreated under their names
    assert fleet.stats.false_requeues == 2  # nothing was wrong with it either time


def test_spare_node_hours_count_the_declared_buffer_that_idle_nodes_fill(
    tmp_path: Path,
) -> None:
    """A pool's MachineDeployment declares 2 spare nodes (as scale_node_pool writes
    it) from the first hour to the third; with no work every node is idle, so both
    count. Then it declares 9 while 7 nodes are idle: 7 count, to the end (4h)."""
    scenario = load_scenario_text(
        tmp_path, GANGS.replace("arrivalsPerHour: 3", "arrivalsPerHour: 0")
    )
    fleet = Fleet(scenario, FirstFit(), static_pools=False)

    def declare(spares: int) -> Any:
        async def patch() -> None:
            annotations = {SPARE_NODES_ANNOTATION: str(spares)}
            await fleet.kube.patch_custom(
                "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", "h100",
                {"metadata": {"annotations": annotations}},
            )  # fmt: skip

        return patch

    fleet.at(EPOCH + 3600.0, declare(2))
    fleet.at(EPOCH + 3 * 3600.0, declare(9))
    asyncio.run(fleet.run())
    assert fleet.stats.spare_node_seconds / 3600.0 == pytest.approx(2 * 2 + 7 * 1, rel=0.01)


def load_scenario_text(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "scenario.yaml"
    path.write_text(text.replace("KIND", "jobset"))
    return load_scenario(path)
