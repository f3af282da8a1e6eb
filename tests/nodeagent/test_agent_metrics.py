"""The node agent's ``/metrics`` (issue 28): its series declared once
(``nodeagent/metrics.py``), rendered through prometheus-client from a frozen
status, passing ``promtool check metrics``, served while a round holds the
agent's lock (a MIG layout being built), and changing nothing when read."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from accel_common.listen import Listener
from nodeagent import layouts
from nodeagent import metrics as catalogue
from nodeagent.agent import Agent, NodeAPI, metrics_app
from nodeagent.metrics import AgentStatus
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext

pytestmark = pytest.mark.timeout(60)


def _agent() -> Agent:
    ctx = AgentContext(
        node_name="n1",
        nvml=None,
        amdsmi=None,
        sysfs_root=Path("/nonexistent"),
        holders=lambda: [],
        clock=lambda: 1_800_000_000.0,
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=None,
    )
    return Agent(NodeAPI(None), ctx, [PartitionTask(layouts.load())])


async def test_served_while_a_round_holds_the_lock_and_unchanged_by_reads(
    promtool_check: Callable[[str], None],
) -> None:
    agent = _agent()
    agent.tasks[0].last = ("mi300x-cpx", "refused")  # type: ignore[attr-defined]
    agent.rounds.update(ok=7, error=2)
    agent.last_success = 1_800_000_123.456
    before = (dict(agent.rounds), agent.last_success, agent.failures, agent.started)
    release = threading.Event()
    held = threading.Event()

    def long_round() -> None:
        with agent._lock:  # what a round holds while it builds a layout
            held.set()
            release.wait(30)

    worker = threading.Thread(target=long_round)
    worker.start()
    try:
        assert await asyncio.to_thread(held.wait, 10)
        listener = await Listener.start(metrics_app(agent.metrics), "127.0.0.1", 0)
        async with listener, aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{listener.bound_port}/metrics"
            texts = []
            for _ in range(2):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
                    texts.append(await r.text())
    finally:
        release.set()
        await asyncio.to_thread(worker.join, 10)
    assert texts[0] == texts[1]
    assert (dict(agent.rounds), agent.last_success, agent.failures, agent.started) == before
    promtool_check(texts[0])
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(texts[0])
        for s in fam.samples
    }
    layout = (("layout", "mi300x-cpx"), ("node", "n1"), ("state", "refused"))
    assert samples[("accel_partition_layout_info", layout)] == 1
    assert samples[("accel_node_agent_rounds_total", (("result", "error"),))] == 2
    assert samples[("accel_node_agent_last_success_timestamp_seconds", ())] == 1_800_000_123.456


def test_the_whole_catalogue_passes_promtool_and_matches_the_docs(
    promtool_check: Callable[[str], None],
) -> None:
    status = AgentStatus(
        node="n1", layouts=(("h100-half", "applied"),), rounds=(("ok", 1), ("error", 0))
    )
    text = catalogue.render(status)
    promtool_check(text)
    served = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
    }
    assert served == {m.name for m in catalogue.CATALOGUE}
    page = (Path(__file__).parents[2] / "docs" / "agent.md").read_text()
    for m in catalogue.CATALOGUE:
        row = f"| `{m.name}` | {', '.join(m.labels)}".rstrip() + " |"
        assert row in page, f"docs/agent.md has no row {row!r}"


def test_before_any_round_only_the_counters_and_the_zero_time_show() -> None:
    text = _agent().metrics()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert names == {
        "accel_node_agent_rounds_total",
        "accel_node_agent_last_success_timestamp_seconds",
    }
