"""Kubernetes names as the API server's own rules have them, and the ``Kube``
implementations that refuse a bad one before any request: ``ClientKube`` (with the
real client, counting what the fake API server receives) and ``DryRunKube`` (which
must not even record the write). The executor's refusal of a bad target, for every
action, is in tests/autoscaler/actions/test_target_names.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from autoscaler.kube import names
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.errors import Invalid, KubeError
from autoscaler.kube.names import InvalidName, name_problem, target_problems
from autoscaler.kube.protocol import CAPI_GROUP, CAPI_VERSION, MACHINE_DEPLOYMENTS
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node

pytestmark = pytest.mark.timeout(60)

VALID_SUBDOMAINS = ["n1", "gpu-node-01", "ip-10-0-0-1.ec2.internal", "0", "a" * 253]
INVALID_SUBDOMAINS = {
    "n1/status": "RFC 1123 subdomain",
    "../x": "RFC 1123 subdomain",
    "..": "RFC 1123 subdomain",
    ".": "RFC 1123 subdomain",
    "Node-1": "RFC 1123 subdomain",
    "n1%2Fstatus": "RFC 1123 subdomain",
    "-n1": "RFC 1123 subdomain",
    "n1-": "RFC 1123 subdomain",
    "n1..x": "RFC 1123 subdomain",
    "n_1": "RFC 1123 subdomain",
    "n1 ": "RFC 1123 subdomain",
    "": "is empty",
    "a" * 254: "254 characters long (at most 253)",
    "n" * 300: "300 characters long (at most 253)",
}


@pytest.mark.parametrize("value", VALID_SUBDOMAINS)
def test_valid_names_pass(value: str) -> None:
    for kind in ("node", "pod", "pool", "lease"):
        assert name_problem(kind, value) is None
        assert names.check(kind, value) == value


@pytest.mark.parametrize(("value", "why"), INVALID_SUBDOMAINS.items(), ids=repr)
def test_invalid_names_are_refused_with_the_reason(value: str, why: str) -> None:
    problem = name_problem("node", value)
    assert problem is not None
    assert problem.startswith("node name ") and "is not a valid Kubernetes name" in problem
    assert why in problem
    with pytest.raises(InvalidName, match="is not a valid Kubernetes name") as raised:
        names.check("pod", value)
    # The actions report any KubeError as a failed API call; it is never retried.
    assert isinstance(raised.value, Invalid) and raised.value.status == 0


def test_a_namespace_is_a_label() -> None:
    assert name_problem("namespace", "ml") is None
    assert name_problem("namespace", "a" * 63) is None
    problem = name_problem("namespace", "a" * 64)
    assert problem is not None and "at most 63" in problem
    problem = name_problem("namespace", "team.ml")  # a subdomain, not a label
    assert problem is not None and "RFC 1123 label" in problem
    assert name_problem("pod", "team.ml") is None


def test_a_long_name_is_shortened_in_the_message() -> None:
    problem = name_problem("node", "n" * 300)
    assert problem is not None and len(problem) < 200
    assert repr("n" * 60 + "...") in problem


def test_target_problems_check_every_api_name_and_leave_devices_alone() -> None:
    assert target_problems({"node": "n1", "device": "nvidia0/mig 1g"}) == []
    assert target_problems({"namespace": "ml", "pod": "train-0"}) == []
    assert target_problems({"pool": "pool-a"}) == []
    found = target_problems({"namespace": "ML", "pod": "a/b", "node": "n1"})
    assert [p.split(" ", 1)[0] for p in found] == ["namespace", "pod"]
    assert target_problems({"node": ""}) == []  # absent: the action says what it lacks


# -- ClientKube: nothing leaves for a bad name --------------------------------------

BAD = "n1/status"
NodeCall = Callable[[Any, str], Awaitable[Any]]
NS_CALLS: dict[str, Callable[[Any, str, str], Awaitable[Any]]] = {
    "get_pod": lambda k, ns, n: k.get_pod(ns, n),
    "patch_pod": lambda k, ns, n: k.patch_pod(ns, n, {"metadata": {"labels": {"a": "b"}}}),
    "delete_pod": lambda k, ns, n: k.delete_pod(ns, n, uid="u"),
    "evict_pod": lambda k, ns, n: k.evict_pod(ns, n),
    "get_job": lambda k, ns, n: k.get_job(ns, n),
    "patch_job": lambda k, ns, n: k.patch_job(ns, n, {"spec": {"suspend": True}}),
    "get_lease": lambda k, ns, n: k.get_lease(ns, n),
    "replace_lease": lambda k, ns, n: k.replace_lease(ns, n, {"spec": {}}),
    "get_custom": lambda k, ns, n: k.get_custom(
        CAPI_GROUP, CAPI_VERSION, ns, MACHINE_DEPLOYMENTS, n
    ),
    "patch_custom": lambda k, ns, n: k.patch_custom(
        CAPI_GROUP, CAPI_VERSION, ns, MACHINE_DEPLOYMENTS, n, {"metadata": {}}
    ),
    "get_scale": lambda k, ns, n: k.get_scale(CAPI_GROUP, CAPI_VERSION, ns, MACHINE_DEPLOYMENTS, n),
    "patch_scale": lambda k, ns, n: k.patch_scale(
        CAPI_GROUP, CAPI_VERSION, ns, MACHINE_DEPLOYMENTS, n, 3
    ),
}
NS_ONLY_CALLS: dict[str, Callable[[Any, str], Awaitable[Any]]] = {
    "list_pods": lambda k, ns: k.list_pods(namespace=ns),
    "create_pod": lambda k, ns: k.create_pod(ns, {"metadata": {"name": "p"}}),
    "create_event": lambda k, ns: k.create_event(ns, {"metadata": {"name": "e"}}),
    "create_lease": lambda k, ns: k.create_lease(ns, {"metadata": {"name": "l"}}),
    "list_custom": lambda k, ns: k.list_custom(CAPI_GROUP, CAPI_VERSION, ns, MACHINE_DEPLOYMENTS),
}
NODE_CALLS: dict[str, NodeCall] = {
    "get_node": lambda k, n: k.get_node(n),
    "patch_node": lambda k, n: k.patch_node(n, {"spec": {"unschedulable": True}}),
    "list_pods(node=)": lambda k, n: k.list_pods(node=n),
}


async def refused(call: Awaitable[Any]) -> str:
    with pytest.raises(InvalidName) as raised:
        await call
    assert isinstance(raised.value, KubeError)
    return str(raised.value)


async def test_the_client_sends_nothing_for_a_bad_name(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    for what, node_call in NODE_CALLS.items():
        assert "node name 'n1/status'" in await refused(node_call(kube, BAD)), what
        assert "node name ''" in await refused(node_call(kube, "")), what
    for what, call in NS_CALLS.items():
        assert "name 'n1/status'" in await refused(call(kube, "ml", BAD)), what
        assert "namespace name 'a.b'" in await refused(call(kube, "a.b", "ok")), what
    for what, ns_call in NS_ONLY_CALLS.items():
        assert "namespace name '../x'" in await refused(ns_call(kube, "../x")), what
    assert api.requests == [], [f"{r.method} {r.path}" for r in api.requests]
    assert sum(kube.request_counts.values()) == 0
    # The same client still reaches what has a valid name.
    assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
    assert len(api.requests) == 1


async def test_the_dry_run_records_no_write_for_a_bad_name(
    api: FakeApiServer, kube: ClientKube
) -> None:
    dry = DryRunKube(kube)
    await refused(dry.patch_node(BAD, {"spec": {"unschedulable": True}}))
    await refused(dry.evict_pod("ml", BAD))
    await refused(dry.delete_pod("ML", "p"))
    await refused(dry.patch_job("ml", "../x", {"spec": {"suspend": True}}))
    await refused(dry.create_event("../x", {"metadata": {"name": "e"}}))
    await refused(dry.get_node(BAD))
    assert dry.writes == []
    assert api.requests == []
