"""An NVIDIA reset with the exporter running beside the agent on one fake NVML: the
fake refuses a reset while any NVML client holds the GPUs, as nvidia-smi does, so the
reset goes through only when the exporter (asked through the hold file, with its real
poller polling) and the agent itself have let go, and both come back after. Without an
exporter's answer the reset is still tried, and a refusal says what was missing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from accel_common.nvmlhold import HOLD, read_released
from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.poller import Poller
from tests.nodeagent.test_reset import make_node, nvml, server  # noqa: F401 - fixture
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.nvml import FakeNVML

pytestmark = pytest.mark.timeout(60)


@contextmanager
def exporter(fake: FakeNVML, sysfs: Path, hold_dir: Path | None) -> Iterator[Poller]:
    """The exporter's nvidia backend and real poller, polling every 50 ms in a thread
    of its own (another process, in production)."""
    backend = NvidiaBackend(BackendOptions(sysfs=sysfs, nvml_hold_dir=hold_dir), nvml=fake)
    poller = Poller([backend], interval=0.05, timeout=5)
    started, stop = threading.Event(), threading.Event()

    async def run() -> None:
        await poller.start()
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.02)
        await poller.stop()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield poller
    finally:
        stop.set()
        thread.join(10)


def wait_until_up(poller: Poller) -> None:
    for _ in range(200):
        if poller.backend_up.get("nvidia"):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the exporter's nvidia backend did not come back")


def test_the_exporter_and_the_agent_let_go_for_the_reset(
    server: FakeApiServer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    fake = nvml("pcie_node")  # the agent's own NVML client
    hold_dir = tmp_path / "run"
    with exporter(fake, tmp_path, hold_dir) as poller:
        assert poller.backend_up == {"nvidia": True}
        assert fake.init_count == 2  # the agent and the exporter hold every GPU
        node = make_node(server, tmp_path, nvml=fake, nvml_hold_dir=hold_dir, nvml_release_wait=10)
        node.ask("r1", [fake.gpus[1].uuid])
        status = node.round()
        assert status["state"] == "done", status["message"]
        assert fake.resets == [(fake.gpus[1].bus_id,)]
        assert read_released(hold_dir) == "r1"  # the exporter answered this request
        assert not (hold_dir / HOLD).exists()  # the hold ended with the reset
        wait_until_up(poller)
        assert fake.init_count == 2  # both hold NVML again


def test_an_exporter_that_does_not_answer_is_named_when_the_reset_is_refused(
    server: FakeApiServer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    fake = nvml("pcie_node")
    # An exporter that does not share the agent's directory: asked, it never answers.
    with exporter(fake, tmp_path, None):
        node = make_node(
            server, tmp_path, nvml=fake, nvml_hold_dir=tmp_path / "run", nvml_release_wait=0.3
        )
        node.ask("r1", [fake.gpus[1].uuid])
        status = node.round()
    assert status["state"] == "failed"
    assert "in use by another process (1 NVML client(s))" in status["message"]
    assert "no exporter said it let go of NVML within 0.3s" in status["message"]
    assert "reason" not in status  # nothing says a reset ran: no "unfixed" evidence
    assert fake.resets == []
    assert fake.init_count == 1  # the agent's own NVML is back; the exporter's closed


def test_with_no_exporter_on_the_node_the_reset_runs_after_the_wait(
    server: FakeApiServer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    fake = nvml("pcie_node")
    node = make_node(
        server, tmp_path, nvml=fake, nvml_hold_dir=tmp_path / "run", nvml_release_wait=0.2
    )
    node.ask("r1", [fake.gpus[1].uuid])
    status = node.round()
    assert status["state"] == "done", status["message"]
    assert fake.resets == [(fake.gpus[1].bus_id,)]
    assert fake.init_count == 1


def fake_procfs(root: Path, processes: dict[int, tuple[str, list[str]]]) -> Path:
    """A procfs with these processes: pid -> (comm, the paths its descriptors point at)."""
    for pid, (comm, targets) in processes.items():
        fd = root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        for n, target in enumerate(targets):
            (fd / str(n)).symlink_to(target)
    return root


def test_a_process_holding_the_device_file_refuses_the_reset_until_it_is_gone(
    server: FakeApiServer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    fake = nvml("pcie_node")
    fake.busy[1] = ["nv-hostengine"]  # what nvidia-smi would see: the refusal below
    procfs = fake_procfs(
        tmp_path / "proc",
        {
            1234: ("nv-hostengine", ["/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia3"]),
            777: ("bash", ["/dev/pts/0", "/dev/nvidia"]),  # no GPU of the group
        },
    )
    now = [1_800_000_000.0]
    node = make_node(
        server,
        tmp_path,
        nvml=fake,
        nvml_hold_dir=tmp_path / "run",
        nvml_release_wait=0.0,
        procfs=procfs,
        clock=lambda: now[0],
    )
    node.ask("r1", [fake.gpus[1].uuid])
    status = node.round()
    assert status["state"] == "refused", status
    assert "nv-hostengine (pid 1234): /dev/nvidia1" in status["message"]
    assert "bash" not in status["message"] and "/dev/nvidia3" not in status["message"]
    assert fake.resets == []
    assert fake.init_count == 1  # the agent's NVML is back after the look
    assert not (tmp_path / "run" / HOLD).exists()
    # The host engine stops. Within two minutes the agent does not let go of NVML
    # again (each look takes the exporter down), and says the same.
    for fd in (procfs / "1234" / "fd").iterdir():
        fd.unlink()
    fake.busy.clear()
    shutdowns = fake.calls["nvmlShutdown"]
    now[0] += 60
    again = node.round()
    assert again["state"] == "refused" and again["message"] == status["message"]
    assert fake.calls["nvmlShutdown"] == shutdowns and fake.resets == []
    now[0] += 61
    status = node.round()
    assert status["state"] == "done", status
    assert fake.resets == [(fake.gpus[1].bus_id,)]
