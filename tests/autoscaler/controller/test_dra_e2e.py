"""Dynamic Resource Allocation end to end (issue 17's acceptance): the fake kubelet,
over real gRPC, serves a pod whose GPU a ResourceClaim allocated and a pod with a
device plugin's GPU; the exporter (NVIDIA backend on fake NVML, kubelet backend)
attributes each GPU to its pod, the claim's with a ``claim`` label; an Xid 79 (the
GPU fell off the bus) on the claim's GPU makes the controller, a real process
scraping the exporter and acting through the real ``kubernetes`` client against
the fake API server, migrate that pod and no other."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from accel_common.listen import Listener
from accel_common.names import DEFAULT_TAINT, DRA_NVIDIA_GPU, NVIDIA_GPU
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.kubelet import KubeletBackend
from exporter.backends.nvidia import NvidiaBackend
from exporter.poller import Poller
from exporter.procmap import ProcMap
from exporter.server import ExporterServer, fd_headroom_limits
from tests.support import draobjs
from tests.support.exposition import parse
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.fakes.kubelet import FakeKubelet
from tests.support.fakes.nvml import FakeNVML
from tests.support.kubeobjs import evictions, node, pod
from tests.support.procs import autoscaler, free_port, http_get, wait_cycles
from tests.support.waits import wait

# A controller process and an exporter: `make test-fast` leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODE = "n1"
RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: fatal-device-fault
      expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
      for: 0s
      target: device
      action: {type: migrate_jobs, deviceOnly: true, drainTimeout: 1m}
      cooldown: 1h
"""


@contextmanager
def serving_exporter(backends: list[Backend], port: int) -> Iterator[str]:
    """The exporter's poller and HTTP server, in-process on a thread of their own
    (the fake NVML lives in this process), as ``accel-exporter`` assembles them."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    failed: list[BaseException] = []

    async def main() -> None:
        # No host /proc or /var/log: the per-process map has nothing to find.
        empty = Path(tempfile.mkdtemp(prefix="procmap-"))
        poller = Poller(backends, interval=0.5, timeout=5.0, procmap=ProcMap(empty, empty))
        server = ExporterServer(poller, "/metrics", None, fd_headroom_limits())
        async with await Listener.start(server, "127.0.0.1", port, stop=stop):
            task = asyncio.create_task(poller.start())
            ready.set()
            await stop.wait()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await poller.stop()
        shutil.rmtree(empty, ignore_errors=True)

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # reported by the test, not lost in the thread
            failed.append(e)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="exporter", daemon=True)
    thread.start()
    assert ready.wait(15), "the exporter did not start"
    assert not failed, failed
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    where = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))  # unix socket paths are short
    fake = FakeKubelet(where / "kubelet.sock")
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(where, ignore_errors=True)


def _cluster(api: FakeApiServer) -> None:
    api.add(node(NODE))
    api.add(draobjs.device_class())
    api.add(draobjs.resource_slice(NODE, 8))
    api.add(draobjs.allocated_claim("train-gpu", NODE, ["gpu-0"], pod="train"))
    api.add(draobjs.dra_pod("train", NODE, ["train-gpu"], owner=("Job", "train")))
    api.add(pod("plugin", NODE, owner_name="infer"))
    api.add(pod("cpu-only", NODE, gpus=0, owner_name="web"))


def _pod_info(url: str) -> set[tuple[str, str, str]]:
    return {
        (lb["device"], lb["pod"], lb.get("claim", ""))
        for name, lb, _ in parse(http_get(url).decode())
        if name == "accel_device_pod_info"
    }


def _controller(tmp: Path, api: FakeApiServer, target: str) -> Any:
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"{NODE}={target}",
        "--kubeconfig",
        str(api.write_kubeconfig(tmp / "kubeconfig")),
        "--eviction.retry-interval",
        "200ms",
        "--no-leader-elect",
    ]
    env = {"PYTHONUNBUFFERED": "1", "POD_NAMESPACE": "", "POD_NAME": ""}
    return args, env


def test_fatal_fault_on_a_claimed_gpu_migrates_that_pod_only(
    tmp_path: Path, kubelet: FakeKubelet
) -> None:
    nvml = FakeNVML.h100_node(mig_on=None)
    # The claim's GPU is the driver's gpu-0 (minor 0: our nvidia0); the plugin pod
    # holds GPU 1 by its UUID, as the NVIDIA device plugin names it.
    kubelet.add_claim_pod("ml", "train", "train-gpu", DRA_NVIDIA_GPU, "gpu-0", pool=NODE)
    kubelet.add_pod("ml", "plugin", NVIDIA_GPU, nvml.gpus[1].uuid)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    backends: list[Backend] = [
        NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=nvml),
        KubeletBackend(BackendOptions(kubelet_socket=kubelet.path)),
    ]
    with (
        running_apiserver(validate=True) as api,
        serving_exporter(backends, free_port()) as metrics,
    ):
        _cluster(api)
        # The exporter attributes both GPUs, the claim's with its claim.
        rows = wait(lambda: _pod_info(metrics), 30.0, "pod attribution", 0.1)
        assert ("nvidia0", "train", "train-gpu") in rows, rows
        assert ("nvidia1", "plugin", "") in rows, rows

        args, env = _controller(tmp_path, api, metrics)
        with (
            (tmp_path / "controller.log").open("ab") as out,
            autoscaler(args, free_port(), out, env) as running,
        ):
            # Let the controller see the fault counter at 0 first (increase() needs
            # two samples), then the GPU falls off the bus.
            wait_cycles(running.url, 2)
            assert running.proc.poll() is None
            nvml.inject_xid(0, 79)
            try:
                wait(lambda: evictions(api, "train") == 1, 30.0, "the claim pod's eviction", 0.1)
            except AssertionError as e:
                raise AssertionError(
                    f"{e}\n{(tmp_path / 'controller.log').read_text(errors='replace')[-4000:]}"
                ) from None
            # A few more evaluations: nothing else moves.
            wait_cycles(running.url, 3)
        log = (tmp_path / "controller.log").read_text(errors="replace")
        assert evictions(api, "plugin") == 0, log
        assert evictions(api, "cpu-only") == 0, log
        taints = (api.get("nodes", None, NODE) or {})["spec"].get("taints") or []
        assert [t["key"] for t in taints] == [DEFAULT_TAINT.split("=")[0]], log
        moved = api.requests_for("POST", r"/eviction$")
        assert [r.path.split("/")[-2] for r in moved if r.status < 300] == ["train"]
