"""Device topology: the one distance scale (``exporter.topology``), and what each
backend feeds it — NVLink and NVML's PCIe common ancestor for NVIDIA, the KFD xGMI
topology for AMD, the kernel's PCI tree for every backend that knows PCI addresses —
checked through the real Poller and renderer, as Prometheus would scrape them.

Fixtures: the fake NVML's 8-GPU NVSwitch board (``h100_node``) and its PCIe-only node
(``pcie_node``); ``tests/fixtures/kfd_xgmi``, an 8-GPU MI300X xGMI hive whose KFD
nodes are numbered in probe order, not PCI order, as the driver does.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter import topology
from exporter.backends.amd import AmdBackend
from exporter.backends.amd.kfd import node_pci_address, xgmi_links
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.backends.nvidia.device import normalize_bus_id
from exporter.backends.oneapi import OneapiBackend
from exporter.model import DeviceInfo, Link
from exporter.pcitopo import cpu_affinity, numa_node, pci_path, pcie_link_type, pcie_links
from exporter.poller import Poller
from tests.exporter.test_oneapi import sysfs_node
from tests.support.exposition import parse, value
from tests.support.fakes.level_zero import FakeLevelZero
from tests.support.fakes.nvml import PCIE_PATHS, FakeNVML
from tests.support.paths import FIXTURES

NOW = 1_700_000_000.0
KFD_XGMI = FIXTURES / "kfd_xgmi" / "sys"
PROCFS = FIXTURES / "proc"
CPUS = ("0-47,96-143", "48-95,144-191")

pytestmark = pytest.mark.timeout(30)

_KEEP = re.compile(r"^accel_(device_info|topology_link_info|topology_distance)\{")


def topology_lines(text: str) -> str:
    """The identity and topology samples only: the goldens here are about placement,
    so a change to any other metric does not touch them."""
    return "".join(line for line in text.splitlines(keepends=True) if _KEEP.match(line))


async def scrape(backend: Backend) -> str:
    poller = Poller([backend], interval=1, timeout=5, clock=lambda: NOW)
    try:
        return (await poller.poll_once()).text.decode()
    finally:
        await poller.stop()


def distance(text: str, a: str, b: str) -> float | None:
    return value(text, "accel_topology_distance", device=a, peer_device=b)


def matrix(text: str) -> dict[tuple[str, str], float]:
    return {
        (lb["device"], lb["peer_device"]): v
        for n, lb, v in parse(text)
        if n == "accel_topology_distance"
    }


def link_types(text: str) -> dict[tuple[str, str], str]:
    return {
        (lb["device"], lb["peer_device"]): lb["link_type"]
        for n, lb, _ in parse(text)
        if n == "accel_topology_link_info"
    }


def assert_is_a_distance_matrix(m: dict[tuple[str, str], float], devices: list[str]) -> None:
    """Every pair present, 0 on the diagonal only, symmetric."""
    assert set(m) == {(a, b) for a in devices for b in devices}
    for a in devices:
        for b in devices:
            assert m[(a, b)] == m[(b, a)]
            assert (m[(a, b)] == 0) == (a == b)


# -- the scale itself -----------------------------------------------------------------


def test_distances_take_the_closest_link_and_fall_back_to_numa() -> None:
    devs = [
        DeviceInfo("nvidia0", "nvidia", "u0", numa_node="0"),
        DeviceInfo("nvidia1", "nvidia", "u1", numa_node="0"),
        DeviceInfo("nvidia2", "nvidia", "u2", numa_node="1"),
        DeviceInfo("nvidia3", "nvidia", "u3", numa_node=""),
        DeviceInfo("nvidia0_mig1", "nvidia", "m", numa_node="0", parent="nvidia0"),
        DeviceInfo("cpu0", "cpu", "c", numa_node="0"),
    ]
    links = [
        Link("nvidia0", "nvidia1", "system"),
        Link("nvidia1", "nvidia0", "nvlink", 4),  # one direction is enough
        Link("nvidia0", "nvidia2", "unknown_type"),
        Link("nvidia0", "cpu0", "pcie_switch"),
    ]
    got = {(a, b): d for a, b, d in topology.distances(devs, links)}
    names = ["nvidia0", "nvidia1", "nvidia2", "nvidia3"]
    assert_is_a_distance_matrix(got, names)  # no partition, no CPU socket
    assert got[("nvidia0", "nvidia1")] == topology.DISTANCE["nvlink"]
    assert got[("nvidia0", "nvidia2")] == topology.ACROSS  # an unknown type is no link
    assert got[("nvidia1", "nvidia2")] == topology.ACROSS
    assert got[("nvidia2", "nvidia3")] == topology.ACROSS  # an unknown node is never near
    ordered = ["nvlink", "pcie_switch", "pcie_hostbridge", "pcie_numa", "system"]
    assert [topology.DISTANCE[k] for k in ordered] == sorted(topology.DISTANCE[k] for k in ordered)


# -- NVIDIA ---------------------------------------------------------------------------


@pytest.fixture
def pcie_sysfs(tmp_path: Path) -> Path:
    """numa_node and local_cpulist for the PCIe node's GPUs: 0-3 on node 0, 4 on 1."""
    root = tmp_path / "sys"
    for bus_id, (node, *_) in PCIE_PATHS:
        d = root / "bus" / "pci" / "devices" / normalize_bus_id(bus_id)
        d.mkdir(parents=True)
        n = int(node.removeprefix("node"))
        (d / "numa_node").write_text(f"{n}\n")
        (d / "local_cpulist").write_text(f"{CPUS[n]}\n")
    return root


@pytest.fixture
def pcie() -> Iterator[FakeNVML]:
    fake = FakeNVML.pcie_node()
    yield fake
    fake.release()


async def test_nvswitch_board_is_nvlink_between_every_pair(tmp_path: Path) -> None:
    fake = FakeNVML.h100_node(mig_on=3)
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)
    text = await scrape(backend)
    gpus = [f"nvidia{i}" for i in range(8)]
    m = matrix(text)
    assert_is_a_distance_matrix(m, gpus)  # MIG instances share their GPU's place
    assert {v for (a, b), v in m.items() if a != b} == {topology.DISTANCE["nvlink"]}
    types = link_types(text)
    assert set(types) == {(a, b) for a in gpus for b in gpus if a != b}
    assert set(types.values()) == {"nvlink"}
    # NVLink joins every pair, so NVML is never asked for a PCIe path.
    assert fake.calls["nvmlDeviceGetTopologyCommonAncestor"] == 0


async def test_pcie_node_distances_follow_the_pcie_tree(
    pcie: FakeNVML,
    pcie_sysfs: Path,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=pcie_sysfs), nvml=pcie)
    text = await scrape(backend)
    gpus = [f"nvidia{i}" for i in range(len(PCIE_PATHS))]
    assert_is_a_distance_matrix(matrix(text), gpus)
    same_switch = distance(text, "nvidia0", "nvidia1")
    same_bridge = distance(text, "nvidia0", "nvidia2")
    same_numa = distance(text, "nvidia0", "nvidia3")
    across = distance(text, "nvidia0", "nvidia4")
    assert same_switch is not None and same_bridge is not None
    assert same_numa is not None and across is not None
    assert same_switch < same_bridge < same_numa < across
    assert (same_switch, same_bridge, same_numa, across) == (20, 30, 40, 50)
    types = link_types(text)
    assert types[("nvidia1", "nvidia0")] == "pcie_switch"
    assert types[("nvidia2", "nvidia1")] == "pcie_hostbridge"
    assert types[("nvidia3", "nvidia2")] == "pcie_numa"
    assert types[("nvidia4", "nvidia3")] == "system"
    # One NVML call per unordered pair, not per ordered pair.
    assert pcie.calls["nvmlDeviceGetTopologyCommonAncestor"] == 10
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["nvidia0"]["cpu_affinity"] == CPUS[0]
    assert info["nvidia4"]["cpu_affinity"] == CPUS[1]
    promtool_check(text)
    golden("topology_nvidia_pcie.prom", topology_lines(text))


async def test_driver_without_common_ancestor_places_by_numa(pcie_sysfs: Path) -> None:
    """An old driver without the NVML call: no PCIe link, and the matrix still places
    every pair, by NUMA node, never closer than it may be."""
    fake = FakeNVML.pcie_node(missing_functions={"nvmlDeviceGetTopologyCommonAncestor"})
    text = await scrape(NvidiaBackend(BackendOptions(sysfs=pcie_sysfs), nvml=fake))
    assert link_types(text) == {}
    assert distance(text, "nvidia0", "nvidia1") == topology.SAME_NUMA
    assert distance(text, "nvidia0", "nvidia4") == topology.ACROSS


# -- AMD ------------------------------------------------------------------------------


def amd_backend(root: Path) -> AmdBackend:
    return AmdBackend(BackendOptions(sysfs=root, procfs=PROCFS), use_amdsmi=False)


async def test_kfd_xgmi_hive_is_xgmi_between_every_pair(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    text = await scrape(amd_backend(KFD_XGMI))
    gpus = [f"amd{i}" for i in range(8)]
    m = matrix(text)
    assert_is_a_distance_matrix(m, gpus)
    assert {v for (a, b), v in m.items() if a != b} == {topology.DISTANCE["xgmi"]}
    types = link_types(text)
    assert set(types) == {(a, b) for a in gpus for b in gpus if a != b}
    assert set(types.values()) == {"xgmi"}
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert [info[g]["cpu_affinity"] for g in gpus] == [CPUS[0]] * 4 + [CPUS[1]] * 4
    promtool_check(text)
    golden("topology_amd_xgmi.prom", topology_lines(text))


def test_kfd_nodes_are_matched_by_pci_address_not_node_number() -> None:
    """Only amd0..amd3 are known: links are kept between those, whatever KFD node
    numbers the driver gave them, and links to unknown nodes are dropped."""
    devs = amd_backend(KFD_XGMI).discover()
    assert node_pci_address({"location_id": 0xC600, "domain": 0}) == "0000:c6:00.0"
    assert node_pci_address({"location_id": 0x0A11, "domain": 1}) == "0001:0a:02.1"
    assert node_pci_address({"location_id": 0}) == ""
    links = xgmi_links(KFD_XGMI, devs[:4])
    assert {(x.device, x.peer_device) for x in links} == {
        (f"amd{a}", f"amd{b}") for a in range(4) for b in range(4) if a != b
    }


def test_kfd_partitions_of_one_gpu_are_not_linked_to_each_other(tmp_path: Path) -> None:
    """A partitioned MI300X has one KFD node per partition on one PCI function: their
    xGMI links are inside the device, and the device pair is reported once."""
    root = tmp_path / "sys"
    shutil.copytree(KFD_XGMI, root, symlinks=True)
    nodes = root / "devices/virtual/kfd/kfd/topology/nodes"
    shutil.copytree(nodes / "3", nodes / "10")  # node 3 is amd0: a second partition
    (nodes / "10/io_links/1/properties").write_text("type 11\nnode_from 10\nnode_to 3\n")
    (nodes / "10/io_links/2/properties").write_text("type 11\nnode_from 10\nnode_to 4\n")
    devs = amd_backend(root).discover()
    links = xgmi_links(root, devs)
    pairs = [(x.device, x.peer_device) for x in links]
    assert len(pairs) == len(set(pairs)) == 56
    assert all(a != b for a, b in pairs)


async def test_no_kfd_places_amd_gpus_by_the_pci_tree(tmp_path: Path) -> None:
    """amdgpu without KFD (or a container without that part of sysfs): each MI300X of
    the fixture hangs from its own host bridge, so pairs are placed by NUMA node."""
    root = tmp_path / "sys"
    shutil.copytree(KFD_XGMI, root, symlinks=True)
    os.unlink(root / "class" / "kfd" / "kfd")
    text = await scrape(amd_backend(root))
    assert set(link_types(text).values()) == {"pcie_numa", "system"}
    assert distance(text, "amd0", "amd3") == topology.SAME_NUMA
    assert distance(text, "amd0", "amd4") == topology.ACROSS


# -- the PCI tree (every backend with PCI addresses) ----------------------------------


def make_pci(root: Path, rel: str, numa: int | None = None) -> str:
    """One PCI function at ``devices/<rel>`` with its bus/pci/devices link."""
    d = root / "devices" / rel
    d.mkdir(parents=True)
    if numa is not None:
        (d / "numa_node").write_text(f"{numa}\n")
    addr = Path(rel).name
    link = root / "bus" / "pci" / "devices" / addr
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(d, link.parent), link)
    return addr


def test_pci_tree_common_ancestor(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    sw = "pci0000:00/0000:00:01.0/0000:01:00.0"  # a switch's upstream port
    a = make_pci(root, f"{sw}/0000:02:00.0/0000:03:00.0")
    b = make_pci(root, f"{sw}/0000:02:01.0/0000:04:00.0")
    c = make_pci(root, "pci0000:00/0000:00:02.0/0000:05:00.0")
    d = make_pci(root, "pci0000:40/0000:40:01.0/0000:41:00.0")
    assert pci_path(root, a)[:2] == ("pci0000:00", "0000:00:01.0")
    assert pci_path(root, "0000:ff:00.0") == ()
    assert pci_path(root, "") == ()

    def kind(x: str, y: str, nx: str = "0", ny: str = "0") -> str:
        return pcie_link_type(pci_path(root, x), pci_path(root, y), nx, ny)

    assert kind(a, b) == "pcie_switch"
    assert kind(a, c) == "pcie_hostbridge"
    assert kind(a, d) == "pcie_numa"
    assert kind(a, d, "0", "1") == "system"
    assert kind(a, "0000:ff:00.0", "0", "0") == "pcie_numa"  # unknown path: by node
    assert kind(a, "0000:ff:00.0", "0", "") == "system"  # unknown node: never near
    devs = [
        DeviceInfo("x0", "sim", "0", pci_bus_id=a, numa_node="0"),
        DeviceInfo("x1", "sim", "1", pci_bus_id=b, numa_node="0"),
        DeviceInfo("x1_p1", "sim", "p", pci_bus_id=b, parent="x1"),
        DeviceInfo("x2", "sim", "2"),  # no PCI address: not placed by the tree
        DeviceInfo("x3", "sim", "3", pci_bus_id="0000:ff:00.0"),  # not in sysfs: neither
    ]
    assert pcie_links(root, devs) == [
        Link("x0", "x1", "pcie_switch"),
        Link("x1", "x0", "pcie_switch"),
    ]


def test_cpu_affinity_from_local_cpulist(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    addr = make_pci(root, "pci0000:00/0000:00:01.0/0000:01:00.0")
    assert cpu_affinity(root, addr) == ""
    (root / "bus/pci/devices" / addr / "local_cpulist").write_text("0-31,64-95\n")
    assert cpu_affinity(root, addr) == "0-31,64-95"
    assert cpu_affinity(root, "") == ""


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"0-31\xff\n", "not UTF-8"), (b"all of them\n", "not a CPU list: 'all of them'"),
     (b"1" * 70_000, "larger than 65536 bytes")],
)  # fmt: skip
def test_an_unusable_local_cpulist_is_empty_with_one_warning(
    tmp_path: Path, content: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "sys"
    addr = make_pci(root, "pci0000:00/0000:00:01.0/0000:01:00.0")
    (root / "bus/pci/devices" / addr / "local_cpulist").write_bytes(content)
    (root / "bus/pci/devices" / addr / "numa_node").write_text("9" * 400)
    with caplog.at_level(logging.WARNING, "accel_exporter.pcitopo"):
        assert cpu_affinity(root, addr) == ""
        assert numa_node(root, addr) == ""
    assert len(caplog.records) == 2
    assert reason in caplog.records[0].getMessage()
    assert "local_cpulist" in caplog.records[0].getMessage()
    assert "numa_node: not a NUMA node" in caplog.records[1].getMessage()


async def test_oneapi_cards_are_placed_by_the_pci_tree(tmp_path: Path) -> None:
    """The oneAPI fixture's Flex 170 (pci0000:40) and B580 (pci0000:c0, NUMA unknown)
    are on different host bridges: placed across sockets, with the Flex's CPUs."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "sys", root, symlinks=True)
    for rel in ("pci0000:40/0000:40:01.1/0000:4d:00.0", "pci0000:c0/0000:c0:01.1/0000:c3:00.0"):
        link = root / "bus" / "pci" / "devices" / Path(rel).name
        os.symlink(f"../../../devices/{rel}", link)
    (root / "devices/pci0000:40/0000:40:01.1/0000:4d:00.0/local_cpulist").write_text("0-95\n")
    backend = OneapiBackend(
        BackendOptions(sysfs=root), dpctl=sysfs_node(), level_zero=FakeLevelZero()
    )
    devs = backend.discover()
    try:
        assert [d.cpu_affinity for d in devs[:2]] == ["0-95", ""]
        assert backend.topology() == [
            Link("oneapi0", "oneapi1", "system"),
            Link("oneapi1", "oneapi0", "system"),
        ]
    finally:
        backend.close()
