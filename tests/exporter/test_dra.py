"""Dynamic Resource Allocation in the exporter: devices that a ResourceClaim gave a
container, served by the fake kubelet over real gRPC, matched to our devices by the
drivers' naming, by the amdkfd topology, or by the node's ResourceSlices read with
the real ``kubernetes`` client from the fake API server, and written as
``accel_device_pod_info{...,claim="..."}``."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import DRA_AMD_GPU, DRA_NVIDIA_GPU, DRA_PCI_BUS_ID_ATTRIBUTE
from exporter import dra
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.kubelet import KubeletBackend, ResourceSlices
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.model import DeviceInfo, PodAssignment, Reading
from exporter.poller import Poller
from tests.support.exposition import parse, value
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.fakes.kubelet import (
    FakeClaim,
    FakeClaimDevice,
    FakeContainer,
    FakeKubelet,
    FakePod,
)
from tests.support.paths import REPO

FIXED = 1_700_000_000.0
POD_INFO = "accel_device_pod_info"
NODE = "gpu-node-1"


class StaticBackend(Backend):
    """Fixed devices, as a vendor backend would discover them."""

    name = "static"
    hardware = False

    def __init__(self, devices: list[DeviceInfo]) -> None:
        super().__init__(BackendOptions())
        self.devices = devices

    def discover(self) -> list[DeviceInfo]:
        return self.devices

    def read(self, device: DeviceInfo) -> Reading:
        return Reading(utilization=0.5)


def _gpu(index: int, bus: str) -> DeviceInfo:
    return DeviceInfo(
        device=f"nvidia{index}",
        vendor="nvidia",
        uuid=f"GPU-0000000{index}-2222-3333-4444-555555555555",
        model="NVIDIA H100 80GB HBM3",
        pci_bus_id=f"00000000:{bus}:00.0",
    )


def _mig(parent: DeviceInfo, gi: int, profile: str) -> DeviceInfo:
    return DeviceInfo(
        device=f"{parent.device}_mig{gi}",
        vendor="nvidia",
        uuid=f"MIG-{parent.device}-{gi:02d}aaaa-bbbb-cccc-dddd-000000000000",
        model=parent.model,
        pci_bus_id=parent.pci_bus_id,
        parent=parent.device,
        profile=profile,
    )


GPU0, GPU1 = _gpu(0, "17"), _gpu(1, "2a")
MIG_1G = _mig(GPU0, 9, "1g.10gb")
MIG_3G_A = _mig(GPU0, 1, "3g.40gb")
MIG_3G_B = _mig(GPU0, 2, "3g.40gb")
AMD0 = DeviceInfo(device="amd0", vendor="amd", uuid="0x18a1b2c3d4e5f607", pci_bus_id="0000:c1:00.0")
AMD1 = DeviceInfo(device="amd1", vendor="amd", uuid="0x28a1b2c3d4e5f607", pci_bus_id="0000:83:00.0")
AMD1_PARTS = [
    DeviceInfo(
        device=f"amd1_p{k}",
        vendor="amd",
        uuid=f"{AMD1.uuid}-p{k}",
        pci_bus_id=AMD1.pci_bus_id,
        parent="amd1",
        profile="CPX/NPS4",
    )
    for k in range(2)
]


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A unix socket path is limited to 107 bytes; pytest's tmp_path can be longer.
    where = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    fake = FakeKubelet(where / "kubelet.sock")
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(where, ignore_errors=True)


def pod_rows(text: str) -> set[tuple[str, str, str, str, str]]:
    """(device, namespace, pod, container, claim); claim "-" where the label is absent."""
    return {
        (lb["device"], lb["namespace"], lb["pod"], lb["container"], lb.get("claim", "-"))
        for n, lb, _ in parse(text)
        if n == POD_INFO
    }


async def poll_text(backends: list[Backend]) -> str:
    poller = Poller(backends, 1, 10, clock=lambda: FIXED)
    try:
        return (await poller.poll_once()).text.decode()
    finally:
        await poller.stop()


def families(text: str, *names: str) -> str:
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if any(line.split("{")[0].split(" ")[0] == n or f" {n} " in line for n in names)
    )


# -- by the drivers' naming ------------------------------------------------------------


async def test_claim_allocated_gpu_and_mig_device_by_driver_naming(
    kubelet: FakeKubelet,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    """A claim-allocated GPU and MIG device land on nvidia1 and on the 1g instance
    of nvidia0, with the claim's name; a device plugin's pod on the same node keeps
    its series without a claim label; a name that is no device of ours is dropped."""
    kubelet.add_claim_pod("ml", "train", "train-gpu", DRA_NVIDIA_GPU, "gpu-1")
    kubelet.add_claim_pod("ml", "small", "small-mig", DRA_NVIDIA_GPU, "gpu-0-mig-1g10gb-19-6")
    kubelet.add_pod("batch", "legacy", "nvidia.com/mig-3g.40gb", MIG_3G_A.uuid)
    kubelet.add_claim_pod("ml", "nic", "rdma", "rdma.example.com", "eth0")
    kubelet.add_claim_pod("ml", "gone", "old", DRA_NVIDIA_GPU, "gpu-7")
    backends: list[Backend] = [
        StaticBackend([GPU0, MIG_1G, MIG_3G_A, GPU1]),
        KubeletBackend(BackendOptions(kubelet_socket=kubelet.path)),
    ]
    text = await poll_text(backends)
    assert pod_rows(text) == {
        ("nvidia1", "ml", "train", "main", "train-gpu"),
        ("nvidia0_mig9", "ml", "small", "main", "small-mig"),
        ("nvidia0_mig1", "batch", "legacy", "main", "-"),
    }
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    promtool_check(text)
    golden("kubelet_dra.prom", families(text, POD_INFO))


async def test_one_claim_with_several_devices_and_containers(kubelet: FakeKubelet) -> None:
    """A claim shared by two containers, holding two GPUs: four rows, one claim."""
    claim = FakeClaim(
        "pair", [FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0"), FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-1")]
    )
    kubelet.set_pods(
        FakePod(
            "ml",
            "ddp",
            [FakeContainer("rank0", claims=[claim]), FakeContainer("rank1", claims=[claim])],
        )
    )
    text = await poll_text(
        [StaticBackend([GPU0, GPU1]), KubeletBackend(BackendOptions(kubelet_socket=kubelet.path))]
    )
    assert pod_rows(text) == {
        (gpu, "ml", "ddp", container, "pair")
        for gpu in ("nvidia0", "nvidia1")
        for container in ("rank0", "rank1")
    }


async def test_a_mig_profile_shared_by_two_instances_names_neither(kubelet: FakeKubelet) -> None:
    """Two 3g instances of one GPU differ only by placement, which our devices do
    not carry: the name attributes the pod to neither rather than guess."""
    kubelet.add_claim_pod("ml", "mid", "mid", DRA_NVIDIA_GPU, "gpu-0-mig-3g40gb-9-4")
    text = await poll_text(
        [
            StaticBackend([GPU0, MIG_3G_A, MIG_3G_B]),
            KubeletBackend(BackendOptions(kubelet_socket=kubelet.path)),
        ]
    )
    assert pod_rows(text) == set()


def _kfd_node(root: Path, n: int, **props: int) -> None:
    d = root / "class" / "kfd" / "kfd" / "topology" / "nodes" / str(n)
    d.mkdir(parents=True)
    (d / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))


def kfd_tree(root: Path) -> Path:
    """A CPU node, a whole MI300X at c1:00.0 (render 128) and one in a two-partition
    mode at 83:00.0 (render 136 and 137), as amdkfd lays them out."""
    _kfd_node(root, 0, gpu_id=0, cpu_cores_count=64)
    _kfd_node(root, 1, gpu_id=1111, domain=0, location_id=0xC100, drm_render_minor=128)
    _kfd_node(root, 2, gpu_id=2222, domain=0, location_id=0x8300, drm_render_minor=137)
    _kfd_node(root, 3, gpu_id=3333, domain=0, location_id=0x8300, drm_render_minor=136)
    return root


async def test_amd_names_through_the_kfd_topology(kubelet: FakeKubelet, tmp_path: Path) -> None:
    """AMD's ``gpu-<card>-<render minor>``: a whole GPU by its render minor's PCI
    address, a partition as the k-th (by render minor) child of its GPU."""
    kubelet.add_claim_pod("hpc", "whole", "w", DRA_AMD_GPU, "gpu-1-128")
    kubelet.add_claim_pod("hpc", "slice", "s", DRA_AMD_GPU, "gpu-9-137")
    kubelet.add_claim_pod("hpc", "ghost", "g", DRA_AMD_GPU, "gpu-5-200")
    options = BackendOptions(kubelet_socket=kubelet.path, sysfs=kfd_tree(tmp_path / "sys"))
    text = await poll_text([StaticBackend([AMD0, AMD1, *AMD1_PARTS]), KubeletBackend(options)])
    assert pod_rows(text) == {
        ("amd0", "hpc", "whole", "main", "w"),
        ("amd1_p1", "hpc", "slice", "main", "s"),
    }


# -- by the node's ResourceSlices ------------------------------------------------------


def resource_slice(
    name: str, driver: str, devices: list[dict[str, Any]], node: str = NODE, generation: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device(name: str, **attrs: str | int) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            k: ({"int": v} if isinstance(v, int) else {"string": v}) for k, v in attrs.items()
        },
    }


def nvidia_slices() -> list[dict[str, Any]]:
    """The NVIDIA driver numbers GPUs by minor number, which here runs opposite to
    NVML's index: gpu-0 is our nvidia1. The MIG device's uuid tells apart two
    instances of one profile."""
    return [
        resource_slice(
            f"{NODE}-gpu.nvidia.com-abcde",
            DRA_NVIDIA_GPU,
            [
                device(
                    "gpu-0",
                    type="gpu",
                    uuid=GPU1.uuid,
                    **{DRA_PCI_BUS_ID_ATTRIBUTE: "0000:2a:00.0"},
                ),
                device("gpu-1", type="gpu", uuid=GPU0.uuid),
                device("gpu-1-mig-3g40gb-9-4", type="mig", uuid=MIG_3G_B.uuid, profile="3g.40gb"),
            ],
        ),
        # Another node's slice, and an older generation of this node's pool: ignored.
        resource_slice("other-node", DRA_NVIDIA_GPU, [device("gpu-0", uuid=GPU0.uuid)], "node-2"),
    ]


def amd_slices() -> list[dict[str, Any]]:
    return [
        resource_slice(
            f"{NODE}-gpu.amd.com-fghij",
            DRA_AMD_GPU,
            [
                device("gpu-1-128", type="amdgpu", pciAddr="0000:c1:00.0", renderIndex=128),
                device(
                    "gpu-2-136",
                    type="amdgpu-partition",
                    parentPciAddr="0000:83:00.0",
                    renderIndex=136,
                ),
                device(
                    "gpu-9-137",
                    type="amdgpu-partition",
                    parentPciAddr="0000:83:00.0",
                    renderIndex=137,
                ),
            ],
        )
    ]


async def test_resource_slices_match_by_uuid_and_pci(
    kubelet: FakeKubelet, api: FakeApiServer, tmp_path: Path
) -> None:
    """With --dra.resource-slices the attributes decide, not the names: gpu-0 is the
    GPU whose uuid the slice gives, the second 3g instance is the one with that
    uuid, and an AMD partition is found by its parent's PCI address and render
    index. The slices are read through the real client, for this node only."""
    for obj in [*nvidia_slices(), *amd_slices()]:
        api.add(obj)
    kubelet.add_claim_pod("ml", "train", "train-gpu", DRA_NVIDIA_GPU, "gpu-0", pool=NODE)
    kubelet.add_claim_pod("ml", "mid", "mid", DRA_NVIDIA_GPU, "gpu-1-mig-3g40gb-9-4", pool=NODE)
    kubelet.add_claim_pod("hpc", "whole", "w", DRA_AMD_GPU, "gpu-1-128", pool=NODE)
    kubelet.add_claim_pod("hpc", "slice", "s", DRA_AMD_GPU, "gpu-2-136", pool=NODE)
    options = BackendOptions(
        kubelet_socket=kubelet.path,
        dra_resource_slices=True,
        dra_node_name=NODE,
        dra_kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
    )
    devices = [GPU0, MIG_3G_A, MIG_3G_B, GPU1, AMD0, AMD1, *AMD1_PARTS]
    text = await poll_text([StaticBackend(devices), KubeletBackend(options)])
    assert pod_rows(text) == {
        ("nvidia1", "ml", "train", "main", "train-gpu"),
        ("nvidia0_mig2", "ml", "mid", "main", "mid"),
        ("amd0", "hpc", "whole", "main", "w"),
        ("amd1_p0", "hpc", "slice", "main", "s"),
    }
    lists = api.requests_for("GET", r"/apis/resource.k8s.io/v1/resourceslices")
    assert len(lists) == 1
    assert f"spec.nodeName={NODE}" in lists[0].query.get("fieldSelector", "")


def test_slices_are_listed_once_a_minute_and_sooner_for_a_new_device() -> None:
    now = [0.0]
    calls: list[float] = []
    slices = nvidia_slices()

    def list_slices() -> list[Any]:
        calls.append(now[0])
        return slices

    cache = ResourceSlices(NODE, clock=lambda: now[0], list_slices=list_slices)
    known = dra.DraDevice(DRA_NVIDIA_GPU, NODE, "gpu-0")
    new = dra.DraDevice(DRA_NVIDIA_GPU, NODE, "gpu-9")
    assert cache.references([known])[known] == GPU1.uuid
    now[0] = 30.0
    cache.references([known])
    assert calls == [0.0]
    cache.references([new])  # not in the slices: listed again, 10 s since the last at most
    now[0] = 35.0
    cache.references([new])
    assert calls == [0.0, 30.0]
    now[0] = 91.0
    cache.references([known])
    assert calls == [0.0, 30.0, 91.0]


async def test_a_failed_slice_list_falls_back_to_names_and_is_logged_once(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> list[Any]:
        raise ConnectionRefusedError("connection refused")

    now = [0.0]
    cache = ResourceSlices(NODE, clock=lambda: now[0], list_slices=broken)
    kubelet.add_claim_pod("ml", "train", "train-gpu", DRA_NVIDIA_GPU, "gpu-1")
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path), slices=cache)
    poller = Poller([StaticBackend([GPU0, GPU1]), backend], 1, 10, clock=lambda: FIXED)
    with caplog.at_level(logging.INFO, logger="accel_exporter"):
        for step in range(3):
            now[0] = 100.0 * step
            text = (await poller.poll_once()).text.decode()
            assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
            assert pod_rows(text) == {("nvidia1", "ml", "train", "main", "train-gpu")}
    await poller.stop()
    warned = [r for r in caplog.records if "ResourceSlices" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert "ConnectionRefusedError" in warned[0].getMessage()


# -- hostile input ---------------------------------------------------------------------


async def test_hostile_dynamic_resources_do_not_break_the_poll(kubelet: FakeKubelet) -> None:
    """Empty and absurdly long names, thousands of devices in one claim, thousands
    of claims in one container: bounded, the bad entries dropped, the poll fine."""
    flood = [FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0") for _ in range(5000)]
    claims = [
        FakeClaim("", [FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0")]),
        FakeClaim("x" * 100_000, [FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0")]),
        FakeClaim(
            "bad-devices",
            [
                FakeClaimDevice("", "gpu-0"),
                FakeClaimDevice(DRA_NVIDIA_GPU, ""),
                FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-" + "9" * 10_000),
                FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0", pool="p" * 100_000),
                FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-0-mig-" + "-" * 5000 + "-1-1"),
                FakeClaimDevice(DRA_AMD_GPU, "gpu-1-128"),
            ],
        ),
        FakeClaim("flood", flood),
        *[FakeClaim(f"c{i}", [FakeClaimDevice(DRA_NVIDIA_GPU, "gpu-1")]) for i in range(2000)],
    ]
    kubelet.set_pods(FakePod("ml", "evil", [FakeContainer("main", claims=claims)]))
    backend = KubeletBackend(
        BackendOptions(kubelet_socket=kubelet.path, sysfs=Path("/nonexistent"))
    )
    text = await poll_text([StaticBackend([GPU0, GPU1]), backend])
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    rows = pod_rows(text)
    assert ("nvidia0", "ml", "evil", "main", "flood") in rows
    assert all(claim not in ("", "x" * 100_000) for *_, claim in rows)


@pytest.mark.parametrize(
    "slices",
    [
        [],
        [None, 1, "x", [], {}],
        [{"spec": None}, {"spec": {"driver": 5, "nodeName": NODE}}],
        [{"spec": {"driver": "d", "nodeName": NODE, "pool": {"name": "p"}, "devices": "x"}}],
        [
            {
                "spec": {
                    "driver": "d",
                    "nodeName": NODE,
                    "pool": {"name": "p", "generation": True},
                    "devices": [
                        None,
                        {"name": 1},
                        {"name": "a", "attributes": []},
                        {"name": "b", "attributes": {"uuid": "x"}},
                        {"name": "c", "attributes": {"uuid": {"string": ["x"]}}},
                        {"name": "d", "attributes": {"type": {"string": "amdgpu-partition"}}},
                        {"name": "e", "attributes": {"pciAddr": {"string": "zz:zz"}}},
                        {
                            "name": "f",
                            "attributes": {
                                "type": {"string": "amdgpu-partition"},
                                "parentPciAddr": {"string": "0000:83:00.0"},
                                "renderIndex": {"int": 10**40},
                            },
                        },
                    ]
                    * 1000,
                },
            }
        ]
        * 50,
    ],
)
def test_malformed_slices_give_an_answer(slices: list[Any]) -> None:
    refs = dra.slice_references(slices, NODE)
    assert all(isinstance(v, str) for v in refs.values())


def test_a_pool_counts_only_in_its_newest_generation() -> None:
    old = resource_slice("old", DRA_NVIDIA_GPU, [device("gpu-0", uuid=GPU0.uuid)], generation=1)
    new = resource_slice("new", DRA_NVIDIA_GPU, [device("gpu-0", uuid=GPU1.uuid)], generation=2)
    for order in ([old, new], [new, old]):
        refs = dra.slice_references(order, NODE)
        assert refs == {dra.DraDevice(DRA_NVIDIA_GPU, NODE, "gpu-0"): GPU1.uuid}


@pytest.mark.parametrize(
    ("profile", "key"),
    [
        ("1g.10gb", "1g10gb"),
        ("1g.10gb+me", "1g10gb-me"),
        ("3g.40gb", "3g40gb"),
        ("7g.80gb", "7g80gb"),
    ],
)
def test_mig_profile_as_the_nvidia_driver_writes_it(profile: str, key: str) -> None:
    assert dra.mig_profile_key(profile) == key


def test_resolve_leaves_device_plugin_rows_alone() -> None:
    plugin = PodAssignment("ml", "p", "main", "nvidia.com/gpu", "gpu-0")
    claimed = PodAssignment("ml", "q", "main", DRA_NVIDIA_GPU, "gpu-0", claim="c")
    out = dra.resolve([GPU0], [plugin, claimed])
    assert out == [plugin, PodAssignment("ml", "q", "main", DRA_NVIDIA_GPU, GPU0.uuid, claim="c")]


# -- the command line ------------------------------------------------------------------


def test_the_flags_reach_the_backend(kubelet: FakeKubelet, tmp_path: Path) -> None:
    """accel-exporter --dra.resource-slices reads this node's slices with the real
    client: the pod lands on the GPU the slice's uuid names, not on nvidia0."""
    sim = SimBackend(
        BackendOptions(sim_devices=parse_sim_devices("nvidia:2"), sim_host=socket.gethostname())
    )
    uuids = [d.uuid for d in sim.discover()]
    kubelet.add_claim_pod("ml", "train", "train-gpu", DRA_NVIDIA_GPU, "gpu-0", pool=NODE)
    with running_apiserver() as api:
        api.add(resource_slice("s", DRA_NVIDIA_GPU, [device("gpu-0", uuid=uuids[1])]))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "exporter.cli",
                "--once",
                "--backends",
                "sim,kubelet",
                "--sim-devices",
                "nvidia:2",
                "--kubelet.pod-resources-socket",
                str(kubelet.path),
                "--dra.resource-slices",
                "--dra.node-name",
                NODE,
                "--dra.kubeconfig",
                str(kubeconfig),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    assert pod_rows(proc.stdout) == {("nvidia1", "ml", "train", "main", "train-gpu")}


def test_resource_slices_need_the_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "--once", "--dra.resource-slices"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--dra.resource-slices needs this node's name" in proc.stderr
    assert "--dra.node-name" in proc.stderr
