"""The fault events the poller makes of transitions, and the driver's live verdict on
the fake NVML (issue 34): a lost device is one ``lost`` event per loss, whatever
the vendor and whenever it was lost; a repair flag is an event when it rises; NVML's
recovery action outranks a reset-class Xid.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import ClassVar

import pynvml
import pytest

from exporter.backends.base import Backend, BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.model import DeviceInfo, DeviceLostError, FaultEvent, Reading
from exporter.poller import Poller
from tests.support.exposition import total, value
from tests.support.fakes.nvml import FakeNVML

NOW = 1_700_000_000.0
pytestmark = pytest.mark.timeout(30)


class Scripted(Backend):
    """One device of a given vendor whose state a test sets: ``up``, ``lost`` (the
    read raises DeviceLostError), ``gone`` (a down reading with a ``lost`` event, as
    the Ascend and TPU backends hand over), ``broken`` (a read that fails for another
    reason); and its remap counts."""

    name: ClassVar[str] = "scripted"

    def __init__(self, vendor: str, state: str = "up") -> None:
        super().__init__(BackendOptions())
        self.vendor, self.state = vendor, state
        self.rows: dict[str, float] = {}

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("dev0", self.vendor, "uuid-0")]

    def read(self, device: DeviceInfo) -> Reading:
        if self.state == "lost":
            raise DeviceLostError("GPU is lost")
        if self.state == "gone":
            return Reading(up=False, down_reason="gone", fault_events=[FaultEvent("lost", "x")])
        if self.state == "broken":
            raise RuntimeError("a read that failed")
        return Reading(utilization=0.5, remapped_rows=dict(self.rows))


async def text_of(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


@pytest.fixture
async def pollers() -> AsyncIterator[Callable[..., Poller]]:
    made: list[Poller] = []

    def build(*backends: Backend) -> Poller:
        p = Poller(list(backends), interval=1, timeout=5, clock=lambda: NOW)
        made.append(p)
        return p

    yield build
    for p in made:
        await p.stop()


def lost_events(text: str) -> float | None:
    return value(text, "accel_fault_code_events_total", device="dev0", code="lost")


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "oneapi", "gaudi", "ascend", "tpu", "cpu"])
async def test_lost_at_the_first_poll_counts_once(
    pollers: Callable[..., Poller], vendor: str
) -> None:
    poller = pollers(Scripted(vendor, "lost"))
    for _ in range(3):
        text = await text_of(poller)
    assert lost_events(text) == 1
    assert total(text, "accel_fault_events_total", device="dev0", action="reboot") == 1
    assert value(text, "accel_fault_events_total", severity="fatal", action="reboot") == 1


async def test_each_loss_counts_once_whatever_the_backend_hands_over(
    pollers: Callable[..., Poller],
) -> None:
    backend = Scripted("amd")
    poller = pollers(backend)
    text = await text_of(poller)
    assert lost_events(text) is None
    # The reboot-class counter is there at 0 before the first loss, for increase().
    assert value(text, "accel_fault_events_total", severity="fatal", action="reboot") == 0
    for state in ("lost", "gone", "broken", "lost"):  # one loss, however it reads
        backend.state = state
        text = await text_of(poller)
    assert lost_events(text) == 1
    backend.state = "up"
    await text_of(poller)
    backend.state = "gone"  # lost again after answering: a second loss
    text = await text_of(poller)
    assert lost_events(text) == 2


async def test_repair_flags_are_events_when_they_rise(pollers: Callable[..., Poller]) -> None:
    backend = Scripted("nvidia")
    backend.rows = {"pending": 1.0, "failure": 0.0}  # pending before the exporter started
    poller = pollers(backend)
    text = await text_of(poller)
    await text_of(poller)
    pending = {"device": "dev0", "code": "remap_pending", "action": "reset_when_idle"}
    assert value(text, "accel_fault_code_events_total", **pending) == 1
    backend.rows = {"pending": 0.0, "failure": 1.0}  # the reset came, the remap failed
    text = await text_of(poller)
    text = await text_of(poller)
    failure = {"device": "dev0", "code": "remap_failure", "action": "isolate"}
    assert value(text, "accel_fault_code_events_total", **failure) == 1
    assert value(text, "accel_fault_code_events_total", **pending) == 1
    backend.rows = {"pending": 3.0, "failure": 1.0}  # Gaudi counts rows: rises again
    text = await text_of(poller)
    assert value(text, "accel_fault_code_events_total", **pending) == 2
    assert value(text, "accel_fault_code_events_total", **failure) == 1


# -- the fake NVML: the driver's verdict ----------------------------------------------


@pytest.fixture
async def nvidia(tmp_path: Path) -> AsyncIterator[Callable[[FakeNVML], Poller]]:
    made: list[Poller] = []

    def build(fake: FakeNVML) -> Poller:
        backend = NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)
        p = Poller([backend], interval=1, timeout=5, clock=lambda: NOW)
        made.append(p)
        return p

    yield build
    for p in made:
        await p.stop()


def xid(text: str, device: str, code: str, action: str) -> float | None:
    labels = {"device": device, "code": code, "action": action}
    return value(text, "accel_fault_code_events_total", **labels)


async def test_node_reboot_verdict_overrides_a_reset_class_xid(
    nvidia: Callable[[FakeNVML], Poller],
) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    poller = nvidia(fake)
    await text_of(poller)
    # Xid 119 is RESET_GPU in the catalog; the driver then says the node must reboot.
    assert fake.inject_xid(2, 119) == 1
    assert fake.set_recovery_action(2, pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT) == 1
    text = await text_of(poller)
    assert xid(text, "nvidia2", "119", "reboot") == 1
    assert xid(text, "nvidia2", "119", "reset") is None
    assert xid(text, "nvidia2", "recovery_action", "reboot") == 1
    # The driver's reboot makes both fatal, whatever their catalogue severity.
    assert value(text, "accel_fault_events_total", device="nvidia2", action="reboot") == 2
    assert value(text, "accel_fault_events_total", device="nvidia2", action="reset") == 0
    # Without a verdict the same Xid is its catalog class.
    fake.inject_xid(4, 119)
    text = await text_of(poller)
    assert xid(text, "nvidia4", "119", "reset") == 1


async def test_verdict_grades_an_nvlink5_xid(nvidia: Callable[[FakeNVML], Poller]) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    poller = nvidia(fake)
    await text_of(poller)
    fake.inject_xid(0, 145)  # no verdict: watched
    text = await text_of(poller)
    assert xid(text, "nvidia0", "145", "watch") == 1
    fake.gpus[1].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
    fake.inject_xid(1, 145)
    fake.gpus[5].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P
    fake.inject_xid(5, 154)
    text = await text_of(poller)
    assert xid(text, "nvidia1", "145", "reset") == 1
    assert xid(text, "nvidia5", "154", "reset_when_idle") == 1


async def test_no_recovery_action_on_an_older_driver_is_no_verdict(
    nvidia: Callable[[FakeNVML], Poller],
) -> None:
    # A driver without the field answers it NotSupported; one without the symbol,
    # FunctionNotFound for the whole call: no verdict either way, no exception.
    fake = FakeNVML.h100_node(mig_on=None)
    fake.gpus[2].unsupported.add("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")
    fake.gpus[2].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    poller = nvidia(fake)
    await text_of(poller)
    fake.inject_xid(2, 119)
    text = await text_of(poller)
    assert xid(text, "nvidia2", "119", "reset") == 1
    assert value(text, "accel_up", device="nvidia2") == 1

    old = FakeNVML.h100_node(mig_on=None, missing_functions={"nvmlDeviceGetFieldValues"})
    old.gpus[3].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    poller = nvidia(old)
    await text_of(poller)
    old.inject_xid(3, 119)
    text = await text_of(poller)
    assert xid(text, "nvidia3", "119", "reset") == 1
    assert value(text, "accel_up", device="nvidia3") == 1
    # Asked once: an answer that cannot change is remembered.
    asked = old.calls["nvmlDeviceGetFieldValues"]
    old.inject_xid(3, 119)
    text = await text_of(poller)
    assert xid(text, "nvidia3", "119", "reset") == 2
    assert old.calls["nvmlDeviceGetFieldValues"] == asked


async def test_gpu_lost_without_an_xid_starts_at_reboot(
    nvidia: Callable[[FakeNVML], Poller],
) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    poller = nvidia(fake)
    await text_of(poller)
    fake.lose(6, xid=None)  # GPU_IS_LOST with no Xid pending
    await text_of(poller)
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia6") == 0
    assert xid(text, "nvidia6", "lost", "reboot") == 1
    assert total(text, "accel_fault_events_total", device="nvidia6", severity="fatal") == 1


async def test_gpu_lost_before_the_exporter_started_is_down_and_counted_once(
    nvidia: Callable[[FakeNVML], Poller],
) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    fake.lose(5, xid=None)  # fell off the bus before the exporter started
    poller = nvidia(fake)
    for _ in range(3):
        text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia5") == 0
    assert value(text, "accel_device_info", device="nvidia5") == 1  # identity: its index
    assert xid(text, "nvidia5", "lost", "reboot") == 1
    assert value(text, "accel_up", device="nvidia4") == 1
