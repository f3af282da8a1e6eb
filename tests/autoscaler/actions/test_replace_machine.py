"""``replace_machine`` against the fake API server with the real client, and the
emulated Cluster API (``tests/support/fakes/capi.py``) bringing the new node.

One behaviour per test: remediate marks exactly one Machine and the MachineSet
brings a new node; delete deletes exactly one Machine with its uid as a
precondition; a replayed decision (before and after Cluster API acted) writes
nothing more; the Machine is found by nodeRef when the node has no annotation, and
anything but exactly one Machine is refused; the breaker counts the node while the
replacement is under way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from accel_common.names import (
    CAPI_DEPLOYMENT_LABEL,
    CAPI_MACHINE_ANNOTATION,
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    REMEDIATION_ANNOTATION,
    REPLACE_REQUEST_ANNOTATION,
)
from autoscaler.actions import ACTIONS, replace_machine
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import entries
from autoscaler.decision import Decision
from autoscaler.engine.breaker import UNHEALTHY_ACTIONS
from autoscaler.engine.restore import restore
from autoscaler.engine.state import EngineState
from autoscaler.kube.client import ClientKube
from autoscaler.pools.clusterapi import MAX_SIZE, MIN_SIZE, ClusterAPIProvider
from autoscaler.ruleset.model import Action, Limits, Rule, RuleSet
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import CAPI, ClusterAPI, machine_health_check, machine_set

NS = "capi"
T0 = 1_800_000_000.0
RULE = "fatal-device-fault"


def pool(
    api: FakeApiServer, name: str = "a100", replicas: int = 2, *, health_check: bool = True
) -> ClusterAPI:
    """A MachineDeployment and its MachineSet with ``replicas`` Machines and Nodes,
    and a MachineHealthCheck selecting its Machines."""
    api.add(
        {
            "apiVersion": CAPI,
            "kind": "MachineDeployment",
            "metadata": {
                "name": name,
                "namespace": NS,
                "annotations": {MIN_SIZE: "0", MAX_SIZE: "8"},
            },
            "spec": {"clusterName": "c1", "replicas": replicas},
        }
    )
    api.add(machine_set(f"{name}-ms", NS, name, replicas))
    if health_check:
        api.add(machine_health_check(f"{name}-mhc", NS, **{CAPI_DEPLOYMENT_LABEL: name}))
    capi = ClusterAPI(api)
    capi.reconcile()
    return capi


def context(kube: ClientKube) -> ActionContext:
    return ActionContext(
        kube=kube, replica="replica-a", clock=lambda: T0, pools=ClusterAPIProvider(kube, NS)
    )


def decision(node: str, mode: str = "remediate", **target: str) -> Decision:
    params, problems = replace_machine.validate({"mode": mode})
    assert problems == []
    return Decision(
        rule=RULE,
        kind="act",
        action="replace_machine",
        params=params,
        target={"node": node, **target},
        sample_labels=(("node", node),),
        sample_value=1.0,
        at=T0,
        reason="test",
    )


def machine_writes(api: FakeApiServer) -> list[tuple[str, str]]:
    return [
        (r.method, r.path.rsplit("/", 1)[-1])
        for r in api.requests
        if r.method in ("PATCH", "DELETE", "PUT", "POST") and "/machines" in r.path
    ]


def marked(api: FakeApiServer) -> list[str]:
    return [
        m["metadata"]["name"]
        for m in api.objects("machines")
        if CAPI_REMEDIATE_MACHINE_ANNOTATION in (m["metadata"].get("annotations") or {})
    ]


async def test_remediate_marks_exactly_one_machine_and_the_machineset_brings_a_new_node(
    api: FakeApiServer, kube: ClientKube
) -> None:
    capi = pool(api)
    (m0, n0), (m1, _) = capi.created
    ctx = context(kube)

    out = await replace_machine.execute(ctx, decision(n0))

    assert out.status == "done", out.message
    assert marked(api) == [m0]
    assert machine_writes(api) == [("PATCH", m0)]
    machine = api.get("machines", NS, m0)
    assert machine is not None
    request = json.loads(machine["metadata"]["annotations"][REPLACE_REQUEST_ANNOTATION])
    assert request["id"] == out.details["request"] and request["node"] == n0
    node = api.get("nodes", None, n0)
    assert node is not None
    entry = entries(node)[RULE]
    assert (entry.action, entry.phase) == ("replace_machine", "replaced")
    assert entry.params["machine"] == f"{NS}/{m0}"
    reasons = {e["reason"] for e in api.objects("events")}
    assert "MachineRemediationRequested" in reasons

    # Replayed before Cluster API acted (a restart, a re-run decision): nothing more.
    node_writes = len(api.requests_for("PATCH", rf"/nodes/{n0}$"))
    again = await replace_machine.execute(ctx, decision(n0))
    assert len(api.requests_for("PATCH", rf"/nodes/{n0}$")) == node_writes
    assert again.status == "done" and "already carries" in again.message, again.message
    assert "our request" in again.message
    assert machine_writes(api) == [("PATCH", m0)]

    # The MachineHealthCheck and the MachineSet: m0 and its node go, one new pair comes.
    capi.reconcile()
    names = sorted(m["metadata"]["name"] for m in api.objects("machines"))
    assert m0 not in names and m1 in names and len(names) == 2
    assert api.get("nodes", None, n0) is None
    new_machine, new_node = capi.created[-1]
    assert new_machine in names
    fresh = api.get("nodes", None, new_node)
    assert fresh is not None and fresh["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert fresh["metadata"]["annotations"][CAPI_MACHINE_ANNOTATION] == new_machine
    assert len(capi.created) == 3

    # Replayed once the node is gone: done, and still one replacement.
    late = await replace_machine.execute(ctx, decision(n0))
    assert late.status == "done" and "no longer exists" in late.message
    assert machine_writes(api) == [("PATCH", m0)]
    capi.reconcile()
    assert len(capi.created) == 3 and len(api.objects("machines")) == 2


async def test_delete_deletes_one_machine_with_its_uid_as_precondition_once(
    api: FakeApiServer, kube: ClientKube
) -> None:
    capi = pool(api, health_check=False)  # delete needs no MachineHealthCheck
    (m0, n0), _ = capi.created
    uid = api.get("machines", NS, m0)["metadata"]["uid"]  # type: ignore[index]
    ctx = context(kube)

    out = await replace_machine.execute(ctx, decision(n0, "delete"))

    assert out.status == "done", out.message
    assert machine_writes(api) == [("DELETE", m0)]
    (delete,) = api.requests_for("DELETE", r"/machines/")
    assert delete.body["preconditions"] == {"uid": uid}
    assert api.get("machines", NS, m0) is None

    # Replayed while the node is still there (Cluster API has not removed it yet):
    # the recorded Machine is gone, which is what was asked.
    node_writes = len(api.requests_for("PATCH", rf"/nodes/{n0}$"))
    again = await replace_machine.execute(ctx, decision(n0, "delete"))
    assert again.status == "done" and "is gone" in again.message, again.message
    assert len(api.requests_for("PATCH", rf"/nodes/{n0}$")) == node_writes
    assert machine_writes(api) == [("DELETE", m0)]

    capi.reconcile()
    assert api.get("nodes", None, n0) is None
    assert len(api.objects("machines")) == 2 and len(capi.created) == 3


async def test_a_device_target_finds_the_machine_by_node_ref(
    api: FakeApiServer, kube: ClientKube
) -> None:
    capi = pool(api)
    (m0, n0), _ = capi.created
    # A node without Cluster API's annotations (an older Cluster API, a hand-made one).
    node = api.get("nodes", None, n0)
    assert node is not None
    node["metadata"]["annotations"] = {}
    api.add(node)

    out = await replace_machine.execute(context(kube), decision(n0, device="nvidia3"))

    assert out.status == "done", out.message
    assert marked(api) == [m0]


@pytest.mark.parametrize("how", ["none", "two", "stale", "unowned"])
async def test_anything_but_exactly_one_machine_is_refused(
    api: FakeApiServer, kube: ClientKube, how: str
) -> None:
    capi = pool(api)
    (m0, n0), (m1, n1) = capi.created
    node = api.get("nodes", None, n0)
    assert node is not None
    if how == "stale":
        node["metadata"]["annotations"][CAPI_MACHINE_ANNOTATION] = m1
        expected = f"whose nodeRef is node {n1}: the annotation is stale"
    elif how == "unowned":
        lone = api.get("machines", NS, m0)
        assert lone is not None
        lone["metadata"]["labels"] = {}
        lone["metadata"]["ownerReferences"] = []
        api.add(lone)
        expected = f"Machine {NS}/{m0} has no owner"
    else:
        node["metadata"]["annotations"] = {}
        if how == "two":
            other = api.get("machines", NS, m1)
            assert other is not None
            other["status"]["nodeRef"]["name"] = n0
            api.add(other)
            expected = "2 Machines in namespace capi have it as nodeRef"
        else:
            api.remove("machines", NS, m0)
            expected = "0 Machines in namespace capi have it as nodeRef"
    api.add(node)

    out = await replace_machine.execute(context(kube), decision(n0))

    assert out.status == "failed"
    assert expected in out.message, out.message
    assert machine_writes(api) == [] and marked(api) == []
    (refused,) = [e for e in api.objects("events") if e["reason"] == "ReplaceRefused"]
    assert refused["type"] == "Warning"


def test_parameters() -> None:
    assert replace_machine.validate({}) == ({"mode": "remediate"}, [])
    params, problems = replace_machine.validate({"mode": "destroy", "when": 1})
    assert params == {"mode": "remediate"}
    assert {p.param for p in problems} == {"mode", "when"}
    assert any("must be remediate or delete" in p.message for p in problems)
    assert ACTIONS["replace_machine"] is replace_machine.SPEC
    assert replace_machine.SPEC.targets == ("node", "device")
    assert not replace_machine.SPEC.reversible


async def test_the_breaker_counts_the_node_while_it_is_being_replaced(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The node's remediation entry says replace_machine: the engine's memory, rebuilt
    from the nodes (a restart), counts that node towards maxUnhealthyNodes."""
    assert "replace_machine" in UNHEALTHY_ACTIONS
    capi = pool(api)
    (_, n0), (_, n1) = capi.created
    out = await replace_machine.execute(context(kube), decision(n0))
    assert out.status == "done"

    rule = Rule(
        name=RULE,
        expr="broken > 0",
        alertname=None,
        target="node",
        action=Action("replace_machine", {"mode": "remediate"}),
        for_=0.0,
        cooldown=3600.0,
        recover=None,
    )
    rs = RuleSet(evaluation_interval=15.0, limits=Limits(max_unhealthy_nodes=1), rules=(rule,))
    state = EngineState()
    found = restore(state, api.objects("nodes"), None, "accel-autoscaler", rs, T0 + 60)
    assert found.nodes == (n0,)
    assert n1 not in found.nodes
    node: dict[str, Any] | None = api.get("nodes", None, n0)
    assert node is not None and REMEDIATION_ANNOTATION in node["metadata"]["annotations"]


async def test_a_replay_after_a_failed_mark_marks_once_and_keeps_the_request(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The entry is written before the Machine is touched: a run that dies (here: is
    refused) after it resumes with the same request id and marks the Machine once."""
    capi = pool(api)
    (m0, n0), _ = capi.created
    ctx = context(kube)
    api.faults.fail(1, status=403, method="PATCH", path_regex=r"/machines/")

    failed = await replace_machine.execute(ctx, decision(n0))
    assert failed.status == "unknown" and marked(api) == []
    node = api.get("nodes", None, n0)
    assert node is not None
    entry = entries(node)[RULE]
    assert entry.phase == "replacing" and entry.params["machine"] == f"{NS}/{m0}"

    done = await replace_machine.execute(ctx, decision(n0))
    assert done.status == "done", done.message
    assert done.details["request"] == entry.params["request"]
    assert marked(api) == [m0]
    assert [r.status for r in api.requests_for("PATCH", r"/machines/")] == [403, 200]


async def test_remediate_without_a_machine_health_check_is_refused(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """Nobody reads the annotation without a MachineHealthCheck that selects the
    Machine: the action says so instead of marking a Machine nobody replaces."""
    capi = pool(api, health_check=False)
    # One that selects another pool's Machines does not count.
    api.add(machine_health_check("other", NS, **{CAPI_DEPLOYMENT_LABEL: "h100"}))
    (m0, n0), _ = capi.created

    out = await replace_machine.execute(context(kube), decision(n0))

    assert out.status == "failed"
    assert f"no MachineHealthCheck in namespace {NS} selects Machine {NS}/{m0}" in out.message
    assert "or use mode: delete" in out.message
    assert machine_writes(api) == [] and marked(api) == []
    capi.reconcile()
    assert len(capi.created) == 2  # and Cluster API replaced nothing
