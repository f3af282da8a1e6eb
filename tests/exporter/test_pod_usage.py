"""Per-pod use of shared devices: processes -> containers -> accel_pod_* series.

The acceptance of issue 17's "per-pod use": two pods time-slicing one GPU at
different loads on the fake NVML (and the same on the fake AMD SMI, under MPS, and
on MIG instances), with their processes in a ``/proc`` and kubelet log tree built in
``tmp_path``. Each pod's ``accel_pod_utilization_ratio`` must be within 0.05 of what
the fake set, and the parts (pods, plus pod="" for processes of no pod) must add up
to the device's ``accel_utilization_ratio`` within 0.05. The measured sums are
printed (``-s``) for the closing note.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from exporter.backends.amd import AmdBackend
from exporter.backends.amd import procs as amd_procs
from exporter.backends.amd.device import Gpu as AmdGpu
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.model import DeviceInfo, PodAssignment, ProcessUsage, Reading
from exporter.poller import Poller
from exporter.procmap import (
    CGROUP_LIMIT,
    NO_OWNER,
    Assigned,
    Owner,
    ProcMap,
    owner_on,
    parse_cgroup,
    parse_container_log,
    parse_pod_dir,
)
from exporter.render import DeviceState, pod_usage
from tests.exporter.test_amd import mi300x_smi
from tests.support.exposition import parse
from tests.support.fakes.amdsmi import FakeAmdProcess, FakeAmdSmi
from tests.support.fakes.nvml import GIB, MIB, FakeNVML
from tests.support.fakes.nvml_procs import FakeProcess
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.timeout(60)

UTIL = "accel_pod_utilization_ratio"
MEM = "accel_pod_memory_used_bytes"


def cid(n: int) -> str:
    return f"{n:064x}"


class PodTree:
    """A host's ``/proc/PID/cgroup`` files and the kubelet's log directories."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.logs = root / "log"
        (self.logs / "pods").mkdir(parents=True)
        (self.logs / "containers").mkdir(parents=True)

    def pod(self, ns: str, pod: str, uid: str, containers: dict[str, str]) -> None:
        for name, container_id in containers.items():
            d = self.logs / "pods" / f"{ns}_{pod}_{uid}" / name
            d.mkdir(parents=True)
            (d / "0.log").write_text("")
            (self.logs / "containers" / f"{pod}_{ns}_{name}-{container_id}.log").write_text("")

    def process(self, pid: int, cgroup: str) -> None:
        d = self.proc / str(pid)
        d.mkdir(parents=True)
        (d / "cgroup").write_text(cgroup)

    def systemd(self, pid: int, uid: str, container_id: str, qos: str = "burstable") -> None:
        """cgroup v2 with the systemd driver and containerd."""
        u = uid.replace("-", "_")
        self.process(
            pid,
            f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/"
            f"cri-containerd-{container_id}.scope\n",
        )

    def procmap(self) -> ProcMap:
        return ProcMap(procfs=self.proc, pod_logs=self.logs)


class Assignments(Backend):
    """What the kubelet's PodResources API would say: which containers hold which
    devices (the kubelet backend's part, held still for these tests)."""

    name: ClassVar[str] = "kubelet"
    hardware: ClassVar[bool] = False

    def __init__(self, pods: Sequence[PodAssignment]) -> None:
        super().__init__(BackendOptions())
        self._pods = list(pods)

    def discover(self) -> list[DeviceInfo]:
        return []

    def read(self, device: DeviceInfo) -> Reading:  # pragma: no cover - no devices
        raise AssertionError("no devices")

    def pods(self) -> list[PodAssignment]:
        return self._pods


UID_A = "0f3e2a4c-1111-4c2b-9a55-aaaaaaaaaaaa"
UID_B = "5b7d9e1f-2222-4f7e-8c11-bbbbbbbbbbbb"
UID_MPS = "77777777-3333-4d4d-8e8e-cccccccccccc"


@pytest.fixture
def tree(tmp_path: Path) -> PodTree:
    t = PodTree(tmp_path)
    t.pod("ml", "train-a", UID_A, {"trainer": cid(0xA)})
    t.pod("ml", "infer-b", UID_B, {"server": cid(0xB), "sidecar": cid(0xBB)})
    t.systemd(1001, UID_A, cid(0xA))
    t.systemd(2002, UID_B, cid(0xB), qos="besteffort")
    # A host process: no pod's cgroup.
    t.process(3003, "0::/system.slice/dcgm-diag.service\n")
    return t


async def poll_twice(poller: Poller, advance: Callable[[], None]) -> str:
    """Two polls with time between them: rates and samples need a period."""
    await poller.poll_once()
    advance()
    text = (await poller.poll_once()).text.decode()
    await poller.stop()
    return text


def usage(text: str, device: str) -> tuple[float | None, dict[str, float], dict[str, float]]:
    """(device utilization, {pod: utilization}, {pod: memory}) of one device."""
    device_util = None
    util: dict[str, float] = {}
    mem: dict[str, float] = {}
    for name, labels, v in parse(text):
        if labels.get("device") != device:
            continue
        if name == "accel_utilization_ratio":
            device_util = v
        elif name == UTIL:
            util[labels["pod"]] = util.get(labels["pod"], 0.0) + v
        elif name == MEM:
            mem[labels["pod"]] = mem.get(labels["pod"], 0.0) + v
    return device_util, util, mem


def assert_adds_up(
    label: str, device_util: float | None, util: dict[str, float], want: dict[str, float]
) -> None:
    assert device_util is not None
    for pod, share in want.items():
        assert util.get(pod) == pytest.approx(share, abs=0.05), (label, pod, util)
    total = sum(util.values())
    print(f"{label}: device {device_util:.3f}, sum of pods {total:.3f}, pods {util}")
    assert total == pytest.approx(device_util, abs=0.05), (label, util)


# -- NVIDIA ---------------------------------------------------------------------------


async def test_time_slicing_on_nvml_splits_the_gpu_by_measured_use(
    tree: PodTree, promtool_check: Callable[[str], None]
) -> None:
    fake = FakeNVML.pcie_node()
    gpu = fake.gpus[1]
    gpu.utilization_gpu = 75
    fake.run_processes(
        1,
        FakeProcess(1001, 6 * GIB, sm_util=50),
        FakeProcess(2002, 2 * GIB, sm_util=20),
        FakeProcess(3003, 300 * MIB, sm_util=5),
    )
    # The NVIDIA device plugin's time-slicing replicas: one GPU, two IDs.
    pods = [
        PodAssignment("ml", "train-a", "trainer", "nvidia.com/gpu", f"{gpu.uuid}::0"),
        PodAssignment("ml", "infer-b", "server", "nvidia.com/gpu", f"{gpu.uuid}::1"),
    ]
    poller = Poller(
        [NvidiaBackend(BackendOptions(), nvml=fake), Assignments(pods)],
        interval=10,
        timeout=5,
        procmap=tree.procmap(),
    )
    text = await poll_twice(poller, lambda: fake.advance(10))
    device_util, util, mem = usage(text, "nvidia1")
    assert_adds_up("nvml time-slicing", device_util, util, {"train-a": 0.5, "infer-b": 0.2})
    assert util[""] == pytest.approx(0.05)  # the host process, under pod=""
    assert mem == {"train-a": 6 * GIB, "infer-b": 2 * GIB, "": 300 * MIB}
    # Labels: the container each process runs in, from its cgroup and the kubelet's logs.
    series = {
        (lb["namespace"], lb["pod"], lb["container"])
        for n, lb, _ in parse(text)
        if n == UTIL and lb["device"] == "nvidia1"
    }
    assert series == {("ml", "train-a", "trainer"), ("ml", "infer-b", "server"), ("", "", "")}
    # A GPU without processes but with NVML's process list has no per-pod series.
    assert usage(text, "nvidia0")[1] == {}
    promtool_check(text)


async def test_mps_clients_are_measured_beside_the_server(tree: PodTree) -> None:
    fake = FakeNVML.pcie_node()
    gpu = fake.gpus[2]
    gpu.utilization_gpu = 80
    tree.pod("gpu-operator", "mps-control", UID_MPS, {"mps": cid(0xC)})
    tree.systemd(900, UID_MPS, cid(0xC))
    fake.run_processes(
        2,
        FakeProcess(900, 256 * MIB),  # nvidia-cuda-mps-server: the context holder
        FakeProcess(1001, 4 * GIB, sm_util=35, mps_client=True),
        FakeProcess(2002, 1 * GIB, sm_util=45, mps_client=True),
    )
    pods = [
        PodAssignment("ml", "train-a", "trainer", "nvidia.com/gpu.shared", gpu.uuid),
        PodAssignment("ml", "infer-b", "server", "nvidia.com/gpu.shared", gpu.uuid),
    ]
    poller = Poller(
        [NvidiaBackend(BackendOptions(), nvml=fake), Assignments(pods)],
        interval=10,
        timeout=5,
        procmap=tree.procmap(),
    )
    text = await poll_twice(poller, lambda: fake.advance(10))
    device_util, util, mem = usage(text, "nvidia2")
    assert_adds_up("nvml MPS", device_util, util, {"train-a": 0.35, "infer-b": 0.45})
    assert util["mps-control"] == 0.0 and mem["mps-control"] == 256 * MIB
    assert mem["train-a"] == 4 * GIB


async def test_mig_instances_give_their_use_to_their_pods(tree: PodTree) -> None:
    """NVML has no per-process utilization on a MIG GPU; each instance's GPM figure
    goes to the one container that holds it, and its processes' memory to it."""
    fake = FakeNVML.h100_node(mig_on=3)
    gpu = fake.gpus[3]
    gi1, gi9 = gpu.migs
    fake.run_processes(
        3,
        FakeProcess(1001, 9 * GIB, gpu_instance=1, compute_instance=0),
        FakeProcess(2002, 1 * GIB, gpu_instance=9, compute_instance=0),
    )
    pods = [
        PodAssignment("ml", "train-a", "trainer", "nvidia.com/mig-3g.40gb", gi1.uuid),
        PodAssignment("ml", "infer-b", "server", "nvidia.com/mig-1g.10gb", gi9.uuid),
    ]
    poller = Poller(
        [NvidiaBackend(BackendOptions(), nvml=fake), Assignments(pods)],
        interval=10,
        timeout=5,
        procmap=tree.procmap(),
    )
    text = await poll_twice(poller, lambda: fake.advance(10))
    for device, pod, share, memory in (
        ("nvidia3_mig1", "train-a", 0.875, 9 * GIB),
        ("nvidia3_mig9", "infer-b", 0.125, 1 * GIB),
    ):
        device_util, util, mem = usage(text, device)
        assert_adds_up(f"nvml MIG {device}", device_util, util, {pod: share})
        assert mem == {pod: memory}
    # The GPU itself lists no process: its instances' would be counted twice.
    assert usage(text, "nvidia3")[1:] == ({}, {})


async def test_without_process_utilization_pods_get_memory_only(tree: PodTree) -> None:
    """An older driver (FunctionNotFound for both utilization calls): two pods on one
    GPU get their memory, and no utilization that would only be a guess."""
    fake = FakeNVML.pcie_node(
        missing_functions=(
            "nvmlDeviceGetProcessesUtilizationInfo",
            "nvmlDeviceGetProcessUtilization",
        )
    )
    fake.run_processes(1, FakeProcess(1001, 2 * GIB, sm_util=50), FakeProcess(2002, GIB))
    poller = Poller(
        [NvidiaBackend(BackendOptions(), nvml=fake)],
        interval=10,
        timeout=5,
        procmap=tree.procmap(),
    )
    text = await poll_twice(poller, lambda: fake.advance(10))
    _, util, mem = usage(text, "nvidia1")
    assert util == {} and mem == {"train-a": 2 * GIB, "infer-b": GIB}


# -- AMD ------------------------------------------------------------------------------


async def test_time_slicing_on_amdsmi_splits_the_gpu_by_engine_time(tree: PodTree) -> None:
    gpu = mi300x_smi(gfx_activity=70)
    gpu.processes = [
        FakeAmdProcess(1001, 40 * GIB, gfx_busy=0.45, gfx_ns=5_000_000_000),
        FakeAmdProcess(2002, 8 * GIB, gfx_busy=0.25),
    ]
    fake = FakeAmdSmi([gpu])
    backend = AmdBackend(
        BackendOptions(sysfs=FIXTURES / "sys", procfs=FIXTURES / "proc"),
        amdsmi=fake,
        clock=lambda: fake.now_ns / 1e9,
    )
    pods = [
        PodAssignment("ml", "train-a", "trainer", "amd.com/gpu", "0000:0c:00.0"),
        PodAssignment("ml", "infer-b", "server", "amd.com/gpu", "0000:0c:00.0"),
    ]
    poller = Poller([backend, Assignments(pods)], interval=10, timeout=5, procmap=tree.procmap())
    text = await poll_twice(poller, lambda: fake.advance(10))
    device_util, util, mem = usage(text, "amd0")
    assert_adds_up("amdsmi time-slicing", device_util, util, {"train-a": 0.45, "infer-b": 0.25})
    assert mem == {"train-a": 40 * GIB, "infer-b": 8 * GIB}


async def test_amd_sysfs_source_has_no_per_pod_series(tree: PodTree) -> None:
    backend = AmdBackend(
        BackendOptions(sysfs=FIXTURES / "sys", procfs=FIXTURES / "proc"), use_amdsmi=False
    )
    poller = Poller([backend], interval=10, timeout=5, procmap=tree.procmap())
    text = await poll_twice(poller, lambda: None)
    assert not [n for n, _, _ in parse(text) if n in (UTIL, MEM)]


# -- procmap: cgroups and the kubelet's log names ------------------------------------------

U = "0f3e2a4c-1111-4c2b-9a55-aaaaaaaaaaaa"
U_ = U.replace("-", "_")
C = cid(0xA)


@pytest.mark.parametrize(
    ("description", "cgroup", "want"),
    [
        (
            "v2, systemd driver, containerd",
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
            f"cri-containerd-{C}.scope\n",
            (U, C),
        ),
        (
            "v2, systemd driver, guaranteed QoS (no QoS slice), CRI-O",
            f"0::/kubepods.slice/kubepods-pod{U_}.slice/crio-{C}.scope\n",
            (U, C),
        ),
        (
            "v2, systemd driver, docker",
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/"
            f"docker-{C}.scope\n",
            (U, C),
        ),
        (
            "v2, cgroupfs driver",
            f"0::/kubepods/burstable/pod{U}/{C}\n",
            (U, C),
        ),
        (
            "v1, cgroupfs driver, several hierarchies",
            f"12:pids:/kubepods/besteffort/pod{U}/{C}\n"
            f"11:memory:/kubepods/besteffort/pod{U}/{C}\n"
            "1:name=systemd:/\n",
            (U, C),
        ),
        (
            "v1, systemd driver, a hierarchy without the pod first",
            "13:misc:/\n"
            f"4:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{U_}.slice/cri-containerd-{C}.scope\n",
            (U, C),
        ),
        (
            "the pod's sandbox cgroup itself: a pod without a container",
            f"0::/kubepods.slice/kubepods-pod{U_}.slice\n",
            (U, ""),
        ),
        (
            "v2, read from inside another cgroup namespace (the exporter's own pod)",
            f"0::/../../kubepods-besteffort-pod{U_}.slice/cri-containerd-{C}.scope\n",
            (U, C),
        ),
        ("a system service", "0::/system.slice/containerd.service\n", ("", "")),
        ("the host's root", "0::/\n", ("", "")),
        ("garbage", "not a cgroup line\n\x00\x01", ("", "")),
        ("a uid-looking name outside a pod component", f"0::/user.slice/x{U}\n", ("", "")),
    ],
)
def test_parse_cgroup(description: str, cgroup: str, want: tuple[str, str]) -> None:
    assert parse_cgroup(cgroup) == want, description


def test_log_names_split_without_ambiguity() -> None:
    assert parse_pod_dir(f"ml_train-a_{U}") == ("ml", "train-a", U)
    assert parse_pod_dir("ml_train-a_not-a-uid") is None
    assert parse_pod_dir(f"ML_train-a_{U}") is None  # not a namespace the API allows
    assert parse_container_log(f"train-a_ml_trainer-v2-{C}.log") == (
        "ml",
        "train-a",
        "trainer-v2",
        C,
    )
    assert parse_container_log(f"train-a_ml_trainer-{C}.log.gz") is None
    assert parse_container_log("x_y_z.log") is None


def test_owner_on_fills_what_the_logs_lack_from_podresources() -> None:
    a = [Assigned("ml", "train-a", "trainer")]
    # Known only by UID (no log directory): the one pod assigned the device.
    assert owner_on(Owner(uid=U), a) == ("ml", "train-a", "trainer")
    # Two pods assigned: it cannot be told which; it stays a pod, under its UID.
    two = [*a, Assigned("ml", "infer-b", "server")]
    assert owner_on(Owner(uid=U), two) == ("", U, "")
    # Known pod, unknown container: the pod's one container on this device.
    assert owner_on(Owner("ml", "train-a", "", U), two) == ("ml", "train-a", "trainer")
    # What the cgroup and the logs say is never overridden.
    assert owner_on(Owner("ml", "other", "c", U), a) == ("ml", "other", "c")
    # A process in no pod.
    assert owner_on(Owner(), a) == ("", "", "")


def test_procmap_relists_on_a_miss_at_most_every_interval(tree: PodTree) -> None:
    now = [0.0]
    pm = ProcMap(procfs=tree.proc, pod_logs=tree.logs, clock=lambda: now[0], relist_seconds=10)
    assert pm.owners([1001])[1001].pod == "train-a"
    # A pod that starts now is not found until the interval has passed.
    uid_c = "9c9c9c9c-4444-4a4a-9b9b-dddddddddddd"
    tree.pod("ml", "late-c", uid_c, {"worker": cid(0xD)})
    tree.systemd(4004, uid_c, cid(0xD))
    now[0] = 5.0
    assert pm.owners([4004])[4004] == Owner(uid=uid_c, container_id=cid(0xD))
    now[0] = 11.0
    assert pm.owners([4004])[4004] == Owner("ml", "late-c", "worker", uid_c, cid(0xD))
    # Gone and never-were processes have no owner; nothing raises.
    assert pm.owners([99999, 0, -5]) == {99999: NO_OWNER, 0: NO_OWNER, -5: NO_OWNER}


def test_hostile_proc_and_log_trees_give_no_owner(tree: PodTree) -> None:
    # A cgroup file that is not UTF-8, one over the read cap, one that is a FIFO,
    # and one linked to /dev/zero: each is "no owner", never an exception or a hang.
    tree.process(5001, "\xff\xfe")
    (tree.proc / "5001" / "cgroup").write_bytes(b"\xff\xfe0::/kubepods\x00")
    tree.process(5002, "0::/" + "a" * (CGROUP_LIMIT + 10))
    (tree.proc / "5003").mkdir()
    os.mkfifo(tree.proc / "5003" / "cgroup")
    (tree.proc / "5004").mkdir()
    (tree.proc / "5004" / "cgroup").symlink_to("/dev/zero")
    # Log names that look almost right, and a file where a directory should be.
    (tree.logs / "pods" / f"ml_x_{U}_extra").mkdir()
    (tree.logs / "pods" / "ml__").mkdir()
    (tree.logs / "containers" / "a_b_c-xyz.log").write_text("")
    pm = tree.procmap()
    got = pm.owners([5001, 5002, 5003, 5004, 1001])
    assert [got[p] for p in (5001, 5002, 5003, 5004)] == [NO_OWNER] * 4
    assert got[1001].pod == "train-a"
    # No log directories at all: pods known by UID only.
    bare = ProcMap(procfs=tree.proc, pod_logs=tree.logs / "absent")
    assert bare.owners([1001])[1001] == Owner(uid=UID_A, container_id=cid(0xA))


# -- the renderer's split, table-driven ------------------------------------------------

A = Owner("ml", "train-a", "trainer", UID_A, cid(0xA))
B = Owner("ml", "infer-b", "server", UID_B, cid(0xB))
KA, KB, HOST = ("ml", "train-a", "trainer"), ("ml", "infer-b", "server"), ("", "", "")
ON_BOTH = [Assigned(*KA), Assigned(*KB)]


@pytest.mark.parametrize(
    ("description", "reading", "owners", "assigned", "want_util", "want_mem"),
    [
        (
            "measured: each process's share, the host's under pod=''",
            Reading(
                utilization=0.6,
                processes=[
                    ProcessUsage(1, 0.4, 10.0),
                    ProcessUsage(2, 0.15, 5.0),
                    ProcessUsage(3, 0.05, None),
                ],
                processes_listed=True,
            ),
            {1: A, 2: B},
            ON_BOTH,
            {KA: 0.4, KB: 0.15, HOST: 0.05},
            {KA: 10.0, KB: 5.0},
        ),
        (
            "no per-process figure, one container: the device's own utilization (MIG)",
            Reading(
                utilization=0.875, processes=[ProcessUsage(1, None, 9.0)], processes_listed=True
            ),
            {1: A},
            [Assigned(*KA)],
            {KA: 0.875},
            {KA: 9.0},
        ),
        (
            "no per-process figure, two containers: memory only, no guess",
            Reading(
                utilization=0.5,
                processes=[ProcessUsage(1, None, 1.0), ProcessUsage(2, None, 2.0)],
                processes_listed=True,
            ),
            {1: A, 2: B},
            ON_BOTH,
            {},
            {KA: 1.0, KB: 2.0},
        ),
        (
            "an assigned container that runs nothing is measured idle",
            Reading(utilization=0.3, processes=[ProcessUsage(1, 0.3, 4.0)], processes_listed=True),
            {1: A},
            ON_BOTH,
            {KA: 0.3, KB: 0.0},
            {KA: 4.0, KB: 0.0},
        ),
        (
            "a pod known by UID only, one pod assigned: PodResources names it",
            Reading(utilization=0.2, processes=[ProcessUsage(1, 0.2, 1.0)], processes_listed=True),
            {1: Owner(uid=UID_A)},
            [Assigned(*KA)],
            {KA: 0.2},
            {KA: 1.0},
        ),
        (
            "a backend that lists no processes: no per-pod series",
            Reading(utilization=0.5),
            {},
            ON_BOTH,
            {},
            {},
        ),
        (
            "a device that is down: no per-pod series",
            Reading(up=False, processes=[ProcessUsage(1, 0.5, 1.0)], processes_listed=True),
            {1: A},
            ON_BOTH,
            {},
            {},
        ),
    ],
)
def test_pod_usage_split(
    description: str,
    reading: Reading,
    owners: dict[int, Owner],
    assigned: list[Assigned],
    want_util: dict[tuple[str, str, str], float],
    want_mem: dict[tuple[str, str, str], float],
) -> None:
    info = DeviceInfo("nvidia0", "nvidia", "GPU-x")
    util, mem = pod_usage(DeviceState(info, reading, owners=owners), assigned)
    assert util == pytest.approx(want_util), description
    assert mem == want_mem, description


def test_amd_process_list_rates_and_odd_answers() -> None:
    """engine_usage.gfx is a running total: a rate from the second read on; a total
    that went backwards (a reused PID) starts again; an older amdsmi's list of
    process handles is no list to bill from; "N/A" is not a number."""
    gpu = AmdGpu(DeviceInfo("amd0", "amd", "u"))

    def once(answer: object, now: float) -> Reading:
        r = Reading()
        amd_procs.read(lambda: answer, gpu, r, now)
        return r

    def proc(pid: int, gfx: object, vram: object = 1024) -> dict[str, object]:
        return {"pid": pid, "engine_usage": {"gfx": gfx}, "memory_usage": {"vram_mem": vram}}

    r = once([proc(7, 1_000_000_000)], 100.0)
    assert r.processes_listed and r.processes == [ProcessUsage(7, None, 1024.0)]
    r = once([proc(7, 6_000_000_000), proc(8, 10)], 110.0)
    assert r.processes == [ProcessUsage(7, 0.5, 1024.0), ProcessUsage(8, None, 1024.0)]
    r = once([proc(7, 10), proc(8, 10 + 20_000_000_000, "N/A")], 120.0)
    assert r.processes == [ProcessUsage(7, None, 1024.0), ProcessUsage(8, 1.0, None)]
    assert not once([object(), object()], 130.0).processes_listed
    assert not once(None, 140.0).processes_listed
    assert once([], 150.0).processes_listed  # nobody: an empty list is an answer
