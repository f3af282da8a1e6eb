"""Partitions as child devices: NVIDIA MIG instances with their own GPM utilization and
bandwidth, and AMD compute/memory partitions (SPX/DPX/QPX/CPX, NPS1/NPS4)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from exporter.backends.amd import AmdBackend, partitions
from exporter.backends.base import FIRST_SAMPLE, BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.backends.nvidia.device import FIELDS
from exporter.model import DeviceLostError
from exporter.poller import Poller
from exporter.topology import distances
from tests.support import amd_gpu_metrics
from tests.support.exposition import parse, stable, value
from tests.support.fakes.nvml import GIB, MIB, FakeMig, FakeNVML, fake_uuid, h100
from tests.support.paths import FIXTURES

NOW = 1_700_000_000.0

pytestmark = pytest.mark.timeout(30)


def mig_gpu(migs: list[FakeMig] | None = None, gpm: bool = True) -> FakeNVML:
    """One H100 in MIG mode (two instances unless told otherwise)."""
    g = h100(0, mig=True)
    g.gpm = gpm
    if migs is not None:
        g.migs = migs
    return FakeNVML([g])


def backend_for(fake: FakeNVML, tmp_path: Path) -> NvidiaBackend:
    return NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)


async def test_mig_gpu_exports_parent_and_instances_with_their_own_utilization(
    tmp_path: Path,
) -> None:
    """A MIG GPU with 2 instances exports 3 devices, and each instance has its own
    accel_utilization_ratio from the second poll on."""
    fake = mig_gpu()
    poller = Poller([backend_for(fake, tmp_path)], 1, 5, clock=lambda: NOW)
    try:
        first = (await poller.poll_once()).text.decode()
        fake.advance(2.0)
        text = (await poller.poll_once()).text.decode()
    finally:
        await poller.stop()
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert set(info) == {"nvidia0", "nvidia0_mig1", "nvidia0_mig9"}
    assert info["nvidia0_mig1"]["parent"] == "nvidia0"
    assert info["nvidia0_mig9"]["profile"] == "1g.10gb"
    # A rate needs two samples: nothing (never 0) on the first poll.
    for d in ("nvidia0_mig1", "nvidia0_mig9"):
        assert value(first, "accel_utilization_ratio", device=d) is None
    assert value(text, "accel_utilization_ratio", device="nvidia0_mig1") == 0.875
    assert value(text, "accel_utilization_ratio", device="nvidia0_mig9") == 0.125
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="nvidia0_mig1") == (
        0.4025
    )
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="nvidia0_mig9") == 0.035
    # NVML has no whole-GPU utilization in MIG mode.
    assert value(text, "accel_utilization_ratio", device="nvidia0") is None


def test_instance_samples_are_per_gpu_instance_and_found_or_explained(tmp_path: Path) -> None:
    fake = mig_gpu()
    backend = backend_for(fake, tmp_path)
    devices = {d.device: d for d in backend.discover()}
    r = backend.read(devices["nvidia0_mig1"])
    assert r.utilization is None
    assert backend.missing["nvidia0_mig1"]["utilization"] == FIRST_SAMPLE
    fake.gpus[0].migs[0].graphics_util_percent = 50.0  # the load changes
    fake.advance(4.0)
    r = backend.read(devices["nvidia0_mig1"])
    assert r.utilization == 0.5
    assert fake.calls["nvmlGpmMigSampleGet"] == 2
    for d in devices.values():
        found = backend.fields(d, backend.read(d))
        assert set(found) | set(backend.missing[d.device]) == set(FIELDS), d.device
        assert not set(found) & set(backend.missing[d.device]), d.device
    backend.close()
    # Two samples for the GPU and two for each instance, all freed.
    assert fake.calls["nvmlGpmSampleAlloc"] == fake.calls["nvmlGpmSampleFree"] == 6


def test_without_gpm_instances_have_no_utilization_and_say_why(tmp_path: Path) -> None:
    fake = mig_gpu(gpm=False)
    backend = backend_for(fake, tmp_path)
    devices = {d.device: d for d in backend.discover()}
    fake.advance(1.0)
    r = backend.read(devices["nvidia0_mig9"])
    assert r.utilization is None and r.memory_bandwidth_utilization is None
    assert "no GPM" in backend.missing["nvidia0_mig9"]["utilization"]
    assert fake.calls["nvmlGpmMigSampleGet"] == 0
    assert r.memory_used_bytes == 2 * GIB  # the instance's own memory still reads
    backend.close()


def test_gpu_instance_split_in_compute_instances_keeps_no_utilization(tmp_path: Path) -> None:
    """GPM measures a GPU instance: two compute instances of one GPU instance would each
    show the other's work, so neither gets a figure."""
    migs = [
        FakeMig(
            0,
            2,
            0,
            "2c.3g.40gb",
            fake_uuid("MIG", "split-0"),
            40_448 * MIB,
            GIB,
            graphics_util_percent=60.0,
        ),
        FakeMig(
            1,
            2,
            1,
            "1c.3g.40gb",
            fake_uuid("MIG", "split-1"),
            40_448 * MIB,
            GIB,
            graphics_util_percent=60.0,
        ),
        FakeMig(
            2,
            9,
            0,
            "1g.10gb",
            fake_uuid("MIG", "whole-9"),
            9_984 * MIB,
            GIB,
            graphics_util_percent=25.0,
        ),
    ]
    fake = mig_gpu(migs)
    backend = backend_for(fake, tmp_path)
    devices = {d.device: d for d in backend.discover()}
    assert set(devices) == {"nvidia0", "nvidia0_mig2_ci0", "nvidia0_mig2_ci1", "nvidia0_mig9"}
    for d in devices.values():
        backend.read(d)
    fake.advance(1.0)
    assert backend.read(devices["nvidia0_mig2_ci0"]).utilization is None
    assert "split in compute instances" in backend.missing["nvidia0_mig2_ci1"]["utilization"]
    assert backend.read(devices["nvidia0_mig9"]).utilization == 0.25
    backend.close()


def test_instance_gpm_not_supported_is_remembered(tmp_path: Path) -> None:
    fake = mig_gpu()
    fake.gpus[0].unsupported.add("nvmlGpmMigSampleGet")
    backend = backend_for(fake, tmp_path)
    devices = {d.device: d for d in backend.discover()}
    for _ in range(3):
        fake.advance(1.0)
        r = backend.read(devices["nvidia0_mig1"])
        assert r.utilization is None and r.memory_used_bytes == 12 * GIB
    assert fake.calls["nvmlGpmMigSampleGet"] == 1
    assert backend.missing["nvidia0_mig1"]["utilization"] == "NVMLError_NotSupported"
    backend.close()


def test_fake_mig_sample_checks_the_gpu_instance() -> None:
    fake = mig_gpu()
    fake.nvmlInit()
    sample = fake.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmMigSampleGet(fake.gpu_handle(0), 5, sample)  # no GPU instance 5
    whole, inst = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    fake.nvmlGpmSampleGet(fake.gpu_handle(0), whole)
    fake.nvmlGpmMigSampleGet(fake.gpu_handle(0), 1, inst)
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version, req.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, 1
    req.sample1, req.sample2 = whole, inst
    req.metrics[0].metricId = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # a GPU and an instance sample
        fake.nvmlGpmMetricsGet(req)


# -- AMD compute partitions ----------------------------------------------------------

AMD_CPX = FIXTURES / "amd_cpx" / "sys"
AMD_TWO_CARDS = FIXTURES / "sys"


@pytest.fixture
def cpx_tree(tmp_path: Path) -> Path:
    """A writable copy of the MI300X-in-CPX/NPS4 fixture (its links stay relative)."""
    root = tmp_path / "sys"
    shutil.copytree(AMD_CPX, root, symlinks=True)
    return root


def amd_backend(sysfs: Path) -> AmdBackend:
    # procfs points nowhere: the driver version is the fixture's, never this host's.
    options = BackendOptions(sysfs=sysfs, procfs=sysfs.parent / "no-proc")
    return AmdBackend(options, use_amdsmi=False)


def test_mi300x_in_cpx_has_eight_partitions_under_its_gpu(cpx_tree: Path) -> None:
    backend = amd_backend(cpx_tree)
    devices = backend.discover()
    assert [d.device for d in devices] == ["amd0"] + [f"amd0_p{k}" for k in range(8)]
    gpu, parts = devices[0], devices[1:]
    # The physical GPU keeps its name and identity; the partitions name it as parent.
    assert (gpu.parent, gpu.profile, gpu.pci_bus_id) == ("", "", "0000:0c:00.0")
    assert {(p.parent, p.profile, p.pci_bus_id) for p in parts} == {
        ("amd0", "CPX/NPS4", "0000:0c:00.0")
    }
    assert len({d.uuid for d in devices}) == 9
    # GPU-wide figures stay on the GPU; a partition has its memory partition's size.
    r = backend.read(gpu)
    assert r.utilization == 0.63 and r.memory_total_bytes == 206141652992
    r = backend.read(parts[3])
    assert r.memory_total_bytes == 48 * 1024**3
    assert r.utilization is None and r.power_watts is None
    # This tree has no gpu_metrics table, so no per-XCP figure either.
    assert backend.missing["amd0_p3"]["utilization"].startswith("no per-partition figure")
    assert backend.missing["amd0_p3"]["power_watts"] == "GPU-wide: reported on amd0"
    # Partitions share their GPU's place: only the GPU is in the distance matrix.
    assert [a for a, _, _ in distances(devices, backend.topology())] == ["amd0"]


@pytest.mark.parametrize("revision", [(1, 6), (1, 7), (1, 8)])
def test_cpx_partitions_take_their_utilization_from_xcp_stats(
    cpx_tree: Path, revision: tuple[int, int]
) -> None:
    """gpu_metrics v1.6+ carries gfx_busy_inst per XCP: in CPX each partition has one
    XCD, and its busy percent is the partition's utilization."""
    gpu_dir = cpx_tree / "devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
    busy = [10, 20, 30, 40, 55, 60, 75, 90]
    table = amd_gpu_metrics.build(
        revision,
        {
            "average_gfx_activity": 47,
            "num_partition": 8,
            "xcp_stats": [{"gfx_busy_inst": [b]} for b in busy],
        },
    )
    (gpu_dir / "gpu_metrics").write_bytes(table)
    backend = amd_backend(cpx_tree)
    devices = backend.discover()
    for k, part in enumerate(devices[1:]):
        r = backend.read(part)
        assert r.utilization == pytest.approx(busy[k] / 100)
        assert r.telemetry_source == "gpu_metrics xcp_stats"
        assert "utilization" not in backend.missing[part.device]
    # The parts are the whole: their mean is the GPU's figure (within rounding).
    parts = [backend.read(p).utilization or 0.0 for p in devices[1:]]
    assert sum(parts) / 8 == pytest.approx(backend.read(devices[0]).utilization, abs=0.01)


def test_partition_is_lost_with_its_gpu(cpx_tree: Path) -> None:
    backend = amd_backend(cpx_tree)
    devices = backend.discover()
    shutil.rmtree(cpx_tree / "devices" / "pci0000:00")
    with pytest.raises(DeviceLostError):
        backend.read(devices[5])


def test_spx_gpu_and_gpu_without_kfd_have_no_partitions(cpx_tree: Path) -> None:
    gpu_dir = cpx_tree / "devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
    (gpu_dir / "current_compute_partition").write_text("SPX\n")
    kfd = cpx_tree / "class" / "kfd"
    for n in range(2, 9):  # SPX: one KFD node for the GPU
        shutil.rmtree(kfd / "kfd/topology/nodes" / str(n))
    assert [d.device for d in amd_backend(cpx_tree).discover()] == ["amd0"]
    shutil.rmtree(kfd)
    (gpu_dir / "current_compute_partition").write_text("CPX\n")
    assert [d.device for d in amd_backend(cpx_tree).discover()] == ["amd0"]


def test_two_card_fixture_is_unpartitioned() -> None:
    assert not any(d.parent for d in amd_backend(AMD_TWO_CARDS).discover())


def test_partition_modes_are_read_as_the_driver_writes_them(cpx_tree: Path) -> None:
    gpu_dir = cpx_tree / "devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
    assert partitions.read_mode(gpu_dir, "compute") == "CPX"
    assert partitions.read_mode(gpu_dir, "memory") == "NPS4"
    (gpu_dir / "current_memory_partition").unlink()
    assert partitions.profile(gpu_dir) == "CPX"
    assert partitions.read_mode(cpx_tree, "compute") == ""


async def test_amd_cpx_golden_and_promtool(
    cpx_tree: Path,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    poller = Poller([amd_backend(cpx_tree)], 1, 5, clock=lambda: NOW)
    try:
        await poller.poll_once()
        text = (await poller.poll_once()).text.decode()
    finally:
        await poller.stop()
    promtool_check(text)
    for k in range(8):
        assert value(text, "accel_up", device=f"amd0_p{k}") == 1
    golden("amd_cpx.prom", stable(text))
