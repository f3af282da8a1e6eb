"""The reboot task through the real agent loop and client against the fake API server:
"rebooting" with the boot id on the Node first, the reboot only once that conditional
write succeeded, "done" once the boot id changed, once per id; and the production
reboot command, bounded."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import REBOOT_REQUEST_ANNOTATION, REBOOT_STATUS_ANNOTATION
from nodeagent.agent import Agent, NodeAPI
from nodeagent.reboot import REBOOT_GRACE, HostReboot, RebootError, RebootTask, read_boot_id
from nodeagent.tasks import AgentContext
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver

pytestmark = pytest.mark.timeout(60)

NODE = "gpu-1"


class Host:
    """The node as the agent sees it: its boot id, a clock, and the reboots asked for."""

    def __init__(self, server: FakeApiServer | None = None) -> None:
        self.boot = "boot-1"
        self.now = 1_800_000_000.0
        self.reboots = 0
        self.fail: str | None = None
        self.server = server
        # The reboot status on the Node at each reboot, as the API server had it.
        self.seen: list[dict[str, Any]] = []

    def reboot(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)
        if self.server is not None:
            self.seen.append(status(self.server))
        self.reboots += 1


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running_apiserver(validate=True) as api:
        api.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield api


def agent(server: FakeApiServer, tmp_path: Path, host: Host) -> Agent:
    ctx = AgentContext(
        node_name=NODE,
        nvml=None,
        amdsmi=None,
        sysfs_root=tmp_path,
        holders=list,
        clock=lambda: host.now,
        boot_id=lambda: host.boot,
        reboot=host.reboot,
        nvidia_reset=None,
    )
    api = NodeAPI.from_config(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    return Agent(api, ctx, [RebootTask()])


def ask(server: FakeApiServer, raw: str) -> None:
    node = server.get("nodes", None, NODE)
    assert node is not None
    node["metadata"].setdefault("annotations", {})[REBOOT_REQUEST_ANNOTATION] = raw
    server.add(node)


def status(server: FakeApiServer) -> dict[str, Any]:
    node = server.get("nodes", None, NODE)
    assert node is not None
    return dict(json.loads(node["metadata"]["annotations"][REBOOT_STATUS_ANNOTATION]))


def write_status(server: FakeApiServer, value: dict[str, Any]) -> None:
    node = server.get("nodes", None, NODE)
    assert node is not None
    node["metadata"].setdefault("annotations", {})[REBOOT_STATUS_ANNOTATION] = json.dumps(value)
    server.add(node)


REQUEST = json.dumps({"id": "b1", "requestedAt": "2026-12-01T19:00:00Z", "by": "t"})


def test_reboot_is_announced_then_done_after_a_new_boot(
    server: FakeApiServer, tmp_path: Path
) -> None:
    host = Host(server)
    a = agent(server, tmp_path, host)
    ask(server, REQUEST)
    a.round()
    assert host.reboots == 1
    # The boot id was on the Node before the host was asked to go down.
    (s,) = host.seen
    assert (s["id"], s["state"], s["bootID"]) == ("b1", "rebooting", "boot-1")
    a.round()
    a.round()
    assert host.reboots == 1  # asked once; the host takes its time
    # The host comes back: a new boot, a new agent process.
    host.boot = "boot-2"
    a = agent(server, tmp_path, host)
    a.round()
    s = status(server)
    assert (s["state"], s["bootID"]) == ("done", "boot-2") and "boot-1 -> boot-2" in s["message"]
    a.round()
    assert host.reboots == 1


def test_an_agent_restarted_before_the_reboot_asks_for_it(
    server: FakeApiServer, tmp_path: Path
) -> None:
    host = Host(server)
    host.fail = "killed before systemctl ran"  # the first process dies at its reboot
    ask(server, REQUEST)
    agent(server, tmp_path, host).round()
    assert host.reboots == 0
    write_status(server, {"id": "b1", "state": "rebooting", "bootID": "boot-1", "message": ""})
    host.fail = None
    agent(server, tmp_path, host).round()  # restarted: same boot, no reboot yet
    assert host.reboots == 1 and "asked again" in host.seen[0]["message"]


def test_a_host_that_does_not_reboot_fails(server: FakeApiServer, tmp_path: Path) -> None:
    host = Host()
    a = agent(server, tmp_path, host)
    ask(server, REQUEST)
    a.round()
    host.now += REBOOT_GRACE + 1
    a.round()
    s = status(server)
    assert s["state"] == "failed" and "still on boot boot-1" in s["message"]


def test_a_failed_reboot_command_fails(server: FakeApiServer, tmp_path: Path) -> None:
    host = Host()
    host.fail = "systemctl exited 1: Access denied"
    a = agent(server, tmp_path, host)
    ask(server, REQUEST)
    a.round()
    s = status(server)
    assert s["state"] == "failed" and "Access denied" in s["message"]


def test_an_unreadable_request_fails(server: FakeApiServer, tmp_path: Path) -> None:
    host = Host()
    ask(server, "reboot please")
    agent(server, tmp_path, host).round()
    assert status(server)["state"] == "failed"
    assert host.reboots == 0


def test_host_reboot_and_boot_id(tmp_path: Path) -> None:
    script = tmp_path / "systemctl"
    script.write_text(
        '#!/bin/sh\n[ "$1" = reboot ] && exit 0\necho "Failed to reboot" >&2; exit 1\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    HostReboot((str(script), "reboot"))()
    with pytest.raises(RebootError, match="exited 1: Failed to reboot"):
        HostReboot((str(script), "halt"))()
    with pytest.raises(RebootError, match="not found"):
        HostReboot((str(tmp_path / "nsenter"),))()
    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_text("1b2c-aa\n")
    assert read_boot_id(tmp_path) == "1b2c-aa"
