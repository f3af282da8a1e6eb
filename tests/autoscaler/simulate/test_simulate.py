"""The fleet simulator: its summary keys and plots, rules that beat the baseline, the
same summary from the same seed, the production actions as what runs, the
scenario loader's messages, the in-memory API's semantics, and the simulated
cluster-state series against ``clusterstate.collect`` over the same cluster."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autoscaler import clusterstate
from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.commands import simulate as simulate_command
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, NotFound
from autoscaler.kube.jsonmerge import merge_patch
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.simulate import results
from autoscaler.simulate import run as sim
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.kube import SimKube, selector_matches
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit, NodeView, Request, slowdown
from autoscaler.simulate.telemetry import Telemetry
from tests.support.paths import REPO

# Slow (simulates the small scenario's fleet, with rules and without):
# `make test-fast` leaves it out. A day of the small fleet is about 50 s of CPU,
# which parallel test workers on two cores can stretch past pytest's 120 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = REPO
SMALL = ROOT / "scenarios" / "small.yaml"
RULES = [str(ROOT / "rules")]

# One 8-GPU job lands on h100-0000 (first fit) and a fatal fault hits it at 1h.
TINY = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 5h
  evaluationInterval: 30s
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 3, min: 3, max: 3,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 2
    sizes: {8: 1}
    duration: {distribution: fixed, value: 2h}
    checkpointInterval: 15m
    restartOverhead: 2m
  faults:
    events:
      - {at: 1h, kind: fatal, node: h100-0000, device: nvidia0}
"""


def cli_args(*argv: str) -> argparse.Namespace:
    """``accel-autoscaler simulate``'s arguments, through its own parser."""
    parser = argparse.ArgumentParser()
    simulate_command.add_arguments(parser)
    return parser.parse_args([*argv, *(f"--rules={r}" for r in RULES)])


def _run_cli(scenario: Path, out: Path, *extra: str) -> dict[str, Any]:
    args = cli_args(str(scenario), "--out", str(out), *[f"--{f.replace('_', '-')}" for f in extra])
    assert simulate_command.main(args) == 0
    doc: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return doc


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("small")
    return out, _run_cli(SMALL, out)


def _without_wall(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    for mode in ("rules", "baseline"):
        if mode in doc:
            doc[mode].pop("wall_seconds")
    return doc


def test_summary_has_exactly_the_summary_keys_and_the_plots(
    small: tuple[Path, dict[str, Any]],
) -> None:
    out, doc = small
    for mode in ("rules", "baseline"):
        section = doc[mode]
        assert tuple(section) == results.SUMMARY_KEYS
        assert set(section["time_to_remediate_seconds"]) == {"p50", "p99", "max"}
        assert set(section["queue_wait_seconds"]) == {"p50", "p95"}
        jct = section["job_completion_seconds"]
        assert set(jct) == {"mean", "p50", "p95"}
        # Jobs complete in small.yaml's hours: each took at least its queue wait.
        assert section["jobs_completed"] > 0 and 0 < jct["p50"] <= jct["p95"]
        assert set(section["lost_device_hours"]) == set(results.LOSS_KEYS.values())
        for kind, spread in section["time_to_remediate_seconds_by_kind"].items():
            assert kind in ("fatal", "ecc_uncorrected", "hang", "stall", "device_lost", "node_down")
            assert set(spread) == {"p50", "p99", "max"}
        assert sum(section["restarts_per_job"].values()) == section["jobs_submitted"]
        assert set(section["goodput_by_job_size"]) <= {"1", "2", "4", "8"}
        assert isinstance(section["actions"], dict)
        assert 0 < section["goodput_ratio"] <= 1
        assert section["jobs_submitted"] > 100
    assert doc["baseline"]["actions"] == {}
    assert doc["rules"]["actions"].get("migrate_jobs", 0) >= 1
    import matplotlib.image as mpimg

    for name in ("utilization.png", "nodes.png", "jobs.png", "faults_actions.png", "loss.png"):
        image = mpimg.imread(out / name)
        height, width = image.shape[:2]
        assert width >= 1000 and height >= 350, name


def test_rules_lose_no_job_and_beat_the_baseline(small: tuple[Path, dict[str, Any]]) -> None:
    _, doc = small
    rules, base = doc["rules"], doc["baseline"]
    scenario = load_scenario(SMALL)
    assert scenario.faults.events and scenario.faults.rates
    assert rules["jobs_lost"] == 0
    assert base["jobs_lost"] > 0
    assert rules["goodput_ratio"] > base["goodput_ratio"]
    assert rules["time_to_remediate_seconds"]["p50"] < base["time_to_remediate_seconds"]["p50"]


def test_same_seed_same_summary(small: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Again, in another process with another string-hash seed: nothing may depend
    on the order of a set or on anything but the scenario's seed. The rules only:
    the baseline runs the same fleet, jobs and faults with fewer parts, and a
    second one would double the test's cost."""
    _, first = small
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "simulate",
            str(SMALL),
            "--out",
            str(tmp_path),
            "--no-plots",
            "--baseline",
            "skip",
            "--rules",
            RULES[0],
        ],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    again = json.loads((tmp_path / "summary.json").read_text())
    assert again["rules"]["actions"], "the comparison covers the rules' acts"
    assert _without_wall(again)["rules"] == _without_wall(first)["rules"]


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_the_production_actions_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug injected into migrate_jobs (it reports success and does nothing) must
    change what the simulation measures: the job stays on the broken device."""
    scenario = load_scenario(_tiny(tmp_path))
    good = sim.simulate(scenario, RULES, baseline=False)["rules"]
    assert good.stats.actions.get("migrate_jobs") == 1
    assert good.outcomes.get("migrate_jobs:done") == 2  # the act and its recover

    async def does_nothing(ctx: ActionContext, decision: Decision) -> Outcome:
        return Outcome("done", "injected bug: nothing moved")

    spec = ACTIONS["migrate_jobs"]
    monkeypatch.setitem(ACTIONS, "migrate_jobs", dataclasses.replace(spec, execute=does_nothing))
    bad = sim.simulate(scenario, RULES, baseline=False)["rules"]
    assert bad.stats.actions.get("migrate_jobs") == 1  # the engine decided the same
    good_s, bad_s = results.summary_section(good), results.summary_section(bad)
    assert bad_s["goodput_ratio"] < good_s["goodput_ratio"]
    assert bad_s["device_hours_useful"] < good_s["device_hours_useful"]
    assert bad_s["time_to_remediate_seconds"]["max"] > good_s["time_to_remediate_seconds"]["max"]


def test_scenario_problems_are_all_reported_with_positions(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 24
  pools:
    - {name: h100, vendor: nvidai, initial: 5, max: 2}
  workload:
    arrivalsPerHour: -1
    sizes: {16: 1}
    duration: {distribution: lognormal}
    checkpointIntervall: 5m
  faults:
    ratesPerDeviceHour: {fatal: 0.1, melted: 0.1}
    events:
      - {at: 1h, kind: fatal, node: h100-0009, device: nvidia0}
  scheduler: best-fit
"""
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    expected = [
        f"{path}:4:13: duration: 24 has no unit",
        f"{path}:6:28: vendor must be one of nvidia, amd, oneapi, gaudi, ascend, tpu, "
        "got 'nvidai'; did you mean",
        "need min <= initial <= max",
        f"{path}:8:22: arrivalsPerHour must be a number >= 0, got -1",
        "a lognormal duration needs 'median'",
        "unknown key 'checkpointIntervall' in workload; did you mean 'checkpointInterval'?",
        "unknown key 'melted' in ratesPerDeviceHour",
        "no initial node named 'h100-0009'",
        f"{path}:16:14: scheduler must be first-fit or placement, got 'best-fit'",
    ]
    for message in expected:
        assert message in text, (message, text)
    lines = text.splitlines()
    assert all(line.startswith(str(path)) for line in lines)


def test_intervals_longer_than_a_rule_window_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "slow.yaml"
    path.write_text(SMALL.read_text().replace("evaluationInterval: 30s", "evaluationInterval: 10m"))
    args = cli_args(str(path), "--out", str(tmp_path), "--no-plots")
    err = io.StringIO()
    assert simulate_command.main(args, stderr=err) == 2
    # The shortest window of the shipped rules, and the rule that has it.
    shortest = sim.shortest_window(load_ruleset(RULES, source="scrape"))
    assert shortest is not None
    window, rule = shortest
    assert f"evaluationInterval 600s is longer than the {window:g}s window of rule" in (
        err.getvalue()
    )
    assert repr(rule) in err.getvalue()


def test_only_windows_that_count_events_bound_the_intervals(tmp_path: Path) -> None:
    # A fault counted between two windows is never seen; an idle state that a 1m
    # window asks about is still there at the next evaluation.
    path = tmp_path / "rules.yaml"
    path.write_text(
        "apiVersion: accel-fleet/v1\nkind: RuleSet\nspec:\n  rules:\n"
        "    - name: idle\n"
        "      expr: max_over_time(accel_utilization_ratio[1m]) == 0\n"
        "      target: node\n"
        "      action: {type: cordon}\n"
        "    - name: faults\n"
        "      expr: increase(accel_fault_events_total[5m]) > 0 and changes(accel_up[7m]) > 0\n"
        "      target: node\n"
        "      action: {type: cordon}\n"
    )
    assert sim.shortest_window(load_ruleset([str(path)], source="scrape")) == (300.0, "faults")


def test_the_in_memory_api_behaves_like_the_server() -> None:
    async def check() -> None:
        now = [EPOCH]
        kube = SimKube(lambda: now[0])
        kube.add_node({"metadata": {"name": "n1", "labels": {"pool": "a"}}, "spec": {}})
        node = await kube.get_node("n1")
        node["spec"]["taints"] = [{"key": "x", "effect": "NoSchedule"}]
        assert "taints" not in (await kube.get_node("n1"))["spec"], "callers get copies"
        rv = node["metadata"]["resourceVersion"]
        patched = await kube.patch_node(
            "n1", {"metadata": {"resourceVersion": rv, "labels": {"pool": None, "b": "1"}}}
        )
        assert patched["metadata"]["labels"] == {"b": "1"}
        with pytest.raises(Conflict):
            await kube.patch_node("n1", {"metadata": {"resourceVersion": rv}})
        with pytest.raises(NotFound):
            await kube.get_node("n2")
        pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
        created = await kube.create_pod("ns", pod)
        with pytest.raises(Conflict) as dup:
            await kube.create_pod("ns", pod)
        assert dup.value.already_exists
        with pytest.raises(Conflict):
            await kube.delete_pod("ns", "p", uid="someone-else")
        await kube.delete_pod("ns", "p", uid=created["metadata"]["uid"])
        with pytest.raises(NotFound):
            await kube.evict_pod("ns", "p")
        # A status write is one call, tallied once, and changes only the status.
        group = ("kueue.x-k8s.io", "v1beta1", "ns", "workloads", "w")
        wl = {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"active": True}}
        kube.add_custom("workloads", wl)
        before = dict(kube.calls)
        out = await kube.patch_custom_status(
            *group, {"spec": {"active": False}, "status": {"requeueState": {"count": 1}}}
        )
        assert out["spec"] == {"active": True} and out["status"]["requeueState"]["count"] == 1
        assert kube.calls["patch_custom_status"] == before.get("patch_custom_status", 0) + 1
        assert kube.calls.get("patch_custom", 0) == before.get("patch_custom", 0)

    asyncio.run(check())
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == {
        "a": {"c": 2},
        "l": [2],
    }
    assert selector_matches("a=1,b!=2,c", {"a": "1", "b": "3", "c": ""})
    assert not selector_matches("!c", {"c": ""})


def test_a_pdb_refuses_evictions_and_the_action_waits_in_simulated_time(tmp_path: Path) -> None:
    """Two 4-GPU jobs on one node, a PodDisruptionBudget of one: migrate_jobs'
    second eviction is refused (429) until the first job runs again elsewhere,
    and the action sleeps in simulated time meanwhile."""
    path = tmp_path / "pdb.yaml"
    path.write_text(
        TINY.replace("sizes: {8: 1}", "sizes: {4: 1}")
        .replace("arrivalsPerHour: 2", "arrivalsPerHour: 3")
        .replace(
            "restartOverhead: 2m",
            "restartOverhead: 2m\n    pdbMaxUnavailable: 1\n    namespaces: 1",
        )
    )
    scenario = load_scenario(path)
    result = sim.simulate(scenario, RULES, baseline=False)["rules"]
    assert result.outcomes.get("migrate_jobs:done") == 2  # the act and its recover
    assert result.stats.lost == 0
    # Both pods went (done, not partial), and at least one eviction was refused and
    # retried ctx.retry_interval later.
    assert result.kube_calls["evict_pod"] > 2


def test_first_fit_and_topology() -> None:
    nodes = [
        NodeView("a", "p", "pcie", 8, (0, 7)),
        NodeView("b", "p", "pcie", 8, (1, 2, 3), avoid=True),
        NodeView("c", "p", "pcie", 8, (4, 5, 6)),
    ]
    placement = FirstFit().place(Request("j", "p", 2), nodes)
    assert placement is not None and (placement.node, placement.devices) == ("a", (0, 7))
    placement = FirstFit().place(Request("j", "p", 3), nodes)
    assert placement is not None and placement.node == "c"  # avoid comes last
    assert FirstFit().place(Request("j", "p", 4), nodes) is None
    assert slowdown("pcie", [0, 1]) == 1.1
    assert slowdown("pcie", [0, 2]) == 1.25
    assert slowdown("pcie", [0, 7]) == 1.5
    assert slowdown("nvlink", [0, 7]) == 1.0


def test_cluster_state_series_equal_what_collect_reads(tmp_path: Path) -> None:
    """The simulator writes the cluster-state series itself (for speed); they must
    be what the controller's own ``clusterstate.collect`` reads from the same
    cluster through the Kube protocol and the Cluster API provider."""
    scenario = load_scenario(SMALL)
    scenario = dataclasses.replace(scenario, duration=6 * 3600.0)
    fleet = Fleet(scenario, FirstFit(), static_pools=False)
    telemetry = Telemetry(fleet, SeriesStore(), [clusterstate.JOB_AGE.name], seed=1)

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        ours = telemetry.pool_rows() + telemetry.node_rows()
        theirs = await clusterstate.collect(fleet.kube, sim.pool_provider(fleet), fleet.now)
        return ours, theirs

    ours, theirs = asyncio.run(go())

    def keyed(rows: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in rows}

    pools = {k: v for k, v in keyed(theirs).items() if not k[0].startswith("accel_job")}
    assert keyed(ours) == pools
    jobs = {k: v for k, v in keyed(theirs).items() if k[0].startswith("accel_job")}
    expected = {}
    for name in fleet.running:
        job = fleet.jobs[name]
        node = fleet.slots[job.slot].node
        labels = (("job", name), ("namespace", job.namespace), ("node", node), ("pod", job.pod))
        start = telemetry.pod_rows[str(job.pod)][2]
        expected[("accel_job_age_seconds", labels)] = fleet.now - start
        expected[("accel_job_timeout_seconds", labels)] = job.timeout
    assert jobs == expected
    assert len(jobs) > 10


# Two one-device nodes, an H100 and an L40S; one-hour jobs drawn for the H100
# pool that may run on either (they ask for nvidia.com/gpu and nothing else).
FLEXIBLE = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 12h
  evaluationInterval: 60s
  seed: 5
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 1, initial: 1, min: 1, max: 1}
    - {name: l40s, vendor: nvidia, model: NVIDIA L40S, topology: pcie, devicesPerNode: 1,
       initial: 1, min: 1, max: 1}
  workload:
    arrivalsPerHour: 3
    pools: {h100: 1}
    eligiblePools: vendor
    sizes: {1: 1}
    duration: {distribution: fixed, value: 1h}
    timeoutFactor: 20
    deadlineFactor: 40
"""


def _runs(fleet: Fleet) -> list[tuple[str, str, float]]:
    """(job, node, seconds) of every run that ended, recorded as the fleet goes."""
    bound: dict[str, tuple[str, float]] = {}
    out: list[tuple[str, str, float]] = []

    def listen(what: str, job: Any) -> None:
        if what == "pod_bound":
            bound[job.name] = (str(fleet.slots[job.slot].node), fleet.now)
        elif what == "pod_unbound":
            node, since = bound.pop(job.name)
            out.append((job.name, node, fleet.now - since))

    fleet.listeners.append(listen)
    return out


def test_a_flexible_job_runs_slower_on_a_slower_model_by_the_catalogue_ratio(
    tmp_path: Path,
) -> None:
    """The same one-hour (on an H100) jobs: an hour on the H100, and peak(H100) /
    peak(L40S) hours, from devices.yaml at bf16, on the L40S. Their pods ask for
    nvidia.com/gpu with no pool selector and carry their work in FLOPs."""
    from autoscaler.placement.catalogue import default_catalogue

    path = tmp_path / "flexible.yaml"
    path.write_text(FLEXIBLE)
    scenario = load_scenario(path)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    runs = _runs(fleet)
    pods: list[Any] = []
    fleet.listeners.append(
        lambda what, job: (
            pods.append(fleet.kube.pods[(job.namespace, job.pod)]) if what == "pod_bound" else None
        )
    )
    asyncio.run(fleet.run())
    catalogue = default_catalogue()
    h100 = catalogue.peak("NVIDIA H100 80GB HBM3", "bf16")
    l40s = catalogue.peak("NVIDIA L40S", "bf16")
    assert h100 and l40s and h100 / l40s > 2.5
    on = {node: [t for _, n, t in runs if n == node] for node in ("h100-0000", "l40s-0000")}
    assert len(on["h100-0000"]) >= 3 and len(on["l40s-0000"]) >= 2, runs
    assert all(t == pytest.approx(3600.0) for t in on["h100-0000"])
    assert all(t == pytest.approx(3600.0 * h100 / l40s) for t in on["l40s-0000"])
    spec = pods[0]["spec"]
    assert "nodeSelector" not in spec and "affinity" not in spec
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    flops = float(pods[0]["metadata"]["annotations"]["accel-fleet.io/flops"])
    assert flops == pytest.approx(3600.0 * h100, rel=1e-5)


def test_bound_jobs_keep_their_pool_and_a_list_uses_node_affinity(tmp_path: Path) -> None:
    """The default binds a job to its pool by nodeSelector at its own model's speed;
    ``eligiblePools: [..]`` lets the listed pools' jobs use each other's nodes
    through a required node affinity on the pool label."""
    path = tmp_path / "bound.yaml"
    path.write_text(FLEXIBLE.replace("    eligiblePools: vendor\n", ""))
    fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)
    runs = _runs(fleet)
    asyncio.run(fleet.run())
    assert {n for _, n, _ in runs} == {"h100-0000"}
    assert all(t == pytest.approx(3600.0) for _, _, t in runs)
    kjob = next(iter(fleet.kube.jobs.values()))  # one still waiting at the end
    assert kjob["spec"]["template"]["spec"]["nodeSelector"] == {"accel-fleet.io/pool": "h100"}

    path.write_text(FLEXIBLE.replace("eligiblePools: vendor", "eligiblePools: [l40s, h100]"))
    fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)
    runs = _runs(fleet)
    asyncio.run(fleet.run())
    assert {n for _, n, _ in runs} == {"h100-0000", "l40s-0000"}
    spec = next(iter(fleet.kube.jobs.values()))["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "accel-fleet.io/pool", "operator": "In", "values": ["h100", "l40s"]}
    ]


def test_eligible_pools_models_and_precision_are_validated(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        FLEXIBLE.replace("model: NVIDIA L40S", "model: NVIDIA B300")
        .replace("eligiblePools: vendor", "eligiblePools: [h100, l40z, mi300x, h100]")
        .replace("    sizes:", "    precision: fp4\n    sizes:")
        .replace(
            "       initial: 1, min: 1, max: 1}\n",
            "       initial: 1, min: 1, max: 1}\n"
            "    - {name: mi300x, vendor: amd, devicesPerNode: 1, initial: 1, max: 1}\n",
        )
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    expected = [
        f"{path}:9:43: pool 'l40s': model 'NVIDIA B300' is not in the device catalogue "
        "(devices.yaml); use a model whose name contains one of 'H100 80GB HBM3', ",
        f"{path}:15:20: eligiblePools mixes vendors (h100 is nvidia, mi300x is amd)",
        f"{path}:15:27: no pool named 'l40z'; did you mean 'l40s'?",
        f"{path}:15:41: pool 'h100' is listed twice",
        f"{path}:16:16: precision must be one of fp64, fp32, tf32, bf16, fp16, fp8, got 'fp4'",
    ]
    for message in expected:
        assert message in text, (message, text)
    path.write_text(
        FLEXIBLE.replace("eligiblePools: vendor", "eligiblePools: any").replace(
            "    sizes:", "    precision: fp64\n    sizes:"
        )
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert f"{path}:14:20: eligiblePools must be pool, vendor or a list of pool names" in text
    assert (
        f"{path}:9:43: pool 'l40s': the device catalogue has no fp64 peak for NVIDIA L40S" in text
    )


def test_pending_flexible_pods_count_where_clusterstate_counts_them() -> None:
    """A pod that several pools can satisfy waits, in ``accel_pool_pending_device_requests``,
    on the pool ``clusterstate.pool_rows`` picks for it, as the controller would read it."""
    scenario = load_scenario(ROOT / "scenarios" / "placement.yaml")
    assert scenario.workload.eligible == "vendor"
    scenario = dataclasses.replace(scenario, duration=6 * 3600.0)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    telemetry = Telemetry(fleet, SeriesStore(), [], seed=1)

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        ours = telemetry.pool_rows() + telemetry.node_rows()
        theirs = await clusterstate.collect(fleet.kube, sim.pool_provider(fleet), fleet.now)
        return ours, theirs

    ours, theirs = asyncio.run(go())

    def keyed(rows: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in rows}

    pools = {k: v for k, v in keyed(theirs).items() if not k[0].startswith("accel_job")}
    assert keyed(ours) == pools
    name = clusterstate.POOL_PENDING.name
    pending = {dict(k[1])["pool"]: v for k, v in pools.items() if k[0] == name}
    assert pending["hgx"] > 0 and pending["pvc"] > 0  # both queues are long by then
    assert fleet.pending[("hgx", "l40s")]
