"""The tpu backend: sysfs fixture trees (tests/fixtures/tpu_v5e, four v5e chips on
vfio plus the VM's gVNIC; tests/fixtures/tpu_v4, two v4 chips on the accel class) and
the fake libtpu runtime metrics service (tests/support/fakes/tpu_runtime.py, a real
gRPC server on 127.0.0.1), through the real Poller and renderer.

The PCI vendor and device ids in the trees are the ones ``tpu-info`` knows; the
subsystem ids of v4 and v5e chips are arbitrary (only v2 and v3 are told apart by
theirs). Expected figures are computed here from the fake's values, in base units.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from exporter import faults
from exporter.backends.base import BackendOptions
from exporter.backends.tpu import TpuBackend
from exporter.backends.tpu.chips import find_chips
from exporter.backends.tpu.runtime import HBM_BANDWIDTH
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError
from exporter.poller import Poller
from tests.support.exposition import names, parse, stable, total, value
from tests.support.fakes.tpu_runtime import GIB, FakeChip, FakeTpuRuntime
from tests.support.paths import FIXTURES, REPO

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000.0
V5E = FIXTURES / "tpu_v5e"
V4 = FIXTURES / "tpu_v4"
TIMEOUT = 0.5


def chips() -> dict[int, FakeChip]:
    return {
        i: FakeChip(
            duty_cycle_percent=[87.5, 12.25, 100.0, 0.0][i],
            hbm_used=[[11 * GIB, 3 * GIB, 15 * GIB, 0][i]],
            hbm_total=[16_106_127_360],
            hbm_bandwidth_percent=[[40.0, 5.5, 75.0, 0.0][i]],
        )
        for i in range(4)
    }


@pytest.fixture
def runtime() -> Iterator[FakeTpuRuntime]:
    rt = FakeTpuRuntime(chips())
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the v5e tree (its links stay relative)."""
    root = tmp_path / "sys"
    shutil.copytree(V5E, root, symlinks=True)
    return root


def backend(sysfs: Path, address: str, timeout: float = TIMEOUT) -> TpuBackend:
    return TpuBackend(BackendOptions(sysfs=sysfs, tpu_runtime_address=address), timeout=timeout)


def closed_address() -> str:
    """A loopback port where nothing listens: a TPU VM with no workload."""
    rt = FakeTpuRuntime()
    rt.start()
    rt.stop()
    return rt.address


async def poll(b: TpuBackend, *changes: Callable[[], None]) -> str:
    """Polls through a real Poller, then once more after each change; the last text."""
    poller = Poller([b], interval=1, timeout=5, clock=lambda: NOW)
    try:
        snapshot = await poller.poll_once()
        for change in changes:
            change()
            snapshot = await poller.poll_once()
        return snapshot.text.decode()
    finally:
        await poller.stop()


# -- sysfs -------------------------------------------------------------------------------


def test_chips_in_device_node_order_and_gvnic_is_not_one() -> None:
    found = find_chips(V5E)
    # iommu groups 1, 0, 2, 3 on functions 04..07: /dev/vfio/0 is 05.0.
    assert [(c.pci, c.node, c.generation.model) for c in found] == [
        ("0000:00:05.0", "/dev/vfio/0", "TPU v5e"),
        ("0000:00:04.0", "/dev/vfio/1", "TPU v5e"),
        ("0000:00:06.0", "/dev/vfio/2", "TPU v5e"),
        ("0000:00:07.0", "/dev/vfio/3", "TPU v5e"),
    ]
    assert [(c.pci, c.node) for c in find_chips(V4)] == [
        ("0000:00:04.0", "/dev/accel0"),
        ("0000:00:05.0", "/dev/accel1"),
    ]


@pytest.mark.parametrize(
    ("device", "subsystem", "model"),
    [
        ("0x0027", "0x004e", "TPU v2"),
        ("0x0027", "0x004f", "TPU v3"),
        ("0x0027", "0x0001", None),
        ("0x005e", "0x0000", "TPU v4"),
        ("0x0062", "0x0000", "TPU v5p"),
        ("0x006f", "0x0000", "TPU v6e"),
        ("0x0076", "0x0000", "TPU7x"),
        ("0x0042", "0x0000", None),
    ],
)
def test_generation_from_pci_ids(
    tmp_path: Path, device: str, subsystem: str, model: str | None
) -> None:
    fn = tmp_path / "devices" / "pci0000:00" / "0000:00:04.0"
    fn.mkdir(parents=True)
    for name, text in (("vendor", "0x1ae0"), ("device", device), ("subsystem_device", subsystem)):
        (fn / name).write_text(text + "\n")
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices" / "0000:00:04.0").symlink_to(
        "../../../devices/pci0000:00/0000:00:04.0"
    )
    assert [c.generation.model for c in find_chips(tmp_path)] == ([model] if model else [])


# -- the whole exposition ---------------------------------------------------------------


async def test_golden_runtime_two_polls(
    tree: Path,
    runtime: FakeTpuRuntime,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    def errors() -> None:
        # chip 1 (function 04.0) sees two more corrected PCIe errors; core of chip 3 halts.
        aer = tree / "devices" / "pci0000:00" / "0000:00:04.0" / "aer_dev_correctable"
        aer.write_text(aer.read_text().replace("TOTAL_ERR_COR 2", "TOTAL_ERR_COR 4"))
        runtime.chips[3].core_errors[0] = "TensorCore halted: program error"

    text = await poll(backend(tree, runtime.address), errors)
    assert value(text, "accel_exporter_backend_up", backend="tpu") == 1
    for i, chip in chips().items():
        d = f"tpu{i}"
        assert value(text, "accel_up", device=d) == 1
        assert value(text, "accel_utilization_ratio", device=d) == chip.duty_cycle_percent / 100
        assert value(text, "accel_memory_used_bytes", device=d) == chip.hbm_used[0]
        assert value(text, "accel_memory_total_bytes", device=d) == chip.hbm_total[0]
        assert value(text, "accel_memory_bandwidth_utilization_ratio", device=d) == (
            chip.hbm_bandwidth_percent[0] / 100
        )
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert [info[f"tpu{i}"]["pci_bus_id"] for i in range(4)] == [
        "0000:00:05.0",
        "0000:00:04.0",
        "0000:00:06.0",
        "0000:00:07.0",
    ]
    assert {lb["model"] for lb in info.values()} == {"TPU v5e"}
    assert (info["tpu0"]["numa_node"], info["tpu2"]["numa_node"]) == ("0", "1")
    assert len({lb["uuid"] for lb in info.values()}) == 4
    # The first poll is the AER baseline; the growth is one info event; the core's error
    # is one recoverable event; nothing is fatal.
    assert faults.classify("tpu", "pcie_correctable") == "info"
    assert total(text, "accel_fault_events_total", device="tpu1", severity="info") == 1
    assert total(text, "accel_fault_events_total", device="tpu3", severity="recoverable") == 1
    for i in range(4):
        assert total(text, "accel_fault_events_total", device=f"tpu{i}", severity="fatal") == 0
    promtool_check(text)
    golden("tpu.prom", stable(text))


async def test_golden_devfs_without_runtime(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    """v4 chips and no workload: identity, accel_up 1, and no telemetry at all."""
    b = backend(V4, closed_address())
    text = await poll(b)
    assert value(text, "accel_exporter_backend_up", backend="tpu") == 1
    for d in ("tpu0", "tpu1"):
        assert value(text, "accel_up", device=d) == 1
        assert value(text, "accel_utilization_ratio", device=d) is None
        assert value(text, "accel_memory_used_bytes", device=d) is None
        assert "UNAVAILABLE" in b.missing[d]["utilization"]
        assert b.sources[d] == "none"
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["tpu0"]["pci_bus_id"] == "0000:00:04.0"  # /dev/accel0
    assert info["tpu0"]["model"] == "TPU v4"
    assert info["tpu0"]["numa_node"] == ""  # the kernel's -1
    assert info["tpu0"]["driver_version"] == "1.1"  # gasket's driver_version
    promtool_check(text)
    golden("tpu_devfs.prom", stable(text))


# -- loss ---------------------------------------------------------------------------------


async def test_chip_lost_by_the_runtime_is_down_and_keeps_identity(
    tree: Path, runtime: FakeTpuRuntime
) -> None:
    b = backend(tree, runtime.address)
    text = await poll(b, lambda: runtime.lose(2), lambda: None)
    assert value(text, "accel_up", device="tpu2") == 0
    assert value(text, "accel_device_info", device="tpu2", pci_bus_id="0000:00:06.0") == 1
    # One fatal fault at the moment of loss, not one per poll it stays lost.
    assert total(text, "accel_fault_events_total", device="tpu2", severity="fatal") == 1
    assert value(text, "accel_utilization_ratio", device="tpu2") is None
    assert value(text, "accel_up", device="tpu0") == 1
    # Read directly, it stays a plain loss while the runtime leaves it out.
    with pytest.raises(DeviceLostError, match="stopped reporting chip 2"):
        b.read(DeviceInfo("tpu2", "tpu", ""))


async def test_chip_gone_from_sysfs_is_down_and_keeps_identity(
    tree: Path, runtime: FakeTpuRuntime
) -> None:
    def unplug() -> None:
        (tree / "bus" / "pci" / "devices" / "0000:00:07.0").unlink()
        shutil.rmtree(tree / "devices" / "pci0000:00" / "0000:00:07.0")

    text = await poll(backend(tree, runtime.address), unplug)
    assert value(text, "accel_up", device="tpu3") == 0
    assert value(text, "accel_device_info", device="tpu3", pci_bus_id="0000:00:07.0") == 1
    assert total(text, "accel_fault_events_total", device="tpu3", severity="fatal") == 1
    assert value(text, "accel_exporter_backend_up", backend="tpu") == 1


async def test_gasket_status_and_resets_of_accel_chips(tmp_path: Path) -> None:
    """v4 chips: DEAD is a lost chip (fatal, once); LAMED and a reset are recoverable."""
    root = tmp_path / "sys"
    shutil.copytree(V4, root, symlinks=True)
    accel0 = root / "devices" / "pci0000:00" / "0000:00:04.0" / "accel" / "accel0"
    accel1 = root / "devices" / "pci0000:00" / "0000:00:05.0" / "accel" / "accel1"

    def trouble() -> None:
        (accel0 / "status").write_text("DEAD\n")
        (accel1 / "status").write_text("LAMED\n")
        (accel1 / "reset_count").write_text("1\n")

    text = await poll(backend(root, closed_address()), trouble, lambda: None)
    assert value(text, "accel_up", device="tpu0") == 0
    assert value(text, "accel_device_info", device="tpu0", pci_bus_id="0000:00:04.0") == 1
    # DEAD, then lost at the next poll: two fatal events, the loss counted once.
    assert total(text, "accel_fault_events_total", device="tpu0", severity="fatal") == 2
    assert total(text, "accel_fault_code_events_total", device="tpu0", code="driver_dead") == 1
    assert total(text, "accel_fault_code_events_total", device="tpu0", code="lost") == 1
    assert value(text, "accel_up", device="tpu1") == 1
    assert total(text, "accel_fault_events_total", device="tpu1", severity="recoverable") == 2
    for code in ("driver_lamed", "chip_reset"):
        assert total(text, "accel_fault_code_events_total", device="tpu1", code=code) == 1


async def test_no_tpu_disables_the_backend_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="accel_exporter")
    address = closed_address()
    with pytest.raises(BackendUnavailableError, match=r"no TPU chip under .* UNAVAILABLE"):
        backend(tmp_path, address).discover()
    caplog.clear()
    text = await poll(backend(tmp_path, address), lambda: None)
    assert value(text, "accel_exporter_backend_up", backend="tpu") == 0
    assert "accel_device_info" not in names(text)
    lines = [r.getMessage() for r in caplog.records]
    assert len([m for m in lines if "no TPU chip" in m]) == 1, lines
    assert not [m for m in lines if "TPU" in m and "no TPU chip" not in m], lines


# -- the runtime failing ----------------------------------------------------------------


async def test_call_timeout_is_identity_only_then_telemetry_returns(
    tree: Path, runtime: FakeTpuRuntime
) -> None:
    b = backend(tree, runtime.address, timeout=0.2)
    runtime.delay = 0.6
    runtime.calls = 0
    text = await poll(b)
    # One deadline for the whole poll, not one per metric and chip: the call past
    # its deadline is the last the poll makes (none, if the deadline passed before
    # the runtime even saw it), where a poll that went on would make five.
    assert runtime.calls <= 1, runtime.calls
    assert value(text, "accel_up", device="tpu0") == 1
    assert value(text, "accel_utilization_ratio", device="tpu0") is None
    assert "no answer within 0.2s" in b.missing["tpu0"]["utilization"]

    def answer() -> None:
        runtime.delay = 0.0

    text = await poll(b, answer)
    assert value(text, "accel_utilization_ratio", device="tpu0") == 0.875


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION])
async def test_runtime_not_initialised_is_identity_only(
    tree: Path, runtime: FakeTpuRuntime, code: grpc.StatusCode
) -> None:
    runtime.not_initialised = code
    b = backend(tree, runtime.address)
    text = await poll(b)
    assert [value(text, "accel_up", device=f"tpu{i}") for i in range(4)] == [1, 1, 1, 1]
    assert "accel_utilization_ratio" not in names(text)
    assert code.name in b.missing["tpu1"]["memory_total_bytes"]


async def test_workload_that_exits_and_returns(tree: Path, runtime: FakeTpuRuntime) -> None:
    b = backend(tree, runtime.address)
    text = await poll(b, runtime.stop)
    assert value(text, "accel_up", device="tpu0") == 1
    assert value(text, "accel_utilization_ratio", device="tpu0") is None
    text = await poll(b, runtime.start)
    assert value(text, "accel_utilization_ratio", device="tpu0") == 0.875


async def test_older_libtpu_leaves_bandwidth_out_with_a_reason(
    tree: Path, runtime: FakeTpuRuntime
) -> None:
    runtime.unsupported = {HBM_BANDWIDTH}
    runtime.status_supported = False
    b = backend(tree, runtime.address)
    text = await poll(b)
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="tpu0") is None
    assert value(text, "accel_memory_used_bytes", device="tpu0") == 11 * GIB
    assert "NOT_FOUND" in b.missing["tpu0"]["memory_bandwidth_utilization"]


async def test_runtime_only_chips_with_two_devices_each(tmp_path: Path) -> None:
    """No /sys/bus/pci (a container): chips from the runtime; two devices per chip."""
    rt = FakeTpuRuntime(
        {
            i: FakeChip(50.0 * i, [GIB, 2 * GIB], [96 * GIB, 96 * GIB], [10.0, 30.0])
            for i in range(2)
        }
    )
    rt.start()
    try:
        text = await poll(backend(tmp_path, rt.address))
    finally:
        rt.stop()
    assert value(text, "accel_utilization_ratio", device="tpu1") == 0.5
    assert value(text, "accel_memory_used_bytes", device="tpu1") == 3 * GIB
    assert value(text, "accel_memory_total_bytes", device="tpu0") == 192 * GIB
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="tpu0") == 0.2
    assert value(text, "accel_device_info", device="tpu0", pci_bus_id="") == 1


def test_catalogue_has_a_fatal_code_for_a_lost_chip() -> None:
    assert faults.classify("tpu", "lost") == "fatal"
    assert faults.classify("tpu", "pcie_fatal") == "fatal"
    assert faults.classify("tpu", "core_error") == "recoverable"


def test_command_line_reads_the_runtime_at_the_given_address(runtime: FakeTpuRuntime) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--backends",
            "tpu",
            "--once",
            "--path.sysfs",
            str(V5E),
            "--tpu.runtime-address",
            runtime.address,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert value(proc.stdout, "accel_utilization_ratio", device="tpu2") == 1
    assert proc.stderr.count("TPU: 4 chips (TPU v5e), 4 in sysfs") == 1
