"""The gang series of the cluster state (``accel_gang_info``, the checkpoint-pause
series), read by ``collect`` from the fake API server with the real client: which
pods are members, the longest declared pause per gang, a bad annotation logged once
per pod and value, and no API call per pod beyond the lists."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from accel_common.logs import Once
from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    GANG_LABEL,
    JOBSET_NAME_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
)
from autoscaler import clusterstate as cs
from autoscaler.kube.client import ClientKube
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.rhythm import Rhythm, learn
from autoscaler.sources.store import StoreSource
from autoscaler.types import Vector
from tests.autoscaler.controller.test_clusterstate import (
    T0,
    as_dict,
    iso,
    pick,
    rule_expr,
    running,
)
from tests.support.fakes.apiserver import FakeApiServer


def member(name: str, node: str, *, pause: str | None = None, **kw: Any) -> dict[str, Any]:
    p = running(name, node, started=T0 - 3600, **kw)
    if pause is not None:
        p["metadata"]["annotations"] = {CHECKPOINT_PAUSE_ANNOTATION: pause}
    return p


def gang_cluster(api: FakeApiServer) -> None:
    # A JobSet of two pods (child Jobs own them), one declaring a longer pause, and
    # a shorter checkpoint interval; their last checkpoints a second apart.
    for i, pause in enumerate(("2m", "3m")):
        p = member(
            f"llm-w-{i}",
            f"n{i}",
            gpus=8,
            pause=pause,
            owner=("Job", f"llm-w-{i}"),
            labels={JOBSET_NAME_LABEL: "llm"},
        )
        p["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] = ("30m", "20m")[i]
        p["metadata"]["annotations"][LAST_CHECKPOINT_ANNOTATION] = iso(T0 - 600 + i)
        api.add(p)
    # A PyTorchJob's pods, owned by it; no pause declared.
    for i in range(2):
        p = member(f"bert-worker-{i}", f"n{2 + i}", gpus=8, owner=None)
        p["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": "bert",
                "uid": "uid-bert",
                "controller": True,
            }
        ]
        api.add(p)
    # Pods grouped by our label, one with a pause that is no duration.
    api.add(member("lab-0", "n4", pause="soon", owner=None, labels={GANG_LABEL: "lab"}))
    api.add(member("lab-1", "n4", pause="soon", owner=None, labels={GANG_LABEL: "lab"}))
    # A single-pod job with a pause, one without, and a gang pod that uses no device.
    solo = member("solo", "n5", pause="1m", owner=("Job", "solo"))
    solo["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] = "1h"
    solo["metadata"]["annotations"][LAST_CHECKPOINT_ANNOTATION] = "2026-01-02T03:04:05"
    api.add(solo)
    api.add(member("plain", "n5", owner=("Job", "plain")))
    api.add(member("launcher", "n5", gpus=0, owner=None, labels={GANG_LABEL: "lab"}))


async def test_gang_members_and_declared_pauses(
    api: FakeApiServer,
    kube: ClientKube,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What earlier tests in this process logged must not hide this test's warnings.
    monkeypatch.setattr(cs, "_REPORTED", Once())
    gang_cluster(api)
    with caplog.at_level(logging.WARNING, logger="autoscaler.clusterstate"):
        rows = await cs.collect(kube, None, T0)
        await cs.collect(kube, None, T0 + 15)
    as_dict(rows)  # labels in catalogue order, no duplicates
    assert pick(rows, "accel_gang_info") == {
        ("ml", "llm-w-0", "n0", "llm", "JobSet"): 1.0,
        ("ml", "llm-w-1", "n1", "llm", "JobSet"): 1.0,
        ("ml", "bert-worker-0", "n2", "bert", "PyTorchJob"): 1.0,
        ("ml", "bert-worker-1", "n3", "bert", "PyTorchJob"): 1.0,
        ("ml", "lab-0", "n4", "lab", "label"): 1.0,
        ("ml", "lab-1", "n4", "lab", "label"): 1.0,
    }
    # The longest over the members; none for a gang that declares nothing.
    assert pick(rows, "accel_gang_checkpoint_pause_seconds") == {("ml", "llm"): 180.0}
    assert pick(rows, "accel_job_checkpoint_pause_seconds") == {
        ("ml", "llm-w-0"): 120.0,
        ("ml", "llm-w-1"): 180.0,
        ("ml", "solo"): 60.0,
    }
    # The shortest interval and the latest checkpoint over the members.
    assert pick(rows, "accel_gang_checkpoint_interval_seconds") == {("ml", "llm"): 1200.0}
    assert pick(rows, "accel_gang_last_checkpoint_timestamp_seconds") == {("ml", "llm"): T0 - 599}
    assert pick(rows, "accel_job_checkpoint_interval_seconds") == {
        ("ml", "llm-w-0"): 1800.0,
        ("ml", "llm-w-1"): 1200.0,
        ("ml", "solo"): 3600.0,
    }
    # solo's stamp has no time zone: not declared (and logged).
    assert pick(rows, "accel_job_last_checkpoint_timestamp_seconds") == {
        ("ml", "llm-w-0"): T0 - 600,
        ("ml", "llm-w-1"): T0 - 599,
    }
    # Once per pod and value, however many cycles see it.
    bad = [r for r in caplog.records if CHECKPOINT_PAUSE_ANNOTATION in r.getMessage()]
    assert sorted(r.getMessage().split(":")[0] for r in bad) == ["pod ml/lab-0", "pod ml/lab-1"]
    assert "invalid duration 'soon'" in bad[0].getMessage()
    (stamp,) = [r for r in caplog.records if LAST_CHECKPOINT_ANNOTATION in r.getMessage()]
    assert stamp.getMessage().startswith("pod ml/solo: annotation")
    assert "no time zone in '2026-01-02T03:04:05' (end it with Z or +00:00)" in stamp.getMessage()
    # Gangs are recognised from the pod list alone: no read per pod or per owner.
    assert not api.requests_for("GET", r"/pytorchjobs|/jobsets|/pods/")


def test_gang_series_render_as_exposition() -> None:
    rows: list[cs.Row] = [
        (
            cs.GANG_INFO,
            {"namespace": "ml", "pod": "p", "node": "n", "gang": "g", "kind": "JobSet"},
            1,
        ),
        (cs.GANG_CHECKPOINT_PAUSE, {"namespace": "ml", "gang": "g"}, 120),
        (cs.JOB_CHECKPOINT_PAUSE, {"namespace": "ml", "pod": "p"}, 120),
    ]
    text = cs.render(rows)
    assert 'accel_gang_info{namespace="ml",pod="p",node="n",gang="g",kind="JobSet"} 1' in text
    assert 'accel_gang_checkpoint_pause_seconds{namespace="ml",gang="g"} 120' in text
    assert 'accel_job_checkpoint_pause_seconds{namespace="ml",pod="p"} 120' in text


async def test_the_stall_rules_read_what_collect_exports(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The shipped stall rules over the series ``collect`` exports (and the
    exporter's): a gang idle for its declared pause is left alone, one idle for
    longer is named once, by one member; a pod that declares a pause too."""
    gang_cluster(api)
    rows = await cs.collect(kube, None, T0)
    store = SeriesStore(retention=3600)
    # The rhythm learner runs in every evaluation cycle (engine/cycle.py); the
    # rules read its series (the last busy time, the dip's start), so it runs here
    # at every scrape, as a 15 s evaluation interval would run it.
    source, learner = StoreSource(store), Rhythm()
    devices = {"llm-w-0": "n0", "llm-w-1": "n1", "solo": "n5"}
    for step in range(0, 81):  # 20 minutes of 15 s scrapes
        t = T0 + step * 15
        cs.ingest(store, rows, t)
        for pod_name, node_name in devices.items():
            dev = {"node": node_name, "device": "nvidia0"}
            # Busy to 10m, idle from 10m15s (a stall, or a checkpoint while it lasts).
            util = 0.8 if step <= 40 else 0.0
            store.add({"__name__": "accel_utilization_ratio", **dev, "uuid": node_name}, t, util)
            store.add(
                {"__name__": "accel_device_pod_info", "namespace": "ml", "pod": pod_name, **dev},
                t,
                1.0,
            )
        await learn(learner, source, t)
    ev = Evaluator(store)

    def fired(rule: str, t: float) -> set[str]:
        result = ev.instant(rule_expr(rule), t)
        assert isinstance(result, Vector)
        return {s.get("pod") for s in result.samples}

    # llm declares 3m (its longest member), solo 1m: both within the 3m window...
    assert fired("stalled-gang", T0 + 12 * 60) == set()
    assert fired("stalled-pod", T0 + 12 * 60) == set()
    # ...and both are stalled once idle for the whole of it.
    # 3m is above 2m30s: the 10 minutes, a dip the learner has seen (its whole
    # [1m] idle from 11m15s) for 9 of them.
    assert fired("stalled-gang", T0 + 20 * 60) == set()
    assert fired("stalled-gang", T0 + 20 * 60 + 15) <= {"llm-w-0", "llm-w-1"}
    assert len(fired("stalled-gang", T0 + 20 * 60 + 15)) == 1
    assert fired("stalled-pod", T0 + 14 * 60) == {"solo"}
