"""The agent loop and its command against the fake API server through the real
``kubernetes`` client: it reads its own Node, runs the tasks, merge-patches the
answer, never dies of an API error, a bad annotation or a broken task, and serves
its state as metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from accel_common.listen import Listener
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
)
from nodeagent import cli, layouts
from nodeagent.agent import Agent, NodeAPI, NodeAPIError, metrics_app
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext, NodePatch
from tests.support.exposition import parse
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.nvml import FakeNVML, h100
from tests.support.kubeobjs import node
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


def context(nvml: Any) -> AgentContext:
    return AgentContext(
        node_name="n1",
        nvml=nvml,
        amdsmi=None,
        sysfs_root=Path("/nonexistent"),
        holders=lambda: [],
        clock=lambda: 1_800_000_000.0,
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=None,
    )


class Broken:
    name = "broken"

    def start(self, ctx: AgentContext) -> NodePatch:
        raise RuntimeError("start failed")

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        raise KeyError("a bug")


class Greeter:
    """A task that answers once, and sees every round's Node."""

    name = "greeter"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def start(self, ctx: AgentContext) -> NodePatch:
        return NodePatch(annotations={"example.com/agent-started": "yes"})

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        self.seen.append(node["metadata"]["name"])
        return NodePatch(labels={"example.com/stale": None})


def agent_for(api: FakeApiServer, tmp_path: Path, nvml: Any, *tasks: Any) -> Agent:
    node_api = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    return Agent(node_api, context(nvml), list(tasks), interval=0.01, max_backoff=0.04)


def labelled(labels: dict[str, str]) -> dict[str, Any]:
    n = node("n1")
    n["metadata"]["labels"].update(labels)
    return n


def stored(api: FakeApiServer) -> dict[str, Any]:
    found = api.get("nodes", None, "n1")
    assert found is not None
    return found


async def test_a_round_reads_the_node_runs_the_tasks_and_patches_it(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.add(labelled({PARTITION_LAYOUT_LABEL: "h100-half", "example.com/stale": "x"}))
    nvml = FakeNVML([h100(0)])
    nvml.nvmlInit()
    greeter = Greeter()
    agent = agent_for(api, tmp_path, nvml, PartitionTask(layouts.load()), Broken(), greeter)
    try:
        assert await asyncio.to_thread(agent.round_safely)
        meta = stored(api)["metadata"]
        assert meta["labels"][PARTITION_APPLIED_LABEL] == "h100-half"
        assert "example.com/stale" not in meta["labels"]  # None deletes
        assert meta["annotations"]["example.com/agent-started"] == "yes"
        assert json.loads(meta["annotations"][PARTITION_STATE_ANNOTATION])["state"] == "applied"
        # A steady node is read, never written.
        patches = len(api.requests_for("PATCH", "/nodes/n1$"))
        assert await asyncio.to_thread(agent.round_safely)
        assert len(api.requests_for("PATCH", "/nodes/n1$")) == patches == 1
        assert greeter.seen == ["n1", "n1"]
        text = agent.metrics()
    finally:
        agent.api.close()
    samples = {(n, tuple(sorted(lb.items()))): v for n, lb, v in parse(text)}
    key = (
        "accel_partition_layout_info",
        (("layout", "h100-half"), ("node", "n1"), ("state", "applied")),
    )
    assert samples[key] == 1
    assert samples[("accel_node_agent_rounds_total", (("result", "ok"),))] == 2


async def test_api_errors_and_bad_annotations_never_end_the_loop(
    api: FakeApiServer, tmp_path: Path
) -> None:
    labels = {PARTITION_LAYOUT_LABEL: "h100-all-1g"}
    n = labelled(labels)
    n["metadata"]["annotations"] = {PARTITION_STATE_ANNOTATION: "{not json"}
    api.add(n)
    nvml = FakeNVML([h100(0)])
    nvml.nvmlInit()
    agent = agent_for(api, tmp_path, nvml, PartitionTask(layouts.load()))
    api.faults.fail(3, status=500, method="GET")
    api.faults.fail(1, status=409, method="PATCH")
    try:
        stop = asyncio.Event()
        run = asyncio.create_task(agent.run(stop))
        await until(lambda: agent.rounds["ok"], what="a good round after the errors")
        stop.set()
        await run
    finally:
        agent.api.close()
    # The 409 is no failed round: the agent reads the Node again and decides again.
    assert agent.rounds["error"] == 3 and agent.rounds["ok"] >= 1
    patches = api.requests_for("PATCH", "/nodes/n1$")
    assert [p.status for p in patches[:2]] == [409, 200]
    assert all(p.body["metadata"]["resourceVersion"] for p in patches)  # every write conditional
    state = json.loads(stored(api)["metadata"]["annotations"][PARTITION_STATE_ANNOTATION])
    assert state["state"] == "applied" and state["layout"] == "h100-all-1g"


def test_backoff_doubles_up_to_the_limit() -> None:
    agent = Agent(NodeAPI(None), context(None), [], interval=30, max_backoff=300)
    assert agent.next_delay() == 30
    agent.failures = 1
    assert agent.next_delay() == 60
    agent.failures = 50
    assert agent.next_delay() == 300


async def test_a_missing_node_is_an_error_with_the_path(api: FakeApiServer, tmp_path: Path) -> None:
    node_api = NodeAPI.from_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        with pytest.raises(NodeAPIError, match="GET /api/v1/nodes/n9: 404"):
            await asyncio.to_thread(node_api.get, "n9")
    finally:
        node_api.close()


async def test_metrics_are_served_on_their_own_listener(tmp_path: Path) -> None:
    agent = Agent(NodeAPI(None), context(None), [PartitionTask(layouts.load())])
    agent.tasks[0].last = ("mi300x-cpx", "refused")  # type: ignore[attr-defined]
    listener = await Listener.start(metrics_app(agent.metrics), "127.0.0.1", 0)
    async with listener, aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{listener.bound_port}"
        async with session.get(f"{url}/metrics") as r:
            text = await r.text()
        async with session.get(f"{url}/healthz") as r:
            assert r.status == 200
    assert 'accel_partition_layout_info{layout="mi300x-cpx",node="n1",state="refused"} 1.0' in text


# -- the command -----------------------------------------------------------------------


def test_help_teaches_the_channel(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "accel-fleet.io/partition-layout" in out and "--layouts" in out and "examples:" in out


def test_check_layouts_lists_or_reports_file_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--check-layouts"]) == 0
    assert "h100-all-1g: H100 (nvidia) 7x 1g.10gb" in capsys.readouterr().out
    bad = tmp_path / "layouts.yaml"
    bad.write_text(
        "layouts:\n"
        "  small: {model: H100, mig: [1g.10gb x9]}\n"
        "  amd: {model: MI300X, compute: XPX}\n"
        "  both: {model: H100, mig: off, compute: CPX}\n"
        "  'bad name!': {model: H100, mig: off}\n"
    )
    assert cli.main(["--check-layouts", "--layouts", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err and "9 instances of 1g.10gb; 1 to 8" in err
    assert f"{bad}:3:" in err and "compute must be" in err
    assert f"{bad}:4:" in err and "give either 'mig'" in err
    assert f"{bad}:5:" in err and "not a label value" in err
    assert cli.main(["--layouts", str(bad), "--node-name", "n1"]) == 2


def test_unusable_flags_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert cli.main(["--no-nvml"]) == 2
    assert "pass --node-name or set $NODE_NAME" in capsys.readouterr().err
    assert cli.main(["--node-name", "n1", "--listen", "nowhere"]) == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["--interval", "0s"])
    assert e.value.code == 2


async def test_once_against_the_api_server(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.add(labelled({PARTITION_LAYOUT_LABEL: "mi300x-cpx"}))
    monkeypatch.setattr(cli, "load_amdsmi", lambda: None)
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    argv = ["--node-name", "n1", "--kubeconfig", kubeconfig, "--once", "--no-nvml"]
    argv += ["--path.sysfs", str(tmp_path / "sys"), "--kubelet-socket", str(tmp_path / "k.sock")]
    assert await asyncio.to_thread(cli.main, argv) == 0
    state = json.loads(stored(api)["metadata"]["annotations"][PARTITION_STATE_ANNOTATION])
    # No AMD GPU under this sysfs: said on the node, not a crash.
    assert state["state"] == "failed" and "this node has none" in state["message"]
    api.faults.fail(1, status=503, method="GET")
    assert await asyncio.to_thread(cli.main, argv) == 1
