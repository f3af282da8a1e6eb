"""The gaudi backend against the fake HLML (tests/support/fakes/hlml.py), through the real
Poller and renderer, so that what is checked is the exposition Prometheus would scrape.

The main table is an HLS-Gaudi3 node: 8 HL-325L wired all-to-all over their RoCE
ports. The fake is a table of ctypes callbacks, so every call below goes through the
backend's real ctypes declarations, out-parameters and structures.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import sys
import types
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from exporter import faults
from exporter.backends import backend_class
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.gaudi import GaudiBackend, binding, hlml
from exporter.backends.gaudi.device import FIELDS
from exporter.backends.gaudi.events import decode
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Reading
from exporter.poller import Poller
from tests.support.exposition import masked, parse, total, value
from tests.support.fakes import hlml as fake_hlml
from tests.support.fakes.hlml import (
    CLOCK_RATE,
    CRITICAL_ERR,
    DRAM_DERR,
    DRAM_SERR,
    ECC_DERR,
    ECC_SERR,
    FakeHLML,
)
from tests.support.waits import until_awaited

NOW = 1_700_000_000.0
DEVICES = [f"gaudi{i}" for i in range(8)]
BUSES = ["19", "1a", "33", "34", "9a", "9b", "b3", "b4"]

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The node's PCI functions: NUMA 0 for the first four Gaudis, 1 for the rest, each
    pair behind its own PCIe switch, as ``/sys/bus/pci/devices`` links into the tree."""
    root = tmp_path / "sys"
    for i, bus in enumerate(BUSES):
        addr = f"0000:{bus}:00.0"
        bridge = "pci0000:00" if i < 4 else "pci0000:80"
        real = root / "devices" / bridge / f"0000:00:0{i // 2}.0" / f"0000:0{i // 2}:00.0" / addr
        real.mkdir(parents=True)
        (real / "numa_node").write_text(f"{0 if i < 4 else 1}\n")
        (real / "local_cpulist").write_text("0-31\n" if i < 4 else "32-63\n")
        link = root / "bus" / "pci" / "devices" / addr
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)
    return root


@pytest.fixture
def node() -> Iterator[FakeHLML]:
    fake = FakeHLML.gaudi3_node()
    yield fake
    fake.release()  # never leave a poller thread blocked in the fake


class StaticBackend(Backend):
    """A second, trivial backend: it must stay up whatever Gaudi does."""

    name: ClassVar[str] = "static"

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("static0", "sim", "static-0")]

    def read(self, device: DeviceInfo) -> Reading:
        return Reading(utilization=0.5)


@pytest.fixture(params=["ctypes", "pyhlml"])
async def poller_for(
    sysfs: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., tuple[Poller, GaudiBackend]]]:
    """Builds pollers over a fake HLML, reached through ctypes on its C table or through
    the pyhlml binding over the same table (each test runs both), and stops them."""
    made: list[Poller] = []

    def build(
        fake: FakeHLML, *others: Backend, timeout: float = 5.0
    ) -> tuple[Poller, GaudiBackend]:
        options = BackendOptions(sysfs=sysfs)
        if request.param == "pyhlml":
            backend = GaudiBackend(options, pyhlml=fake.binding())
        else:
            backend = GaudiBackend(options, library=fake.table)
        poller = Poller([backend, *others], interval=1, timeout=timeout, clock=lambda: NOW)
        made.append(poller)
        return poller, backend

    yield build
    for p in made:
        await p.stop()


async def poll(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


# -- the fake and the declarations ------------------------------------------------------


def _layout(t: Any) -> tuple[Any, ...]:
    """What a C argument type is to the ABI: its size, and for a pointer the size of
    what it points to (a char pointer and a string are the same; a structure's members
    are compared on their own)."""
    if t in (ctypes.c_char_p, ctypes.c_void_p) or getattr(t, "_type_", None) is ctypes.c_char:
        return ("pointer", t is ctypes.c_void_p)
    if hasattr(t, "contents"):
        if issubclass(t._type_, ctypes.Structure):  # its members are compared below
            return ("pointer", "structure")
        return ("pointer", ctypes.sizeof(t._type_))
    return ("value", ctypes.sizeof(t))


def test_backend_declarations_match_hlml_h() -> None:
    """The backend's ctypes declarations and the fake's, each written from hlml.h."""
    assert set(hlml.PROTOTYPES) == set(fake_hlml.SIGNATURES)
    for name, argtypes in hlml.PROTOTYPES.items():
        theirs = fake_hlml.SIGNATURES[name]
        assert [_layout(t) for t in argtypes] == [_layout(t) for t in theirs], name
    pairs: list[tuple[type[ctypes.Structure], type[ctypes.Structure]]] = [
        (hlml.PciInfo, fake_hlml._PciInfo),
        (hlml.Utilization, fake_hlml._Utilization),
        (hlml.Memory, fake_hlml._Memory),
        (hlml.EventData, fake_hlml._EventData),
    ]
    for ours, fakes in pairs:
        # hlml.h's members first, at hlml.h's offsets, then room for newer releases'.
        header = [(f[0], getattr(fakes, f[0]).offset) for f in fakes._fields_]
        assert [(f[0], getattr(ours, f[0]).offset) for f in ours._fields_[: len(header)]] == header
        assert ctypes.sizeof(ours) >= ctypes.sizeof(fakes) + 64, ours.__name__
    assert hlml.ERROR_AIP_IS_LOST == fake_hlml.AIP_IS_LOST == 15  # hlml.h, not pyhlml's 11


def test_registry_names_the_backend() -> None:
    assert backend_class("gaudi") is GaudiBackend


def test_every_event_code_is_in_the_catalogue() -> None:
    every = ECC_DERR | ECC_SERR | CRITICAL_ERR | CLOCK_RATE | DRAM_DERR | DRAM_SERR
    # lost and remap_pending come from the poller (a loss, a rising pending count).
    assert {e.code for e in decode(every)} | {"lost", "remap_pending"} == set(faults.GAUDI_EVENTS)
    for code in ("ecc_double_bit", "dram_double_bit", "critical_error", "lost"):
        assert faults.classify("gaudi", code) == "fatal", code
    for code in ("ecc_single_bit", "dram_single_bit"):
        assert faults.classify("gaudi", code) == "recoverable", code
    assert faults.classify("gaudi", "clock_rate") == "info"


# -- the node -----------------------------------------------------------------------------


async def test_gaudi3_node_values_units_and_golden(
    node: FakeHLML,
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    poller, backend = poller_for(node)
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="gaudi") == 1
    info = [lb for n, lb, _ in parse(text) if n == "accel_device_info"]
    assert [lb["device"] for lb in info] == DEVICES
    first = info[0]
    assert first["model"] == "HL-325L"
    assert first["uuid"] == "01P0-HL3090A0-18-U4V193-22-07-00"
    assert first["pci_bus_id"] == "0000:19:00.0"  # HLML's upper case, normalised
    assert first["driver_version"] == "1.21.0-555b6b4"
    assert first["numa_node"] == "0" and info[5]["numa_node"] == "1"
    assert first["vendor"] == "gaudi"

    def v(name: str, device: str = "gaudi3", **labels: str) -> float | None:
        return value(text, name, device=device, **labels)

    assert v("accel_up") == 1
    assert v("accel_utilization_ratio") == 0.35
    assert v("accel_memory_used_bytes") == 32 * fake_hlml.GIB
    assert v("accel_memory_total_bytes") == 128 * fake_hlml.GIB
    assert v("accel_temperature_celsius", sensor="gpu") == 43
    assert v("accel_temperature_celsius", sensor="board") == 36
    assert v("accel_power_watts") == 375
    assert v("accel_power_limit_watts") == 850  # the enforced limit, not the default
    assert v("accel_temperature_celsius", sensor="memory") == 45
    assert v("accel_energy_joules_total") == 4000
    assert v("accel_clock_hertz", clock="soc") == 1.6e9
    assert v("accel_pcie_throughput_bytes_per_second", direction="rx") == 8000 * 1024
    assert v("accel_ecc_errors_total", "gaudi2", type="uncorrected") == 1
    assert v("accel_remapped_rows", "gaudi2", type="correctable") == 2
    assert v("accel_remapped_rows", "gaudi2", type="pending") == 1
    assert v("accel_throttle_active", "gaudi7", reason="power_cap") == 1
    assert v("accel_throttle_active", "gaudi7", reason="thermal") == 0
    # hlml.h: corrected ECC counts are not supported, so there is no series, not a 0.
    assert backend.missing["gaudi0"]["ecc_errors.corrected"] == "HLML_ERROR_NOT_SUPPORTED"
    assert total(text, "accel_fault_events_total", device="gaudi3", severity="fatal") == 0
    # All-to-all over RoCE: 21 internal ports, 3 to each of the 7 others.
    assert (
        value(
            text,
            "accel_topology_link_info",
            device="gaudi0",
            peer_device="gaudi7",
            link_type="roce",
            links="3",
        )
        == 1
    )
    assert value(text, "accel_topology_distance", device="gaudi0", peer_device="gaudi7") == 10
    text = await poll(poller)  # a second poll changes nothing that is not new
    promtool_check(text)
    golden("gaudi.prom", masked(text))
    # Unsupported fields are not asked again.
    assert node.calls["hlml_device_get_total_ecc_errors"] == 8 + 2 * 8


async def test_every_field_is_found_or_explained(
    node: FakeHLML, poller_for: Callable[..., tuple[Poller, GaudiBackend]]
) -> None:
    _, backend = poller_for(node)
    for d in backend.discover():
        reading = backend.read(d)
        found = backend.fields(d, reading)
        missing = set(backend.missing[d.device])
        assert found | missing == set(FIELDS), d.device
        assert not found & missing, d.device
    backend.close()


async def test_older_library_lacks_calls(
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
) -> None:
    fake = FakeHLML.gaudi3_node(
        absent=(
            "hlml_get_driver_version",
            "hlml_device_get_replaced_rows_pending_status",
            "hlml_device_get_power_management_limit",
        )
    )
    poller, backend = poller_for(fake)
    text = await poll(poller)
    assert value(text, "accel_power_limit_watts", device="gaudi0") == 900  # the default
    text = await poll(poller)
    assert fake.calls["hlml_device_get_power_management_default_limit"] == 16
    assert value(text, "accel_device_info", device="gaudi0", driver_version="") == 1
    assert value(text, "accel_remapped_rows", device="gaudi0", type="pending") is None
    assert value(text, "accel_remapped_rows", device="gaudi0", type="correctable") == 0
    # ctypes finds no symbol; the binding answers INVALID_ARGUMENT for one.
    reason = backend.missing["gaudi0"]["remapped_rows.pending"]
    assert reason in ("HLML_ERROR_FUNCTION_NOT_FOUND", "HLML_ERROR_INVALID_ARGUMENT")


# -- faults -------------------------------------------------------------------------------


async def test_events_are_counted_by_severity(
    node: FakeHLML, poller_for: Callable[..., tuple[Poller, GaudiBackend]]
) -> None:
    poller, _ = poller_for(node)
    await poll(poller)
    assert node.inject(1, ECC_DERR) == 1
    node.inject(2, CRITICAL_ERR)
    node.inject(3, ECC_SERR)
    node.inject(4, CLOCK_RATE)
    node.inject(5, DRAM_DERR | DRAM_SERR)  # one event, two bits: two faults
    text = await poll(poller)

    def fault(device: str, severity: str) -> float | None:
        return total(text, "accel_fault_events_total", device=device, severity=severity)

    def code(device: str, c: str, severity: str) -> float | None:
        return total(
            text, "accel_fault_code_events_total", device=device, code=c, severity=severity
        )

    assert fault("gaudi1", "fatal") == 1 and code("gaudi1", "ecc_double_bit", "fatal") == 1
    assert fault("gaudi2", "fatal") == 1 and code("gaudi2", "critical_error", "fatal") == 1
    assert fault("gaudi3", "recoverable") == 1 and fault("gaudi3", "fatal") == 0
    assert fault("gaudi4", "info") == 1 and code("gaudi4", "clock_rate", "info") == 1
    assert code("gaudi5", "dram_double_bit", "fatal") == 1
    assert code("gaudi5", "dram_single_bit", "recoverable") == 1
    assert fault("gaudi0", "fatal") == 0 and fault("gaudi0", "info") == 0
    text = await poll(poller)  # counted once
    assert total(text, "accel_fault_events_total", device="gaudi1", severity="fatal") == 1


async def test_older_driver_registers_the_original_event_types(
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
) -> None:
    fake = FakeHLML.gaudi3_node(refuse_event_types=ECC_SERR | DRAM_SERR)
    poller, backend = poller_for(fake)
    await poll(poller)
    assert fake.inject(0, ECC_SERR) == 0  # not registered on this driver
    assert fake.inject(0, CRITICAL_ERR) == 1
    text = await poll(poller)
    assert total(text, "accel_fault_events_total", device="gaudi0", severity="fatal") == 1
    assert "fault_events" not in backend.missing["gaudi0"]


async def test_no_event_set_means_no_fault_counter_with_the_reason(
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
) -> None:
    fake = FakeHLML.gaudi3_node()
    fake.fail("hlml_event_set_create", fake_hlml.NOT_SUPPORTED)
    _, backend = poller_for(fake)
    devices = backend.discover()
    backend.read(devices[0])
    reason = backend.missing["gaudi0"]["fault_events"]
    assert reason == "hlml_event_set_create: HLML_ERROR_NOT_SUPPORTED"
    backend.close()


# -- failures -----------------------------------------------------------------------------


async def test_lost_device_is_down_alone_keeps_identity_and_counts_a_fatal_fault(
    node: FakeHLML, poller_for: Callable[..., tuple[Poller, GaudiBackend]]
) -> None:
    poller, backend = poller_for(node)
    before = await poll(poller)
    uuid5 = next(
        lb["uuid"]
        for n, lb, _ in parse(before)
        if n == "accel_device_info" and lb["device"] == "gaudi5"
    )
    node.lose(5)
    for _ in range(2):  # the loss is one fatal fault, not one per poll
        text = await poll(poller)
        assert value(text, "accel_up", device="gaudi5") == 0
        assert value(text, "accel_device_info", device="gaudi5", uuid=uuid5) == 1
        assert value(text, "accel_utilization_ratio", device="gaudi5") is None
        assert total(text, "accel_fault_events_total", device="gaudi5", severity="fatal") == 1
        assert total(text, "accel_fault_code_events_total", device="gaudi5", code="lost") == 1
        for d in DEVICES:
            if d != "gaudi5":
                assert value(text, "accel_up", device=d) == 1, d
        assert value(text, "accel_exporter_backend_up", backend="gaudi") == 1
    with pytest.raises(DeviceLostError, match="AIP_IS_LOST"):
        backend.read(DeviceInfo("gaudi5", "gaudi", uuid5))
    node.recover(5)
    text = await poll(poller)
    assert value(text, "accel_up", device="gaudi5") == 1
    assert value(text, "accel_utilization_ratio", device="gaudi5") == 0.55


async def test_library_absent_is_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = GaudiBackend(BackendOptions(), paths=(str(tmp_path / "libhlml.so"),))
    poller = Poller([backend], interval=1, timeout=5, clock=lambda: NOW)
    try:
        with caplog.at_level(logging.DEBUG, "accel_exporter"):
            for _ in range(3):
                text = await poll(poller)
                assert value(text, "accel_exporter_backend_up", backend="gaudi") == 0
                assert "accel_up" not in {n for n, _, _ in parse(text)}
    finally:
        await poller.stop()
    lines = [r.getMessage() for r in caplog.records if "gaudi" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "HLML library not found" in lines[0] and "habanalabs" in lines[0]


def test_library_absent_on_this_host() -> None:
    """The real loader with the default paths: one clear reason, or a real Gaudi."""
    backend = GaudiBackend(BackendOptions())
    try:
        devices = backend.discover()
    except BackendUnavailableError as e:
        assert "HLML library not found" in str(e) or "driver" in str(e)
        return
    backend.close()
    pytest.skip(f"real HLML present here ({len(devices)} Gaudis)")


def test_driver_not_loaded() -> None:
    fake = FakeHLML.gaudi3_node(driver_not_loaded=True)
    with pytest.raises(BackendUnavailableError, match="Gaudi driver not loaded"):
        GaudiBackend(BackendOptions(), library=fake.table).discover()


async def test_uninitialised_library_is_initialised_again(
    node: FakeHLML,
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    poller, _ = poller_for(node)
    await poll(poller)
    node.uninitialize()  # as if something shut HLML down under the exporter
    with caplog.at_level(logging.WARNING, "accel_exporter.gaudi"):
        text = await poll(poller)
    assert node.calls["hlml_init"] == 2
    for d in DEVICES:
        assert value(text, "accel_up", device=d) == 1, d
    # The new event set works: an event after re-initialisation is counted.
    assert node.inject(6, CRITICAL_ERR) == 1
    text = await poll(poller)
    assert total(text, "accel_fault_events_total", device="gaudi6", severity="fatal") == 1


async def test_hlml_timeout_answer_leaves_the_field_out_logged_once(
    node: FakeHLML,
    poller_for: Callable[..., tuple[Poller, GaudiBackend]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    node.fail("hlml_device_get_power_usage", fake_hlml.TIMEOUT, index=0)
    poller, backend = poller_for(node)
    with caplog.at_level(logging.WARNING, "accel_exporter.gaudi"):
        for _ in range(3):
            text = await poll(poller)
            assert value(text, "accel_power_watts", device="gaudi0") is None
            assert value(text, "accel_power_watts", device="gaudi1") == 325
            assert value(text, "accel_up", device="gaudi0") == 1
    assert backend.missing["gaudi0"]["power_watts"] == "HLML_ERROR_TIMEOUT"
    assert len([m for m in caplog.messages if "power_watts" in m]) == 1


async def test_hung_call_times_out_and_other_backends_stay_up(
    node: FakeHLML, poller_for: Callable[..., tuple[Poller, GaudiBackend]]
) -> None:
    poller, _ = poller_for(node, StaticBackend(BackendOptions()), timeout=0.3)
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="gaudi") == 1
    node.hang("hlml_device_get_power_usage", 2)
    for _ in range(2):  # timed out, then skipped while the call is still stuck
        text = await asyncio.wait_for(poll(poller), 2)
        assert node.hanging.is_set()
        assert value(text, "accel_exporter_backend_up", backend="gaudi") == 0
        assert value(text, "accel_exporter_backend_up", backend="static") == 1
        for d in DEVICES:  # identities kept, shown down rather than stale
            assert value(text, "accel_up", device=d) == 0, d
            assert value(text, "accel_device_info", device=d) == 1, d
    node.release()

    async def up_again() -> str:
        text = await poll(poller)
        return text if value(text, "accel_exporter_backend_up", backend="gaudi") == 1 else ""

    text = await until_awaited(up_again, what="the backend up again")
    assert value(text, "accel_exporter_backend_up", backend="gaudi") == 1
    assert value(text, "accel_up", device="gaudi2") == 1


# -- topology -----------------------------------------------------------------------------


def test_down_ports_lower_the_device_links(node: FakeHLML, sysfs: Path) -> None:
    node.devices[0].ports_down = {0, 1}  # 19 internal ports up: 2 to each peer
    backend = GaudiBackend(BackendOptions(sysfs=sysfs), library=node.table)
    backend.discover()
    links = {(lk.device, lk.peer_device): (lk.link_type, lk.links) for lk in backend.topology()}
    assert links[("gaudi0", "gaudi1")] == ("roce", 2)
    assert links[("gaudi1", "gaudi0")] == ("roce", 2)
    assert links[("gaudi1", "gaudi2")] == ("roce", 3)
    backend.close()


def test_pcie_cards_are_placed_by_the_pcie_tree(sysfs: Path) -> None:
    fake = FakeHLML.gaudi3_node()
    for d in fake.devices:  # PCIe cards: every port external, none on a baseboard
        d.external_ports = d.ports
    backend = GaudiBackend(BackendOptions(sysfs=sysfs), library=fake.table)
    backend.discover()
    links = {(lk.device, lk.peer_device): lk.link_type for lk in backend.topology()}
    assert links[("gaudi0", "gaudi1")] == "pcie_switch"
    assert links[("gaudi0", "gaudi2")] == "pcie_hostbridge"
    assert links[("gaudi0", "gaudi4")] not in ("roce", "pcie_switch", "pcie_hostbridge")
    assert "roce" not in set(links.values())
    backend.close()


def test_close_releases_the_event_set_and_library(node: FakeHLML) -> None:
    backend = GaudiBackend(BackendOptions(), library=node.table)
    backend.discover()
    backend.close()
    assert node.calls["hlml_event_set_free"] == 1
    assert node.calls["hlml_shutdown"] == 1
    assert not node.initialized
    assert len(backend.discover()) == 8  # and discovering again starts clean
    backend.close()


def test_events_waiting_for_their_read_survive_a_reinitialisation(node: FakeHLML) -> None:
    backend = GaudiBackend(BackendOptions(), library=node.table)
    devices = backend.discover()
    node.inject(0, CRITICAL_ERR)
    node.inject(5, ECC_SERR)
    assert [e.code for e in backend.read(devices[0]).fault_events] == ["critical_error"]
    node.uninitialize()
    assert backend.read(devices[1]).up  # initialises HLML again, with a new event set
    assert node.calls["hlml_init"] == 2
    assert [e.code for e in backend.read(devices[5]).fault_events] == ["ecc_single_bit"]
    node.inject(5, CRITICAL_ERR)  # registered on the new set
    assert [e.code for e in backend.read(devices[5]).fault_events] == ["critical_error"]
    backend.close()


# -- the pyhlml binding -------------------------------------------------------------------


def test_pyhlml_is_used_where_it_imports_and_raises(
    node: FakeHLML, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = types.ModuleType("pyhlml")
    main: Any = node.binding()
    package.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyhlml", package)
    monkeypatch.setitem(sys.modules, "pyhlml.main", main)
    backend = GaudiBackend(BackendOptions())
    assert len(backend.discover()) == 8
    assert node.calls["hlml_init"] == 1
    backend.close()


def test_an_archived_pyhlml_that_does_not_raise_is_passed_over(
    node: FakeHLML, caplog: pytest.LogCaptureFixture
) -> None:
    class Archived(fake_hlml.FakePyhlml):
        @staticmethod
        def check_return(ret: int) -> int:
            return ret  # the archived release builds the error and drops it

    with caplog.at_level(logging.WARNING, "accel_exporter.gaudi"):
        assert not binding.usable(Archived(node.table))
    assert binding.usable(node.binding())
    assert "does not raise" in caplog.text


def test_pyhlml_absent_falls_back_to_ctypes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # makes the import fail
    assert binding.load() is None


def test_pyhlml_without_its_library_is_one_clear_reason(
    node: FakeHLML, capsys: pytest.CaptureFixture[str]
) -> None:
    class NoLibrary(fake_hlml.FakePyhlml):
        def hlmlInit(self) -> None:
            print("Failed to load libhlml")  # what the binding prints
            raise fake_hlml.FakeHLMLError(fake_hlml.UNINITIALIZED)

    backend = GaudiBackend(BackendOptions(), pyhlml=NoLibrary(node.table))
    with pytest.raises(BackendUnavailableError, match="pyhlml could not load"):
        backend.discover()
    assert capsys.readouterr().out == ""  # the binding's print stays out of stdout


def test_the_binding_adapter_answers_every_call_the_ctypes_layer_has() -> None:
    public = {n for n, v in vars(hlml.Hlml).items() if callable(v) and not n.startswith("_")}
    assert public <= set(vars(binding.Pyhlml)), public - set(vars(binding.Pyhlml))


def test_the_real_binding_over_the_fake_table(
    node: FakeHLML, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where habana-pyhlml is installed: the fake binding has its signatures, and the
    real one, its library swapped for the fake's table, serves the backend."""
    real = pytest.importorskip("pyhlml.main")
    for name, fn in vars(fake_hlml.FakePyhlml).items():
        if name.startswith("hlml"):
            want = list(inspect.signature(getattr(real, name)).parameters)
            assert list(inspect.signature(fn).parameters)[1:] == want, name

    class Library:
        def __init__(self, path: str = "") -> None:
            self.ref_count = 0

        def get_func_ptr(self, name: str) -> Any:
            fn = getattr(node.table, name, None)
            if fn is None:
                raise real.HLMLError(hlml.ERROR_INVALID_ARGUMENT)
            return fn

        def inc_ref(self) -> None:
            self.ref_count += 1

        def dec_ref(self) -> None:
            self.ref_count -= 1

    monkeypatch.setattr(real, "LibHLML", Library)
    assert binding.usable(real)
    backend = GaudiBackend(BackendOptions(), pyhlml=real)
    devices = backend.discover()
    node.inject(2, ECC_DERR)
    reading = backend.read(devices[2])
    assert devices[2].pci_bus_id == "0000:33:00.0"
    assert reading.utilization == 0.25 and reading.power_limit_watts == 850
    assert [e.code for e in reading.fault_events] == ["ecc_double_bit"]
    node.lose(3)
    assert not backend.read(devices[3]).up
    backend.close()
