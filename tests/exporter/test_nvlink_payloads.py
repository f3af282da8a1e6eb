"""NVLink Xid payloads (issue 34): Xid 74's registers and the NVLink5 Xids' Fatal or
Nonfatal word, decoded from the driver's kernel log line into a class
(``linkpayload``), joined one line to one NVML event (``payloads``), and exported
as the event's class, which for these codes may be lower than the catalogue's
default (``Catalogue.action``) while the driver's recovery action still raises it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pynvml
import pytest

from accel_common.remedies import ActionClass
from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.backends.nvidia.device import Gpu
from exporter.backends.nvidia.kmsg import KmsgReader, Record
from exporter.backends.nvidia.linkpayload import XidLine, decode, is_hopper, parse
from exporter.backends.nvidia.payloads import MAX_PENDING, Payloads, bus_key
from exporter.cli import build_parser, make_backends, parse_args
from exporter.faults import BUILTIN
from exporter.model import DeviceInfo, FaultEvent
from exporter.poller import Poller
from tests.support.exposition import value
from tests.support.fakes.nvml import FakeNVML

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000.0


def xid74(*regs: int, bus: str = "0000:18:00") -> str:
    fields = ", ".join(hex(r) for r in regs)
    return (
        f"NVRM: Xid (PCI:{bus}): 74, pid=1234, name=python3, "
        f"NVLink: fatal error detected on link 4({fields})"
    )


def nvlink5(code: int, word: str, bus: str = "0000:18:00") -> str:
    return (
        f"NVRM: Xid (PCI:{bus}): {code}, pid='<unknown>', name=<unknown>, "
        f"NETIR_LINK_EVT {word} XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000)"
    )


def classify(message: str, hopper: bool = True) -> ActionClass | None:
    line = parse(message)
    assert line is not None, message
    found = decode(line, hopper)
    return None if found is None else found.action


# -- the decoder ---------------------------------------------------------------------

_B = [1 << i for i in range(32)]


@pytest.mark.parametrize(
    ("regs", "expected"),
    [
        # First register bits 0, 23, 30: safe to ignore.
        ((_B[0], 0, 0, 0, 0, 0, 0), "ignore"),
        ((_B[23] | _B[30], 0, 0, 0, 0, 0, 0), "ignore"),
        # Sympathetic or secondary: first register bits 1, 20; fourth 16, 17, 18.
        ((_B[1], 0, 0, 0, 0, 0, 0), "watch"),
        ((_B[20] | _B[0], 0, 0, 0, 0, 0, 0), "watch"),
        ((0, 0, 0, _B[16], 0, 0, 0), "watch"),
        ((0, 0, 0, _B[17] | _B[18], 0, 0, 0), "watch"),
        # Fifth register bits 20, 23, 26, 29: an ECC threshold, continue operation.
        ((0, 0, 0, 0, _B[20] | _B[29], 0, 0), "watch"),
        # Hardware resolutions (ECC/parity, mechanics, signal integrity): reset.
        ((_B[4], 0, 0, 0, 0, 0, 0), None),
        ((_B[8], 0, 0, 0, 0, 0, 0), None),
        ((_B[21], 0, 0, 0, 0, 0, 0), None),
        ((0, 0, _B[16], 0, 0, 0, 0), None),  # the catalog's "0x0, 0x0, 0x10000" line
        ((0, 0, _B[13], 0, 0, 0, 0), None),
        ((0, 0, 0, 0, _B[18], 0, 0), None),
        # Sympathetic bits beside a fault bit follow the fault.
        ((_B[1] | _B[4], 0, 0, 0, 0, 0, 0), None),
        ((0, 0, _B[0], _B[16], 0, 0, 0), None),
        # A bit the workflow does not list, a register it does not define, no bit.
        ((_B[2], 0, 0, 0, 0, 0, 0), None),
        ((_B[0], _B[0], 0, 0, 0, 0, 0), None),
        ((0, 0, 0, 0, 0, 0, _B[1]), None),
        ((0, 0, 0, 0, 0, 0, 0), None),
    ],
)
def test_xid74_registers(regs: tuple[int, ...], expected: ActionClass | None) -> None:
    assert classify(xid74(*regs)) == expected


def test_xid74_is_decoded_on_hopper_only() -> None:
    assert classify(xid74(_B[1], 0, 0, 0, 0, 0, 0), hopper=False) is None
    assert is_hopper("NVIDIA H100 80GB HBM3") and is_hopper("NVIDIA GH200 480GB")
    assert is_hopper("NVIDIA H200") and is_hopper("NVIDIA H20")
    assert not is_hopper("NVIDIA A100-SXM4-80GB") and not is_hopper("NVIDIA B200")
    assert not is_hopper("NVIDIA H1000")


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: Xid (PCI:0000:18:00): 74, NVLink: fatal error detected on link 4(0x0, 0x2)",
        "NVRM: Xid (PCI:0000:18:00): 74, link 4(0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
        "NVRM: Xid (PCI:0000:18:00): 74, link 4(0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 0x123456789)",
        "NVRM: Xid (PCI:0000:18:00): 74, link 4(0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 12)",
        "NVRM: Xid (PCI:0000:18:00): 74, NVLink: no registers at all",
        "NVRM: Xid (PCI:0000:18:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 08 (0x12)",
        "NVRM: Xid (PCI:0000:18:00): 146, rlw_remap Fatal XC0 i0 Link 08 (0x1 0x2)",
        "NVRM: Xid (PCI:0000:18:00): 147, TREX Deadly XC0 i0 Link 08 (0x1 0x2)",
    ],
)
def test_undecodable_payloads_keep_the_default(message: str) -> None:
    assert classify(message) is None


@pytest.mark.parametrize("code", range(144, 151))
def test_nvlink5_by_the_drivers_word(code: int) -> None:
    assert classify(nvlink5(code, "Fatal")) == "reset"
    assert classify(nvlink5(code, "Nonfatal")) == "watch"
    unit = "NVRM: Xid (PCI:0000:18:00): {}, NVLPW_CTRL/SAW_MVB Fatal XC1 i1 Link -1 (0x1 0x0)"
    assert classify(unit.format(code)) == "reset"


def test_other_xids_and_other_lines_are_not_decoded() -> None:
    line = parse("NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.")
    assert line == XidLine("0000:18:00", "79", " pid=1, GPU has fallen off the bus.")
    assert decode(line, True) is None
    assert parse("NVRM: GPU at PCI:0000:18:00: GPU-1234") is None
    assert parse("NVRM: Xid (PCI:0000:18:00): 74, " + "x" * 2000) is None
    mig = parse("NVRM: Xid (PCI:0000:3B:00 GPU-I:05): 74, link 1(0x1, 0, 0, 0, 0, 0, 0)")
    assert mig is not None and (mig.bus, mig.code) == ("0000:3b:00", "74")


# -- the catalogue: a decoded payload replaces the default, the verdict raises -------


def test_a_decoded_nvlink_payload_replaces_the_default_class() -> None:
    assert BUILTIN.action("nvidia", "74") == "reset"
    assert BUILTIN.action("nvidia", "74", None, "watch") == "watch"
    assert BUILTIN.action("nvidia", "74", None, "ignore") == "ignore"
    assert BUILTIN.action("nvidia", "145", None, "reset") == "reset"
    assert BUILTIN.severity("nvidia", "74", None, "watch") == "recoverable"
    assert BUILTIN.severity("nvidia", "74", None, "ignore") == "info"
    # The driver's recovery action still raises a decoded class, never lowers it.
    assert BUILTIN.action("nvidia", "74", "reset", "watch") == "reset"
    assert BUILTIN.action("nvidia", "74", "ignore", "watch") == "watch"
    assert BUILTIN.severity("nvidia", "74", "reboot", "ignore") == "fatal"


def test_a_decoded_class_lowers_no_other_code() -> None:
    assert BUILTIN.action("nvidia", "79", None, "ignore") == "reboot"
    assert BUILTIN.severity("nvidia", "79", None, "ignore") == "fatal"
    assert BUILTIN.action("amd", "74", None, "ignore") == BUILTIN.action("amd", "74")


# -- joining a line to its NVML event ----------------------------------------------


class Lines(KmsgReader):
    """A reader whose records a test hands over."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent"))
        self.queue: list[str] = []

    def read(self) -> list[Record]:
        out = [Record(i, 0, m) for i, m in enumerate(self.queue)]
        self.queue = []
        return out


def h100(index: int, bus: str) -> Gpu:
    return Gpu(DeviceInfo(f"nvidia{index}", "nvidia", "u", "NVIDIA H100 80GB HBM3", bus), None, 0)


def test_one_line_grades_one_event_and_unclaimed_lines_expire() -> None:
    clock = [0.0]
    lines = Lines()
    payloads = Payloads(lines, window_s=30.0, clock=lambda: clock[0])
    gpu = h100(0, "0000:18:00.0")
    assert bus_key(gpu.info.pci_bus_id) == "0000:18:00"
    lines.queue = [xid74(_B[1], 0, 0, 0, 0, 0, 0), xid74(_B[0], 0, 0, 0, 0, 0, 0)]
    lines.queue.append(xid74(_B[1], 0, 0, 0, 0, 0, 0, bus="0000:2a:00"))  # another GPU
    payloads.poll()
    events = [FaultEvent("74"), FaultEvent("74"), FaultEvent("74"), FaultEvent("79")]
    got = payloads.apply(gpu, events)
    assert [e.decoded for e in got] == ["watch", "ignore", None, None]
    assert "sympathetic" in got[0].detail
    # The other GPU's line, never claimed, is gone after the window.
    clock[0] = 31.0
    assert payloads.apply(h100(1, "0000:2A:00.0"), [FaultEvent("74")])[0].decoded is None


def test_the_backlog_is_bounded() -> None:
    lines = Lines()
    payloads = Payloads(lines, clock=lambda: 0.0)
    lines.queue = [xid74(_B[1], 0, 0, 0, 0, 0, 0)] * (MAX_PENDING + 10)
    payloads.poll()
    got = payloads.apply(h100(0, "0000:18:00.0"), [FaultEvent("74")] * (MAX_PENDING + 10))
    assert sum(e.decoded == "watch" for e in got) == MAX_PENDING


# -- end to end: the fake NVML and a kernel log file --------------------------------


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[FakeNVML, Path, Poller]]:
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"")
    fake = FakeNVML.h100_node(mig_on=None)
    options = BackendOptions(sysfs=tmp_path, kmsg_path=kmsg)
    poller = Poller([NvidiaBackend(options, nvml=fake)], interval=1, timeout=5, clock=lambda: NOW)
    await poller.poll_once()  # discovery opens the log at its end
    yield fake, kmsg, poller
    await poller.stop()


def write(kmsg: Path, *messages: str) -> None:
    usec = time.monotonic_ns() // 1000 + 1
    with kmsg.open("ab") as f:
        for i, m in enumerate(messages):
            f.write(f"3,{usec + i},{usec + i},-;{m}\n".encode())


def xid(text: str, device: str, code: str, action: str) -> float | None:
    labels = {"device": device, "code": code, "action": action}
    return value(text, "accel_fault_code_events_total", **labels)


async def test_nvlink_xids_are_exported_with_their_payloads_class(
    node: tuple[FakeNVML, Path, Poller],
) -> None:
    fake, kmsg, poller = node
    write(
        kmsg,
        xid74(_B[1], 0, 0, 0, 0, 0, 0, bus="0000:18:00"),  # nvidia0: its partner's error
        xid74(_B[4], 0, 0, 0, 0, 0, 0, bus="0000:2a:00"),  # nvidia1: ECC on its link
        xid74(_B[0], 0, 0, 0, 0, 0, 0, bus="0000:3a:00"),  # nvidia2: ignorable
        xid74(_B[1], 0, 0, 0, 0, 0, 0, bus="0000:5d:00"),  # nvidia3: NVML never saw it
        nvlink5(145, "Fatal", bus="0000:9a:00"),  # nvidia4
    )
    for index, code in ((0, 74), (1, 74), (2, 74), (4, 145)):
        assert fake.inject_xid(index, code) == 1
    text = (await poller.poll_once()).text.decode()
    assert xid(text, "nvidia0", "74", "watch") == 1
    assert xid(text, "nvidia0", "74", "reset") is None
    assert xid(text, "nvidia1", "74", "reset") == 1
    assert xid(text, "nvidia2", "74", "ignore") == 1
    assert xid(text, "nvidia4", "145", "reset") == 1
    # A line without its NVML event counts nothing: one count per event.
    assert not [ln for ln in text.splitlines() if 'device="nvidia3"' in ln and 'code="74"' in ln]
    # The device's fault counter by severity and class agrees: a sympathetic Xid 74
    # is recoverable and watched, not fatal and reset.
    events = {"device": "nvidia0", "severity": "recoverable", "action": "watch"}
    assert value(text, "accel_fault_events_total", **events) == 1
    fatal = {"device": "nvidia0", "severity": "fatal", "action": "reset"}
    assert value(text, "accel_fault_events_total", **fatal) == 0
    # An Xid 74 whose line is gone keeps the catalogue's default.
    fake.inject_xid(0, 74)
    text = (await poller.poll_once()).text.decode()
    assert xid(text, "nvidia0", "74", "reset") == 1
    assert xid(text, "nvidia0", "74", "watch") == 1


async def test_the_drivers_verdict_still_raises_a_sympathetic_event(
    node: tuple[FakeNVML, Path, Poller],
) -> None:
    fake, kmsg, poller = node
    write(kmsg, xid74(_B[1], 0, 0, 0, 0, 0, 0, bus="0000:ab:00"))
    fake.gpus[5].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
    fake.inject_xid(5, 74)
    text = (await poller.poll_once()).text.decode()
    assert xid(text, "nvidia5", "74", "reset") == 1
    assert xid(text, "nvidia5", "74", "watch") is None


async def test_without_a_kernel_log_nvlink_xids_keep_their_default(
    tmp_path: Path,
) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    options = BackendOptions(sysfs=tmp_path, kmsg_path=tmp_path / "no-kmsg")
    poller = Poller([NvidiaBackend(options, nvml=fake)], interval=1, timeout=5, clock=lambda: NOW)
    try:
        await poller.poll_once()
        fake.inject_xid(0, 74)
        fake.inject_xid(1, 146)
        text = (await poller.poll_once()).text.decode()
        assert xid(text, "nvidia0", "74", "reset") == 1
        assert xid(text, "nvidia1", "146", "watch") == 1
    finally:
        await poller.stop()


# -- the flag ----------------------------------------------------------------------


def test_the_kmsg_flag_reaches_the_nvidia_backend(tmp_path: Path) -> None:
    assert "--path.kmsg" in build_parser().format_help()
    args, _ = parse_args(["--backends=nvidia"])
    (backend,) = make_backends(args)
    assert backend.options.kmsg_path == Path("/dev/kmsg")
    args, _ = parse_args(["--backends=nvidia", f"--path.kmsg={tmp_path / 'k'}"])
    assert make_backends(args)[0].options.kmsg_path == tmp_path / "k"
    args, _ = parse_args(["--backends=nvidia", "--path.kmsg="])
    assert make_backends(args)[0].options.kmsg_path is None
