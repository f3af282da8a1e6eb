"""``make demo``: a busy port is reported before the 20-50 s simulation, the first
line where the exporter starts says it runs until Ctrl-C, and the README says what
the demo leaves running; ``make peers`` checks every peer it installs."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from exporter import cli, demo
from tests.support.exposition import parse
from tests.support.paths import REPO


@pytest.fixture
def busy() -> Iterator[str]:
    """An address something already listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_busy_port_fails_the_check_at_once(busy: str) -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.demo", "--check"],
        cwd=REPO,
        env={**os.environ, "DEMO_ADDRESS": busy},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert f"accel-exporter demo: error: cannot listen on {busy}: " in proc.stderr
    assert "DEMO_ADDRESS=127.0.0.1:9836 make demo" in proc.stderr
    assert time.monotonic() - start < 10.0


def test_a_free_port_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_ADDRESS", free_address())
    assert demo.main(["--check"]) == 0
    monkeypatch.setenv("DEMO_ADDRESS", "nowhere")
    assert demo.port_problem("nowhere") is not None
    assert demo.main(["--check"]) == 2


def test_the_exporter_starts_saying_how_to_stop_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[list[str]] = []

    def start(argv: list[str]) -> int:
        started.append(list(argv))
        return 0

    monkeypatch.setattr(cli, "main", start)
    where = free_address()
    monkeypatch.setenv("DEMO_ADDRESS", where)
    assert demo.main([]) == 0
    first = capsys.readouterr().out.strip().splitlines()[0]
    assert (
        first == f"accel-exporter demo: serving http://{where} in the foreground. Ctrl-C to stop."
    )
    [argv] = started
    assert argv[argv.index("--web.listen-address") + 1] == where


def test_the_exporter_is_not_started_on_a_busy_port(
    busy: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "main", lambda argv: pytest.fail("started on a busy port"))
    monkeypatch.setenv("DEMO_ADDRESS", busy)
    assert demo.main([]) == 2
    assert capsys.readouterr().out == ""


def _recipe(target: str) -> list[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert body is not None, target
    return [line.strip() for line in body.group(1).splitlines()]


def test_make_demo_checks_the_port_before_the_simulation() -> None:
    steps = _recipe("demo")
    assert steps[0] == "$(PY) -m exporter.demo --check"
    assert "simulate" in steps[1] and steps[-1] == "$(PY) -m exporter.demo"


def test_make_peers_checks_every_peer_it_installs() -> None:
    [step] = _recipe("peers")
    checked = set(re.findall(r"command -v (\S+)", step))
    installed = set(step.split("apt-get install -y -qq", 1)[1].split(">")[0].split())
    assert installed == {"prometheus", "prometheus-alertmanager", "prometheus-node-exporter"}
    assert checked == installed | {"promtool"}


def test_the_readme_says_what_the_demo_leaves_running() -> None:
    readme = (REPO / "README.md").read_text()
    [line] = [line for line in readme.splitlines() if line.startswith("make demo")]
    assert "Ctrl-C" in line and "9835" in line


def test_the_demo_shows_claims_and_per_pod_use() -> None:
    """The demo's exporter (its simulated node alone, so that no hardware is probed)
    publishes devices that ResourceClaims gave, with their claim, and each pod's use
    of its devices (issue 29: neither could be seen without a cluster)."""
    args = demo.exporter_args(free_address(), real=[])
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", *args, "--once"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    samples = parse(proc.stdout)
    claims = {lb["claim"] for n, lb, _ in samples if n == "accel_device_pod_info" and "claim" in lb}
    used = {lb["pod"] for n, lb, _ in samples if n == "accel_pod_utilization_ratio" and lb["pod"]}
    assert claims and "infer-mps" in claims
    assert {"infer-0", "infer-1", "infer-2", "notebook-0"} <= used
