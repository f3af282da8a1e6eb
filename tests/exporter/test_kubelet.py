"""Pod attribution: the kubelet backend against a real gRPC server playing the
kubelet's PodResources API on a unix socket, through the real Poller."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.backends import default_backends
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.kubelet import KubeletBackend
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.model import DeviceInfo, Reading
from exporter.poller import Poller
from exporter.render import normalise_device_id
from tests.support.clock import FakeClock
from tests.support.exposition import parse, value
from tests.support.fakes.kubelet import FakeContainer, FakeKubelet, FakePod
from tests.support.paths import REPO

FIXED = 1_700_000_000.0
GPU = "nvidia.com/gpu"
POD_INFO = "accel_device_pod_info"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # A unix socket path is limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(sock_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(sock_dir / "kubelet.sock")
    fake.allocatable = {GPU: ["a", "b", "c"]}
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def kubelet_backend(path: Path) -> KubeletBackend:
    return KubeletBackend(BackendOptions(kubelet_socket=path))


def sim_backend(devices: str) -> SimBackend:
    return SimBackend(BackendOptions(sim_devices=parse_sim_devices(devices)), clock=FakeClock(0.0))


class StaticBackend(Backend):
    """Fixed devices, as a vendor backend would discover them, for the ID mapping."""

    name = "static"
    hardware = False

    def __init__(self, devices: list[DeviceInfo]) -> None:
        super().__init__(BackendOptions())
        self.devices = devices

    def discover(self) -> list[DeviceInfo]:
        return self.devices

    def read(self, device: DeviceInfo) -> Reading:
        return Reading(utilization=0.5, ecc_errors={"corrected": 0})


def pod_series(text: str) -> set[tuple[str, str, str, str]]:
    return {
        (lb["device"], lb["namespace"], lb["pod"], lb["container"])
        for n, lb, _ in parse(text)
        if n == POD_INFO
    }


def families(text: str, *names: str) -> str:
    """Only the named families, HELP and TYPE included: the golden file holds what
    this backend adds, not the sim's telemetry, which has goldens of its own."""
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if any(line.split("{")[0].split(" ")[0] == n or f" {n} " in line for n in names)
    )


async def poll(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


async def test_time_slicing_and_multi_gpu_pods_then_a_pod_ends(
    kubelet: FakeKubelet,
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    """Two pods sharing one GPU and one pod holding two GPUs are exactly the pod
    series; a pod that ends is gone at the next poll."""
    sim = sim_backend("nvidia:4")
    uuids = [d.uuid for d in sim.discover()]
    # The NVIDIA plugin's time-slicing replicas are "<uuid>::<n>".
    kubelet.add_pod("ml", "train-a", GPU, f"{uuids[0]}::0")
    kubelet.add_pod("ml", "train-b", GPU, f"{uuids[0]}::1")
    kubelet.add_pod("research", "big", GPU, uuids[1], uuids[2], container="trainer")
    # CPU-only containers and IDs of devices this exporter does not see are ignored.
    kubelet.set_pods(
        *kubelet.pods,
        FakePod("kube-system", "dns", [FakeContainer("coredns", cpu_ids=[2, 3])]),
        FakePod("ml", "elsewhere", [FakeContainer("main", {GPU: ["GPU-not-on-this-host"]})]),
    )
    poller = Poller([sim, kubelet_backend(kubelet.path)], 1, 5, clock=lambda: FIXED)
    text = await poll(poller)
    assert pod_series(text) == {
        ("nvidia0", "ml", "train-a", "main"),
        ("nvidia0", "ml", "train-b", "main"),
        ("nvidia1", "research", "big", "trainer"),
        ("nvidia2", "research", "big", "trainer"),
    }
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    promtool_check(text)
    golden("kubelet.prom", families(text, POD_INFO, "accel_exporter_backend_up"))

    kubelet.remove_pod("ml", "train-b")
    text = await poll(poller)
    assert pod_series(text) == {
        ("nvidia0", "ml", "train-a", "main"),
        ("nvidia1", "research", "big", "trainer"),
        ("nvidia2", "research", "big", "trainer"),
    }
    await poller.stop()


async def test_socket_going_away_and_coming_back(kubelet: FakeKubelet) -> None:
    """Without the socket the device metrics keep flowing and the kubelet backend
    is down; it is up again at the next poll after the socket comes back, on the
    same path."""
    sim = sim_backend("nvidia:2")
    uuids = [d.uuid for d in sim.discover()]
    kubelet.add_pod("ml", "train", GPU, uuids[1])
    poller = Poller([sim, kubelet_backend(kubelet.path)], 1, 5, clock=lambda: FIXED)
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    assert pod_series(text) == {("nvidia1", "ml", "train", "main")}

    kubelet.stop()
    assert not kubelet.path.exists()
    for _ in range(2):
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
        assert value(text, "accel_exporter_backend_up", backend="sim") == 1
        assert value(text, "accel_up", device="nvidia0") == 1
        assert value(text, "accel_utilization_ratio", device="nvidia1") is not None
        assert pod_series(text) == set()

    kubelet.start()
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    assert pod_series(text) == {("nvidia1", "ml", "train", "main")}
    await poller.stop()


async def test_a_dead_kubelet_behind_a_stale_socket_is_down(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """A socket file nobody listens on (the kubelet died without removing it):
    List fails fast, the backend is down, logged once, retried every poll."""
    sim = sim_backend("nvidia:1")
    poller = Poller([sim, kubelet_backend(kubelet.path)], 1, 5, clock=lambda: FIXED)
    assert value(await poll(poller), "accel_exporter_backend_up", backend="kubelet") == 1
    server = kubelet._server
    assert server is not None
    server.stop(grace=None).wait(5)  # stops serving, leaves a socket file behind
    kubelet.path.unlink(missing_ok=True)
    import socket

    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(kubelet.path))  # bound, never listening: connections are refused
    try:
        with caplog.at_level(logging.INFO, logger="accel_exporter"):
            for _ in range(3):
                text = await poll(poller)
                assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
                assert value(text, "accel_up", device="nvidia0") == 1
    finally:
        stale.close()
    down = [r for r in caplog.records if "backend kubelet is down" in r.getMessage()]
    assert len(down) == 1, [r.getMessage() for r in down]
    assert "UNAVAILABLE" in down[0].getMessage()
    await poller.stop()


async def test_a_slow_kubelet_is_down_within_the_rpc_timeout(kubelet: FakeKubelet) -> None:
    """List has its own deadline, shorter than the poll timeout: a kubelet that does
    not answer is reported down (DEADLINE_EXCEEDED), not hung, and comes back."""
    sim = sim_backend("nvidia:1")
    kubelet.add_pod("ml", "train", GPU, sim.discover()[0].uuid)
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path), timeout=0.2)
    poller = Poller([sim, backend], 1, 5, clock=lambda: FIXED)
    assert value(await poll(poller), "accel_exporter_backend_up", backend="kubelet") == 1
    kubelet.list_delay = 1.0
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
    assert pod_series(text) == set()
    kubelet.list_delay = 0.0
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
    assert pod_series(text) == {("nvidia0", "ml", "train", "main")}
    await poller.stop()


async def test_without_a_kubelet_one_log_line(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host without Kubernetes: backend_up 0 and one log line, however many polls."""
    poller = Poller(
        [sim_backend("nvidia:1"), kubelet_backend(sock_dir / "kubelet.sock")],
        1,
        5,
        clock=lambda: FIXED,
    )
    with caplog.at_level(logging.DEBUG, logger="accel_exporter"):
        for _ in range(3):
            text = await poll(poller)
            assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
            assert value(text, "accel_up", device="nvidia0") == 1
    kubelet_lines = [r.getMessage() for r in caplog.records if "kubelet" in r.getMessage()]
    assert kubelet_lines == [
        f"backend kubelet is down: kubelet pod-resources socket {sock_dir / 'kubelet.sock'} "
        "not found; pod attribution off"
    ]
    assert caplog.records[0].levelno == logging.INFO
    await poller.stop()


def test_kubelet_is_a_default_backend() -> None:
    assert "kubelet" in default_backends()


async def test_an_old_kubelet_without_get_allocatable_resources(sock_dir: Path) -> None:
    fake = FakeKubelet(sock_dir / "kubelet.sock", allocatable_supported=False)
    fake.start()
    try:
        sim = sim_backend("nvidia:1")
        fake.add_pod("ml", "train", GPU, sim.discover()[0].uuid)
        poller = Poller([sim, kubelet_backend(fake.path)], 1, 5, clock=lambda: FIXED)
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        assert pod_series(text) == {("nvidia0", "ml", "train", "main")}
        await poller.stop()
    finally:
        fake.stop()


H100 = DeviceInfo(
    device="nvidia0",
    vendor="nvidia",
    uuid="GPU-11111111-2222-3333-4444-555555555555",
    model="NVIDIA H100 80GB HBM3",
    pci_bus_id="00000000:17:00.0",
)
MIG = [
    DeviceInfo(
        device=f"nvidia0_mig{i}",
        vendor="nvidia",
        uuid=f"MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000{i}",
        model="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        pci_bus_id="00000000:17:00.0",
        parent="nvidia0",
        profile="3g.40gb",
    )
    for i in (1, 2)
]
MI300 = DeviceInfo(
    device="amd0", vendor="amd", uuid="0x18a1b2c3d4e5f607", pci_bus_id="0000:c1:00.0"
)
ARC = DeviceInfo(device="oneapi0", vendor="oneapi", uuid="8680-56a0", pci_bus_id="0000:03:00.0")


async def test_mig_uuids_and_pci_addresses_map_to_their_devices(kubelet: FakeKubelet) -> None:
    """A MIG UUID lands on the MIG instance, not its GPU (which shares its PCI
    address); AMD and Intel plugins' PCI addresses land on the whole device, in
    whatever case and domain width they are written."""
    kubelet.add_pod("ml", "mig-a", "nvidia.com/mig-3g.40gb", MIG[0].uuid)
    kubelet.add_pod("ml", "mig-b", "nvidia.com/mig-3g.40gb", MIG[1].uuid)
    kubelet.add_pod("hpc", "rocm", "amd.com/gpu", "0000:C1:00.0")
    kubelet.add_pod("media", "xe", "gpu.intel.com/xe", "03:00.0")
    static = StaticBackend([H100, *MIG, MI300, ARC])
    poller = Poller([static, kubelet_backend(kubelet.path)], 1, 5, clock=lambda: FIXED)
    text = await poll(poller)
    assert pod_series(text) == {
        ("nvidia0_mig1", "ml", "mig-a", "main"),
        ("nvidia0_mig2", "ml", "mig-b", "main"),
        ("amd0", "hpc", "rocm", "main"),
        ("oneapi0", "media", "xe", "main"),
    }
    await poller.stop()


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("00000000:17:00.0", "0000:17:00.0"),
        ("c1:00.0", "0000:c1:00.0"),
        ("GPU-11111111-2222-3333-4444-555555555555::4", "GPU-11111111-2222-3333-4444-555555555555"),
        ("MIG-aaaaaaaa-bbbb-cccc-dddd-000000000001", "MIG-aaaaaaaa-bbbb-cccc-dddd-000000000001"),
    ],
)
def test_device_id_normalisation(raw: str, normal: str) -> None:
    assert normalise_device_id(raw) == normal


async def test_pod_labels_on_device_gauges(
    kubelet: FakeKubelet, promtool_check: Callable[[str], None]
) -> None:
    """--pod-labels: a device's gauges carry its pod, a shared device's its pods
    joined in sorted order; counters and accel_device_info stay as they are."""
    sim = sim_backend("nvidia:3")
    uuids = [d.uuid for d in sim.discover()]
    kubelet.add_pod("ml", "train-b", GPU, uuids[0])
    kubelet.add_pod("batch", "train-a", GPU, uuids[0])
    kubelet.add_pod("ml", "solo", GPU, uuids[1])
    poller = Poller(
        [sim, kubelet_backend(kubelet.path)], 1, 5, clock=lambda: FIXED, pod_labels=True
    )
    text = await poll(poller)
    promtool_check(text)
    util = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_utilization_ratio"}
    assert (util["nvidia0"]["namespace"], util["nvidia0"]["pod"]) == ("batch,ml", "train-a,train-b")
    assert (util["nvidia1"]["namespace"], util["nvidia1"]["pod"]) == ("ml", "solo")
    assert "pod" not in util["nvidia2"]
    for name in ("accel_device_info", "accel_fault_events_total", "accel_ecc_errors_total"):
        assert all("pod" not in lb for n, lb, _ in parse(text) if n == name), name
    # accel_device_pod_info keeps one series per pod either way.
    assert len(pod_series(text)) == 3
    await poller.stop()


def test_cli_flags_reach_the_backend_and_the_renderer(kubelet: FakeKubelet) -> None:
    # The CLI's simulated UUIDs derive from this machine's host name.
    options = BackendOptions(
        sim_devices=parse_sim_devices("nvidia:1"), sim_host=socket.gethostname()
    )
    sim = SimBackend(options)
    kubelet.add_pod("ml", "train", GPU, sim.discover()[0].uuid)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--once",
            "--backends",
            "sim,kubelet",
            "--sim-devices",
            "nvidia:1",
            "--kubelet.pod-resources-socket",
            str(kubelet.path),
            "--pod-labels",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert value(proc.stdout, "accel_exporter_backend_up", backend="kubelet") == 1
    assert value(proc.stdout, POD_INFO, device="nvidia0", pod="train") == 1
    assert value(proc.stdout, "accel_up", device="nvidia0", pod="train") == 1
