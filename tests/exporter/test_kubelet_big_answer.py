"""PodResources answers larger than gRPC's 4 MiB default (issue 27, "Destructive
steps only on proof"): a node whose DRA claims pass 4 MiB took the kubelet backend
down, and every pod's attribution with it. Here a real gRPC server plays the
kubelet (tests/support/fakes/kubelet.py) with 110 pods, the kubelet's default
maxPods: a few hold a container at the caps the backend keeps (128 claims of 32
devices, with names as NVIDIA's DRA driver writes them), the others GPUs through
the device plugin; the exporter's real Poller reads it."""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.backends import kubelet as kubelet_backend
from exporter.backends.base import BackendOptions
from exporter.backends.kubelet import (
    MAX_ANSWER_BYTES,
    MAX_CLAIM_DEVICES,
    MAX_CLAIMS,
    PODS,
    KubeletBackend,
    KubeletError,
)
from exporter.poller import Poller
from tests.exporter.test_kubelet import FIXED, GPU, pod_series, poll, sim_backend
from tests.support.exposition import value
from tests.support.fakes.kubelet import (
    FakeClaim,
    FakeClaimDevice,
    FakeContainer,
    FakeKubelet,
    FakePod,
)

MIB = 1024 * 1024
NODE = "ip-10-42-117-203.eu-west-1.compute.internal"  # the pool: NVIDIA names it by node
PODS_ON_NODE = 110  # the kubelet's default maxPods


def claims_at_the_caps(pod: str) -> list[FakeClaim]:
    """128 claims of 32 MIG devices each, named as NVIDIA's DRA driver does, each
    device with its CDI names and a share ID: about 1.1 MB of answer."""
    claims = []
    for c in range(MAX_CLAIMS):
        claim_uid = uuid.UUID(int=c + 1)
        devices = [
            FakeClaimDevice(
                "gpu.nvidia.com",
                f"gpu-{d % 8}-mig-1g10gb-19-{d // 8}",
                pool=NODE,
                cdi_devices=[
                    f"k8s.gpu.nvidia.com/claim={claim_uid}-gpu-{d % 8}-mig-1g10gb-19-{d // 8}",
                    f"k8s.compute-domain.nvidia.com/channel={claim_uid}-imex-channel-{d}",
                ],
                share_id=str(uuid.UUID(int=(c << 8) + d)),
            )
            for d in range(MAX_CLAIM_DEVICES)
        ]
        claims.append(FakeClaim(f"{pod}-mig-slices-{c:03d}", devices))
    return claims


def big_pod(name: str, containers: int = 1) -> FakePod:
    return FakePod(
        "ml",
        name,
        [FakeContainer(f"worker-{i}", claims=claims_at_the_caps(name)) for i in range(containers)],
    )


def ordinary_pods(count: int, uuids: list[str]) -> list[FakePod]:
    """Pods holding a GPU through the device plugin: time-slicing replicas
    ("<uuid>::<n>") spread over the node's GPUs."""
    return [
        FakePod(
            "team",
            f"job-{i:03d}",
            [FakeContainer("main", {GPU: [f"{uuids[i % len(uuids)]}::{i // len(uuids)}"]})],
        )
        for i in range(count)
    ]


def expected(pods: list[FakePod], devices: list[str]) -> set[tuple[str, str, str, str]]:
    """The pod series the ordinary pods make: (device, namespace, pod, container)."""
    return {
        (devices[i % len(devices)], p.namespace, p.name, "main")
        for i, p in enumerate(pods)
        if p.name.startswith("job-")
    }


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # A unix socket path is limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    fake = FakeKubelet(path / "kubelet.sock")
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(path, ignore_errors=True)


async def test_an_answer_over_four_mib_keeps_every_pod_attributed(kubelet: FakeKubelet) -> None:
    sim = sim_backend("nvidia:8")
    uuids = [d.uuid for d in sim.discover()]
    devices = [f"nvidia{i}" for i in range(8)]
    big = [big_pod(f"train-{i}") for i in range(5)]
    ordinary = ordinary_pods(PODS_ON_NODE - len(big), uuids)
    kubelet.set_pods(*big, *ordinary)
    size = kubelet.answer_bytes()
    assert 4 * MIB < size < MAX_ANSWER_BYTES, size
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path))
    poller = Poller([sim, backend], 1, 10, clock=lambda: FIXED)
    try:
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        assert pod_series(text) == expected(ordinary, devices)
        assert len(pod_series(text)) == PODS_ON_NODE - len(big)
        # The DRA rows are all there too (their devices are not this node's sim
        # GPUs, so they make no series), and one List did it.
        rows = backend.pods()
        assert sum(1 for r in rows if r.claim) == len(big) * MAX_CLAIMS * MAX_CLAIM_DEVICES
        assert kubelet.get_calls == 0
    finally:
        await poller.stop()


async def test_past_the_limit_only_what_does_not_fit_is_dropped(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a limit of 3 MiB (so that the test stays small; the shipped one is 64
    MiB) the answer grows past it: the pods the last answer named are read one by
    one, a pod too large on its own is dropped and named, and the backend stays up
    throughout; once the answer fits again, everything is back."""
    sim = sim_backend("nvidia:8")
    uuids = [d.uuid for d in sim.discover()]
    devices = [f"nvidia{i}" for i in range(8)]
    limit = 3 * MIB
    known_big = [big_pod("train-0"), big_pod("train-1")]
    ordinary = ordinary_pods(PODS_ON_NODE - len(known_big), uuids)
    kubelet.set_pods(*known_big, *ordinary)
    assert kubelet.answer_bytes() < limit
    # Limits of time are not what this test is about: on a busy machine a 3 MiB
    # answer and 110 calls one by one may take longer than the shipped bounds.
    monkeypatch.setattr(kubelet_backend, "ONE_BY_ONE_SECONDS", 60.0)
    backend = KubeletBackend(
        BackendOptions(kubelet_socket=kubelet.path), max_answer_bytes=limit, timeout=30.0
    )
    poller = Poller([sim, backend], 1, 60, clock=lambda: FIXED)
    everyone = expected(ordinary, devices)
    caplog.set_level(logging.INFO, logger="accel_exporter")
    try:
        text = await poll(poller)
        assert pod_series(text) == everyone

        # Two more pods at the caps: the whole answer is over the limit.
        late = [big_pod("train-2"), big_pod("train-3")]
        late_ordinary = ordinary_pods(PODS_ON_NODE + 1, uuids)[-1]
        kubelet.set_pods(*known_big, *ordinary, *late, late_ordinary)
        assert kubelet.answer_bytes() > limit
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        # Every pod of the last answer that fit keeps its attribution; the pod that
        # started since has none until List fits again.
        assert pod_series(text) == everyone
        assert kubelet.get_calls == PODS_ON_NODE
        assert backend.missing[PODS] == {}
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"over {limit} bytes" in m and "one by one" in m for m in warned), warned

        # A known pod grows past the limit on its own, another one ends.
        kubelet.set_pods(big_pod("train-0", containers=3), known_big[1], *ordinary[1:], *late)
        assert kubelet.answer_bytes(big_pod("train-0", containers=3)) > limit
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        assert pod_series(text) == everyone - expected(ordinary[:1], devices)
        assert set(backend.missing[PODS]) == {"ml/train-0"}
        assert f"over {limit} bytes" in backend.missing[PODS]["ml/train-0"]
        dropped = [m for m in (r.getMessage() for r in caplog.records) if "ml/train-0" in m]
        assert len(dropped) == 1, dropped

        # The answer fits again: every pod, the one started since included.
        kubelet.set_pods(*known_big, *ordinary, late_ordinary)
        text = await poll(poller)
        assert pod_series(text) == everyone | expected([late_ordinary], devices[-2:])
        assert backend.missing[PODS] == {}
        assert any("fits in" in r.getMessage() for r in caplog.records)
    finally:
        await poller.stop()


def down_reason(caplog: pytest.LogCaptureFixture) -> str:
    """The reason of the poller's "backend kubelet is down" line, the one there is."""
    lines = [r.getMessage() for r in caplog.records if "backend kubelet is down" in r.getMessage()]
    assert len(lines) == 1, lines
    return lines[0]


async def test_over_the_limit_with_no_earlier_answer_is_down_and_says_why(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """An exporter that starts on a node already past the limit has no pod names
    to read one by one: the backend is down with the reason, and device metrics
    flow; it is up once the answer fits."""
    sim = sim_backend("nvidia:2")
    uuids = [d.uuid for d in sim.discover()]
    kubelet.set_pods(big_pod("train-0"), *ordinary_pods(4, uuids))
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path), max_answer_bytes=MIB)
    poller = Poller([sim, backend], 1, 10, clock=lambda: FIXED)
    caplog.set_level(logging.INFO, logger="accel_exporter")
    try:
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
        assert value(text, "accel_up", device="nvidia0") == 1
        reason = down_reason(caplog)
        assert f"over {MIB} bytes" in reason and "no earlier answer" in reason, reason
        kubelet.remove_pod("ml", "train-0")
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        assert len(pod_series(text)) == 4
    finally:
        await poller.stop()


async def test_a_kubelet_without_get_is_down_past_the_limit(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    sim = sim_backend("nvidia:2")
    uuids = [d.uuid for d in sim.discover()]
    kubelet.get_supported = False
    kubelet.set_pods(*ordinary_pods(4, uuids))
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path), max_answer_bytes=MIB)
    poller = Poller([sim, backend], 1, 10, clock=lambda: FIXED)
    caplog.set_level(logging.INFO, logger="accel_exporter")
    try:
        assert len(pod_series(await poll(poller))) == 4
        kubelet.set_pods(big_pod("train-0"), *ordinary_pods(4, uuids))
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 0
        reason = down_reason(caplog)
        assert "Get method disabled" in reason and f"over {MIB} bytes" in reason, reason
    finally:
        await poller.stop()


def test_past_the_limit_a_partial_answer_is_no_proof(kubelet: FakeKubelet) -> None:
    """The node agent resets a device only when no pod holds one: it asks
    ``whole_pods``, which refuses the pods read one by one, since a pod started
    since the last answer that fit (here one holding the GPU) would be missing."""
    sim = sim_backend("nvidia:1")
    gpu = sim.discover()[0].uuid
    kubelet.set_pods(*ordinary_pods(2, [gpu]))
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path), max_answer_bytes=MIB)
    try:
        assert {r.pod for r in backend.whole_pods()} == {"job-000", "job-001"}
        newcomer = FakePod("ml", "new", [FakeContainer("main", {GPU: [gpu]})])
        kubelet.set_pods(big_pod("train-0"), *ordinary_pods(2, [gpu]), newcomer)
        assert {r.pod for r in backend.pods()} == {"job-000", "job-001"}
        with pytest.raises(KubeletError, match=f"over {MIB} bytes.*no proof"):
            backend.whole_pods()
        kubelet.remove_pod("ml", "train-0")
        assert "new" in {r.pod for r in backend.whole_pods()}
    finally:
        backend.close()


def many_claims(pod: str, devices_per_claim: int) -> list[FakeClaim]:
    """128 claims, each of ``devices_per_claim`` of the node's GPUs as NVIDIA's DRA
    driver names them (``gpu-<minor>``), with CDI names and share IDs."""
    return [
        FakeClaim(
            f"{pod}-shared-gpu-claim-{c:03d}",
            [
                FakeClaimDevice(
                    "gpu.nvidia.com",
                    f"gpu-{(c + d) % 8}",
                    pool=NODE,
                    cdi_devices=[f"k8s.gpu.nvidia.com/claim={uuid.UUID(int=c + 1)}-gpu-{d}"],
                    share_id=str(uuid.UUID(int=(c << 8) + d)),
                )
                for d in range(devices_per_claim)
            ],
        )
        for c in range(MAX_CLAIMS)
    ]


async def test_110_pods_of_128_claims_each_keep_every_attribution(kubelet: FakeKubelet) -> None:
    """Every pod of a full node names 128 claims (the acceptance's 110 × 128), and
    every other one also holds a GPU through the device plugin: the answer is past
    4 MiB, and every device-plugin pod keeps its series."""
    sim = sim_backend("nvidia:8")
    uuids = [d.uuid for d in sim.discover()]
    devices = [f"nvidia{i}" for i in range(8)]
    pods = []
    for i in range(PODS_ON_NODE):
        name = f"job-{i:03d}" if i % 2 == 0 else f"dra-{i:03d}"
        plugin = {GPU: [f"{uuids[i % 8]}::{i // 8}"]} if i % 2 == 0 else {}
        pods.append(
            FakePod("team", name, [FakeContainer("main", plugin, claims=many_claims(name, 2))])
        )
    kubelet.set_pods(*pods)
    assert kubelet.answer_bytes() > 4 * MIB
    backend = KubeletBackend(BackendOptions(kubelet_socket=kubelet.path))
    poller = Poller([sim, backend], 1, 10, clock=lambda: FIXED)
    try:
        text = await poll(poller)
        assert value(text, "accel_exporter_backend_up", backend="kubelet") == 1
        plugin_pods = {(devices[i % 8], "team", f"job-{i:03d}", "main") for i in range(0, 110, 2)}
        assert plugin_pods <= pod_series(text)
        rows = backend.pods()
        assert sum(1 for r in rows if r.claim) == PODS_ON_NODE * MAX_CLAIMS * 2
    finally:
        await poller.stop()
