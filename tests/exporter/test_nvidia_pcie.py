"""PCIe throughput of the NVIDIA backend (``exporter/backends/nvidia/pcie.py``): every
GPU's 20 ms driver samples are taken together, each read collects its own, and a
failure is judged as every other NVML answer is (lost ends the read, NotSupported is
asked no more).

The fake's ``pcie_samples_meet`` makes each sample wait until the expected number are
in flight at once, so a reader that asked them one at a time fails here, with no
timing in the assertion."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend, pcie
from exporter.model import DeviceInfo, DeviceLostError
from tests.support.fakes.nvml import FakeNVML

pytestmark = pytest.mark.timeout(30)

FN = "nvmlDeviceGetPcieThroughput"


@pytest.fixture
def fake() -> Iterator[FakeNVML]:
    fake = FakeNVML.h100_node(mig_on=None)
    yield fake
    fake.release()


def backend(fake: FakeNVML, tmp_path: Path) -> tuple[NvidiaBackend, list[DeviceInfo]]:
    b = NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)
    return b, b.discover()


def test_one_poll_takes_every_gpus_samples_together(fake: FakeNVML, tmp_path: Path) -> None:
    b, devices = backend(fake, tmp_path)
    try:
        for _ in range(2):  # and again the next poll
            fake.pcie_samples_meet(2 * len(devices))
            for d, g in zip(devices, fake.gpus, strict=True):
                r = b.read(d)
                assert r.pcie_bytes_per_second == {
                    "rx": g.pcie_rx_kbs * 1024,
                    "tx": g.pcie_tx_kbs * 1024,
                }, d.device
        assert fake.calls[FN] == 2 * 2 * len(devices)
    finally:
        b.close()


def test_a_lost_gpu_ends_its_own_read_and_no_other(fake: FakeNVML, tmp_path: Path) -> None:
    b, devices = backend(fake, tmp_path)
    try:
        fake.lose(5, xid=None)
        for _ in range(2):
            for d in devices:
                if d.device == "nvidia5":
                    with pytest.raises(DeviceLostError):
                        b.read(d)
                else:
                    assert set(b.read(d).pcie_bytes_per_second) == {"rx", "tx"}
        # The first poll asked all eight (the loss was not known yet); the second
        # asked no sample of the lost GPU, whose read ends before it would collect.
        assert fake.calls[FN] == 2 * 8 + 2 * 7
    finally:
        b.close()


def test_not_supported_is_remembered_and_asked_no_more(fake: FakeNVML, tmp_path: Path) -> None:
    fake.gpus[2].unsupported.add(FN)
    b, devices = backend(fake, tmp_path)
    try:
        for poll in range(2):
            for d in devices:
                r = b.read(d)
                if d.device == "nvidia2":
                    assert r.pcie_bytes_per_second == {}
                    missing = b.missing.get("nvidia2", {})
                    for key in pcie.KEYS:
                        assert missing[key] == "NVMLError_NotSupported", (poll, key)
            if poll == 0:
                assert fake.calls[FN] == 16
        assert fake.calls[FN] == 16 + 14
    finally:
        b.close()


def test_a_sample_no_longer_fresh_is_taken_again(
    fake: FakeNVML, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, devices = backend(fake, tmp_path)
    try:
        b.read(devices[0])
        assert fake.calls[FN] == 16  # every GPU's, started by the first read
        b.read(devices[1])
        assert fake.calls[FN] == 16  # its own, already taken
        monkeypatch.setattr(pcie, "FRESH_SECONDS", -1.0)  # every sample is old now
        b.read(devices[2])
        # Taken again for the six GPUs not yet read, nvidia2 among them.
        assert fake.calls[FN] == 16 + 12
    finally:
        b.close()


def test_close_does_not_wait_on_a_sample_that_hangs(fake: FakeNVML, tmp_path: Path) -> None:
    b, devices = backend(fake, tmp_path)
    fake.hang(FN, 4)
    try:
        b.read(devices[0])
        assert fake.hanging.wait(5)
        start = time.monotonic()
        b.close()
        assert time.monotonic() - start < pcie.CLOSE_WAIT_SECONDS + 5
    finally:
        fake.release()
