"""accel_common.dra: the ResourceClaim/ResourceSlice readers shared by the controller,
the simulator and the exporter. Pinned on objects in the real resource.k8s.io/v1
shapes, then fuzzed: any JSON value, and real objects with any field replaced by
anything, give an answer (never an exception) within the API server's bounds."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from accel_common import dra
from accel_common.names import DRA_AMD_GPU, DRA_NVIDIA_GPU, DRA_NVIDIA_MIG_CLASS, DRA_VENDORS


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "shared", "resourceClaimName": "shared-gpus"},
            ]
        },
        "status": {
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-0-gpu-x7k2p"}]
        },
    }


def _claim(name: str, devices: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                ]
            }
        },
    }
    if devices is not None:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": d, "pool": p, "device": n}
                        for d, p, n in devices
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "u1"}],
        }
    return claim


def _template(cls: str, count: int | None = None, mode: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    return {
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def _slice(
    node: str, pool: str, gen: int, devices: list[dict[str, Any]], driver: str = DRA_NVIDIA_GPU
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{driver}-{gen}"},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": gen, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


def test_claim_names_from_spec_and_status() -> None:
    pod = _pod()
    assert dra.pod_claim_names(pod) == ["train-0-gpu-x7k2p", "shared-gpus"]
    refs = dra.pod_claims(pod)
    assert refs[0] == dra.ClaimRef("gpu", "train-0-gpu-x7k2p", "one-gpu")
    assert refs[1] == dra.ClaimRef("shared", "shared-gpus", "")
    del pod["status"]
    assert dra.pod_claims(pod)[0].claim == ""
    assert dra.pod_claim_names(pod) == ["shared-gpus"]
    assert dra.has_claims(pod)
    assert not dra.has_claims({"spec": {"containers": []}})


def test_claim_devices_and_vendor() -> None:
    claim = _claim("c", [(DRA_NVIDIA_GPU, "node-a", "gpu-0"), ("dra.net", "node-a", "eth1")])
    devs = dra.claim_devices(claim)
    assert [(d.driver, d.pool, d.device, d.request) for d in devs] == [
        (DRA_NVIDIA_GPU, "node-a", "gpu-0", "gpus"),
        ("dra.net", "node-a", "eth1", "gpus"),
    ]
    assert [d.vendor for d in devs] == ["nvidia", None]
    assert dra.allocated_requests(claim) == {"nvidia": 1}
    assert dra.claim_requests(claim) == {"nvidia": 1}
    assert dra.claim_devices(_claim("c")) == []
    assert dra.claim_requests(_claim("c")) == {"nvidia": 2}


def test_driver_vendors() -> None:
    assert dra.driver_vendor(DRA_NVIDIA_GPU) == "nvidia"
    assert dra.driver_vendor(DRA_NVIDIA_MIG_CLASS) == "nvidia"
    assert dra.driver_vendor(DRA_AMD_GPU) == "amd"
    assert dra.driver_vendor("gpu.intel.com") == "oneapi"
    assert dra.driver_vendor("gaudi.intel.com") == "gaudi"
    assert dra.driver_vendor("tpu.google.com") == "tpu"
    assert dra.driver_vendor("dra.net") is None


def test_class_vendors_by_name_and_cel() -> None:
    classes: list[dict[str, Any]] = [
        {"metadata": {"name": "gpu.nvidia.com"}},
        {
            "metadata": {"name": "big-amd"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]},
        },
        {
            "metadata": {"name": "any"},
            "spec": {
                "selectors": [
                    {"cel": {"expression": 'device.driver == "gpu.amd.com"'}},
                    {"cel": {"expression": '"gpu.nvidia.com" == device.driver'}},
                ]
            },
        },
        {"metadata": {"name": "nic"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
    ]
    assert dra.class_vendors(classes) == {"gpu.nvidia.com": "nvidia", "big-amd": "amd"}


def test_spec_requests_modes() -> None:
    assert dra._template_requests(_template("gpu.nvidia.com"), None) == {"nvidia": 1}
    assert dra._template_requests(_template("gpu.nvidia.com", 4), None) == {"nvidia": 4}
    assert dra._template_requests(_template("gpu.nvidia.com", 4, "All"), None) == {"nvidia": 1}
    assert dra._template_requests(_template("big-amd", 2), {"big-amd": "amd"}) == {"amd": 2}
    assert dra._template_requests(_template("nic", 2), None) == {}
    first = {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "gpu.amd.com", "count": 2},
                        {"name": "small", "deviceClassName": "mig.nvidia.com"},
                    ],
                }
            ]
        }
    }
    assert dra.spec_requests(first) == {"amd": 2}


def test_pod_requests_allocated_template_and_missing() -> None:
    pod = _pod()
    claims = {
        "train-0-gpu-x7k2p": _claim("train-0-gpu-x7k2p", [(DRA_NVIDIA_GPU, "n", "gpu-1")]),
        "shared-gpus": _claim("shared-gpus"),
    }
    # allocated: 1 device; unallocated claim asks for 2.
    assert dra.pod_requests(pod, claims) == {"nvidia": 3}
    # The generated claim not read yet: its template counts.
    del claims["train-0-gpu-x7k2p"]
    assert dra.pod_requests(pod, claims, {"one-gpu": _template("gpu.amd.com", 3)}) == {
        "nvidia": 2,
        "amd": 3,
    }
    # Pending pod whose claim is not generated: the template counts.
    del pod["status"]
    assert dra.pod_requests(pod, {}, {"one-gpu": _template("gpu.nvidia.com")}) == {"nvidia": 1}
    assert dra.pod_requests(pod, {}, None) == {}


def test_pod_devices_dedup() -> None:
    pod = _pod()
    pod["spec"]["resourceClaims"].append({"name": "again", "resourceClaimName": "shared-gpus"})
    claims = {"shared-gpus": _claim("shared-gpus", [(DRA_NVIDIA_GPU, "n", "gpu-0")])}
    assert [d.device for d in dra.pod_devices(pod, claims)] == ["gpu-0"]
    assert dra.pod_requests(pod, claims) == {"nvidia": 1}


def test_node_offers() -> None:
    whole = [{"name": f"gpu-{i}"} for i in range(4)]
    partitionable = [
        {"name": "gpu-0", "consumesCounters": [{"counterSet": "gpu-0-cs", "counters": {}}]},
        {"name": "gpu-0-mig-1g", "consumesCounters": [{"counterSet": "gpu-0-cs", "counters": {}}]},
        {"name": "gpu-1-mig-1g", "consumesCounters": [{"counterSet": "gpu-1-cs", "counters": {}}]},
    ]
    slices = [
        _slice("a", "a", 1, [{"name": "old"}] * 9),  # an old generation
        _slice("a", "a", 2, whole),
        _slice("b", "b", 1, partitionable),
        _slice("b", "b-amd", 1, [{"name": "gpu-0"}], DRA_AMD_GPU),
        _slice("b", "b-nic", 1, [{"name": "eth0"}], "dra.net"),
    ]
    # No node: a network-attached pool.
    shared = _slice("x", "fabric", 1, whole)
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    per_device = _slice("x", "pd", 1, [{"name": "g0", "nodeName": "c"}, {"name": "g1"}])
    del per_device["spec"]["nodeName"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    assert dra.node_offers([*slices, shared, per_device]) == {
        "a": {"nvidia": 4},
        "b": {"nvidia": 2, "amd": 1},
        "c": {"nvidia": 1},
    }


def test_dra_state_answers_by_namespace() -> None:
    gpu = _claim("train-0-gpu-x7k2p", [(DRA_NVIDIA_GPU, "n", "gpu-1")])
    elsewhere = copy.deepcopy(_claim("shared-gpus"))
    elsewhere["metadata"]["namespace"] = "other"
    state = dra.DraState.build(
        [gpu, elsewhere],
        [_template("gpu.amd.com", 2)],
        [{"metadata": {"name": "gpu.nvidia.com"}}],
        [_slice("a", "a", 1, [{"name": "gpu-0"}])],
    )
    pod = _pod()
    # shared-gpus lives in another namespace: not this pod's, so unknown.
    assert state.requests(pod) == {"nvidia": 1}
    assert state.unknown_claims(pod) == ["shared-gpus"]
    assert [d.device for d in state.devices(pod)] == ["gpu-1"]
    assert state.offers == {"a": {"nvidia": 1}}
    del pod["status"]
    assert state.requests(pod) == {"amd": 2}
    assert dra.EMPTY_STATE.requests({"spec": {}}) == {}
    assert set(dra.VENDOR_DRIVER.values()) <= set(DRA_VENDORS)


def test_bounds() -> None:
    claim = _claim("c", [(DRA_NVIDIA_GPU, "p", f"gpu-{i}") for i in range(1000)])
    assert len(dra.claim_devices(claim)) == dra.MAX_RESULTS
    huge = _template("gpu.nvidia.com", 10**30)
    assert dra._template_requests(huge, None) == {"nvidia": dra.MAX_RESULTS}
    for bad in (float("inf"), float("nan"), -5, True, "3", None):
        spec = {
            "devices": {
                "requests": [{"exactly": {"deviceClassName": "gpu.nvidia.com", "count": bad}}]
            }
        }
        assert 1 <= dra.spec_requests(spec)["nvidia"] <= dra.MAX_RESULTS


# -- fuzz ------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def _mutated(draw: st.DrawFn, seed: Any) -> Any:
    tree = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(tree) if p]
        if not paths:
            return draw(_json)
        path = draw(st.sampled_from(paths))
        node = tree
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = draw(_json)
    return tree


_SEEDS = {
    "pod": _pod(),
    "claim": _claim("c", [(DRA_NVIDIA_GPU, "p", "gpu-0"), (DRA_AMD_GPU, "p", "gpu-1")]),
    "template": _template("gpu.nvidia.com", 2),
    "slice": _slice("a", "a", 1, [{"name": "gpu-0", "consumesCounters": [{"counterSet": "s"}]}]),
}


def _check_all(pod: Any, claim: Any, template: Any, slice_: Any, cls: Any) -> None:
    dra.pod_claims(pod)
    names = dra.pod_claim_names(pod)
    assert all(isinstance(n, str) and n for n in names)
    devs = dra.claim_devices(claim)
    assert len(devs) <= dra.MAX_RESULTS
    for counted in (
        dra.claim_requests(claim),
        dra.pod_requests(pod, {n: claim for n in names}, {"one-gpu": template}),
        dra._template_requests(template, None),
    ):
        assert all(isinstance(v, str) and isinstance(n, int) and n >= 0 for v, n in counted.items())
    dra.pod_devices(pod, {n: claim for n in names})
    offers = dra.node_offers([slice_, slice_])
    assert all(0 <= n <= dra.MAX_SLICE_DEVICES for by in offers.values() for n in by.values())
    dra.class_vendors([cls])
    dra.has_claims(pod)
    dra.is_allocated(claim)
    state = dra.DraState.build([claim, claim], [template], [cls], [slice_])
    state.requests(pod)
    state.unknown_claims(pod)
    state.devices(pod)


@settings(max_examples=200, deadline=None)
@given(_json, _json, _json, _json, _json)
def test_fuzz_any_json(pod: Any, claim: Any, template: Any, slice_: Any, cls: Any) -> None:
    _check_all(pod, claim, template, slice_, cls)
    dra.node_offers(slice_ if isinstance(slice_, list) else [slice_])
    dra.class_vendors(cls if isinstance(cls, list) else [cls])


@settings(max_examples=200, deadline=None)
@given(
    _mutated(_SEEDS["pod"]),
    _mutated(_SEEDS["claim"]),
    _mutated(_SEEDS["template"]),
    _mutated(_SEEDS["slice"]),
    _mutated(
        {
            "metadata": {"name": "x"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]},
        }
    ),
)
def test_fuzz_damaged_objects(pod: Any, claim: Any, template: Any, slice_: Any, cls: Any) -> None:
    _check_all(pod, claim, template, slice_, cls)
