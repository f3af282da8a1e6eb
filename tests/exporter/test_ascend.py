"""The Huawei Ascend backend: DCMI (tests/support/fakes/dcmi.py's FakeDcmi, standing
where the ctypes library stands) and the npu-smi fallback (the same module's FakeNpuSmi,
an executable put on PATH), through the real Poller and renderer.

The expected figures are computed here from the fake chips' DCMI units (MB, percent,
0.1 W, MHz), never copied from the output.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter import faults
from exporter.backends.ascend import AscendBackend
from exporter.backends.ascend import dcmi as api
from exporter.backends.ascend.device import FIELDS, MIB
from exporter.backends.ascend.npusmi import (
    NpuSmiError,
    parse_error_codes,
    parse_info,
    parse_keyed,
    parse_topo,
    run,
)
from exporter.backends.base import BackendOptions
from exporter.model import BackendUnavailableError
from exporter.poller import Poller
from tests.support.exposition import names, parse, stable, total, value
from tests.support.fakes.dcmi import FakeChip, FakeDcmi, FakeNpuSmi, render_info
from tests.support.waits import until_awaited

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000.0
NO_LIBRARY = (None, "libdcmi.so not loadable (test: no library)")
# The PATH the tests started with, where promtool is; the npu-smi tests narrow PATH.
PATH = os.environ.get("PATH", "")


def chips() -> list[FakeChip]:
    """Two Ascend 910B3 cards joined by HCCS, and an Ascend 310P3 with DDR."""
    return [
        FakeChip(0, pci=(0, 0xC1, 0, 0), vdie=(0x11, 0x12, 0x13, 0x14, 0x15)),
        FakeChip(
            1,
            pci=(0, 0x81, 0, 0),
            vdie=(0x21, 0x22, 0x23, 0x24, 0x25),
            aicore=87,
            hbm_used_mb=60000,
            hbm_bandwidth=64,
            temperature=52,
            power_dw=3104,
            ecc_single_total=3,
            ecc_double_total=1,
            ecc_double_pages=2,
        ),
        FakeChip(
            4,
            chip_name="310P3",
            pci=(0, 0x04, 0, 0),
            vdie=(0x41, 0x42, 0x43, 0x44, 0x45),
            aicore=5,
            ddr=(21534, 20000),
            hbm_total_mb=0,
            power_dw=158,
            ecc_enabled=False,
        ),
    ]


TOPOLOGY = {(0, 2): api.TOPO_PHB, (1, 2): api.TOPO_SYS}  # 0-1: HCCS (the default)


@pytest.fixture
def fake() -> FakeDcmi:
    return FakeDcmi(chips(), topology=dict(TOPOLOGY))


@pytest.fixture
def no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds only an empty directory (where a test may put a fake npu-smi)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


@pytest.fixture
def npu_smi(fake: FakeDcmi, no_path: Path) -> Iterator[FakeNpuSmi]:
    yield FakeNpuSmi(no_path, fake)


def dcmi_backend(fake: FakeDcmi, tmp_path: Path) -> AscendBackend:
    return AscendBackend(BackendOptions(sysfs=tmp_path / "sys"), dcmi=fake)


def smi_backend(tmp_path: Path, timeout: float = 5.0) -> AscendBackend:
    return AscendBackend(
        BackendOptions(sysfs=tmp_path / "sys"),
        loader=lambda: NO_LIBRARY,
        npu_smi_candidates=(),
        npu_smi_timeout=timeout,
    )


async def poll(backend: AscendBackend, *changes: Callable[[], None], timeout: float = 10) -> str:
    """Polls through a real Poller, then once more after each change; the last text."""
    poller = Poller([backend], interval=1, timeout=timeout, clock=lambda: NOW)
    try:
        snapshot = await poller.poll_once()
        for change in changes:
            change()
            snapshot = await poller.poll_once()
        return snapshot.text.decode()
    finally:
        await poller.stop()


# -- the ctypes layer and the fake -------------------------------------------------------


def test_fake_has_every_function_the_ctypes_layer_declares() -> None:
    assert set(api.PROTOTYPES) <= set(FakeDcmi.implemented())


def test_structures_have_the_headers_sizes() -> None:
    # dcmi_interface_api.h: "the size of dcmi_pcie_info_all is 64"; three 32-byte names
    # and an unsigned int for the chip; five unsigned ints for a die id.
    assert ctypes.sizeof(api.PcieInfoAll) == 64
    assert ctypes.sizeof(api.ChipInfo) == 3 * 32 + 4
    assert ctypes.sizeof(api.DieId) == 5 * 4
    assert ctypes.sizeof(api.EccInfo) == 9 * 4


def test_fake_fails_like_dcmi(fake: FakeDcmi) -> None:
    d = api.Dcmi(fake)
    with pytest.raises(api.DcmiError) as e:
        d.health(0, 0)  # before dcmi_init
    assert e.value.code == api.ERR_INNER_ERR
    d.init()
    assert d.health(0, 0) == 0
    fake.lose(0)
    with pytest.raises(api.DcmiError) as e:
        d.temperature(0, 0)
    assert (e.value.code, e.value.kind) == (api.ERR_NOT_READY, "lost")
    fake.timeouts.add("dcmi_get_device_power_info")
    with pytest.raises(api.DcmiError) as e:
        d.power_decawatts(1, 0)
    assert e.value.kind == "transient" and "DCMI_ERR_CODE_TIME_OUT" in str(e.value)
    fake.missing.add("dcmi_get_card_list")  # an older libdcmi: the older name answers
    assert d.card_list() == [0, 1, 4]
    failing = FakeDcmi(chips())
    failing.fail_init()
    with pytest.raises(api.DcmiError, match="INNER_ERR"):
        api.Dcmi(failing).init()


# A C stand-in for a few DCMI functions, with the header's structures: the calling
# convention the fake checks must be the one a real C library accepts.
C_STUB = r"""
#include <string.h>
struct dcmi_hbm_info { unsigned long long memory_size; unsigned int freq;
    unsigned long long memory_usage; int temp; unsigned int bandwith_util_rate; };
struct dcmi_pcie_info_all { unsigned int venderid, subvenderid, deviceid, subdeviceid;
    int domain; unsigned int bdf_busid, bdf_deviceid, bdf_funcid; unsigned char reserve[32]; };
int dcmi_init(void) { return 0; }
int dcmi_get_card_list(int *n, int *list, int len) { *n = 2; list[0] = 0; list[1] = 3; return 0; }
int dcmi_get_device_hbm_info(int c, int d, struct dcmi_hbm_info *h) {
    h->memory_size = 65536; h->memory_usage = 100 + c; h->temp = 40; h->freq = 1600;
    h->bandwith_util_rate = 7; return 0; }
int dcmi_get_device_pcie_info_v2(int c, int d, struct dcmi_pcie_info_all *p) {
    p->domain = 0; p->bdf_busid = 0xc1; p->bdf_deviceid = 0; p->bdf_funcid = 1; return 0; }
int dcmi_get_driver_version(char *v, unsigned int len) { strncpy(v, "24.1.rc2", len); return 0; }
int dcmi_get_device_errorcode_v2(int c, int d, int *n, unsigned int *list, unsigned int len) {
    *n = 2; list[0] = 0x80E01801u; list[1] = 0x40F84E00u; return 0; }
int dcmi_get_device_power_info(int c, int d, int *p) { return -8012; }
"""


def test_the_ctypes_layer_calls_a_real_c_library(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here")
    (tmp_path / "stub.c").write_text(C_STUB)
    so = tmp_path / "libdcmi.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(so), str(tmp_path / "stub.c")],
        check=True,
        timeout=60,
    )
    lib, reason = api.load_library((str(so),))
    assert lib is not None, reason
    d = api.Dcmi(lib)
    d.init()
    assert d.card_list() == [0, 3]
    assert d.pci_bus_id(0, 0) == "0000:c1:00.1"
    assert d.driver_version() == "24.1.rc2"
    assert d.error_codes(0, 0) == [0x80E01801, 0x40F84E00]
    hbm = d.hbm_info(3, 0)
    assert (hbm.memory_size, hbm.memory_usage, hbm.temp, hbm.bandwith_util_rate) == (
        65536,
        103,
        40,
        7,
    )
    with pytest.raises(api.DcmiError) as e:
        d.power_decawatts(0, 0)
    assert e.value.kind == "lost"
    with pytest.raises(api.DcmiError) as e:
        d.temperature(0, 0)  # not in this library: an older driver
    assert (e.value.code, e.value.kind) == (api.MISSING_FUNCTION, "static")


def test_real_library_is_absent_here() -> None:
    lib, reason = api.load_library(("/nonexistent/libdcmi.so",))
    assert lib is None and "/nonexistent/libdcmi.so" in reason


# -- DCMI: the whole exposition ----------------------------------------------------------


async def test_dcmi_golden_and_values(
    fake: FakeDcmi,
    tmp_path: Path,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    def alarm() -> None:
        fake.chips[1].health = 2
        fake.chips[1].error_codes = [0x80E01801]

    backend = dcmi_backend(fake, tmp_path)
    text = await poll(backend, alarm, lambda: None)
    _, c1, c2 = fake.chips
    assert value(text, "accel_device_info", device="ascend0") == 1
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["ascend0"]["uuid"] == "00000011-00000012-00000013-00000014-00000015"
    assert info["ascend0"]["model"] == "Ascend910B3"
    assert info["ascend2"]["model"] == "Ascend310P3"
    assert info["ascend1"]["pci_bus_id"] == "0000:81:00.0"
    assert info["ascend1"]["driver_version"] == fake.driver_version
    assert value(text, "accel_utilization_ratio", device="ascend1") == c1.aicore / 100
    assert value(text, "accel_memory_total_bytes", device="ascend1") == c1.hbm_total_mb * MIB
    assert value(text, "accel_memory_used_bytes", device="ascend1") == c1.hbm_used_mb * MIB
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="ascend1") == 0.64
    assert value(text, "accel_power_watts", device="ascend1") == c1.power_dw / 10
    assert value(text, "accel_temperature_celsius", device="ascend1", sensor="gpu") == 52
    assert value(text, "accel_temperature_celsius", device="ascend1", sensor="memory") == 41
    assert value(text, "accel_clock_hertz", device="ascend0", clock="aicore") == 1.8e9
    assert value(text, "accel_ecc_errors_total", device="ascend1", type="corrected") == 3
    assert value(text, "accel_ecc_errors_total", device="ascend1", type="uncorrected") == 1
    assert value(text, "accel_retired_pages", device="ascend1", cause="double_bit_ecc") == 2
    # The 310P has DDR, not HBM: memory from the DDR call, no bandwidth, no ECC.
    ddr_total, ddr_free = c2.ddr or (0, 0)
    assert value(text, "accel_memory_total_bytes", device="ascend2") == ddr_total * MIB
    assert value(text, "accel_memory_used_bytes", device="ascend2") == (ddr_total - ddr_free) * MIB
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="ascend2") is None
    assert value(text, "accel_ecc_errors_total", device="ascend2", type="corrected") is None
    assert "disabled" in backend.missing["ascend2"]["ecc_errors"]
    # The alarm raised between the polls: counted once each, by the catalogue's severity.
    fatal = total(text, "accel_fault_events_total", device="ascend1", severity="fatal")
    assert fatal == 1  # the alarm; the HBM error is MindCluster's RestartBusiness
    assert total(text, "accel_fault_events_total", device="ascend0", severity="fatal") == 0
    code = {"device": "ascend1", "code": "0x80E01801", "severity": "recoverable", "action": "app"}
    assert total(text, "accel_fault_code_events_total", **code) == 1
    promtool_check(text)
    golden("ascend_dcmi.prom", stable(text))


async def test_every_field_is_found_or_explained(fake: FakeDcmi, tmp_path: Path) -> None:
    fake.chips[0].unsupported = {"dcmi_get_device_power_info"}
    backend = dcmi_backend(fake, tmp_path)
    devices = backend.discover()
    for d in devices:
        r = backend.read(d)
        for key in FIELDS:
            present = bool(v) if isinstance(v := getattr(r, key), dict) else v is not None
            assert present or backend.missing[d.device].get(key), (d.device, key)
    assert "NOT_SUPPORT" in backend.missing["ascend0"]["power_watts"]


async def test_unsupported_is_absent_not_zero_and_not_asked_again(
    fake: FakeDcmi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.chips[0].unsupported = {"dcmi_get_device_power_info"}
    with caplog.at_level(logging.DEBUG, "accel_exporter.ascend"):
        text = await poll(dcmi_backend(fake, tmp_path), lambda: None, lambda: None)
    assert value(text, "accel_power_watts", device="ascend0") is None
    assert value(text, "accel_power_watts", device="ascend1") == 310.4
    asked = [c for c in fake.calls if c == "dcmi_get_device_power_info"]
    assert len(asked) == 1 + 3 + 3  # ascend0 once; ascend1 and ascend2 at each of 3 polls
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_dcmi_timeout_leaves_the_field_out_for_the_poll(
    fake: FakeDcmi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = dcmi_backend(fake, tmp_path)
    fake.timeouts.add("dcmi_get_device_temperature")
    with caplog.at_level(logging.WARNING):
        text = await poll(backend)
    assert value(text, "accel_up", device="ascend0") == 1
    assert value(text, "accel_temperature_celsius", device="ascend0", sensor="gpu") is None
    # The HBM sensor (another call) still answers.
    assert value(text, "accel_temperature_celsius", device="ascend0", sensor="memory") == 41
    assert not [r for r in caplog.records if "ascend" in r.getMessage()]
    fake.timeouts.clear()
    text = await poll(backend)
    assert value(text, "accel_temperature_celsius", device="ascend0", sensor="gpu") == 37


# -- lost chips, absent sources ----------------------------------------------------------


@pytest.mark.parametrize("code", [api.ERR_NOT_READY, api.ERR_DEVICE_NOT_EXIST])
async def test_dcmi_lost_chip_is_down_with_identity_and_one_fatal_event(
    fake: FakeDcmi, tmp_path: Path, code: int
) -> None:
    backend = dcmi_backend(fake, tmp_path)
    text = await poll(backend, lambda: fake.lose(1, code), lambda: None)
    uuid = "00000021-00000022-00000023-00000024-00000025"
    assert value(text, "accel_up", device="ascend1") == 0
    assert value(text, "accel_device_info", device="ascend1", uuid=uuid) == 1
    assert value(text, "accel_up", device="ascend0") == 1
    assert value(text, "accel_utilization_ratio", device="ascend1") is None
    assert total(text, "accel_fault_code_events_total", device="ascend1", code="lost") == 1
    assert total(text, "accel_fault_events_total", device="ascend1", severity="fatal") == 1
    assert faults.classify("ascend", "lost") == "fatal"


def test_a_card_dropped_before_discovery_costs_only_its_chips(
    fake: FakeDcmi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.lose(1)
    with caplog.at_level(logging.WARNING, "accel_exporter.ascend"):
        devices = dcmi_backend(fake, tmp_path).discover()
    assert [(d.device, d.pci_bus_id) for d in devices] == [
        ("ascend0", "0000:c1:00.0"),
        ("ascend1", "0000:04:00.0"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "ascend: card 1 left out: dcmi_get_device_num_in_card: DCMI_ERR_CODE_NOT_REDAY (-8012)"
    ]


async def test_a_hung_dcmi_call_is_the_pollers_timeout(fake: FakeDcmi, tmp_path: Path) -> None:
    poller = Poller([dcmi_backend(fake, tmp_path)], interval=1, timeout=0.3, clock=lambda: NOW)
    try:
        await poller.poll_once()
        fake.hang("dcmi_get_device_power_info")
        text = (await poller.poll_once()).text.decode()
        assert value(text, "accel_exporter_backend_up", backend="ascend") == 0
        for d in ("ascend0", "ascend1", "ascend2"):  # identities kept, shown down
            assert value(text, "accel_up", device=d) == 0
            assert value(text, "accel_device_info", device=d) == 1
        fake.release()

        async def up_again() -> str:
            text = (await poller.poll_once()).text.decode()
            return text if value(text, "accel_exporter_backend_up", backend="ascend") == 1 else ""

        # The stuck thread finishes; the next poll is a fresh one.
        text = await until_awaited(up_again, what="the backend up again")
        assert value(text, "accel_up", device="ascend1") == 1
    finally:
        fake.release()
        await poller.stop()


async def test_dcmi_that_does_not_initialise_falls_back_to_npu_smi(
    fake: FakeDcmi, npu_smi: FakeNpuSmi, tmp_path: Path
) -> None:
    fake.fail_init(api.ERR_INNER_ERR)
    backend = AscendBackend(BackendOptions(sysfs=tmp_path / "sys"), dcmi=fake)
    devices = backend.discover()
    assert backend.source == "npu-smi"
    assert "INNER_ERR" in backend.dcmi_reason
    assert [d.device for d in devices] == ["ascend0", "ascend1", "ascend2"]


async def test_neither_dcmi_nor_npu_smi_is_one_log_line(
    no_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = smi_backend(tmp_path)
    with caplog.at_level(logging.DEBUG):
        text = await poll(backend, lambda: None, lambda: None)
    assert value(text, "accel_exporter_backend_up", backend="ascend") == 0
    assert "accel_device_info" not in names(text)
    said = [r for r in caplog.records if "ascend" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert "libdcmi.so not loadable" in said[0].getMessage()
    assert "no npu-smi" in said[0].getMessage()
    with pytest.raises(BackendUnavailableError):
        backend.discover()


def test_the_library_flag_names_the_file_in_the_reason(no_path: Path, tmp_path: Path) -> None:
    options = BackendOptions(ascend_dcmi_library=str(tmp_path / "libdcmi.so"))
    backend = AscendBackend(options, npu_smi_candidates=())
    with pytest.raises(BackendUnavailableError, match=str(tmp_path / "libdcmi.so")):
        backend.discover()


# -- alarms ---------------------------------------------------------------------------------


async def test_alarms_are_counted_by_severity(fake: FakeDcmi, tmp_path: Path) -> None:
    c0 = fake.chips[0]
    c0.health = 1  # present at start: held back, counted on the second poll
    first = await poll(dcmi_backend(fake, tmp_path))
    assert total(first, "accel_fault_events_total", device="ascend0", severity="recoverable") == 0

    def rise() -> None:
        c0.health = 3
        c0.error_codes = [0x80E21007, 0x80C98009, 0x12345678]

    def clear() -> None:
        c0.health, c0.error_codes = 0, []

    def again() -> None:
        c0.health, c0.error_codes = 2, [0x80E21007]

    text = await poll(dcmi_backend(fake, tmp_path), lambda: None, rise, clear, again)
    count = {
        s: total(text, "accel_fault_events_total", device="ascend0", severity=s)
        for s in ("fatal", "recoverable", "info")
    }
    # minor (recoverable); critical (fatal), 0x80E21007 (info), 0x80C98009 (recoverable),
    # an unknown code (recoverable); after the clear, major (fatal) and 0x80E21007 again.
    assert count == {"fatal": 2, "recoverable": 3, "info": 2}
    for code, sev, n in (
        ("health_minor", "recoverable", 1),
        ("health_critical", "fatal", 1),
        ("health_major", "fatal", 1),
        ("0x80E21007", "info", 2),
        ("0x12345678", "recoverable", 1),
    ):
        labels = {"device": "ascend0", "code": code, "severity": sev}
        assert total(text, "accel_fault_code_events_total", **labels) == n, code


def test_every_ascend_code_has_a_severity_and_a_reason() -> None:
    catalogue = faults.CATALOGUES["ascend"]
    assert {c.severity for c in catalogue.values()} == {"fatal", "recoverable", "info"}
    for code in catalogue.values():
        assert code.name and code.reason, code.code
    assert faults.classify("ascend", "0x80E18402") == "fatal"
    assert faults.classify("ascend", "health_minor") == "recoverable"


# -- topology -----------------------------------------------------------------------------


def four_chips() -> FakeDcmi:
    four = [FakeChip(i, pci=(0, 0x10 * (i + 1), 0, 0), vdie=(i, 1, 2, 3, 4)) for i in range(4)]
    topology = {
        (0, 1): api.TOPO_HCCS,
        (0, 2): api.TOPO_HCCS_SW,
        (0, 3): api.TOPO_PIX,
        (1, 2): api.TOPO_SIO,
        (1, 3): api.TOPO_PHB,
        (2, 3): api.TOPO_SYS,
    }
    return FakeDcmi(four, topology=topology)


EXPECTED_LINKS = {
    ("ascend0", "ascend1"): ("hccs", 10),
    ("ascend0", "ascend2"): ("hccs", 10),
    ("ascend0", "ascend3"): ("pcie_switch", 20),
    ("ascend1", "ascend2"): ("hccs", 10),
    ("ascend1", "ascend3"): ("pcie_hostbridge", 30),
    ("ascend2", "ascend3"): ("system", 50),
}


def links_of(text: str) -> dict[tuple[str, str], tuple[str, float]]:
    out = {}
    for n, lb, _ in parse(text):
        if n == "accel_topology_link_info":
            pair = (lb["device"], lb["peer_device"])
            distance = value(text, "accel_topology_distance", device=pair[0], peer_device=pair[1])
            assert distance is not None
            out[pair] = (lb["link_type"], distance)
    return out


async def test_hccs_topology_from_dcmi(tmp_path: Path) -> None:
    text = await poll(dcmi_backend(four_chips(), tmp_path))
    assert links_of(text) == EXPECTED_LINKS


async def test_hccs_topology_from_npu_smi(no_path: Path, tmp_path: Path) -> None:
    FakeNpuSmi(no_path, four_chips())
    text = await poll(smi_backend(tmp_path))
    assert links_of(text) == EXPECTED_LINKS


async def test_a_library_without_topology_leaves_the_pcie_path(tmp_path: Path) -> None:
    fake = four_chips()
    fake.missing.add("dcmi_get_topo_info_by_device_id")
    text = await poll(dcmi_backend(fake, tmp_path))
    assert "accel_topology_link_info" not in names(text)  # no sysfs here: NUMA placement
    assert value(text, "accel_topology_distance", device="ascend0", peer_device="ascend1") == 50


# -- npu-smi ------------------------------------------------------------------------------


async def test_npu_smi_golden_and_values(
    npu_smi: FakeNpuSmi,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    fake = npu_smi.dcmi

    def alarm() -> None:
        fake.chips[1].health = 2
        fake.chips[1].error_codes = [0x80E01801]
        npu_smi.sync()

    backend = smi_backend(tmp_path)
    text = await poll(backend, alarm, lambda: None)
    assert backend.source == "npu-smi"
    c1, c2 = fake.chips[1], fake.chips[2]
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["ascend1"]["uuid"] == info["ascend1"]["pci_bus_id"] == "0000:81:00.0"
    assert info["ascend1"]["model"] == "Ascend910B3"
    assert info["ascend2"]["model"] == "Ascend310P3"
    assert info["ascend0"]["driver_version"] == fake.driver_version
    assert value(text, "accel_utilization_ratio", device="ascend1") == c1.aicore / 100
    assert value(text, "accel_memory_total_bytes", device="ascend1") == c1.hbm_total_mb * MIB
    assert value(text, "accel_memory_used_bytes", device="ascend1") == c1.hbm_used_mb * MIB
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="ascend1") == 0.64
    assert value(text, "accel_power_watts", device="ascend1") == c1.power_dw / 10
    assert value(text, "accel_temperature_celsius", device="ascend1", sensor="gpu") == 52
    ddr_total, ddr_free = c2.ddr or (0, 0)
    assert value(text, "accel_memory_total_bytes", device="ascend2") == ddr_total * MIB
    assert value(text, "accel_memory_used_bytes", device="ascend2") == (ddr_total - ddr_free) * MIB
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="ascend2") is None
    # What npu-smi does not give is absent, with its reason.
    assert value(text, "accel_ecc_errors_total", device="ascend1", type="corrected") is None
    assert "DCMI" in backend.missing["ascend1"]["ecc_errors"]
    code = {"device": "ascend1", "code": "0x80E01801", "severity": "recoverable", "action": "app"}
    assert total(text, "accel_fault_code_events_total", **code) == 1
    assert total(text, "accel_fault_events_total", device="ascend1", severity="fatal") == 1
    monkeypatch.setenv("PATH", PATH)
    promtool_check(text)
    golden("ascend_npusmi.prom", stable(text))
    # Fixed command lines only: the table once per poll, usages once per card, the
    # health detail only for the chip in alarm, and the topology at discovery.
    argvs = npu_smi.argvs()
    allowed = {
        ("info",),
        ("info", "-t", "topo"),
        *(("info", "-t", "usages", "-i", str(c)) for c in (0, 1, 4)),
        ("info", "-t", "health", "-i", "1", "-c", "0"),
    }
    assert {tuple(a) for a in argvs} == allowed
    assert argvs.count(["info"]) == 3


async def test_npu_smi_lost_chip_is_down_with_identity(npu_smi: FakeNpuSmi, tmp_path: Path) -> None:
    def drop() -> None:
        npu_smi.dcmi.lose(1)
        npu_smi.sync()

    text = await poll(smi_backend(tmp_path), drop, lambda: None)
    assert value(text, "accel_up", device="ascend1") == 0
    assert value(text, "accel_device_info", device="ascend1", uuid="0000:81:00.0") == 1
    assert value(text, "accel_up", device="ascend0") == 1
    assert total(text, "accel_fault_code_events_total", device="ascend1", code="lost") == 1


async def test_hanging_npu_smi_is_killed_by_the_timeout(
    npu_smi: FakeNpuSmi, tmp_path: Path
) -> None:
    backend = smi_backend(tmp_path, timeout=0.5)

    def hang() -> None:
        npu_smi.mode = "hang"
        npu_smi.sync()

    start = time.monotonic()
    text = await poll(backend, lambda: None, hang)
    assert time.monotonic() - start < 8
    pid = int(npu_smi.pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert value(text, "accel_up", device="ascend0") == 1  # identity kept, values missing
    assert value(text, "accel_utilization_ratio", device="ascend0") is None
    assert "no answer within 0.5s" in backend.missing["ascend0"]["utilization"]


@pytest.mark.parametrize("mode", ["garbage", "fail"])
async def test_unusable_npu_smi_output_is_missing_fields_not_a_crash(
    npu_smi: FakeNpuSmi, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    def spoil() -> None:
        npu_smi.mode = mode
        npu_smi.sync()

    backend = smi_backend(tmp_path)
    with caplog.at_level(logging.WARNING, "accel_exporter.ascend"):
        text = await poll(backend, spoil, spoil)
    assert value(text, "accel_exporter_backend_up", backend="ascend") == 1
    assert value(text, "accel_up", device="ascend1") == 1
    assert value(text, "accel_power_watts", device="ascend1") is None
    assert backend.missing["ascend1"]["power_watts"]
    assert len([r for r in caplog.records if "npu-smi" in r.getMessage()]) == 1


def test_npu_smi_at_discovery_failing_disables_the_backend(
    npu_smi: FakeNpuSmi, tmp_path: Path
) -> None:
    npu_smi.mode = "garbage"
    npu_smi.sync()
    with pytest.raises(BackendUnavailableError, match="no chip table"):
        smi_backend(tmp_path).discover()


def test_run_bounds_output(tmp_path: Path) -> None:
    script = tmp_path / "chatty"
    script.write_text("#!/bin/sh\nyes 0123456789\n")
    script.chmod(0o755)
    with pytest.raises(NpuSmiError, match="more than"):
        run(str(script), [], 5)
    with pytest.raises(NpuSmiError, match="cannot run"):
        run(str(tmp_path / "absent"), [], 5)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00\xff garbage",
        "| NPU Name | Health | Power(W) Temp(C) |\n| 0 910B | OK | NA x |\n",
        render_info(
            {
                "version": "1",
                "chips": [],
            }
        ),
    ],
)
def test_parsers_take_what_they_recognise(text: str) -> None:
    try:
        table = parse_info(text)
    except NpuSmiError:
        return
    assert table.chips == []


def test_parse_info_leaves_unreadable_cells_out() -> None:
    chip = FakeChip(0)
    state = {"version": "24.1.rc2", "chips": [chip.__dict__ | {"unsupported": []}]}
    text = render_info(state).replace("95.7", "NA").replace("3402 / 65536", "x / y")
    (row,) = parse_info(text).chips
    assert "Power(W)" not in row.values and "HBM-Usage(MB)" not in row.pairs
    assert row.values["Temp(C)"] == 37 and row.bus_id == "0000:c1:00.0"


def test_parse_keyed_and_codes() -> None:
    report = (
        "\tNPU ID : 0\n\tHBM Bandwidth Usage Rate(%) : 9\n\tChip ID : 0\n\tA : 1\n\tChip ID : 1\n"
    )
    assert parse_keyed(report) == {
        0: {"NPU ID": "0", "HBM Bandwidth Usage Rate(%)": "9"},
        1: {"A": "1"},
    }
    assert parse_keyed("Health Status : OK\n") == {0: {"Health Status": "OK"}}
    assert parse_error_codes("NA") == []
    assert parse_error_codes("80E01801 0x80E18402") == [0x80E01801, 0x80E18402]
    assert parse_error_codes("see the log") is None
    assert parse_topo("garbage\nNPU0 NPU1\nNPU0 X HCCS\n") == {(0, 0): "X", (0, 1): "HCCS"}
