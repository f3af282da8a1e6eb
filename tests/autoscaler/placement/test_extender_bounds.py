"""The scheduler extender against bodies built to break it: JSON nested deeper
than Python's parser recurses, bodies past ``MAX_BODY``, text that is not UTF-8,
numbers past 64 bits, and Pods or Nodes whose fields have the wrong shape where
the scorer reads them. Each gets a 400 that says what is wrong (413 for size),
never a 500 or a logged traceback, and the extender keeps answering."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from autoscaler.placement.extender import MAX_BODY, Extender
from tests.autoscaler.placement.test_extender import (
    args_names,
    args_nodes,
    cache_with,
    client_for,
    fleet,
    k8s_pod,
)
from tests.autoscaler.placement.test_placement import nvlink_node

__all__ = ["client_for"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(60)


def pod_with(path: str, value: Any) -> dict[str, Any]:
    """k8s_pod(1) with the field at a dotted ``path`` set to ``value``."""
    pod = k8s_pod(1)
    *parents, last = path.split(".")
    here: Any = pod
    for key in parents:
        here = here[int(key)] if isinstance(here, list) else here[key]
    here[last] = value
    return pod


def node_obj(name: str = "a", **fields: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": name, "labels": {}}, "spec": {}}
    for path, value in fields.items():
        node[path.split("__")[0]] = (
            value if "__" not in path else {**node[path.split("__")[0]], path.split("__")[1]: value}
        )
    return node


RAW_CASES: list[tuple[bytes, int, str]] = [
    (b"[" * 100_000, 400, "nested deeper than 64"),
    (b'{"Pod":' * 70 + b"{}" + b"}" * 70, 400, "nested 71 deep"),
    (b'{"Pod": {}, "NodeNames": ["\xff"]}', 400, "not UTF-8"),
    (b'{"Pod": {"spec": {"priority": ' + b"9" * 5_000 + b"}}}", 400, "out of range"),
    (b'{"Pod": {}, "NodeNames": [Infinity]}', 400, "Infinity is not JSON"),
]

SHAPE_CASES: list[tuple[dict[str, Any], str]] = [
    (args_names(pod_with("metadata", []), ["a"]), "Pod.metadata must be an object"),
    (args_names(pod_with("metadata.name", 5), ["a"]), "Pod.metadata.name must be a string"),
    (
        args_names(pod_with("metadata.annotations", {"x": 1}), ["a"]),
        "Pod.metadata.annotations must map strings to strings",
    ),
    (args_names(pod_with("metadata.labels", "x"), ["a"]), "Pod.metadata.labels must be an object"),
    (args_names(pod_with("spec", "x"), ["a"]), "Pod.spec must be an object"),
    (args_names(pod_with("spec.containers", {}), ["a"]), "containers must be a list of objects"),
    (args_names(pod_with("spec.containers", [1]), ["a"]), "containers must be a list of objects"),
    (
        args_names(pod_with("spec.containers.0.resources", []), ["a"]),
        "containers[0].resources must be an object",
    ),
    (
        args_names(pod_with("spec.containers.0.resources.limits", "8"), ["a"]),
        "containers[0].resources.limits must be an object",
    ),
    (
        args_nodes(k8s_pod(1), [node_obj(metadata=None), node_obj(metadata=[1])]),
        "Nodes.items[1].metadata must be an object",
    ),
    # fuzz finding F5: a falsy name that is not a string.
    (
        args_nodes(k8s_pod(1), [node_obj(metadata={"name": []})]),
        "Nodes.items[0].metadata.name must be a string",
    ),
    (args_names(pod_with("metadata.name", {}), ["a"]), "Pod.metadata.name must be a string"),
    (
        args_names(pod_with("spec.containers.0.name", 0), ["a"]),
        "containers[0].name must be a string",
    ),
    (
        args_nodes(k8s_pod(1), [node_obj(spec__taints={"key": "x"})]),
        "Nodes.items[0].spec.taints must be a list of objects",
    ),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_hostile_bodies_get_a_400_that_says_why(
    client_for: Any, caplog: pytest.LogCaptureFixture, verb: str
) -> None:
    client = await client_for(Extender(cache_with(fleet(nvlink_node("a")))))
    cases = [(raw, status, message) for raw, status, message in RAW_CASES] + [
        (json.dumps(body).encode(), 400, message) for body, message in SHAPE_CASES
    ]
    with caplog.at_level(logging.WARNING):
        for raw, status, message in cases:
            resp = await client.post(f"/{verb}", data=raw)
            assert resp.status == status, (raw[:80], await resp.text())
            assert message in (await resp.json())["Error"], raw[:80]
        resp = await client.post(f"/{verb}", data=b"x" * (MAX_BODY + 1))
        assert resp.status == 413
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    ok = await client.post("/filter", json=args_names(k8s_pod(1), ["a"]))
    assert ok.status == 200
    assert (await ok.json())["NodeNames"] == ["a"]


async def test_null_fields_read_as_absent(client_for: Any) -> None:
    """Go writes a nil map or slice as null; that is no shape error."""
    client = await client_for(Extender(cache_with(fleet(nvlink_node("a")))))
    pod = copy.deepcopy(k8s_pod(1))
    pod["metadata"]["annotations"] = None
    pod["spec"]["containers"][0]["resources"]["requests"] = None
    nodes = [{"metadata": {"name": "a", "labels": None}, "spec": {"taints": None}}]
    resp = await client.post("/filter", json=args_nodes(pod, nodes))
    assert resp.status == 200
    body = await resp.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["a"]
    resp = await client.post("/filter", json=args_nodes(pod, [{"metadata": None}]))
    assert resp.status == 200


async def test_a_body_that_does_not_decode_gets_a_400(client_for: Any) -> None:
    client = await client_for(Extender(cache_with(fleet(nvlink_node("a")))))
    resp = await client.post(
        "/filter", data=b"not compressed", headers={"Content-Encoding": "gzip"}
    )
    assert resp.status == 400
    assert "cannot read the body" in (await resp.json())["Error"]
