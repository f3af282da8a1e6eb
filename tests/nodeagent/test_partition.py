"""The partition task on fake NVML and the AMD sysfs fixture: layouts applied, read back
by the exporter's own backends, idempotent, and refused while a device pod runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest

from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
)
from exporter.backends.amd import AmdBackend
from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.model import PodAssignment
from exporter.poller import Poller
from nodeagent import layouts
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext, NodePatch
from tests.support.exposition import parse
from tests.support.fakes.nvml import FakeNVML, h100
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.timeout(60)

LAYOUTS = layouts.load()
GPU_DIR = "devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
KFD = "class/kfd/kfd/topology/nodes"


def context(
    nvml: Any = None, sysfs: Path = Path("/nonexistent"), holders: Any = None
) -> AgentContext:
    now = [1_800_000_000.0]
    return AgentContext(
        node_name="gpu-1",
        nvml=nvml,
        amdsmi=None,
        sysfs_root=sysfs,
        holders=holders or (lambda: []),
        clock=lambda: now[0],
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=None,
    )


def node_with(layout: str | None, patch: NodePatch | None = None) -> dict[str, Any]:
    labels = {} if layout is None else {PARTITION_LAYOUT_LABEL: layout}
    n: dict[str, Any] = {"metadata": {"name": "gpu-1", "labels": labels, "annotations": {}}}
    if patch is not None:
        merge(n, patch)
    return n


def merge(node: dict[str, Any], patch: NodePatch) -> None:
    """What the API server does with the agent's merge-patch."""
    for where, values in (("labels", patch.labels), ("annotations", patch.annotations)):
        target = node["metadata"].setdefault(where, {})
        for k, v in values.items():
            if v is None:
                target.pop(k, None)
            else:
                target[k] = v


def state_of(node: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(node["metadata"]["annotations"][PARTITION_STATE_ANNOTATION]))


def two_h100() -> FakeNVML:
    fake = FakeNVML([h100(0), h100(1)])
    fake.nvmlInit()
    return fake


def children(fake: FakeNVML, tmp_path: Path) -> dict[str, str]:
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)
    try:
        return {d.device: d.profile for d in backend.discover() if d.parent}
    finally:
        backend.close()


async def polled(poller: Poller) -> dict[str, str]:
    """The devices of the exporter's next poll, with their profile, as scraped."""
    text = (await poller.poll_once()).text.decode()
    return {
        lb["device"]: lb.get("profile", "") for n, lb, _ in parse(text) if n == "accel_device_info"
    }


async def test_h100_all_1g_gives_seven_instances_in_the_exporters_next_poll(
    tmp_path: Path,
) -> None:
    fake = two_h100()
    # The exporter runs all along, on the same GPUs.
    poller = Poller([NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)], 1, 5)
    task, ctx, node = PartitionTask(LAYOUTS), context(fake), node_with("h100-all-1g")
    try:
        assert sorted(await polled(poller)) == ["nvidia0", "nvidia1"]
        merge(node, task.reconcile(node, ctx))
        after = await polled(poller)
        # Back to whole GPUs: the instances leave the exporter's next poll too.
        node["metadata"]["labels"][PARTITION_LAYOUT_LABEL] = "h100-whole"
        merge(node, task.reconcile(node, ctx))
        whole = await polled(poller)
    finally:
        await poller.stop()
    sliced = {d: p for d, p in after.items() if "_mig" in d}
    assert sorted(sliced) == sorted(f"nvidia{g}_mig{gi}" for g in (0, 1) for gi in range(7, 14))
    assert set(sliced.values()) == {"1g.10gb"}
    assert sorted(whole) == ["nvidia0", "nvidia1"]
    state = state_of(node)
    assert state["state"] == "applied" and state["layout"] == "h100-whole"
    assert task.last == ("h100-whole", "applied")


def test_the_answer_names_the_layout_and_what_each_gpu_has() -> None:
    fake = two_h100()
    task, ctx, node = PartitionTask(LAYOUTS), context(fake), node_with("h100-all-1g")
    merge(node, task.reconcile(node, ctx))
    state = state_of(node)
    assert state["state"] == "applied" and state["layout"] == "h100-all-1g"
    assert state["devices"] == {"nvidia0": "7x 1g.10gb", "nvidia1": "7x 1g.10gb"}
    assert node["metadata"]["labels"][PARTITION_APPLIED_LABEL] == "h100-all-1g"
    assert task.last == ("h100-all-1g", "applied")


def test_applying_the_applied_layout_changes_nothing() -> None:
    fake = two_h100()
    task, ctx, node = PartitionTask(LAYOUTS), context(fake), node_with("h100-all-1g")
    merge(node, task.reconcile(node, ctx))
    made = dict(fake.mig_calls)
    uuids = [m.uuid for g in fake.gpus for m in g.migs]
    # A second agent (a restart) and a second round both find the layout in place:
    # no NVML create, destroy or mode call, and no patch at all.
    for again in (task, PartitionTask(LAYOUTS)):
        assert again.reconcile(node, ctx).empty()
    assert dict(fake.mig_calls) == made
    assert [m.uuid for g in fake.gpus for m in g.migs] == uuids


def test_switching_layouts_destroys_first_and_whole_turns_mig_off(tmp_path: Path) -> None:
    fake = FakeNVML([h100(0, mig=True)])  # 3g.40gb + 1g.10gb already there
    fake.nvmlInit()
    task, ctx = PartitionTask(LAYOUTS), context(fake)
    node = node_with("h100-half")
    merge(node, task.reconcile(node, ctx))
    assert state_of(node)["devices"] == {"nvidia0": "2x 3g.40gb"}
    assert children(fake, tmp_path) == {"nvidia0_mig1": "3g.40gb", "nvidia0_mig2": "3g.40gb"}
    assert fake.mig_calls["nvmlComputeInstanceDestroy"] == 2
    assert fake.mig_calls["nvmlGpuInstanceDestroy"] == 2
    node["metadata"]["labels"][PARTITION_LAYOUT_LABEL] = "h100-whole"
    merge(node, task.reconcile(node, ctx))
    assert state_of(node)["state"] == "applied"
    assert fake.gpus[0].mig_enabled is False
    assert children(fake, tmp_path) == {}
    assert node["metadata"]["labels"][PARTITION_APPLIED_LABEL] == "h100-whole"


def test_a_device_pod_refuses_the_change_with_a_clear_message() -> None:
    fake = two_h100()
    holders = [PodAssignment("ml", "train-0", "main", "nvidia.com/gpu", fake.gpus[0].uuid)]
    task, ctx = PartitionTask(LAYOUTS), context(fake, holders=lambda: holders)
    node = node_with("h100-all-1g")
    patch = task.reconcile(node, ctx)
    merge(node, patch)
    state = state_of(node)
    assert state["state"] == "refused"
    assert "ml/train-0" in state["message"] and "drain" in state["message"]
    assert PARTITION_APPLIED_LABEL not in node["metadata"]["labels"]
    assert sum(fake.mig_calls.values()) == 0
    # The same refusal is not written again; once the pod is gone, it applies.
    assert task.reconcile(node, ctx).empty()
    holders.clear()
    merge(node, task.reconcile(node, ctx))
    assert state_of(node)["state"] == "applied"
    # With the layout in place, a new device pod is no reason to refuse.
    holders.append(PodAssignment("ml", "small", "main", "nvidia.com/mig-1g.10gb", "MIG-x"))
    assert task.reconcile(node, ctx).empty()


def test_unknown_layout_wrong_model_and_kubelet_down_are_answered_not_raised() -> None:
    fake = two_h100()
    task, ctx = PartitionTask(LAYOUTS), context(fake)
    node = node_with("h100-everything")
    merge(node, task.reconcile(node, ctx))
    assert state_of(node)["state"] == "failed"
    assert "unknown layout 'h100-everything'" in state_of(node)["message"]
    # A failure is said once per retry period, not every round.
    assert task.reconcile(node, ctx).empty()
    node = node_with("mi300x-cpx")
    merge(node, task.reconcile(node, ctx))
    assert "is for MI300X GPUs" in state_of(node)["message"]

    def down() -> list[PodAssignment]:
        raise OSError("kubelet socket missing")

    node = node_with("h100-all-1g")
    merge(node, PartitionTask(LAYOUTS).reconcile(node, context(fake, holders=down)))
    assert state_of(node)["state"] == "refused"
    assert "cannot tell which pods hold devices" in state_of(node)["message"]
    # Without NVML, an NVIDIA layout fails with the reason.
    node = node_with("h100-all-1g")
    merge(node, PartitionTask(LAYOUTS).reconcile(node, context(None)))
    assert "needs NVML" in state_of(node)["message"]


def test_a_node_without_the_label_gets_no_patch() -> None:
    assert PartitionTask(LAYOUTS).reconcile(node_with(None), context(two_h100())).empty()


# -- AMD ---------------------------------------------------------------------------


class FakeAmdgpu:
    """What amdgpu does on a write to ``current_compute_partition``: it switches and
    registers one KFD node per compute partition (SPX 1, DPX 2, QPX 4, CPX 8), each
    with the GPU's location and its own render minor."""

    COUNT: ClassVar[dict[str, int]] = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}

    def __init__(self, root: Path, saved: Path) -> None:
        self.root, self.saved = root, saved
        self.writes: list[tuple[str, str]] = []

    def __call__(self, path: Path, value: str) -> None:
        self.writes.append((path.name, value))
        path.write_text(value + "\n")
        if path.name == "current_compute_partition":
            self.reshape(self.COUNT[value])

    def reshape(self, count: int) -> None:
        nodes = self.root / KFD
        for n in range(1, 9):
            shutil.rmtree(nodes / str(n), ignore_errors=True)
            if n <= count:
                shutil.copytree(self.saved / str(n), nodes / str(n))


@pytest.fixture
def spx_tree(tmp_path: Path) -> tuple[Path, FakeAmdgpu]:
    """A writable MI300X tree in SPX/NPS1: one KFD node for the GPU."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "amd_cpx" / "sys", root, symlinks=True)
    saved = tmp_path / "kfd-nodes"
    shutil.copytree(root / KFD, saved)
    driver = FakeAmdgpu(root, saved)
    (root / GPU_DIR / "current_compute_partition").write_text("SPX\n")
    (root / GPU_DIR / "current_memory_partition").write_text("NPS1\n")
    driver.reshape(1)
    return root, driver


def amd_devices(sysfs: Path) -> list[str]:
    options = BackendOptions(sysfs=sysfs, procfs=sysfs.parent / "no-proc")
    return [d.device for d in AmdBackend(options, use_amdsmi=False).discover()]


async def test_amd_cpx_layout_gives_eight_partitions(spx_tree: tuple[Path, FakeAmdgpu]) -> None:
    root, driver = spx_tree
    options = BackendOptions(sysfs=root, procfs=root.parent / "no-proc")
    poller = Poller([AmdBackend(options, use_amdsmi=False)], 1, 5)
    task, ctx = PartitionTask(LAYOUTS, writer=driver), context(sysfs=root)
    node = node_with("mi300x-cpx")
    try:
        assert list(await polled(poller)) == ["amd0"]
        merge(node, task.reconcile(node, ctx))
        # The exporter's next poll has the eight partitions, the modes as profile.
        after = await polled(poller)
    finally:
        await poller.stop()
    assert after == {"amd0": "", **{f"amd0_p{k}": "CPX/NPS4" for k in range(8)}}
    state = state_of(node)
    assert state["state"] == "applied", state
    assert state["devices"] == {"amd0": "CPX/NPS4, 8 partitions"}
    # Memory first: the driver checks the compute mode against it.
    assert driver.writes == [
        ("current_memory_partition", "NPS4"),
        ("current_compute_partition", "CPX"),
    ]
    assert amd_devices(root) == ["amd0"] + [f"amd0_p{k}" for k in range(8)]
    # Idempotent: nothing is written again.
    assert task.reconcile(node, ctx).empty()
    assert len(driver.writes) == 2


def test_amd_mode_the_driver_does_not_take_fails_with_the_reason(
    spx_tree: tuple[Path, FakeAmdgpu],
) -> None:
    root, driver = spx_tree
    (root / GPU_DIR / "available_memory_partition").write_text("NPS1\n")
    node = node_with("mi300x-cpx")
    merge(node, PartitionTask(LAYOUTS, writer=driver).reconcile(node, context(sysfs=root)))
    assert state_of(node)["state"] == "failed"
    assert "memory partition NPS4 is not available (NPS1)" in state_of(node)["message"]

    def reload_needed(path: Path, value: str) -> None:  # the driver keeps the old mode
        pass

    (root / GPU_DIR / "available_memory_partition").write_text("NPS1, NPS4\n")
    node = node_with("mi300x-cpx")
    merge(node, PartitionTask(LAYOUTS, writer=reload_needed).reconcile(node, context(sysfs=root)))
    assert "amdgpu reload" in state_of(node)["message"]


def test_a_gpu_without_mig_fails_a_mig_layout_and_takes_mig_off_as_done() -> None:
    fake = FakeNVML.pcie_node()  # L40S: no MIG
    fake.nvmlInit()
    table = {
        "l40s-slices": layouts.Layout("l40s-slices", "L40S", "nvidia", mig=("1g.10gb",)),
        "l40s-whole": layouts.Layout("l40s-whole", "L40S", "nvidia", mig=None),
    }
    node = node_with("l40s-slices")
    merge(node, PartitionTask(table).reconcile(node, context(fake)))
    assert "needs MIG, which this NVIDIA L40S does not support" in state_of(node)["message"]
    node = node_with("l40s-whole")
    merge(node, PartitionTask(table).reconcile(node, context(fake)))
    assert state_of(node)["state"] == "applied"
    assert sum(fake.mig_calls.values()) == 0
