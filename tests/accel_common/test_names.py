"""The names module is the one home of every Kubernetes key and vendor resource name:
no other source file spells one, and the parts that name MIG instances (the
exporter's simulated device plugin, the controller's cluster state, placement and
the fleet simulator) agree with each other and with NVIDIA's device plugin."""

from __future__ import annotations

import ast
import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accel_common import names
from autoscaler import clusterstate
from autoscaler.placement.score import pod_request
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.scenario import load_scenario
from autoscaler.simulate.scheduler import FirstFit
from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, parse_sim_devices
from tests.support.paths import REPO

# Where source lives (tests may spell a key: they pin the wire format).
SOURCES = ("accel_common", "exporter", "autoscaler", "nodeagent", "bench", "deploy", "dashboards")
HOME = REPO / "accel_common" / "names.py"
# A string that spells one of these names: ours, a vendor's resource, Cluster API's.
SPELLED = re.compile(
    r"accel-fleet\.io/|nvidia\.com/|amd\.com/|gpu\.intel\.com/|cluster\.x-k8s\.io/"
    r"|habana\.ai/|huawei\.com/Ascend|google\.com/tpu"
)
# Cluster API's apiVersion is an API group, not a key.
NOT_KEYS = frozenset({"cluster.x-k8s.io/v1beta1"})

# The NVIDIA device plugin's "mixed" strategy: "mig-" + the profile, whose
# attributes ("+me") follow a dot, under nvidia.com/.
MIG_FORM = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb(\.[a-z]+)*$")
# A Kubernetes extended resource name: a DNS-subdomain prefix, "/", a qualified name.
QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose, not names in use)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.add(id(body[0].value))
    return out


def _spelled(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal in ``path`` that spells a name, docstrings
    aside. Comments are not in the syntax tree; f-string parts are constants in it."""
    tree = ast.parse(path.read_text(), str(path))
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and node.value not in NOT_KEYS
            and SPELLED.search(node.value)
        ):
            yield node.lineno, node.value


def _sources() -> Iterator[Path]:
    for top in SOURCES:
        yield from sorted((REPO / top).rglob("*.py"))


def test_only_the_names_module_spells_a_key_or_a_resource() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for path in _sources()
        if path != HOME
        for line, text in _spelled(path)
    ]
    assert not found, "use accel_common.names instead of spelling these:\n" + "\n".join(found)


def test_the_check_sees_literals_and_f_strings_but_not_prose(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        '"""Module prose: accel-fleet.io/remediation."""\n'
        "def f(x: str) -> str:\n"
        '    """Function prose: nvidia.com/gpu."""\n'
        "    # a comment: accel-fleet.io/faulty\n"
        '    a = "accel-fleet.io/timeout"\n'
        '    return f"{x} and nvidia.com/mig-{x}" + a\n'
    )
    assert [line for line, _ in _spelled(src)] == [5, 6]


def test_every_accel_fleet_key_is_under_the_prefix_and_distinct() -> None:
    keys = {
        attr: value
        for attr, value in vars(names).items()
        if attr.endswith(("_ANNOTATION", "_LABEL", "_TAINT"))
        and attr != "DEFAULT_TAINT"  # a taint, key=value:Effect, not a key
        and isinstance(value, str)
        and value.startswith(names.PREFIX)
    }
    assert len(keys) >= 15
    assert len(set(keys.values())) == len(keys)
    for attr, value in keys.items():
        # A qualified name: at most 63 characters after the prefix, alphanumeric ends.
        assert QUALIFIED.match(value), attr
        assert len(value) - len(names.PREFIX) <= 63, attr
    key, _, rest = names.DEFAULT_TAINT.partition("=")
    assert (key, rest) == (names.FAULTY_TAINT, "true:NoSchedule")


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("3g.40gb", "nvidia.com/mig-3g.40gb"),
        ("7g.80gb", "nvidia.com/mig-7g.80gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
    ],
)
def test_mig_resources_take_the_device_plugin_mixed_form(profile: str, resource: str) -> None:
    got = names.nvidia_mig_resource(profile)
    assert got == resource
    assert MIG_FORM.match(got) and QUALIFIED.match(got)


def _sim_pods(**options: Any) -> dict[str, str]:
    """device name -> the resource the simulated device plugin handed it out as."""
    backend = SimBackend(BackendOptions(**options))
    devices = {d.uuid: d for d in backend.discover()}
    return {devices[p.device_id].device: p.resource for p in backend.pods()}


def _pod(resource: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": "job"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {resource: count}}}]},
    }


def test_mig_resources_agree_between_exporter_controller_and_placement() -> None:
    # The exporter's simulated device plugin (pod attribution) names MIG instances
    # the device plugin's way, with the profile the NVML backend reports.
    backend = SimBackend(
        BackendOptions(sim_devices=parse_sim_devices("nvidia:2"), sim_partitions=True)
    )
    migs = [d for d in backend.discover() if d.parent]
    assert migs
    held = _sim_pods(sim_devices=parse_sim_devices("nvidia:2"), sim_partitions=True, sim_pods=20)
    for d in migs:
        resource = names.nvidia_mig_resource(d.profile)
        assert MIG_FORM.match(resource)
        assert held[d.device] == resource
        # The controller counts a MIG request as a device request, by that name...
        assert clusterstate.device_requests(_pod(resource, 2)) == {resource: 2}
        assert names.is_device_resource(resource)
        # ...and placement, which places whole devices, leaves the pod to the scheduler.
        assert pod_request(_pod(resource)).count == 0


# One pool of each vendor: the simulator's nodes offer, and its pods request, the
# vendor's whole-device resource.
EVERY_VENDOR = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 2h
  evaluationInterval: 30s
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 1, min: 1, max: 1}
    - {name: mi300, vendor: amd, devicesPerNode: 8, initial: 1, min: 1, max: 1}
    - {name: pvc, vendor: oneapi, devicesPerNode: 4, initial: 1, min: 1, max: 1}
    - {name: gaudi3, vendor: gaudi, devicesPerNode: 8, initial: 1, min: 1, max: 1}
    - {name: ascend, vendor: ascend, devicesPerNode: 8, initial: 1, min: 1, max: 1}
    - {name: v5e, vendor: tpu, devicesPerNode: 4, initial: 1, min: 1, max: 1}
  workload:
    arrivalsPerHour: 60
    sizes: {1: 1, 2: 1}
    duration: {distribution: fixed, value: 30m}
"""


def _simulated_cluster(tmp_path: Path) -> tuple[list[Any], list[Any]]:
    path = tmp_path / "every-vendor.yaml"
    path.write_text(EVERY_VENDOR)
    fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        return await fleet.kube.list_nodes(), await fleet.kube.list_pods()

    return asyncio.run(go())


def test_whole_device_resources_agree_between_exporter_simulator_and_placement(
    tmp_path: Path,
) -> None:
    nodes, pods = _simulated_cluster(tmp_path)
    offered: dict[str, str] = {}
    for node in nodes:
        vendor = node["metadata"]["labels"][names.VENDOR_LABEL]
        devices = [r for r in node["status"]["allocatable"] if names.is_device_resource(r)]
        assert devices == [names.VENDOR_RESOURCE[vendor]]
        offered[node["metadata"]["labels"][names.POOL_LABEL]] = vendor
    assert sorted(offered.values()) == sorted(names.VENDOR_RESOURCE)
    asked: set[str] = set()
    for pod in pods:
        vendor = offered[pod["spec"]["nodeSelector"][names.POOL_LABEL]]
        resource = names.VENDOR_RESOURCE[vendor]
        # The controller counts the simulator's pod by the resource its node offers...
        (count,) = clusterstate.device_requests(pod).values()
        assert clusterstate.device_requests(pod) == {resource: count}
        # ...and placement reads it back as that many devices of that vendor.
        request = pod_request(pod)
        assert (request.count, request.vendors) == (count, frozenset({vendor}))
        asked.add(vendor)
    assert asked == set(names.VENDOR_RESOURCE)
    # The exporter's simulated device plugin hands a whole device out by the same name.
    for vendor, resource in names.VENDOR_RESOURCE.items():
        held = _sim_pods(sim_devices=parse_sim_devices(f"{vendor}:1"), sim_pods=1)
        assert held == {f"{vendor}0": resource}
        assert names.WHOLE_DEVICE_RESOURCES[resource] == vendor


@pytest.mark.parametrize(
    ("resource", "device"),
    [
        (names.NVIDIA_GPU, True),
        ("nvidia.com/gpu.shared", True),
        (names.AMD_GPU, True),
        ("amd.com/cpx_nps4", True),
        (names.INTEL_I915, True),
        (names.INTEL_XE, True),
        ("gpu.intel.com/millicores", False),
        ("gpu.intel.com/memory.max", False),
        ("gpu.intel.com/tiles", False),
        ("gpu.intel.com/i915_monitoring", False),
        (names.GAUDI, True),
        (names.ASCEND_910, True),
        ("huawei.com/Ascend910-4c", True),
        (names.ASCEND_310P, True),
        ("huawei.com/Ascend910B", True),
        ("huawei.com/Ascend910B-memory", False),
        (names.TPU, True),
        ("google.com/gpu", False),
        ("cpu", False),
        ("example.com/gpu", False),
    ],
)
def test_which_resources_are_devices(resource: str, device: bool) -> None:
    assert names.is_device_resource(resource) is device
