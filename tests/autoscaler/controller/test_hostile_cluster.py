"""Hostile values on the cluster cost only themselves (issue 27): for every
annotation the controller reads on Nodes, Pods, Jobs, gang owners, Machines and
MachineDeployments, a value nested 100,000 deep, one with NaN, Infinity or 1e999,
one of the wrong type and one of 300 KiB.

Each case runs the controller's real cycle, executor and actions, with the real
``kubernetes`` client against the fake API server, on the test's ``FakeClock`` (a
minute per tick, a bounded number of ticks; the actions sleep on it too, and after
each tick the test waits until every action in flight has finished or parked).
Node ``bad`` (or pod, Job, gang owner, Machine, MachineDeployment) carries the
hostile value; node ``good`` has the same fault and nothing hostile. In every case:

- the controller keeps cycling (no exception out of a cycle, none counted failed);
- ``good``'s fault is acted on in the first cycle, as if ``bad`` were not there;
- a warning names the object and the key (where the value is parsed at all);
- ``bad`` is not acted on more widely: its ladder never escalates, a record that
  may be another owner's is left as it is, a gang is not restarted again.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    BARE_PODS_ANNOTATION,
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_LABELS,
    CAPI_DEPLOYMENT_LABEL,
    CAPI_MACHINE_ANNOTATION,
    CAPI_MAX_SIZE_ANNOTATION,
    CAPI_MIN_SIZE_ANNOTATION,
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    GANG_RESTARTS_ANNOTATION,
    JOBSET_NAME_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
    PARTITION_STATE_ANNOTATION,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    REMEDIATION_ANNOTATION,
    REPLACE_REQUEST_ANNOTATION,
    REQUEUES_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
    TIMEOUT_ANNOTATION,
)
from autoscaler.actions.context import ActionContext
from autoscaler.clusterstate import collect
from autoscaler.controller import Controller, StateRecord
from autoscaler.decision import Decision
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.store import StoreSource
from autoscaler.wiring import wire
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import ClusterAPI, machine_health_check, machine_set
from tests.support.kubeobjs import client, evictions, job, node, pod
from tests.support.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

Obj = dict[str, Any]
T0 = 1_800_000_000.0
TICK = 60.0
TICKS = 2
NS = "accel-fleet"
CAPI_NS = "capi"
RULE = "hostile"

# The four hostile values, for an annotation holding a JSON record and for one
# holding a plain string (a duration, a name, a count).
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_JSON = json.dumps({"pad": "x" * 300 * 1024})
VALUES: dict[str, tuple[str, str]] = {
    # kind: (JSON record, plain string)
    "nested": (DEEP, DEEP),
    "non-finite": ('{"count": NaN, "last": Infinity, "version": 1e999}', "1e999"),
    "wrong-type": ('["an", "array", "not", "an", "object"]', '{"an": "object"}'),
    "300KiB": (HUGE_JSON, "9" * 300 * 1024),
}


def hostile(kind: str, case: Case) -> str:
    if kind == "non-finite" and not case.json_record:
        return case.non_finite
    return VALUES[kind][0 if case.json_record else 1]


def rules(action: str, target: str = "device", expr: str = "accel_up == 0") -> str:
    """One rule: ``action`` first, then a cordon if the first step failed or timed
    out. A second step on ``bad`` within the test's ticks is an escalation."""
    if target == "pod":
        step = f"action: {action}"
    else:
        step = f"escalate:\n        - action: {action}\n          timeout: 15m\n"
        step += "        - action: {type: cordon}\n          timeout: 15m"
    return f"""\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 15s
  rules:
    - name: {RULE}
      expr: {expr}
      for: 0s
      target: {target}
      cooldown: 1h
      {step}
"""


@dataclass
class Case:
    """One annotation: where the hostile value goes, the rule that reads it, and
    what ``bad`` must still look like afterwards."""

    name: str
    key: str
    json_record: bool
    rules: str
    # Puts the value in place (after the cluster is built).
    plant: Callable[[World, str], None]
    # The warning names this object (compared in lower case).
    names: str
    # The check that ``good`` was acted on in the first cycle.
    good: Callable[[World], bool]
    # Whether the value is parsed at all (a reset scope is only compared to "node").
    warns: bool = True
    # The plain-string value standing for "non-finite" ("1e999" is a valid name).
    non_finite: str = "1e999"
    # Extra checks of ``bad`` after the ticks.
    after: Callable[[World, str], None] = lambda w, v: None
    capi: bool = False
    pools: bool = False


@dataclass
class World:
    """The fake cluster, the series store, the clock and one controller."""

    api: FakeApiServer
    tmp: Path
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    store: SeriesStore = field(default_factory=lambda: SeriesStore(retention=math.inf))
    capi: ClusterAPI | None = None
    bad: str = "bad"
    good: str = "good"
    decisions: list[Decision] = field(default_factory=list)

    @property
    def now(self) -> float:
        return self.clock()

    def start(self, case: Case) -> None:
        path = self.tmp / "rules.yaml"
        path.write_text(case.rules)
        self.kube = client(self.api, self.tmp)
        source = StoreSource(self.store)
        provider = ClusterAPIProvider(self.kube, CAPI_NS, clock=self.clock) if case.pools else None
        ctx = ActionContext(
            kube=self.kube,
            controller="accel-autoscaler",
            clock=self.clock,
            sleep=self.clock.sleep,
            query=source.query,
            retry_interval=0.01,
            event_namespace=NS,
            pools=provider,
        )
        watcher = RuleWatcher([path], clock=self.clock)
        wiring = wire(source, lambda: watcher.current, ctx)
        assert wiring.executor is not None
        self.executor = wiring.executor
        kube = self.kube

        async def cluster_state(now: float) -> list[Any]:
            return list(await collect(kube, provider, now))

        # The nodes' remediation entries are read each cycle (/metrics, breaker)
        # from the executor's API, the default.
        self.controller = Controller(
            watcher,
            source,
            AlertReceiver(),
            clock=self.clock,
            wiring=wiring,
            record=StateRecord(self.kube, NS, "accel-autoscaler-state"),
            cluster_state=cluster_state,
        )

    def scrape(self) -> None:
        for name in (self.bad, self.good):
            base = {"node": name, "device": "nvidia0", "vendor": "nvidia", "uuid": f"GPU-{name}"}
            self.store.add({"__name__": "accel_up", **base}, self.now, 0.0)
            self.store.add({"__name__": "accel_device_info", **base}, self.now, 1.0)

    async def tick(self) -> list[Decision]:
        self.clock.advance(TICK)
        self.scrape()
        decisions = await self.controller.cycle()
        # All the actions can do at this instant is done: each finished or waits on
        # the clock.
        await until(
            lambda: self.executor.in_flight <= self.clock.sleepers,
            what="the actions finished or waiting on the clock",
        )
        self.decisions.extend(decisions)
        return decisions

    def annotations(self, plural: str, namespace: str | None, name: str) -> dict[str, str]:
        obj = self.api.get(plural, namespace, name)
        assert obj is not None, f"{plural} {namespace}/{name} is gone"
        return dict(obj["metadata"].get("annotations") or {})

    def annotate(self, plural: str, namespace: str | None, name: str, key: str, v: str) -> None:
        obj = self.api.get(plural, namespace, name)
        assert obj is not None
        obj["metadata"].setdefault("annotations", {})[key] = v
        self.api.add(obj)

    def close(self) -> None:
        self.kube.close()


def boot(n: Obj, name: str) -> Obj:
    """A Ready node with a boot id (the reboot action reads it)."""
    n.setdefault("status", {})["nodeInfo"] = {
        "machineID": name,
        "systemUUID": name,
        "bootID": f"boot-{name}-0",
        "kernelVersion": "6.8.0",
        "osImage": "Ubuntu 24.04",
        "containerRuntimeVersion": "containerd://2.0.0",
        "kubeletVersion": "v1.33.0",
        "kubeProxyVersion": "v1.33.0",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return n


def build(w: World, case: Case) -> None:
    """Nodes ``bad`` and ``good`` (from a MachineSet for the Cluster API cases),
    each with a Job pod that holds its GPU."""
    if case.capi:
        w.capi = ClusterAPI(w.api)
        w.api.add(machine_set("gpu", CAPI_NS, "gpu", 2))
        w.api.add(machine_health_check("gpu", CAPI_NS, **{CAPI_DEPLOYMENT_LABEL: "gpu"}))
        w.capi.reconcile()
        w.bad, w.good = sorted(n["metadata"]["name"] for n in w.api.objects("nodes"))
        for name in (w.bad, w.good):
            n = w.api.get("nodes", None, name)
            assert n is not None
            w.api.add(boot(n, name))
    else:
        for name in (w.bad, w.good):
            w.api.add(boot(node(name), name))
    for name in (w.bad, w.good):
        w.api.add(job(f"train-{name}"))
        w.api.add(pod(f"train-{name}", name, owner="Job", owner_name=f"train-{name}"))


def pod_gone(name: str) -> Callable[[World], bool]:
    return lambda w: w.api.get("pods", "ml", f"train-{getattr(w, name)}") is None


def node_annotated(key: str) -> Callable[[World], bool]:
    return lambda w: key in w.annotations("nodes", None, w.good)


def cordoned(w: World) -> bool:
    n = w.api.get("nodes", None, w.good)
    return bool(n and n["spec"].get("unschedulable"))


def unchanged(plural: str, key: str, namespace: str | None = None, name: str = "") -> Any:
    """After the ticks, the hostile value is still there, byte for byte: it may be
    another owner's, and nothing overwrote it."""

    def check(w: World, value: str) -> None:
        where = name or w.bad
        assert w.annotations(plural, namespace, where).get(key) == value, f"{key} was rewritten"

    return check


def untouched_pod(w: World, value: str) -> None:
    assert w.api.get("pods", "ml", f"train-{w.bad}") is not None
    assert evictions(w.api, f"train-{w.bad}") == 0


def bad_not_cordoned(w: World, value: str) -> None:
    n = w.api.get("nodes", None, w.bad)
    assert n is not None and not n["spec"].get("unschedulable"), "bad was cordoned"


def requeue_record_kept(w: World, value: str) -> None:
    assert w.annotations("jobs", "ml", f"train-{w.bad}")[REQUEUES_ANNOTATION] == value


def both(*checks: Callable[[World, str], None]) -> Callable[[World, str], None]:
    def check(w: World, value: str) -> None:
        for c in checks:
            c(w, value)

    return check


def on_node(key: str) -> Callable[[World, str], None]:
    return lambda w, v: w.annotate("nodes", None, w.bad, key, v)


MIGRATE = rules("{type: migrate_jobs, taint: 'accel-fleet.io/faulty=true:NoSchedule'}")
RESET = rules("{type: reset_devices, taint: 'accel-fleet.io/faulty=true:NoSchedule', wait: 10m}")
REBOOT = rules("{type: reboot_node, method: agent, wait: 20m}")
REPARTITION = rules("{type: repartition, layout: all-1g}")
REPLACE = rules("{type: replace_machine, mode: remediate}")
REQUEUE = rules("{type: requeue_job}", target="pod", expr="accel_job_age_seconds > 0")
OBSERVE = rules("{type: taint}")


def plant_gang(kind: str) -> Callable[[World, str], None]:
    """``bad``'s second pod is a member of a JobSet or PyTorchJob whose restart
    record holds the hostile value."""

    def plant(w: World, value: str) -> None:
        meta: Obj = {
            "name": "llm",
            "namespace": "ml",
            "annotations": {GANG_RESTARTS_ANNOTATION: value},
        }
        if kind == "JobSet":
            owner: Obj = {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": meta,
                "spec": {"failurePolicy": {"maxRestarts": 3}, "replicatedJobs": []},
                "status": {"restarts": 0},
            }
            member = pod("llm-0", w.bad, owner=None, labels={JOBSET_NAME_LABEL: "llm"})
        else:
            owner = {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": meta,
                "spec": {"pytorchReplicaSpecs": {}},
            }
            member = pod("llm-0", w.bad, owner=None)
            member["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "llm",
                    "uid": "uid-llm",
                    "controller": True,
                }
            ]
        w.api.add(owner)
        w.api.add(member)
        w.api.add(pod("llm-1", w.good, owner=None, labels=member["metadata"]["labels"]))
        if kind != "JobSet":
            peer = w.api.get("pods", "ml", "llm-1")
            assert peer is not None
            peer["metadata"]["ownerReferences"] = member["metadata"]["ownerReferences"]
            w.api.add(peer)

    return plant


def gang_left_alone(plural: str) -> Callable[[World, str], None]:
    def check(w: World, value: str) -> None:
        assert w.api.get("pods", "ml", "llm-0") is not None, "the gang was restarted"
        assert w.api.get("pods", "ml", "llm-1") is not None, "the gang was restarted"
        assert w.annotations(plural, "ml", "llm").get(GANG_RESTARTS_ANNOTATION) == value
        # The node's other pod still moved: the bad record cost only its gang.
        assert w.api.get("pods", "ml", f"train-{w.bad}") is None

    return check


def on_bad_machine(key: str, *, remediate: bool = False) -> Callable[[World, str], None]:
    def plant(w: World, value: str) -> None:
        name = w.annotations("nodes", None, w.bad)[CAPI_MACHINE_ANNOTATION]
        if remediate:
            w.annotate("machines", CAPI_NS, name, CAPI_REMEDIATE_MACHINE_ANNOTATION, "")
        w.annotate("machines", CAPI_NS, name, key, value)

    return plant


def machines_marked(w: World) -> set[str]:
    return {
        str(m["status"]["nodeRef"]["name"])
        for m in w.api.objects("machines")
        if CAPI_REMEDIATE_MACHINE_ANNOTATION in (m["metadata"].get("annotations") or {})
    }


def bad_machine_left(w: World, value: str) -> None:
    assert len(w.api.objects("machines")) == 2, "a Machine was deleted"
    assert w.bad not in machines_marked(w), "bad's Machine was marked"


def bad_machine_request_kept(w: World, value: str) -> None:
    name = w.annotations("nodes", None, w.bad)[CAPI_MACHINE_ANNOTATION]
    assert w.annotations("machines", CAPI_NS, name).get(REPLACE_REQUEST_ANNOTATION) == value
    assert len(w.api.objects("machines")) == 2, "a Machine was deleted"


def on_bad_pod(key: str) -> Callable[[World, str], None]:
    return lambda w, v: w.annotate("pods", "ml", f"train-{w.bad}", key, v)


def good_pod_timeout_seen(w: World) -> bool:
    return any(
        metric.name == "accel_job_timeout_seconds" and labels.get("pod") == f"train-{w.good}"
        for metric, labels, _ in w.controller.cluster_rows
    )


def plant_pools(key: str) -> Callable[[World, str], None]:
    """Two MachineDeployments, ``good-pool`` and ``bad-pool``, the hostile value in
    ``bad-pool``'s annotation ``key``."""

    def plant(w: World, value: str) -> None:
        for name in ("good-pool", "bad-pool"):
            notes = {CAPI_MIN_SIZE_ANNOTATION: "0", CAPI_MAX_SIZE_ANNOTATION: "4"}
            notes[CAPI_CAPACITY_GPU_COUNT] = "8"
            if name == "bad-pool":
                notes[key] = value
            w.api.add(
                {
                    "apiVersion": "cluster.x-k8s.io/v1beta1",
                    "kind": "MachineDeployment",
                    "metadata": {"name": name, "namespace": CAPI_NS, "annotations": notes},
                    "spec": {"clusterName": "c1", "replicas": 0},
                }
            )

    return plant


def good_pool_seen(w: World) -> bool:
    return any(
        metric.name == "accel_pool_nodes_max" and labels.get("pool") == "good-pool"
        for metric, labels, _ in w.controller.cluster_rows
    )


def node_case(name: str, key: str, rule: str, good: Callable[[World], bool], **kw: Any) -> Case:
    return Case(name, key, True, rule, on_node(key), "node bad", good, **kw)


CASES: list[Case] = [
    node_case(
        "remediation entries",
        REMEDIATION_ANNOTATION,
        MIGRATE,
        pod_gone("good"),
        after=both(unchanged("nodes", REMEDIATION_ANNOTATION), untouched_pod),
    ),
    node_case(
        "bare-pod records",
        BARE_PODS_ANNOTATION,
        MIGRATE,
        pod_gone("good"),
        after=unchanged("nodes", BARE_PODS_ANNOTATION),
    ),
    node_case(
        "reset request", RESET_REQUEST_ANNOTATION, RESET, node_annotated(RESET_REQUEST_ANNOTATION)
    ),
    node_case(
        "reset status", RESET_STATUS_ANNOTATION, RESET, node_annotated(RESET_REQUEST_ANNOTATION)
    ),
    Case(
        "reset scope",
        RESET_SCOPE_ANNOTATION,
        False,
        RESET,
        on_node(RESET_SCOPE_ANNOTATION),
        "node bad",
        node_annotated(RESET_REQUEST_ANNOTATION),
        warns=False,
    ),
    node_case(
        "reboot request",
        REBOOT_REQUEST_ANNOTATION,
        REBOOT,
        node_annotated(REBOOT_REQUEST_ANNOTATION),
    ),
    node_case(
        "reboot status", REBOOT_STATUS_ANNOTATION, REBOOT, node_annotated(REBOOT_REQUEST_ANNOTATION)
    ),
    node_case(
        "partition state",
        PARTITION_STATE_ANNOTATION,
        REPARTITION,
        cordoned,
        after=both(untouched_pod, bad_not_cordoned),
    ),
    Case(
        "JobSet gang-restart record",
        GANG_RESTARTS_ANNOTATION,
        True,
        MIGRATE,
        plant_gang("JobSet"),
        "jobset ml/llm",
        pod_gone("good"),
        after=gang_left_alone("jobsets"),
    ),
    Case(
        "PyTorchJob gang-restart record",
        GANG_RESTARTS_ANNOTATION,
        True,
        MIGRATE,
        plant_gang("PyTorchJob"),
        "pytorchjob ml/llm",
        pod_gone("good"),
        after=gang_left_alone("pytorchjobs"),
    ),
    Case(
        "requeue record",
        REQUEUES_ANNOTATION,
        True,
        REQUEUE,
        lambda w, v: w.annotate("jobs", "ml", f"train-{w.bad}", REQUEUES_ANNOTATION, v),
        "job ml/train-bad",
        pod_gone("good"),
        after=both(untouched_pod, requeue_record_kept),
    ),
    Case(
        "Machine of the node",
        CAPI_MACHINE_ANNOTATION,
        False,
        REPLACE,
        on_node(CAPI_MACHINE_ANNOTATION),
        "node ",
        lambda w: w.good in machines_marked(w),
        after=bad_machine_left,
        capi=True,
        non_finite="NaN",
    ),
    Case(
        "replace-machine request",
        REPLACE_REQUEST_ANNOTATION,
        True,
        REPLACE,
        on_bad_machine(REPLACE_REQUEST_ANNOTATION, remediate=True),
        "machine capi/",
        lambda w: w.good in machines_marked(w),
        after=bad_machine_request_kept,
        capi=True,
    ),
    *(
        Case(
            f"pod {key.split('/')[1]}",
            key,
            False,
            OBSERVE,
            on_bad_pod(key),
            "pod ml/train-bad",
            good_pod_timeout_seen,
        )
        for key in (
            TIMEOUT_ANNOTATION,
            CHECKPOINT_PAUSE_ANNOTATION,
            CHECKPOINT_INTERVAL_ANNOTATION,
            LAST_CHECKPOINT_ANNOTATION,
        )
    ),
    *(
        Case(
            f"pool {key.rsplit('/', 1)[1]}",
            key,
            False,
            OBSERVE,
            plant_pools(key),
            "machinedeployment capi/bad-pool",
            good_pool_seen,
            pools=True,
        )
        for key in (CAPI_CAPACITY_GPU_COUNT, CAPI_CAPACITY_LABELS, CAPI_MAX_SIZE_ANNOTATION)
    ),
]


@pytest.fixture
def world(api: FakeApiServer, tmp_path: Path) -> Iterator[World]:
    w = World(api, tmp_path)
    yield w
    w.close()


@pytest.mark.parametrize("kind", list(VALUES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_hostile_value_costs_only_itself(
    world: World, case: Case, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    build(w, case)
    if case.key == TIMEOUT_ANNOTATION or case.name.startswith("pod "):
        # The good pod declares a timeout: its series must survive the bad one's.
        w.annotate("pods", "ml", f"train-{w.good}", TIMEOUT_ANNOTATION, "2h")
    value = hostile(kind, case)
    case.plant(w, value)
    w.start(case)
    caplog.set_level(logging.WARNING)

    first = await w.tick()
    # The first cycle's action on good runs on (evictions, API calls): bounded.
    await until(lambda: case.good(w), 10.0, f"{case.name}/{kind}: good acted on")
    for _ in range(TICKS - 1):
        await w.tick()

    # The controller kept cycling, and no cycle failed.
    assert w.controller.stats.cycles == TICKS
    assert w.controller.stats.cluster_state_errors == 0
    # No escalation on bad: its first step stayed its only one.
    steps = {int(d.extra.get("step", 1)) for d in w.decisions if d.target.get("node") == w.bad}
    assert steps <= {1}, f"bad escalated to step(s) {sorted(steps)}"
    assert first, "the first cycle decided nothing"
    if case.warns:
        named = [
            r.getMessage()
            for r in caplog.records
            if case.key in r.getMessage() and case.names in r.getMessage().lower()
        ]
        assert named, f"no warning names {case.names!r} and {case.key}"
        assert all(len(m) < 4096 for m in named), "a warning copied the value"
    case.after(w, value)
