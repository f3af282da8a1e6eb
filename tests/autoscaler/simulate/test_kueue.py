"""Kueue in the fleet simulator: the scenario's ``kueue`` section and its errors,
admission by quota, cohort borrowing and lending limits, StrictFIFO against
BestEffortFIFO, fair sharing's order, waitForPodsReady (blockAdmission, the
timeout's eviction and backoff), the production queue series and requeue over the
simulated objects, and a short run of ``scenarios/kueue-teams.yaml``.

The admission tests build a fleet with no arrivals, submit jobs by hand and step
its event heap; a few simulated minutes each."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import math
from pathlib import Path
from typing import Any

import pytest

from autoscaler import clusterstate, queues
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops import kueue as kueue_ops
from autoscaler.kube.kueue import EVICTED, PODS_READY_TIMEOUT, REQUEUED, condition, is_true
from autoscaler.kube.protocol import WORKLOADS
from autoscaler.metrics import POOL_QUEUED, QUEUE_DEVICE_REQUESTS, QUEUE_NOMINAL_QUOTA
from autoscaler.simulate import run as sim
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.jobstate import Gang, Job
from autoscaler.simulate.kueue import QUEUE_FIGURES, SimKueue
from autoscaler.simulate.results import KUEUE_KEY, summary
from autoscaler.simulate.scenario import Scenario, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from tests.support.paths import REPO

BASE = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 6h
  evaluationInterval: 1m
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: NODES, min: 0, max: 8,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 0
    gangKind: jobset
    sizes: {8: 1}
    duration: {distribution: fixed, value: 1h}
    checkpointInterval: 20m
  kueue:
KUEUE
"""

TWO_TEAMS = """\
    clusterQueues:
      - {name: a, flavors: {h100: {nominalQuota: 16}}}
      - {name: b, flavors: {h100: {nominalQuota: 16}}}
    localQueues:
      - {name: a, namespace: team-a, clusterQueue: a}
      - {name: b, namespace: team-b, clusterQueue: b}
"""


def _load(tmp_path: Path, kueue: str, nodes: int = 8) -> Scenario:
    path = tmp_path / "kueue.yaml"
    path.write_text(BASE.replace("NODES", str(nodes)).replace("KUEUE", kueue.rstrip("\n")))
    return load_scenario(path)


def _fleet(tmp_path: Path, kueue: str, nodes: int = 8) -> tuple[Fleet, SimKueue]:
    fleet = Fleet(_load(tmp_path, kueue, nodes), FirstFit(), static_pools=True)
    fleet.machines.start()
    fleet.job_controller.start()
    k = fleet.job_controller.kueue
    assert k is not None
    return fleet, k


def _submit(fleet: Fleet, name: str, namespace: str, size: int = 8) -> Job:
    """A job of ``size`` devices (a JobSet gang of whole nodes) in ``namespace``,
    submitted as an arrival is: suspended, with its Workload."""
    jc = fleet.job_controller
    index = len(jc.job_by_index)
    job = Gang(
        name=name,
        namespace=namespace,
        pool="h100",
        size=size,
        total=3600.0,
        utilization=0.9,
        timeout=10800.0,
        deadline=21600.0,
        submitted=fleet.now,
        stall_at=None,
        index=index,
        pools=("h100",),
        nodes=size // 8,
        suspended=True,
    )
    jc.jobs[name] = job
    jc.job_by_index.append(job)
    jc.gangs.submit(job)
    assert jc.kueue is not None
    jc.kueue.submit(job, jc.pod_spec(job, 8))
    return job


def _step(fleet: Fleet, seconds: float) -> None:
    """Runs the fleet's events for ``seconds`` of simulated time."""
    heap = fleet.time._heap
    until = fleet.now + seconds
    while heap and heap[0][0] <= until:
        t, _, fn = heapq.heappop(heap)
        fleet._advance(t)
        fleet.time.now = t
        fn()
        fleet._after_event()
    fleet.time.now = until


def _state(k: SimKueue, job: Job) -> str:
    return k.workloads[job.name].state


def _workload(fleet: Fleet, job: Job) -> dict[str, Any]:
    return fleet.kube.custom[(WORKLOADS, job.namespace, f"jobset-{job.name}")]


# -- the section -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kueue", "wanted"),
    [
        (
            TWO_TEAMS.replace(
                "nominalQuota: 16}}}\n      - {name: b", "nominalQuta: 16}}}\n      - {name: b"
            ),
            "unknown key 'nominalQuta' in the quota of a/h100; did you mean 'nominalQuota'?",
        ),
        (
            TWO_TEAMS.replace(
                "{h100: {nominalQuota: 16}}}\n      - {name: b",
                "{h10: {nominalQuota: 16}}}\n      - {name: b",
            ),
            "ClusterQueue 'a': no pool 'h10'; did you mean 'h100'?",
        ),
        (
            TWO_TEAMS.replace("clusterQueue: b}", "clusterQueue: bb}"),
            "LocalQueue 'b': no ClusterQueue 'bb'; did you mean 'b'?",
        ),
        (
            TWO_TEAMS.replace(
                "{nominalQuota: 16}}}\n    localQueues",
                "{nominalQuota: 16, borrowingLimit: 8}}}\n    localQueues",
            ),
            "ClusterQueue 'b': borrowingLimit needs a cohort",
        ),
        (
            TWO_TEAMS.replace(
                "{nominalQuota: 16}}}\n    localQueues",
                "{nominalQuota: 16, lendingLimit: 24}}}\n    localQueues",
            ),
            "ClusterQueue 'b': lendingLimit 24 exceeds nominalQuota 16",
        ),
        (
            TWO_TEAMS.replace("queueingStrategy", "x").replace(
                "{name: a, flavors", "{name: a, queueingStrategy: Strict, flavors"
            ),
            "queueingStrategy must be",
        ),
        (
            TWO_TEAMS.replace("namespace: team-b", "namespace: team-a"),
            "namespace 'team-a' has a LocalQueue already",
        ),
        (
            "    waitForPodsReady: {timeout: 0s}\n" + TWO_TEAMS,
            "timeout must be",
        ),
    ],
)
def test_the_section_refuses_what_kueue_would_not_take(
    tmp_path: Path, kueue: str, wanted: str
) -> None:
    with pytest.raises(ScenarioError) as e:
        _load(tmp_path, kueue)
    text = str(e.value)
    assert wanted in text, text
    assert "kueue.yaml:" in text  # file:line:col


def test_every_pool_jobs_draw_needs_a_flavor_in_every_cluster_queue(tmp_path: Path) -> None:
    path = tmp_path / "kueue.yaml"
    text = BASE.replace("NODES", "2").replace("KUEUE", TWO_TEAMS.rstrip("\n"))
    text = text.replace(
        "provisionTime: 5m}",
        "provisionTime: 5m}\n    - {name: l40s, vendor: nvidia, model: NVIDIA L40S, "
        "devicesPerNode: 8, initial: 1, max: 1}",
    )
    path.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "ClusterQueue 'a' has no flavor for pool 'l40s'" in str(e.value)


def test_the_section_reads_kueues_fields(tmp_path: Path) -> None:
    s = _load(
        tmp_path,
        "    waitForPodsReady: {timeout: 10m, blockAdmission: false,\n"
        "                       requeuingBackoff: {base: 30s, max: 5m}}\n"
        + TWO_TEAMS.replace(
            "{name: a, flavors",
            "{name: a, cohort: c, fairSharing: {weight: 3}, queueingStrategy: StrictFIFO, flavors",
        ).replace(
            "nominalQuota: 16}}}\n      - {name: b",
            "nominalQuota: 16, borrowingLimit: 4, lendingLimit: 2}}}\n      - {name: b",
        ),
    )
    assert s.kueue is not None
    a = s.kueue.cluster_queues[0]
    assert (a.cohort, a.weight, a.strategy) == ("c", 3.0, "StrictFIFO")
    assert a.quota("h100") == dataclasses.replace(a.flavors[0][1], nominal=16, borrowing=4)
    assert a.flavors[0][1].lending == 2
    ready = s.kueue.pods_ready
    assert ready is not None and (ready.timeout, ready.block) == (600.0, False)
    assert [ready.backoff(n) for n in (1, 2, 3, 4, 5, 6)] == [30, 60, 120, 240, 300, 300]


# -- admission -----------------------------------------------------------------------


def test_a_queue_admits_up_to_its_nominal_quota_without_a_cohort(tmp_path: Path) -> None:
    fleet, k = _fleet(tmp_path, TWO_TEAMS)
    jobs = [_submit(fleet, f"a-{i}", "team-a") for i in range(3)]
    _step(fleet, 1)
    assert [_state(k, j) for j in jobs] == ["admitted", "admitted", "pending"]
    wl = _workload(fleet, jobs[0])
    assert is_true(wl, "QuotaReserved") and is_true(wl, "Admitted")
    assert wl["status"]["admission"]["clusterQueue"] == "a"
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
        "nvidia.com/gpu": "h100"
    }
    # Admitted: the JobSet is resumed and its member pods exist; the third has none.
    assert fleet.kube.custom[("jobsets", "team-a", "a-0")]["spec"]["suspend"] is False
    labels = [p["metadata"]["labels"] for p in fleet.kube.pods.values()]
    pods = {lab.get("jobset.sigs.k8s.io/jobset-name") for lab in labels}
    assert pods == {"a-0", "a-1"}


COHORT = """\
    clusterQueues:
      - {name: a, cohort: c, flavors: {h100: {nominalQuota: 8, borrowingLimit: BORROW}}}
      - {name: b, cohort: c, flavors: {h100: {nominalQuota: 16, lendingLimit: LEND}}}
    localQueues:
      - {name: a, namespace: team-a, clusterQueue: a}
      - {name: b, namespace: team-b, clusterQueue: b}
"""


def test_a_queue_borrows_what_the_cohort_lends_up_to_its_borrowing_limit(
    tmp_path: Path,
) -> None:
    fleet, k = _fleet(tmp_path, COHORT.replace("BORROW", "8").replace("LEND", "16"))
    jobs = [_submit(fleet, f"a-{i}", "team-a") for i in range(3)]
    _step(fleet, 1)
    # 8 of its own, 8 borrowed from b's unused 16; the third would borrow 16 > 8.
    assert [_state(k, j) for j in jobs] == ["admitted", "admitted", "pending"]


def test_a_lending_limit_keeps_the_rest_of_a_queues_quota_for_itself(tmp_path: Path) -> None:
    fleet, k = _fleet(tmp_path, COHORT.replace("BORROW", "16").replace("LEND", "0"))
    a = [_submit(fleet, f"a-{i}", "team-a") for i in range(2)]
    b = [_submit(fleet, f"b-{i}", "team-b") for i in range(2)]
    _step(fleet, 1)
    assert [_state(k, j) for j in a] == ["admitted", "pending"]  # b lends nothing
    assert [_state(k, j) for j in b] == ["admitted", "admitted"]


def test_strict_fifo_waits_behind_its_head_and_best_effort_fifo_does_not(
    tmp_path: Path,
) -> None:
    for strategy, small in (("StrictFIFO", "pending"), ("BestEffortFIFO", "admitted")):
        kueue = TWO_TEAMS.replace(
            "{name: a, flavors", f"{{name: a, queueingStrategy: {strategy}, flavors"
        )
        fleet, k = _fleet(tmp_path, kueue)
        first = _submit(fleet, "a-0", "team-a")
        big = _submit(fleet, "a-1", "team-a", size=16)  # 8 + 16 > 16
        behind = _submit(fleet, "a-2", "team-a")
        _step(fleet, 1)
        assert (_state(k, first), _state(k, big), _state(k, behind)) == (
            "admitted",
            "pending",
            small,
        ), strategy


def test_fair_sharing_lets_the_queue_that_borrowed_least_borrow_first(tmp_path: Path) -> None:
    kueue = """\
    clusterQueues:
      - {name: a, cohort: c, fairSharing: {weight: 2}, flavors: {h100: {nominalQuota: 8}}}
      - {name: b, cohort: c, flavors: {h100: {nominalQuota: 8}}}
      - {name: lender, cohort: c, flavors: {h100: {nominalQuota: 24}}}
    localQueues:
      - {name: a, namespace: team-a, clusterQueue: a}
      - {name: b, namespace: team-b, clusterQueue: b}
      - {name: l, namespace: team-l, clusterQueue: lender}
"""
    fleet, k = _fleet(tmp_path, kueue)
    a = [_submit(fleet, f"a-{i}", "team-a") for i in range(3)]  # 8 own + 16 borrowed
    _step(fleet, 1)
    assert all(_state(k, j) == "admitted" for j in a)
    early = _submit(fleet, "a-3", "team-a")  # queued first, but a borrows 16 already
    later = _submit(fleet, "b-0", "team-b")
    late = _submit(fleet, "b-1", "team-b")  # b's own 8, then 8 of the last 8 lent
    _step(fleet, 1)
    assert (_state(k, later), _state(k, late), _state(k, early)) == (
        "admitted",
        "admitted",
        "pending",
    )
    assert k.share(k.queues["a"]) == pytest.approx(16 / 40 / 2)


READY = "    waitForPodsReady: {timeout: 10m, blockAdmission: BLOCK,\n" + (
    "                       requeuingBackoff: {base: 60s, max: 1h}}\n"
)


def test_block_admission_admits_nothing_while_admitted_pods_are_not_ready(
    tmp_path: Path,
) -> None:
    fleet, k = _fleet(tmp_path, READY.replace("BLOCK", "true") + TWO_TEAMS)
    first = _submit(fleet, "a-0", "team-a")
    second = _submit(fleet, "b-0", "team-b")
    k.admit()  # directly: no scheduling pass in between
    assert (_state(k, first), _state(k, second)) == ("admitted", "pending")
    k.admit()
    assert _state(k, second) == "pending"  # a-0's member pod is not bound yet
    _step(fleet, 1)  # the scheduler binds it: Ready, and b-0 goes next
    assert k.workloads["a-0"].ready and _state(k, second) == "admitted"


def test_without_block_admission_every_fitting_workload_is_admitted(tmp_path: Path) -> None:
    fleet, k = _fleet(tmp_path, READY.replace("BLOCK", "false") + TWO_TEAMS)
    jobs = [_submit(fleet, "a-0", "team-a"), _submit(fleet, "b-0", "team-b")]
    k.admit()
    assert [_state(k, j) for j in jobs] == ["admitted", "admitted"]


def test_pods_not_ready_in_time_are_evicted_and_requeued_with_backoff(tmp_path: Path) -> None:
    # One node: a two-node gang is admitted (quota 16) but its pods never all bind.
    fleet, k = _fleet(tmp_path, READY.replace("BLOCK", "true") + TWO_TEAMS, nodes=1)
    job = _submit(fleet, "a-0", "team-a", size=16)
    _step(fleet, 1)
    assert _state(k, job) == "admitted"
    assert k.queues["a"].usage == {"h100": 16}
    _step(fleet, 600)
    wl = _workload(fleet, job)
    evicted = condition(wl, EVICTED)
    assert evicted is not None and evicted["reason"] == PODS_READY_TIMEOUT
    assert wl["status"]["requeueState"]["count"] == 1
    assert _state(k, job) == "backoff" and k.queues["a"].usage == {"h100": 0}
    assert "admission" not in wl["status"] and not is_true(wl, "QuotaReserved")
    assert job.suspended and not any(
        p["metadata"]["namespace"] == "team-a" for p in fleet.kube.pods.values()
    )
    _step(fleet, 58)  # evicted at 600 s, 1 s ago
    assert _state(k, job) == "backoff"  # 60 s for the first requeue
    _step(fleet, 2)
    assert _state(k, job) == "admitted" and is_true(wl, REQUEUED)
    assert not is_true(wl, EVICTED)
    _step(fleet, 600)
    assert wl["status"]["requeueState"]["count"] == 2
    _step(fleet, 118)
    assert _state(k, job) == "backoff"  # 120 s for the second
    _step(fleet, 2)
    assert _state(k, job) == "admitted"
    assert k.workloads["a-0"].evictions == 2


def test_a_finished_job_frees_its_quota_for_the_next(tmp_path: Path) -> None:
    fleet, k = _fleet(tmp_path, TWO_TEAMS)
    jobs = [_submit(fleet, f"a-{i}", "team-a") for i in range(3)]
    _step(fleet, 1)
    assert _state(k, jobs[2]) == "pending"
    _step(fleet, 3600)
    assert jobs[0].state == "done" and _state(k, jobs[0]) == "finished"
    assert (WORKLOADS, "team-a", "jobset-a-0") not in fleet.kube.custom
    assert _state(k, jobs[2]) == "admitted"


# -- the production readers and writers over the simulated objects -------------------------


def test_the_production_queue_series_read_the_simulated_objects(tmp_path: Path) -> None:
    fleet, k = _fleet(tmp_path, TWO_TEAMS, nodes=1)
    jobs = [_submit(fleet, f"a-{i}", "team-a") for i in range(3)]
    _step(fleet, 1)
    rows = asyncio.run(
        queues.collect(
            fleet.kube, clusterstate.device_requests, k.pools(), list(fleet.kube.nodes.values())
        )
    )
    assert sorted(rows, key=repr) == sorted(k.rows(), key=repr)  # the telemetry's own
    value = {(m.name, tuple(sorted(lab.items()))): v for m, lab, v in rows}
    quota = {"cluster_queue": "a", "flavor": "h100", "resource": "nvidia.com/gpu"}
    assert value[(QUEUE_NOMINAL_QUOTA.name, tuple(sorted(quota.items())))] == 16.0
    admitted = (QUEUE_DEVICE_REQUESTS.name, tuple(sorted((quota | {"state": "admitted"}).items())))
    assert value[admitted] == 16.0
    # The third waits for quota, not nodes: nothing queued for the pool.
    queued = (POOL_QUEUED.name, (("pool", "h100"), ("resource", "nvidia.com/gpu")))
    assert value[queued] == 0.0
    assert _state(k, jobs[2]) == "pending"


def test_the_production_requeue_evicts_through_the_workload_and_kueue_reacts(
    tmp_path: Path,
) -> None:
    fleet, k = _fleet(tmp_path, TWO_TEAMS)
    job = _submit(fleet, "a-0", "team-a")
    _step(fleet, 1)
    assert job.state == "running"
    pod = next(iter(fleet.kube.pods.values()))
    ctx = ActionContext(kube=fleet.kube, clock=fleet.clock)

    async def requeue() -> kueue_ops.Eviction:
        found = await kueue_ops.managed(ctx, pod)
        assert found.managed is not None
        return await kueue_ops.evict(
            ctx,
            found.managed,
            pod_uid="u1",
            why="stalled",
            max_requeues=3,
            backoff=lambda n: 300.0,
        )

    done = asyncio.run(requeue())
    assert done.status == "evicted" and done.count == 1
    assert _state(k, job) == "backoff" and job.suspended
    assert k.queues["a"].usage == {"h100": 0}
    assert not fleet.kube.pods
    _step(fleet, 299)
    assert _state(k, job) == "backoff"
    _step(fleet, 2)
    assert _state(k, job) == "admitted"


# -- the scenario -----------------------------------------------------------------------


def test_the_three_team_scenario_reports_every_queue_for_rules_and_baseline(
    tmp_path: Path,
) -> None:
    scenario = load_scenario(REPO / "scenarios" / "kueue-teams.yaml")
    assert scenario.kueue is not None
    assert {cq.cohort for cq in scenario.kueue.cluster_queues} == {"research"}
    short = dataclasses.replace(scenario, duration=3 * 3600.0)
    results = sim.simulate(short, [str(REPO / "rules")], parallel=False)
    doc = summary(results, short, short.seed)
    for mode in ("rules", "baseline"):
        per = doc[mode][KUEUE_KEY]
        assert set(per) == {"team-a", "team-b", "team-c"}
        for figures in per.values():
            assert tuple(figures) == QUEUE_FIGURES
        assert sum(f["jobs_admitted"] for f in per.values()) > 0
        assert sum(f["jobs_submitted"] for f in per.values()) == doc[mode]["jobs_submitted"]
        # Each team's goodput is counted as the run's, over its namespaces: every
        # job is some team's, so the teams' kept work and held device time add
        # up to the run's.
        assert all(0.0 <= f["goodput_ratio"] <= 1.0 for f in per.values())
        stats = results[mode].stats
        assert math.isclose(
            sum(stats.allocated_by_namespace.values()), stats.device_seconds_allocated
        )
        assert math.isclose(sum(stats.useful_by_namespace.values()), stats.device_seconds_useful)
        assert set(stats.allocated_by_namespace) <= {"team-a", "team-b", "team-c"}
    # The rules grew the pool for the queued Workloads; the baseline cannot.
    assert doc["rules"]["actions"].get("scale_node_pool", 0) > 0


def test_the_simulated_queue_series_equal_what_clusterstate_collect_reads() -> None:
    """The telemetry writes the queue series through ``queues.queue_rows`` over
    Kueue's objects and pools built from the fleet; the controller's own
    ``clusterstate.collect`` reads them through the Kube protocol and the Cluster
    API provider: the same rows, the pool each queued Workload is counted for
    included."""
    scenario = load_scenario(REPO / "scenarios" / "kueue-teams.yaml")
    fleet = Fleet(dataclasses.replace(scenario, duration=3600.0), FirstFit(), static_pools=False)
    k = fleet.job_controller.kueue
    assert k is not None

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        theirs = await clusterstate.collect(fleet.kube, sim.pool_provider(fleet), fleet.now)
        return k.rows(), theirs

    ours, theirs = asyncio.run(go())

    def keyed(rows: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in rows}

    names = {m.name for m, _, _ in ours}
    assert POOL_QUEUED.name in names
    assert keyed(ours) == {key: v for key, v in keyed(theirs).items() if key[0] in names}
    # An hour in, admitted gangs block admission while Workloads that fit wait:
    # their devices are queued for the pool (not all zeros).
    queued = [v for m, labels, v in ours if m.name == POOL_QUEUED.name]
    assert queued and queued[0] > 0
