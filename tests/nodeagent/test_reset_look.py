"""The node agent's look after a reset (``nodeagent/resetters.py``), on fake NVML through
the real agent loop against the fake API server: a GPU that answers again is "done"
only when NVML shows it fixed (no row remap still pending or failed, no driver
recovery action still asking for a reset or more); otherwise "failed" with
``"reason": "unfixed"``, which the ladder takes as evidence for its next step. A
library that cannot say is no evidence either way. And the agent carries out every
reset mechanism the vendor table (``accel_common.agentsupport``) declares."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from accel_common.agentsupport import RESET_MECHANISMS, SUPPORT, UNFIXED_REASON
from nodeagent.resetters import LOOKS, RESETTERS
from tests.nodeagent.test_reset import make_node, nvml, server
from tests.support.fakes.apiserver import FakeApiServer

pytestmark = pytest.mark.timeout(60)

__all__ = ["server"]  # the fixture, shared with test_reset.py

REBOOT = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
GPU_RESET = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET


def _reset_once(server: FakeApiServer, tmp_path: Path, fake: object) -> dict[str, object]:
    node = make_node(server, tmp_path, nvml=fake)
    gpu = fake.gpus[1]  # type: ignore[attr-defined]
    node.ask("r1", [gpu.uuid])
    node.round()  # claims it ("resetting"), then resets and answers
    return node.round()


def test_a_reset_that_applies_the_remap_and_clears_the_drivers_verdict_is_done(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    fake.gpus[1].remapped_rows = (0, 1, 1, 0)  # a remap waiting for this reset
    fake.set_recovery_action(1, GPU_RESET)
    status = _reset_once(server, tmp_path, fake)
    assert status["state"] == "done", status
    assert "reason" not in status
    assert fake.gpus[1].remapped_rows == (0, 1, 0, 0)


def test_a_driver_that_still_asks_for_a_reboot_fails_the_reset_as_unfixed(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    fake.set_recovery_action(1, REBOOT)
    fake.unfixed.add(1)
    status = _reset_once(server, tmp_path, fake)
    assert status["state"] == "failed" and status["reason"] == UNFIXED_REASON
    message = str(status["message"])
    assert fake.gpus[1].uuid in message and "answers again but is not fixed" in message
    assert "recovery action still asks for node_reboot" in message
    assert len(fake.resets) == 1  # the reset did run


def test_a_failed_row_remap_fails_the_reset_as_unfixed(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    fake.gpus[1].remapped_rows = (0, 3, 0, 1)  # a reset cannot undo a failed remap
    status = _reset_once(server, tmp_path, fake)
    assert status["state"] == "failed" and status["reason"] == UNFIXED_REASON
    assert "row remapping failed" in str(status["message"])


def test_a_remap_still_pending_after_the_reset_fails_it(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    fake.gpus[1].remapped_rows = (0, 1, 1, 0)
    fake.unfixed.add(1)
    status = _reset_once(server, tmp_path, fake)
    assert status["state"] == "failed" and status["reason"] == UNFIXED_REASON
    assert "still pending after the reset" in str(status["message"])


def test_a_library_that_cannot_say_is_no_evidence(server: FakeApiServer, tmp_path: Path) -> None:
    """NotSupported (no row remapper, a driver without the field) and an odd error
    after the reset: the GPU answered, so the reset is done; the exporter keeps
    watching it."""
    fake = nvml("pcie_node")
    fake.gpus[1].unsupported |= {"nvmlDeviceGetRemappedRows", "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"}
    fake.gpus[1].remapped_rows = (0, 0, 1, 1)  # never read: NotSupported
    assert _reset_once(server, tmp_path, fake)["state"] == "done"

    odd = nvml("pcie_node")

    def reset_then_fail(bus_ids: list[str]) -> None:
        odd.gpu_reset(bus_ids)
        odd.gpus[1].errors["nvmlDeviceGetRemappedRows"] = pynvml.NVML_ERROR_UNKNOWN
        odd.gpus[1].errors["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_UNKNOWN

    node = make_node(server, tmp_path, nvml=odd, nvidia_reset=reset_then_fail)
    node.ask("r2", [odd.gpus[1].uuid])
    node.round()
    assert node.round()["state"] == "done"


def test_a_failed_reset_is_not_called_unfixed(server: FakeApiServer, tmp_path: Path) -> None:
    """nvidia-smi refused: nothing was reset, so nothing says the device is unfixed."""
    fake = nvml("pcie_node")
    fake.busy[1] = ["dcgm"]
    fake.set_recovery_action(1, REBOOT)
    status = _reset_once(server, tmp_path, fake)
    assert status["state"] == "failed" and "in use" in str(status["message"])
    assert "reason" not in status


def test_every_declared_mechanism_has_a_reset_and_a_look() -> None:
    assert set(RESETTERS) == set(LOOKS) == set(RESET_MECHANISMS)
    used = {s.reset.mechanism for s in SUPPORT.values() if s.reset is not None}
    assert used == set(RESET_MECHANISMS)
