"""A hostile sysfs/procfs tree costs one field, never a device, a backend or the host
(issue 15, "sysfs").

Each case copies a fixture tree into ``tmp_path``, breaks one file the way a broken
driver or an attacker with write access to a bind mount would (``gpu_metrics`` linked
to ``/dev/zero`` or made a FIFO, a non-UTF-8 ``local_cpulist``, KFD ``properties`` or
``current_compute_partition``, ``cpu/online`` naming 400 million CPUs, one 400-digit
number), and polls it through the real Poller and renderer, under a memory cap and a
clock. The promise checked every time: every device keeps its identity and
``accel_up 1``, its backend stays up, the broken field is absent with its reason in the
backend's ``missing`` (or, for an identity label, one warning), and every other field of
every device is what the intact tree gives. A property test then writes any bytes into
the files a poll reads (every read stays up, every value finite), and the last test runs
the real exporter over a tree with every break at once and scrapes it over HTTP.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_common.readfile import FieldError
from exporter.backends.amd import AmdBackend
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.cpu import MAX_CPUS, CpuBackend, parse_cpu_list
from exporter.backends.oneapi.sysfs import discover_cards, read_card
from exporter.model import Reading
from exporter.poller import Poller
from tests.support.exposition import parse, value
from tests.support.paths import FIXTURES, REPO
from tests.support.procs import free_port, http_get
from tests.support.waits import wait

SUCCESS = "accel_exporter_last_success_timestamp_seconds"  # moves with every good poll

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000.0
GIB = 1024**3
SYS, PROC = FIXTURES / "sys", FIXTURES / "proc"
AMD_CPX, KFD_XGMI = FIXTURES / "amd_cpx" / "sys", FIXTURES / "kfd_xgmi" / "sys"
# amd0 (MI300X) and amd1 (MI210) of the main fixture, by their PCI functions.
AMD0 = "devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
AMD1 = "devices/pci0000:80/0000:80:01.1/0000:83:00.0"
HUGE = "9" * 400 + "\n"
NOT_UTF8 = b"0-3\xff\xfe\n"
KFD_NODES = "class/kfd/kfd/topology/nodes"


@contextlib.contextmanager
def memory_cap(extra: int = GIB) -> Iterator[None]:
    """At most ``extra`` more address space while the block runs: a regression that
    reads ``/dev/zero`` or expands 400 million CPUs fails with MemoryError instead of
    taking the machine down."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    vm = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(vm + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def copy(tree: Path, tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(tree, root, symlinks=True)
    return root


def replace(path: Path, content: str | bytes | Callable[[Path], None]) -> None:
    """Puts ``content`` where ``path`` was (through its links, as a driver would)."""
    path = Path(os.path.realpath(path))
    path.unlink(missing_ok=True)
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        content(path)


def to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def fifo(path: Path) -> None:
    os.mkfifo(path)


def amd(root: Path) -> AmdBackend:
    return AmdBackend(BackendOptions(sysfs=root, procfs=PROC), use_amdsmi=False)


def cpu(root: Path, procfs: Path = PROC) -> CpuBackend:
    return CpuBackend(BackendOptions(sysfs=root, procfs=procfs), clock=lambda: NOW)


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def series(text: str) -> Series:
    """Every sample but the exporter's own timing, keyed by name and labels."""
    return {
        (n, tuple(sorted(lb.items()))): v
        for n, lb, v in parse(text)
        if not n.startswith("accel_exporter_poll_duration")
    }


def of(s: Series, device: str, name: str) -> Series:
    return {k: v for k, v in s.items() if k[0] == name and ("device", device) in k[1]}


async def poll_twice(backends: list[Backend]) -> str:
    """Two polls (rates need two), within 10 s and 1 GiB more memory."""
    poller = Poller(backends, interval=1, timeout=5, clock=lambda: NOW)
    t0 = time.monotonic()
    try:
        with memory_cap():
            await poller.poll_once()
            text = (await poller.poll_once()).text.decode()
    finally:
        await poller.stop()
    assert time.monotonic() - t0 < 10
    return text


@dataclass
class Case:
    """One broken file: where, what it holds, and what it may cost."""

    tree: Path
    path: str
    content: str | bytes | Callable[[Path], None]
    backends: Callable[[Path], list[Backend]]
    device: str
    # Metric names the device loses entirely, and those whose series may differ (a
    # fallback source answers); everything else must be as in the intact tree.
    lost: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    # field key -> a piece of its reason in the backend's ``missing``.
    reasons: dict[str, str] = field(default_factory=dict)
    # Identity labels that become empty, each with one warning naming the file.
    labels: tuple[str, ...] = ()
    warning: str = ""
    # Other series that may change (the topology a KFD file fed, the partitions).
    also: Callable[[tuple[str, tuple[tuple[str, str], ...]]], bool] = lambda key: False
    # Files both trees get first (what the fixture lacks), relative path -> text.
    before: dict[str, str] = field(default_factory=dict)


def amd_and_cpu(root: Path) -> list[Backend]:
    return [amd(root), cpu(root)]


def amd_only(root: Path) -> list[Backend]:
    return [amd(root)]


def is_topology(key: tuple[str, tuple[tuple[str, str], ...]]) -> bool:
    return key[0] in ("accel_topology_link_info", "accel_topology_distance")


def is_partition_of_amd0(key: tuple[str, tuple[tuple[str, str], ...]]) -> bool:
    labels = dict(key[1])
    return labels.get("device", "").startswith("amd0_p") or labels.get("parent") == "amd0"


# What gpu_metrics gives over the other files: without it, those files answer.
FROM_GPU_METRICS = (
    "accel_clock_hertz",
    "accel_memory_bandwidth_utilization_ratio",
    "accel_power_watts",
    "accel_temperature_celsius",
    "accel_utilization_ratio",
)

CASES: dict[str, Case] = {
    "gpu_metrics is /dev/zero": Case(
        SYS, f"{AMD0}/gpu_metrics", to_dev_zero, amd_and_cpu, "amd0",
        lost=("accel_energy_joules_total",), changed=FROM_GPU_METRICS,
        reasons={"throttle": "gpu_metrics: a character device",
                 "link_bytes_per_second": "gpu_metrics: a character device"},
    ),
    "gpu_metrics is a FIFO": Case(
        SYS, f"{AMD1}/gpu_metrics", fifo, amd_and_cpu, "amd1",
        lost=("accel_energy_joules_total", "accel_throttle_active"), changed=FROM_GPU_METRICS,
        reasons={"throttle": "gpu_metrics: a FIFO"},
    ),
    "gpu_metrics is 1 MiB": Case(
        SYS, f"{AMD0}/gpu_metrics", b"\x00" * 1024 * 1024, amd_and_cpu, "amd0",
        lost=("accel_energy_joules_total",), changed=FROM_GPU_METRICS,
        reasons={"throttle": "gpu_metrics: larger than 262144 bytes"},
    ),
    "local_cpulist is not UTF-8": Case(
        SYS, f"{AMD0}/local_cpulist", NOT_UTF8, amd_and_cpu, "amd0",
        labels=("cpu_affinity",), warning="local_cpulist: not UTF-8",
        before={f"{AMD0}/local_cpulist": "0-7\n"},
    ),
    "numa_node has 400 digits": Case(
        SYS, f"{AMD1}/numa_node", HUGE, amd_and_cpu, "amd1",
        labels=("numa_node",), warning="numa_node: not a NUMA node",
        also=is_topology,  # the distance matrix places amd1 by its NUMA node
    ),
    "product_name is not UTF-8": Case(
        SYS, f"{AMD0}/product_name", NOT_UTF8, amd_and_cpu, "amd0",
        warning="product_name: not UTF-8",
        also=lambda key: key[0] == "accel_device_info" and ("device", "amd0") in key[1],
    ),
    "mem_info_vram_used has 400 digits": Case(
        SYS, f"{AMD0}/mem_info_vram_used", HUGE, amd_and_cpu, "amd0",
        lost=("accel_memory_used_bytes",),
        reasons={"memory_used_bytes": "mem_info_vram_used: number too long (400 digits)"},
    ),
    "power1_cap has 400 digits": Case(
        SYS, f"{AMD1}/hwmon/hwmon4/power1_cap", HUGE, amd_and_cpu, "amd1",
        lost=("accel_power_limit_watts",),
        reasons={"power_limit_watts": "power1_cap: number too long"},
    ),
    "a RAS count has 400 digits": Case(
        SYS, f"{AMD0}/ras/umc_err_count", "ue: " + HUGE + "ce: 0\n", amd_and_cpu, "amd0",
        lost=("accel_ecc_errors_total",),
        reasons={"ecc_errors": "umc_err_count: not ue/ce counts"},
    ),
    "cpu/online names 400 million CPUs": Case(
        SYS, "devices/system/cpu/online", "0-400000000\n", amd_and_cpu, "cpu0",
        warning="online: names more than 65536 CPUs",
    ),
    "a package temperature has 400 digits": Case(
        SYS, "class/hwmon/hwmon1/temp1_input", HUGE, amd_and_cpu, "cpu1",
        lost=("accel_temperature_celsius",),
        reasons={"temperatures": "number too long (400 digits)"},
    ),
    "RAPL energy has 400 digits": Case(
        SYS, "class/powercap/intel-rapl:0/energy_uj", HUGE, amd_and_cpu, "cpu0",
        lost=("accel_energy_joules_total",),
        reasons={"energy_joules": "energy_uj: number too long"},
    ),
    "current_compute_partition is not UTF-8": Case(
        AMD_CPX, "class/drm/card0/device/current_compute_partition", b"CPX\xff\n", amd_only,
        "amd0", warning="current_compute_partition: not UTF-8", also=is_partition_of_amd0,
    ),
    "a KFD partition node's properties is not UTF-8": Case(
        AMD_CPX, f"{KFD_NODES}/8/properties", b"gpu_id 1\xff\n", amd_only, "amd0",
        warning="properties: not UTF-8", also=is_partition_of_amd0,
    ),
    "a KFD GPU node's properties is not UTF-8": Case(
        KFD_XGMI, f"{KFD_NODES}/2/properties", NOT_UTF8, amd_only, "amd0",
        warning="properties: not UTF-8", also=is_topology,
    ),
    "a KFD io_link's properties is /dev/zero": Case(
        KFD_XGMI, f"{KFD_NODES}/2/io_links/0/properties", to_dev_zero, amd_only, "amd0",
        warning="properties: a character device", also=is_topology,
    ),
    "a KFD gpu_id has 400 digits": Case(
        KFD_XGMI, f"{KFD_NODES}/3/gpu_id", HUGE, amd_only, "amd1", also=is_topology,
    ),
}  # fmt: skip


def _identity(s: Series, device: str) -> dict[str, str]:
    (key,) = of(s, device, "accel_device_info")
    return dict(key[1])


@pytest.mark.parametrize("name", sorted(CASES))
async def test_one_broken_file_costs_one_field(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    case = CASES[name]
    intact_root = copy(case.tree, tmp_path / "intact")
    root = copy(case.tree, tmp_path / "hostile")
    for tree in (intact_root, root):
        for rel, text in case.before.items():
            replace(tree / rel, text)
    intact = series(await poll_twice(case.backends(intact_root)))
    replace(root / case.path, case.content)
    backends = case.backends(root)
    with caplog.at_level(logging.WARNING, "accel_exporter"):
        got = series(await poll_twice(backends))

    for b in backends:
        assert got[("accel_exporter_backend_up", (("backend", b.name),))] == 1, b.name
    devices = {dict(k[1])["device"] for k in intact if k[0] == "accel_device_info"}
    for d in devices:
        if case.also(("accel_device_info", (("device", d), ("parent", "amd0")))):
            continue  # a partition that may be gone with its mode file
        assert of(got, d, "accel_up") == of(intact, d, "accel_up"), d
        assert set(of(got, d, "accel_up").values()) == {1.0}, d
    # The device keeps its identity: only the broken labels are emptied.
    want = _identity(intact, case.device)
    have = _identity(got, case.device)
    assert have["uuid"] == want["uuid"] and have["device"] == want["device"]
    for label in case.labels:
        assert want[label] and have[label] == ""
    # The broken fields are gone, for that device only; nothing else changed.
    for metric in case.lost:
        assert of(intact, case.device, metric), metric
        assert not of(got, case.device, metric), metric

    def expected(key: tuple[str, tuple[tuple[str, str], ...]]) -> bool:
        if case.also(key):
            return False
        if key[0] == "accel_device_info" and ("device", case.device) in key[1]:
            return False
        mine = ("device", case.device) in key[1]
        return not (mine and key[0] in (*case.lost, *case.changed))

    assert {k: v for k, v in got.items() if expected(k)} == {
        k: v for k, v in intact.items() if expected(k)
    }
    # Why, in the backend's bookkeeping, and said once.
    owner = next(b for b in backends if case.device.startswith(b.name))
    missing = getattr(owner, "missing", {}).get(case.device, {})
    for key, reason in case.reasons.items():
        assert reason in missing.get(key, ""), (key, missing)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if case.warning:
        assert len([m for m in said if case.warning in m]) == 1, said
    for reason in case.reasons.values():
        assert len([m for m in said if reason.split(": ")[-1] in m]) >= 1, said


def test_cpu_list_expansion_is_bounded() -> None:
    assert len(parse_cpu_list(f"0-{MAX_CPUS - 1}")) == MAX_CPUS
    for text in (f"0-{MAX_CPUS}", "0-400000000", f"0-40000,40001-{2 * MAX_CPUS}", "9" * 400,
                 "3-1", "x", "-1"):  # fmt: skip
        with pytest.raises(FieldError):
            parse_cpu_list(text)


def test_intel_sysfs_drops_only_the_broken_fields(tmp_path: Path) -> None:
    """The oneAPI backend's i915/xe sysfs reader: a 400-digit energy counter and a
    ``power1_max`` linked to ``/dev/zero`` drop those two fields, with their reasons,
    and the card is still found and read."""
    root = copy(SYS, tmp_path)
    hwmon = root / "class/drm/card2/device/hwmon/hwmon5"
    replace(hwmon / "energy1_input", HUGE)
    replace(hwmon / "power1_max", to_dev_zero)
    with memory_cap():
        cards = discover_cards(root)
        assert [c.name for c in cards] == ["card2", "card3"]
        r, missing = Reading(), dict[str, str]()
        read_card(cards[0], r, missing, lambda: NOW)
    assert r.energy_joules is None and r.power_limit_watts is None
    assert missing["energy_joules"] == "energy1_input: number too long (400 digits)"
    assert missing["power_limit_watts"] == "power1_max: a character device"


# Every file the AMD and CPU backends read on a poll, for the property below.
POLLED = (
    *(f"{AMD0}/{name}" for name in ("gpu_busy_percent", "mem_busy_percent", "mem_info_vram_total",
      "mem_info_vram_used", "gpu_metrics", "ras/umc_err_count", "hwmon/hwmon3/temp2_input",
      "hwmon/hwmon3/temp2_label", "hwmon/hwmon3/power1_input", "hwmon/hwmon3/freq1_input")),
    "class/hwmon/hwmon0/temp1_input", "class/powercap/intel-rapl:0/energy_uj",
    "devices/system/node/node0/meminfo",
)  # fmt: skip
_contents = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([HUGE.encode(), NOT_UTF8, b"-1\n", b"18446744073709551616\n", b"",
                     b"ue: 1\nce: x\n", b"0x10\n", b"\xff" * 4096, b"1e400\n"]),
)  # fmt: skip


@pytest.fixture(scope="module")
def one_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Backend]]]:
    """One copy of the main fixture and its AMD and CPU backends, discovered once:
    the property below breaks files in it and puts them back after each example."""
    root = copy(SYS, tmp_path_factory.mktemp("any-bytes"))
    backends: list[Backend] = [amd(root), cpu(root)]
    yield root, backends


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(POLLED), _contents), min_size=1, max_size=4))
def test_any_bytes_in_polled_files_cost_fields_not_devices(
    one_tree: tuple[Path, list[Backend]], breaks: list[tuple[str, bytes]]
) -> None:
    """Whatever bytes the polled files hold, every read returns a reading that is up,
    with only finite values: a clear reason or a value, never an exception."""
    root, backends = one_tree
    devices = [(b, d) for b in backends for d in b.discover()]
    try:
        for rel, content in breaks:
            replace(root / rel, content)
        with memory_cap():
            for b, d in devices:
                r = b.read(d)
                assert r.up, d.device
                for v in (r.utilization, r.memory_used_bytes, r.memory_total_bytes,
                          r.power_watts, r.energy_joules, *r.temperatures.values(),
                          *r.clocks_hz.values(), *r.ecc_errors.values()):  # fmt: skip
                    assert v is None or math.isfinite(v), (d.device, v)
    finally:
        for rel, _ in breaks:
            replace(root / rel, (SYS / rel).read_bytes())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789,-", max_size=40))
def test_any_cpu_list_is_a_bounded_set_or_a_field_error(text: str) -> None:
    try:
        cpus = parse_cpu_list(text)
    except FieldError as e:
        assert e.reason
    else:
        assert len(cpus) <= MAX_CPUS and all(c >= 0 for c in cpus)


# -- the real exporter over every break at once ---------------------------------------


def hostile_everything(tmp_path: Path) -> tuple[Path, Path]:
    root = copy(SYS, tmp_path)
    for case in CASES.values():
        if case.tree == SYS and not (root / case.path).is_symlink():
            target = Path(os.path.realpath(root / case.path))
            if not target.exists() or target.is_file():
                replace(root / case.path, case.content)
    proc = tmp_path / "proc"
    shutil.copytree(PROC, proc)
    replace(proc / "stat", b"cpu  1 2 3\xff\n")
    replace(proc / "cpuinfo", fifo)
    return root, proc


def test_the_exporter_serves_through_every_break_at_once(tmp_path: Path) -> None:
    """The real process serves within 10 s with every device up, its resident peak
    under 256 MiB. Its address space is capped at 2 GiB, so a regression fails here
    instead of swapping the machine (not lower: glibc reserves a 64 MiB malloc arena
    per thread, which is address space, not memory)."""
    root, proc = hostile_everything(tmp_path)
    port = free_port()

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))

    exporter = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "--backends", "amd,cpu",
         "--path.sysfs", str(root), "--path.procfs", str(proc),
         "--poll-interval", "200ms", "--web.listen-address", f"127.0.0.1:{port}"],
        cwd=REPO, stderr=subprocess.PIPE, preexec_fn=cap,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def scraped() -> str:
            assert exporter.poll() is None, (
                exporter.stderr.read().decode() if exporter.stderr else ""
            )
            with contextlib.suppress(OSError):
                text = http_get(url, timeout=2).decode()
                return text if "accel_up{" in text else ""
            return ""

        def polled() -> float:
            return value(http_get(url, timeout=2).decode(), SUCCESS, backend="amd") or 0.0

        wait(scraped, what="a scrape with devices", every=0.1)
        for _ in range(3):  # a few more polls over the same files
            before = polled()
            wait(lambda before=before: polled() > before, what="another poll")  # type: ignore[misc]
        got = series(http_get(f"http://127.0.0.1:{port}/metrics", timeout=2).decode())
        status = Path(f"/proc/{exporter.pid}/status").read_text()
        peak = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM:"))
    finally:
        exporter.terminate()
        _, err = exporter.communicate(timeout=10)
    for b in ("amd", "cpu"):
        assert got[("accel_exporter_backend_up", (("backend", b),))] == 1
    for d in ("amd0", "amd1", "cpu0", "cpu1"):
        assert set(of(got, d, "accel_up").values()) == {1.0}, d
        assert _identity(got, d)["uuid"]
    assert of(got, "amd1", "accel_memory_used_bytes")  # an unbroken field of a broken GPU
    assert not of(got, "cpu0", "accel_utilization_ratio")  # /proc/stat is not UTF-8
    assert peak * 1024 < GIB / 4, f"peak RSS {peak} KiB"
    log = err.decode()
    assert "Traceback" not in log
    assert log.count("gpu_metrics: a character device") == 1, log
