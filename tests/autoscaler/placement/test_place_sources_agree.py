"""``place`` gives the same answer from Prometheus and from the scrape source for
the same data (issue 20, point 6): about 8 minutes after a fatal fault on
n2/nvidia2, both refuse n2 for a 4-GPU pod ("has 3 healthy nvidia devices").

The data is one 30-minute history of three nodes, written as OpenMetrics and
backfilled into a real Prometheus with ``promtool tsdb create-blocks-from``; the
scrape source reads the same values from exporter-like HTTP endpoints on
127.0.0.1 (the last step's values for a one-shot ``place``, every step for a
scrape source that keeps its history). n3/nvidia1 had a fatal fault 25 minutes
ago: Prometheus and a scrape source with history know it is old and offer the
device; a single scrape cannot date it and refuses it, with a warning that says so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from autoscaler.placement.fleet import read_fleet
from autoscaler.placement.score import Ranking, pod_request, score
from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
from autoscaler.sources.scrape import ScrapeSource
from tests.support.paths import REPO
from tests.support.procs import free_port, prometheus_tsdb, require

pytestmark = pytest.mark.slow

STEP = 15
HISTORY = 30 * 60
NODES = ("n1", "n2", "n3")
FAULTS = {("n2", "nvidia2"): 8 * 60, ("n3", "nvidia1"): 25 * 60}  # seconds before the end
MODEL = "NVIDIA H100 80GB HBM3"
# The data ends a little before the test starts, so that "now" (which `place` uses)
# reads the last values: 20 s is well inside the 5-minute lookback.
_END: list[int] = []


def end() -> int:
    """The data's last second, fixed when first asked for (by the ``prom`` fixture,
    just before the first test here), never at import: in a long run the module is
    collected minutes before its tests, and data that old is past the lookback."""
    if not _END:
        _END.append(int(time.time()) - 20)
    return _END[0]


def exposition(node: str, t: int, *, timestamps: bool) -> list[str]:
    """The node's series at time t, as an exporter writes them (no node label) or, with
    ``timestamps``, as OpenMetrics lines with the node label relabeling adds."""
    lines = []
    for i in range(4):
        device = f"nvidia{i}"
        base = f'device="{device}",vendor="nvidia",uuid="GPU-{node}-{i}"'
        ago = FAULTS.get((node, device))
        faulted = ago is not None and t >= end() - ago
        series = [
            (f'accel_device_info{{{base},model="{MODEL}"}}', 1),
            (f"accel_up{{{base}}}", 1),
            (f"accel_utilization_ratio{{{base}}}", 0.1 * i),
            (f"accel_memory_used_bytes{{{base}}}", 2e9 * i),
            (f"accel_memory_total_bytes{{{base}}}", 8e10),
            (f'accel_fault_events_total{{{base},severity="fatal"}}', 1 if faulted else 0),
        ]
        for head, value in series:
            if timestamps:
                head = head.replace("{", f'{{node="{node}",', 1)
                lines.append(f"{head} {value:g} {t}")
            else:
                lines.append(f"{head} {value:g}")
    return lines


def steps() -> list[int]:
    return list(range(end() - HISTORY, end() + 1, STEP))


def openmetrics() -> str:
    by_series: dict[str, list[str]] = {}
    for t in steps():
        for node in NODES:
            for line in exposition(node, t, timestamps=True):
                by_series.setdefault(line.rsplit(" ", 2)[0], []).append(line)
    lines = [line for group in by_series.values() for line in group]
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prom")
    series = tmp / "fleet.om"
    series.write_text(openmetrics())
    data = tmp / "data"
    proc = subprocess.run(
        [require("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(series), str(data)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    with prometheus_tsdb(tmp, data) as url:
        yield url


class Exporters:
    """One exposition endpoint per node, serving the values at ``self.t``."""

    def __init__(self) -> None:
        self.t = end()
        self.base = ""

    async def handler(self, request: web.Request) -> web.StreamResponse:
        node = request.match_info["node"]
        return web.Response(text="\n".join(exposition(node, self.t, timestamps=False)) + "\n")

    def targets(self, nodes: tuple[str, ...] = NODES) -> dict[str, str]:
        return {n: f"{self.base}/{n}/metrics" for n in nodes}


@pytest.fixture
async def exporters() -> AsyncIterator[Exporters]:
    ex = Exporters()
    app = web.Application()
    app.router.add_get("/{node}/metrics", ex.handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    ex.base = f"http://127.0.0.1:{port}"
    try:
        yield ex
    finally:
        await runner.cleanup()


def gpu_pod(count: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(count)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "image": "t:1", "resources": {"limits": limits}}]},
    }


def answer(ranking: Ranking) -> tuple[list[tuple[str, tuple[str, ...], float]], list[Any]]:
    return (
        [(c.node, c.devices, round(c.total, 9)) for c in ranking.candidates],
        sorted((r.node, r.reason) for r in ranking.rejected),
    )


async def _place(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "autoscaler.cli",
        "place",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_place_answers_the_same_from_prometheus_and_from_one_scrape(
    prom: str, exporters: Exporters, tmp_path: Path
) -> None:
    """The issue's case, through the command: `place` for a 4-GPU pod on n1 and n2."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(gpu_pod(4)))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(
            {"kind": "NodeList", "items": [{"metadata": {"name": n}} for n in NODES[:2]]}
        )
    )
    common = [str(pod), "--nodes", str(nodes), "--output", "json"]
    targets = ",".join(f"{n}={u}" for n, u in exporters.targets().items())
    from_prom = await _place(*common, "--source", "prometheus", "--prometheus.url", prom)
    from_scrape = await _place(*common, "--source", "scrape", "--targets", targets)
    assert from_prom[0] == from_scrape[0] == 0, (from_prom[2], from_scrape[2])
    assert json.loads(from_prom[1]) == json.loads(from_scrape[1])
    doc = json.loads(from_scrape[1])
    assert [(c["node"], c["devices"]) for c in doc["candidates"]] == [
        ("n1", ["nvidia0", "nvidia1", "nvidia2", "nvidia3"])
    ]
    assert doc["rejected"][0]["node"] == "n2"
    assert doc["rejected"][0]["reason"].startswith("has 3 healthy nvidia devices")
    # One scrape has no history: it says why it refused what it could not date.
    assert "n2/nvidia2 (1)" in from_scrape[2] and "no sample from 10 minutes ago" in from_scrape[2]


async def test_a_scrape_source_with_history_dates_faults_as_prometheus_does(
    prom: str, exporters: Exporters
) -> None:
    req = pod_request(gpu_pod(4))
    prometheus = PrometheusSource(PrometheusConfig(url=prom, timeout=10.0))
    try:
        expected = answer(score(req, list(NODES), await read_fleet(prometheus, end())))
    finally:
        await prometheus.close()
    assert [c[0] for c in expected[0]] == ["n1", "n3"] or [c[0] for c in expected[0]] == [
        "n3",
        "n1",
    ]
    assert [r[0] for r in expected[1]] == ["n2"]

    # A scrape source that has scraped every step of the 30 minutes (as the extender's
    # does, every refresh) keeps the history and agrees, n3's old fault included.
    scrape = ScrapeSource(exporters.targets(), timeout=5.0)
    try:
        for t in steps():
            exporters.t = t
            state = await read_fleet(scrape, float(t))
        assert scrape.store.retention >= 15 * 60
    finally:
        await scrape.close()
    assert answer(score(req, list(NODES), state)) == expected

    # One scrape cannot date n3's fault: n3 is refused too (never offered wrongly).
    exporters.t = end()
    once = ScrapeSource(exporters.targets(), timeout=5.0)
    try:
        state = await read_fleet(once, float(end()))
    finally:
        await once.close()
    candidates, rejected = answer(score(req, list(NODES), state))
    assert [c[0] for c in candidates] == ["n1"]
    assert [r[0] for r in rejected] == ["n2", "n3"]
    assert not state.nodes["n3"].devices["nvidia1"].healthy
