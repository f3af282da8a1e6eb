"""The exporter's DRA readers, fuzzed with hypothesis: ResourceSlices as the API
server returns them (``exporter.dra.slice_references``) and DRA device names as the
kubelet sends them (``reference`` and ``resolve``).

Structure-aware cases start from valid slices of the NVIDIA and AMD drivers, with one
to three places replaced by a value of any type (a list for a name, a 10**30 render
index, a dict for a string attribute), so that the cases get past the first check.
Every case must give an answer: the readers have no error of their own.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from accel_common.names import DRA_AMD_GPU, DRA_NVIDIA_GPU
from exporter import dra
from exporter.model import DeviceInfo, PodAssignment
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import copy_tree, tree_paths, wrong_values

NODE = "node-1"


def _slice(driver: str, devices: list[Any]) -> dict[str, Any]:
    return {
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        }
    }


SEEDS: list[Any] = [
    [
        _slice(
            DRA_NVIDIA_GPU,
            [
                {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}},
                {
                    "name": "gpu-0-mig-1g10gb-19-0",
                    "attributes": {"uuid": {"string": "MIG-1"}, "profile": {"string": "1g.10gb"}},
                },
            ],
        ),
        _slice(
            DRA_AMD_GPU,
            [
                {
                    "name": "gpu-1-128",
                    "attributes": {
                        "type": {"string": "amdgpu"},
                        "pciAddr": {"string": "0000:c1:00.0"},
                    },
                },
                {
                    "name": "gpu-2-136",
                    "attributes": {
                        "type": {"string": "amdgpu-partition"},
                        "parentPciAddr": {"string": "0000:83:00.0"},
                        "renderIndex": {"int": 136},
                    },
                },
            ],
        ),
    ]
]


@st.composite
def damaged_slices(draw: st.DrawFn) -> Any:
    tree = copy_tree(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in tree_paths(tree) if p]
        if not places:
            break
        *parent_at, key = draw(st.sampled_from(places))
        parent = tree
        for p in parent_at:
            parent = parent[p]
        parent[key] = draw(wrong_values)
    return tree


@budget(300)
@given(slices=st.one_of(damaged_slices(), wrong_values))
def test_slice_references(slices: Any) -> None:
    def read() -> dict[dra.DraDevice, str]:
        refs = dra.slice_references(slices if isinstance(slices, list) else [slices], NODE)
        assert all(isinstance(v, str) and v for v in refs.values())
        return refs

    check("dra slice_references", read, ())


DEVICES = [
    DeviceInfo("nvidia0", "nvidia", "GPU-1", pci_bus_id="0000:17:00.0"),
    DeviceInfo("nvidia0_mig1", "nvidia", "MIG-1", parent="nvidia0", profile="1g.10gb"),
    DeviceInfo("amd0", "amd", "0xabc", pci_bus_id="0000:83:00.0"),
    DeviceInfo("amd0_p0", "amd", "0xabc-p0", pci_bus_id="0000:83:00.0", parent="amd0"),
]
_names = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "gpu-0",
            "gpu-0-mig-1g10gb-19-0",
            "gpu-1-128",
            "0000:83:00.0/0",
            "0000:83:00.0/9999",
            "zz/1",
            "/",
            "gpu-" + "9" * 300,
            "gpu-0-mig-" + "-" * 300 + "-1-1",
        ]
    ),
)


@budget(300)
@given(
    driver=st.sampled_from([DRA_NVIDIA_GPU, DRA_AMD_GPU, "", "x"]),
    name=_names,
    kfd=st.dictionaries(st.integers(-5, 300), _names, max_size=4),
)
def test_reference_and_resolve(driver: str, name: str, kfd: dict[int, str]) -> None:
    def both() -> list[PodAssignment]:
        device_id = dra.reference(dra.DraDevice(driver, NODE, name), {}, kfd)
        return dra.resolve(DEVICES, [PodAssignment("ns", "p", "c", driver, device_id, claim="x")])

    check("dra reference and resolve", both, ())
