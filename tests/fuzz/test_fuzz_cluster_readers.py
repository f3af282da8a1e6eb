"""The controller's readers of values on the cluster, fuzzed with hypothesis (issue
27): remediation entries, bare-pod records, gang-restart and requeue records, the
agent's partition state, a node's Machine annotations, the rebalance stamp, pod
timeouts and checkpoint declarations, pool capacity and bounds, JobSet restart
counts and gang membership, and ``accel_common.clusterjson`` under all of them.

Structure-aware cases start from valid records (what the controller itself writes)
with one to three places replaced by a value of any type or by raw JSON text no
encoder writes (nesting thousands deep, ``NaN``, ``1e999``, a 5,000-digit integer,
a 300 KiB string, a lone surrogate), and the text is sometimes cut short. Each
reader must answer with a valid result or its own documented error naming the
object and key, within the harness's time and memory bounds; a valid result holds
no NaN or infinity.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from accel_common import clusterjson
from accel_common.gangs import gang_of
from accel_common.names import (
    BARE_PODS_ANNOTATION,
    CAPI_CAPACITY_DRA_DRIVER,
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
    CAPI_CAPACITY_TAINTS,
    CAPI_MACHINE_ANNOTATION,
    CAPI_MAX_SIZE_ANNOTATION,
    CAPI_MIN_SIZE_ANNOTATION,
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    GANG_RESTARTS_ANNOTATION,
    JOBSET_NAME_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
    PARTITION_STATE_ANNOTATION,
    REBALANCED_ANNOTATION,
    REMEDIATION_ANNOTATION,
    REQUEUES_ANNOTATION,
    TIMEOUT_ANNOTATION,
)
from autoscaler import clusterstate
from autoscaler.actions import (
    rebalance,
    repartition,
    replace_machine,
    requeue_job,
)
from autoscaler.actions.ops import barepods, gangs, ownership
from autoscaler.actions.ops.unknown import UnknownFact
from autoscaler.pools import capacity, clusterapi
from tests.fuzz.harness import budget, check, nonfinite
from tests.fuzz.strategies import wrong_values

NOW = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"

# Raw JSON text for one value: what broke ``json.loads`` readers, or what no
# encoder writes.
HOSTILE_JSON: tuple[str, ...] = (
    "[" * 5000 + "]" * 5000,
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "9" * 5000,
    "-" + "9" * 400,
    "1.5",
    "-1",
    "0",
    "true",
    "null",
    "[]",
    "{}",
    '""',
    '"' + "x" * 300 * 1024 + '"',
    '"\\ud800"',
    '"\\u0000"',
    '"9999-12-31T23:59:59Z"',
    '"0001-01-01T00:00:00Z"',
)
_MARK = "zzrawzz"

ENTRY: dict[str, Any] = {
    "action": "migrate_jobs",
    "phase": "migrating",
    "started": STAMP,
    "controller": "accel-autoscaler",
    "replica": "accel-autoscaler-0",
    "target": {"node": "n1", "device": "nvidia0"},
    "params": {"drainTimeout": 600.0, "taint": "accel-fleet.io/faulty=true:NoSchedule"},
    "cordoned": True,
    "taint": "accel-fleet.io/faulty=true:NoSchedule",
}
SEEDS: dict[str, list[Any]] = {
    REMEDIATION_ANNOTATION: [{"fatal-device-fault": ENTRY, "ecc": {**ENTRY, "cordoned": False}}],
    BARE_PODS_ANNOTATION: [
        {
            "ml/p": {
                "uid": "u1",
                "rule": "fatal",
                "replacement": "p-mabc123",
                "pod": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "ml", "labels": {"a": "b"}},
                    "spec": {"terminationGracePeriodSeconds": 30, "containers": []},
                },
            }
        }
    ],
    GANG_RESTARTS_ANNOTATION: [
        {"count": 2, "last": STAMP, "rule": "fatal", "uids": ["u1", "u2"], "version": 3}
    ],
    REQUEUES_ANNOTATION: [{"count": 1, "last": STAMP, "pods": ["u1"]}],
    PARTITION_STATE_ANNOTATION: [
        {
            "layout": "all-1g",
            "state": "applied",
            "message": "",
            "at": STAMP,
            "devices": {"nvidia0": ["1g.10gb"] * 7},
        }
    ],
}


def _places(tree: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.extend(_places(v, (*at, k)))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out.extend(_places(v, (*at, i)))
    return out


@st.composite
def record_text(draw: st.DrawFn, key: str) -> str:
    """A record of ``key`` as JSON text, damaged in one to three places."""
    tree: Any = json.loads(json.dumps(draw(st.sampled_from(SEEDS[key]))))
    raws: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.sampled_from(_places(tree)))
        if draw(st.booleans()):
            new: Any = f"{_MARK}{len(raws)}"
            raws.append(draw(st.sampled_from(HOSTILE_JSON)))
        else:
            new = draw(wrong_values)
        if not place:
            tree = new
            continue
        parent = tree
        for p in place[:-1]:
            parent = parent[p]
        parent[place[-1]] = new
    text = json.dumps(tree)
    for i, raw in enumerate(raws):
        text = text.replace(f'"{_MARK}{i}"', raw)
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def any_text(key: str) -> st.SearchStrategy[Any]:
    """The annotation's value: a damaged record, raw hostile JSON, or anything (the
    client hands over whatever the object holds)."""
    return st.one_of(record_text(key), st.sampled_from(HOSTILE_JSON), wrong_values)


def _on(kind: str, key: str, value: Any, **extra: Any) -> dict[str, Any]:
    meta = {"name": "x1", "namespace": "ml", "annotations": {key: value}}
    return {"kind": kind, "metadata": meta, **extra}


def _no_nonfinite(result: Any) -> None:
    assert not nonfinite(result), nonfinite(result)


@budget(150)
@given(value=st.one_of(record_text(REMEDIATION_ANNOTATION), st.sampled_from(HOSTILE_JSON)))
def test_clusterjson_loads_object(value: str) -> None:
    def read() -> dict[str, Any]:
        out = clusterjson.loads_object(value, "node x1 annotation k")
        _no_nonfinite(out)
        return out

    check("clusterjson loads_object", read, (clusterjson.ClusterValueError,), names="node x1")


@budget(150)
@given(value=any_text(REMEDIATION_ANNOTATION))
def test_remediation_entries(value: Any) -> None:
    node = _on("Node", REMEDIATION_ANNOTATION, value)

    def read() -> dict[str, ownership.Entry]:
        found, problem = ownership.read_entries(node)
        assert problem is None or REMEDIATION_ANNOTATION in str(problem)
        for e in found.values():
            assert isinstance(e.cordoned, bool) and isinstance(e.started, str)
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in e.target.items())
            ownership.parse_iso(e.started)  # what restore and the drain deadline read
            json.dumps(e.as_json())  # what update_node writes back
        return found

    check("ownership read_entries", read, ())


@budget(100)
@given(value=any_text(BARE_PODS_ANNOTATION))
def test_bare_pod_records(value: Any) -> None:
    node = _on("Node", BARE_PODS_ANNOTATION, value)

    def read() -> dict[str, barepods.Record]:
        found = barepods.records(node)
        for key, record in found.items():
            barepods.replacement(record, key, "n1")  # what a replacement is made from
            _no_nonfinite(record.as_json())
        return found

    check("barepods records", read, (clusterjson.ClusterValueError,), names=BARE_PODS_ANNOTATION)


@budget(150)
@given(value=any_text(GANG_RESTARTS_ANNOTATION))
def test_gang_restart_record(value: Any) -> None:
    holder = _on("JobSet", GANG_RESTARTS_ANNOTATION, value)

    def read() -> dict[str, Any]:
        rec = gangs.record(holder)
        assert isinstance(rec.get("count", 0), int) and not isinstance(rec.get("count"), bool)
        assert all(isinstance(u, str) for u in rec.get("uids", []))
        return rec

    check("gangs record", read, (UnknownFact,), names=GANG_RESTARTS_ANNOTATION)


@budget(100)
@given(value=any_text(REQUEUES_ANNOTATION))
def test_requeue_record(value: Any) -> None:
    job = _on("Job", REQUEUES_ANNOTATION, value)

    def read() -> dict[str, Any]:
        rec = requeue_job._record(job)
        assert isinstance(rec.get("count", 0), int)
        if "last" in rec:
            ownership.parse_iso(rec["last"])
        return rec

    check("requeue_job record", read, (UnknownFact,), names=REQUEUES_ANNOTATION)


@budget(100)
@given(value=any_text(PARTITION_STATE_ANNOTATION), layout=st.sampled_from(["all-1g", ""]))
def test_partition_state(value: Any, layout: str) -> None:
    node = _on("Node", PARTITION_STATE_ANNOTATION, value)

    def read() -> bool:
        repartition.failed_since(node, layout, NOW)
        return repartition.applied(node, layout)

    check("repartition agent_state", read, (UnknownFact,), names=PARTITION_STATE_ANNOTATION)


_strings = st.one_of(
    st.sampled_from(HOSTILE_JSON),
    st.text(max_size=40),
    st.sampled_from(["n1", "machine-1", "1e999", "NaN", "-5", "8", "2h", "x" * 300, STAMP]),
    wrong_values,
)


@budget(150)
@given(machine=_strings, namespace=_strings)
def test_machine_annotations(machine: Any, namespace: Any) -> None:
    node = _on("Node", CAPI_MACHINE_ANNOTATION, machine)
    node["metadata"]["annotations"]["cluster.x-k8s.io/cluster-namespace"] = namespace

    def read() -> str:
        return replace_machine._named(node, CAPI_MACHINE_ANNOTATION)

    check("replace_machine machine name", read, (UnknownFact,), names=CAPI_MACHINE_ANNOTATION)


@budget(100)
@given(stamp=_strings)
def test_rebalance_stamp(stamp: Any) -> None:
    node = _on("Node", REBALANCED_ANNOTATION, stamp)
    check("rebalance cooling", lambda: rebalance._cooling(node, NOW, 600.0), ())


@budget(200)
@given(
    key=st.sampled_from(
        [
            TIMEOUT_ANNOTATION,
            CHECKPOINT_PAUSE_ANNOTATION,
            CHECKPOINT_INTERVAL_ANNOTATION,
            LAST_CHECKPOINT_ANNOTATION,
        ]
    ),
    value=_strings,
)
def test_pod_declarations(key: str, value: Any) -> None:
    pod = _on("Pod", key, value)

    def read() -> float | None:
        if key == TIMEOUT_ANNOTATION:
            out = clusterstate._annotated_timeout(pod)
        else:
            out = clusterstate.checkpoint_declaration(pod, key)
        assert out is None or (isinstance(out, float) and out >= 0), out
        _no_nonfinite(out)
        return out

    check("clusterstate pod declarations", read, ())


_CAPACITY_KEYS = (
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_DRA_DRIVER,
    CAPI_CAPACITY_LABELS,
    CAPI_CAPACITY_TAINTS,
    CAPI_MIN_SIZE_ANNOTATION,
    CAPI_MAX_SIZE_ANNOTATION,
)


@budget(200)
@given(values=st.dictionaries(st.sampled_from(_CAPACITY_KEYS), _strings, max_size=4))
def test_pool_capacity_and_bounds(values: dict[str, Any]) -> None:
    md = _on(
        "MachineDeployment",
        CAPI_CAPACITY_GPU_COUNT,
        "4",
        spec={"replicas": 0},
    )
    md["metadata"]["annotations"].update(
        {CAPI_MIN_SIZE_ANNOTATION: "0", CAPI_MAX_SIZE_ANNOTATION: "4", **values}
    )

    def read() -> Any:
        bounds = clusterapi.read_bounds(md)
        if isinstance(bounds, str):
            assert len(bounds) < 2000, "a refusal copied the value"
        else:
            assert 0 <= bounds.min_size <= bounds.max_size <= clusterapi.MAX_POOL_SIZE
        shape = capacity.read_shape(md)
        if shape is not None:
            assert all(0 < n <= capacity.MAX_DEVICES for n in shape.devices.values())
        return shape

    check("pool capacity and bounds", read, (ValueError,), names="MachineDeployment ml/x1")


@budget(200)
@given(spec=wrong_values, status=wrong_values, damaged=st.booleans())
def test_jobset_restarts_left(spec: Any, status: Any, damaged: bool) -> None:
    jobset: dict[str, Any] = {
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"failurePolicy": {"maxRestarts": spec, "rules": []}},
        "status": {"restarts": status},
    }
    if damaged:
        jobset["spec"] = spec
        jobset["status"] = status

    def read() -> int:
        left = gangs.restarts_left(jobset)
        assert isinstance(left, int) and left >= 0
        return left

    check("gangs restarts_left", read, ())


@budget(200)
@given(meta=wrong_values, labels=wrong_values, refs=wrong_values)
def test_gang_of(meta: Any, labels: Any, refs: Any) -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "labels": {JOBSET_NAME_LABEL: labels} if isinstance(labels, str) else labels,
            "ownerReferences": refs,
        }
    }
    if isinstance(meta, dict):
        pod["metadata"].update(meta)

    def read() -> Any:
        ref = gang_of(pod)
        assert ref is None or (0 < len(ref.name) <= 253 and len(ref.namespace) <= 253)
        return ref

    check("gang_of", read, ())
