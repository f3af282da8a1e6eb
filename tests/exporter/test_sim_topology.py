"""The sim's topology, partitions and pods: the three node shapes a scheduler must tell
apart (NVSwitch, xGMI, a PCIe tree), partitions as child devices, and deterministic
pod attribution."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.cli import make_backends, parse_args
from exporter.poller import Poller
from exporter.topology import distances
from tests.support.clock import FakeClock
from tests.support.exposition import stable

FIXED = 1_700_000_000.0


def sim(
    devices: str,
    *,
    partitions: bool = False,
    pods: int = 0,
    seed: int = 0,
    clock: FakeClock | None = None,
) -> SimBackend:
    opts = BackendOptions(
        sim_devices=parse_sim_devices(devices),
        sim_seed=seed,
        sim_partitions=partitions,
        sim_pods=pods,
    )
    return SimBackend(opts, clock=clock or FakeClock(0.0))


def matrix(backend: SimBackend) -> dict[tuple[str, str], float]:
    return {(a, b): d for a, b, d in distances(backend.discover(), backend.topology())}


def test_nvidia_node_is_all_nvlink_and_amd_all_xgmi() -> None:
    b = sim("nvidia:8,amd:8")
    links = {(link.device, link.peer_device): link for link in b.topology()}
    for v, kind in (("nvidia", "nvlink"), ("amd", "xgmi")):
        for i in range(8):
            for j in range(8):
                if i != j:
                    assert links[(f"{v}{i}", f"{v}{j}")].link_type == kind
    m = matrix(b)
    assert m[("nvidia0", "nvidia7")] == 10
    assert m[("amd2", "amd5")] == 10
    # Two vendors in one host have no link: placed by NUMA node.
    assert m[("nvidia0", "amd0")] == 40
    assert m[("nvidia0", "amd7")] == 50


def test_oneapi_node_is_a_pcie_tree() -> None:
    b = sim("oneapi:8")
    m = matrix(b)
    assert m[("oneapi0", "oneapi0")] == 0
    assert m[("oneapi0", "oneapi1")] == 20  # same PCIe switch
    assert m[("oneapi0", "oneapi3")] == 30  # same host bridge
    assert m[("oneapi0", "oneapi4")] == 50  # across the system
    assert m[("oneapi6", "oneapi7")] == 20
    assert all(m[(a, b)] == m[(b, a)] for a, b in m)
    assert {link.link_type for link in b.topology()} == {
        "pcie_switch",
        "pcie_hostbridge",
        "system",
    }
    # PCIe-only: no device-link throughput.
    assert b.read(b.discover()[0]).link_bytes_per_second == {}


def test_partitions_are_child_devices() -> None:
    b = sim("nvidia:8,amd:2,oneapi:1", partitions=True)
    devices = {d.device: d for d in b.discover()}
    assert devices["nvidia7_mig1"].parent == "nvidia7"
    assert devices["nvidia7_mig1"].profile == "3g.40gb"
    assert devices["nvidia7_mig9"].profile == "1g.10gb"
    assert devices["nvidia7_mig9"].uuid.startswith("MIG-")
    assert devices["amd1_p0"].parent == "amd1"
    assert devices["amd1_p1"].profile == "DPX"
    assert not any(d.parent for d in devices.values() if d.vendor == "oneapi")
    assert len(devices) == 8 + 2 + 2 + 2 + 1
    assert len({d.uuid for d in devices.values()}) == len(devices)
    # Partitions share their parent's place: not in the matrix, no links of their own.
    names = {a for a, _, _ in distances(list(devices.values()), b.topology())}
    assert names == {n for n, d in devices.items() if not d.parent}
    r = b.read(devices["nvidia7_mig9"])
    assert r.utilization is not None and 0 <= r.utilization <= 1
    assert r.memory_total_bytes == devices_total(b, "nvidia7") / 8
    assert r.power_watts is None  # GPU-wide figures stay on the parent


def devices_total(b: SimBackend, name: str) -> float:
    total = b.read(next(d for d in b.discover() if d.device == name)).memory_total_bytes
    assert total is not None
    return total


def test_no_partitions_without_the_flag() -> None:
    assert not any(d.parent for d in sim("nvidia:8,amd:2").discover())


def test_pods_are_deterministic_and_one_device_is_shared() -> None:
    b = sim("nvidia:8,amd:2", partitions=True, pods=4, seed=3)
    pods = b.pods()
    assert pods == sim("nvidia:8,amd:2", partitions=True, pods=4, seed=3).pods()
    assert {p.namespace for p in pods} == {"sim"}
    assert {p.container for p in pods} == {"main"}
    assert pods[0].pod == "train-0"
    uuids = {d.uuid: d for d in b.discover()}
    # Parents of partitions are not handed out; their partitions are.
    held = [uuids[p.device_id] for p in pods]
    assert not any(d.device in ("nvidia7", "amd1") for d in held)
    per_pod: dict[str, int] = {}
    for p in pods:
        per_pod[p.pod] = per_pod.get(p.pod, 0) + 1
    assert all(1 <= n <= 5 for n in per_pod.values())
    shared = [p.device_id for p in pods if [q.device_id for q in pods].count(p.device_id) > 1]
    assert len(set(shared)) == 1
    assert {p.pod for p in pods if p.device_id in shared} == {"train-0", pods[-1].pod}
    resources = {uuids[p.device_id].device: p.resource for p in pods}
    assert resources["nvidia0"] == "nvidia.com/gpu"
    every = sim("nvidia:8,amd:2", partitions=True, pods=20, seed=3).pods()
    assert {p.resource for p in every} == {
        "nvidia.com/gpu",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-1g.10gb",
        "amd.com/gpu",
    }
    assert sim("nvidia:8", pods=0).pods() == []


def test_pods_stop_when_devices_run_out() -> None:
    pods = sim("nvidia:1", pods=5).pods()
    assert [p.pod for p in pods] == ["train-0"]


def test_flags_reach_the_backend() -> None:
    args, _ = parse_args(
        ["--sim-devices", "nvidia:8", "--sim-partitions", "--sim-pods", "3", "--once"]
    )
    backend = next(b for b in make_backends(args) if isinstance(b, SimBackend))
    assert isinstance(backend, SimBackend)
    assert backend.options.sim_partitions and backend.options.sim_pods == 3


async def test_sim_topology_golden_and_promtool(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    clock = FakeClock(0)
    backend = sim("nvidia:2,amd:2,oneapi:4", partitions=True, pods=3, clock=clock)
    poller = Poller([backend], 1, 5, clock=lambda: FIXED)
    await poller.poll_once()
    clock.set(10.0)
    text = (await poller.poll_once()).text.decode()
    promtool_check(text)
    assert 'accel_device_pod_info{device="nvidia1_mig1"' in text or "train-" in text
    golden("sim_topology.prom", stable(text))


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--sim-partitions"], "need --sim-devices"),
        (["--sim-pods", "2"], "need --sim-devices"),
        (["--sim-devices", "nvidia:2", "--sim-pods", "-1"], "--sim-pods must be 0 or more"),
    ],
)
def test_bad_sim_flags_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
