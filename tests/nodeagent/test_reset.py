"""The reset task on fake NVML (and fake amdsmi), driven by the real agent loop through
the real ``kubernetes`` client against the fake API server: it resets only once the
node's device pods are gone and "resetting" is on the Node, all GPUs of an NVSwitch
board together, refuses with a message naming the pods and devices while one is held,
and acts on an id once."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from exporter.model import PodAssignment
from nodeagent.agent import Agent, NodeAPI
from nodeagent.reset import NvidiaSmi, ResetError, ResetTask
from nodeagent.tasks import AgentContext
from tests.support.fakes.amdsmi import FakeAmdSmi
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver
from tests.support.fakes.nvml import FakeNVML
from tests.support.fakes.nvml_procs import FakeProcess

pytestmark = pytest.mark.timeout(60)

NODE = "gpu-1"


@dataclass
class Node:
    """One node's agent (a reset task) against the fake API server."""

    api: FakeApiServer
    agent: Agent
    holders: list[PodAssignment] = field(default_factory=list)
    # The reset status on the Node (as the API server had it) at each reset.
    seen: list[str] = field(default_factory=list)

    def ask(self, rid: str, devices: list[str]) -> None:
        node = self.api.get("nodes", None, NODE)
        assert node is not None
        node["metadata"].setdefault("annotations", {})[RESET_REQUEST_ANNOTATION] = json.dumps(
            {"id": rid, "devices": devices, "requestedAt": "2026-12-01T19:00:00Z", "by": "t"}
        )
        self.api.add(node)

    def annotations(self) -> dict[str, str]:
        node = self.api.get("nodes", None, NODE)
        assert node is not None
        return dict(node["metadata"].get("annotations") or {})

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.annotations()[RESET_STATUS_ANNOTATION]))

    def round(self) -> dict[str, Any]:
        self.agent.round()
        return self.status() if RESET_STATUS_ANNOTATION in self.annotations() else {}

    def restart(self) -> None:
        """A new agent process: nothing but the Node is remembered."""
        self.agent = Agent(self.agent.api, self.agent.ctx, [ResetTask()])


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running_apiserver(validate=True) as api:
        api.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield api


def make_node(
    server: FakeApiServer,
    tmp_path: Path,
    *,
    nvml: Any = None,
    amdsmi: Any = None,
    nvidia_reset: Callable[[list[str]], None] | None = None,
    holders: Callable[[], list[PodAssignment]] | None = None,
    nvml_hold_dir: Path | None = None,
    nvml_release_wait: float = 0.0,
    procfs: Path | None = None,
    clock: Callable[[], float] | None = None,
) -> Node:
    api = NodeAPI.from_config(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    pods: list[PodAssignment] = []
    seen: list[str] = []
    base = nvidia_reset if nvidia_reset is not None else getattr(nvml, "gpu_reset", None)

    def reset(bus_ids: list[str]) -> None:
        found = server.get("nodes", None, NODE)
        assert found is not None and base is not None
        seen.append(json.loads(found["metadata"]["annotations"][RESET_STATUS_ANNOTATION])["state"])
        base(bus_ids)

    ctx = AgentContext(
        node_name=NODE,
        nvml=nvml,
        amdsmi=amdsmi,
        sysfs_root=tmp_path,
        holders=holders or (lambda: list(pods)),
        clock=clock or (lambda: 1_800_000_000.0),
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=reset if base is not None else None,
        nvml_hold_dir=nvml_hold_dir,
        nvml_release_wait=nvml_release_wait,
        procfs=procfs,
    )
    return Node(server, Agent(api, ctx, [ResetTask()]), pods, seen)


def nvml(kind: str) -> FakeNVML:
    fake: FakeNVML = getattr(FakeNVML, kind)()
    fake.nvmlInit()
    return fake


def pod(name: str, device: str) -> PodAssignment:
    return PodAssignment("ml", name, "main", "nvidia.com/gpu", device)


def test_scope_is_published_at_start(server: FakeApiServer, tmp_path: Path) -> None:
    for kind, scope in (("h100_node", "node"), ("v100_pair", "node"), ("pcie_node", "device")):
        node = make_node(server, tmp_path, nvml=nvml(kind))
        node.round()
        assert node.annotations()[RESET_SCOPE_ANNOTATION] == scope, kind


def test_nvswitch_resets_every_gpu_only_after_the_pods_are_gone(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("h100_node")  # GPU 3 in MIG mode
    node = make_node(server, tmp_path, nvml=fake)
    node.round()
    fake.lose(2)  # Xid 79: the GPU to reset has fallen off the bus
    mig = fake.gpus[3].migs[0].uuid
    node.holders += [pod("train-a", fake.gpus[5].uuid), pod("train-b", mig)]
    node.ask("r1", [fake.gpus[2].uuid])

    status = node.round()
    assert status["state"] == "refused"
    assert "ml/train-a" in status["message"] and fake.gpus[5].uuid in status["message"]
    assert "ml/train-b" in status["message"] and mig in status["message"]
    assert "NVSwitch" in status["message"]
    assert status["devices"] == [g.uuid for g in fake.gpus]  # the group: all eight

    node.holders.pop(0)
    status = node.round()
    assert status["state"] == "refused" and "train-a" not in status["message"]
    assert fake.resets == []

    node.holders.clear()
    status = node.round()
    assert status["state"] == "done", status
    assert node.seen == ["resetting"]  # the reset came after "resetting" was on the Node
    assert fake.resets == [tuple(g.bus_id for g in fake.gpus)]  # all together, no -i
    assert fake.nvmlDeviceGetUUID(fake.gpu_handle(2)) == fake.gpus[2].uuid  # back again

    node.round()
    node.restart()
    node.round()
    assert fake.resets == [tuple(g.bus_id for g in fake.gpus)]  # once per id


def test_a_process_outside_pods_refuses_too(server: FakeApiServer, tmp_path: Path) -> None:
    fake = nvml("h100_node")
    fake.processes[6] = [FakeProcess(pid=4242, memory=1 << 30)]
    node = make_node(server, tmp_path, nvml=fake)
    node.ask("r1", [fake.gpus[0].uuid])
    status = node.round()
    assert status["state"] == "refused" and "process 4242" in status["message"]
    fake.processes.clear()
    assert node.round()["state"] == "done"


def test_pcie_gpu_resets_alone_beside_busy_neighbours(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    node = make_node(server, tmp_path, nvml=fake)
    node.holders.append(pod("other", fake.gpus[3].uuid))
    node.ask("r1", [fake.gpus[1].uuid])
    status = node.round()
    assert status["state"] == "done" and status["devices"] == [fake.gpus[1].uuid]
    assert fake.resets == [(fake.gpus[1].bus_id,)]


def test_nvlink_peers_reset_together(server: FakeApiServer, tmp_path: Path) -> None:
    fake = nvml("v100_pair")
    node = make_node(server, tmp_path, nvml=fake)
    node.holders.append(pod("peer", fake.gpus[1].uuid))
    node.ask("r1", [fake.gpus[0].uuid])
    status = node.round()
    assert status["state"] == "refused" and "joined by NVLink" in status["message"]
    node.holders.clear()
    node.round()
    assert node.round()["state"] == "done"
    assert fake.resets == [(fake.gpus[0].bus_id, fake.gpus[1].bus_id)]


def test_restart_while_resetting_fails_rather_than_reset_twice(
    server: FakeApiServer, tmp_path: Path
) -> None:
    fake = nvml("pcie_node")
    node = make_node(server, tmp_path, nvml=fake)
    node.ask("r1", [fake.gpus[0].uuid])
    # What an agent killed between its "resetting" and the reset leaves on the Node.
    n = server.get("nodes", None, NODE)
    assert n is not None
    n["metadata"]["annotations"][RESET_STATUS_ANNOTATION] = json.dumps(
        {"id": "r1", "state": "resetting", "devices": [fake.gpus[0].uuid], "message": ""}
    )
    server.add(n)
    node.restart()
    status = node.round()
    assert status["state"] == "failed" and "restarted" in status["message"]
    assert fake.resets == []


def test_a_gpu_the_reset_does_not_bring_back_fails(server: FakeApiServer, tmp_path: Path) -> None:
    fake = nvml("pcie_node")
    node = make_node(server, tmp_path, nvml=fake)
    node.round()
    fake.lose(4)
    fake.unresettable.add(4)
    node.ask("r1", [fake.gpus[4].uuid])
    node.round()
    status = node.round()
    assert status["state"] == "failed" and "still does not answer" in status["message"]


def test_a_refused_nvidia_smi_fails_with_its_reason(server: FakeApiServer, tmp_path: Path) -> None:
    fake = nvml("pcie_node")
    fake.busy[0] = ["dcgm"]  # an NVML client the kubelet does not list
    node = make_node(server, tmp_path, nvml=fake)
    node.ask("r1", [fake.gpus[0].uuid])
    node.round()
    status = node.round()
    assert (
        status["state"] == "failed"
        and "in use" in status["message"]
        and "dcgm" in status["message"]
    )


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("not json", "not bounded JSON"),
        (json.dumps({"devices": []}), "reset-request.id: expected a string"),
        (json.dumps({"id": "r1", "devices": "GPU-1"}), "list of device UUIDs"),
    ],
)
def test_an_unreadable_request_fails(
    server: FakeApiServer, tmp_path: Path, raw: str, says: str
) -> None:
    fake = nvml("pcie_node")
    node = make_node(server, tmp_path, nvml=fake)
    n = server.get("nodes", None, NODE)
    assert n is not None
    n["metadata"]["annotations"] = {RESET_REQUEST_ANNOTATION: raw}
    server.add(n)
    status = node.round()
    assert status["state"] == "failed" and says in status["message"]
    assert fake.resets == []


def test_a_device_it_cannot_reset_fails_and_says_why(server: FakeApiServer, tmp_path: Path) -> None:
    node = make_node(server, tmp_path, nvml=nvml("pcie_node"))
    node.ask("r1", ["GPU-not-here"])
    status = node.round()
    assert status["state"] == "failed" and "Intel Gaudi" in status["message"]
    # The controller's ladder skips the step at once on this reason
    # (accel_common.remedies.can_reset, the rule both sides answer by).
    assert status["reason"] == "unsupported"


def test_a_whole_node_request_without_a_resettable_device_is_unsupported(
    server: FakeApiServer, tmp_path: Path
) -> None:
    node = make_node(server, tmp_path)  # neither NVML nor amdsmi: a Gaudi node, say
    node.ask("r1", [])
    status = node.round()
    assert status["state"] == "failed"
    assert status["reason"] == "unsupported" and "no device to reset" in status["message"]


def test_unknown_holders_refuse(server: FakeApiServer, tmp_path: Path) -> None:
    def holders() -> list[PodAssignment]:
        raise ConnectionError("kubelet socket gone")

    fake = nvml("pcie_node")
    node = make_node(server, tmp_path, nvml=fake, holders=holders)
    node.ask("r1", [fake.gpus[0].uuid])
    status = node.round()
    assert status["state"] == "refused" and "kubelet socket gone" in status["message"]


def test_amd_reset_through_amdsmi_with_its_hive_free(server: FakeApiServer, tmp_path: Path) -> None:
    from tests.exporter.test_amd import mi300x_smi

    smi = FakeAmdSmi([mi300x_smi(), mi300x_smi(bdf="0000:1c:00.0", uuid="amd-2")])
    smi.amdsmi_init()
    smi.hives.update({0: 77, 1: 77})
    node = make_node(server, tmp_path, amdsmi=smi)
    node.holders.append(PodAssignment("ml", "peer", "main", "amd.com/gpu", "0000:1c:00.0"))
    node.ask("r1", [smi.gpus[0].uuid])
    status = node.round()
    assert node.annotations()[RESET_SCOPE_ANNOTATION] == "node"
    assert status["state"] == "refused" and "XGMI hive" in status["message"]
    node.holders.clear()
    node.round()
    assert node.round()["state"] == "done"
    assert smi.resets == [0]  # only the GPU asked for; its hive peer only had to be free


def test_nvidia_smi_runs_bounded_and_says_why_it_failed(tmp_path: Path) -> None:
    script = tmp_path / "nvidia-smi"
    log = tmp_path / "args"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        'case "$*" in *BAD*) echo "GPU in use by another client" >&2; exit 3;; esac\n'
        'case "$*" in *SLOW*) sleep 5;; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    reset = NvidiaSmi((str(script),), timeout=1.0)
    reset([])
    reset(["0000:18:00.0", "0000:2a:00.0"])
    assert log.read_text().splitlines() == [
        "--gpu-reset",
        "--gpu-reset -i 0000:18:00.0,0000:2a:00.0",
    ]
    with pytest.raises(ResetError, match=r"exited 3 \(the operation is not available.*in use"):
        reset(["BAD"])
    with pytest.raises(ResetError, match="did not finish within 1s"):
        reset(["SLOW"])
    with pytest.raises(ResetError, match="not found"):
        NvidiaSmi((str(tmp_path / "missing"),))([])


def test_the_fake_reset_follows_nvidia_smis_rules() -> None:
    from tests.support.fakes.nvml_reset import NOT_AVAILABLE, NOT_FOUND, GpuResetError

    board = nvml("h100_node")
    with pytest.raises(GpuResetError, match="also include") as e:
        board.gpu_reset([board.gpus[2].bus_id])  # a subset of an NVSwitch board
    assert e.value.returncode == NOT_AVAILABLE
    pair = nvml("v100_pair")
    with pytest.raises(GpuResetError, match=pair.gpus[1].bus_id):
        pair.gpu_reset(["0000:1b:00.0"])  # its NVLink peer is missing
    pcie = nvml("pcie_node")
    with pytest.raises(GpuResetError) as e:
        pcie.gpu_reset(["0000:99:00.0"])
    assert e.value.returncode == NOT_FOUND
    pcie.processes[1] = [FakeProcess(pid=7, memory=None)]
    with pytest.raises(GpuResetError, match="pid 7"):
        pcie.gpu_reset([pcie.gpus[1].bus_id])
    assert board.resets == pair.resets == pcie.resets == []
    board.inject_xid(0, 48)
    # An NVML client that has not shut down holds every GPU (nvmlInit attaches them).
    with pytest.raises(GpuResetError, match=r"1 NVML client\(s\)") as e:
        board.gpu_reset([])
    assert e.value.returncode == NOT_AVAILABLE
    board.nvmlShutdown()
    board.gpu_reset([])
    assert board.resets == [tuple(g.bus_id for g in board.gpus)]
