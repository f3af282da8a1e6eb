"""Start and stop the real processes the tests talk to, on 127.0.0.1 only, each
with its own port and data directory, always stopped when the test ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support.exposition import value
from tests.support.paths import REPO
from tests.support.waits import wait


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def wait_http(url: str, timeout: float = 20.0) -> None:
    """Waits until ``url`` answers; fails with the last error after ``timeout``."""
    last: list[Exception] = []

    def answers() -> bool:
        try:
            http_get(url, timeout=1.0)
        except Exception as e:
            last[:] = [e]
            return False
        return True

    try:
        wait(answers, timeout, what=f"an answer from {url}")
    except AssertionError as e:
        raise AssertionError(f"{e}: {last[0] if last else 'no error'}") from None


LAST_EVALUATION = "accel_autoscaler_last_evaluation_timestamp_seconds"


def last_evaluation(url: str) -> float:
    """When the controller at ``url`` last finished an evaluation cycle (0: never)."""
    return value(http_get(url + "/metrics", timeout=5.0).decode(), LAST_EVALUATION) or 0.0


def wait_cycles(url: str, count: int = 1, timeout: float = 20.0) -> None:
    """Waits until the controller at ``url`` has finished ``count`` evaluation cycles
    after this moment: the event a test waits for before it asserts that the
    controller did (or did not do) something "by now", instead of a fixed sleep."""
    for n in range(count):
        before = last_evaluation(url)
        wait(
            lambda before=before: last_evaluation(url) > before,  # type: ignore[misc]
            timeout,
            f"evaluation cycle {n + 1} of {count}",
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass(frozen=True)
class Running:
    url: str
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def _serve(
    what: str,
    cmd: Sequence[str],
    port: int | None,
    output: IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Iterator[Running]:
    """Runs ``cmd --web.listen-address 127.0.0.1:PORT`` until its /healthz answers,
    failing at once (with its stderr) if it exits first; stopped on exit."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", *cmd, "--web.listen-address", f"127.0.0.1:{port}"],
        cwd=REPO,
        stderr=output if output is not None else subprocess.PIPE,
        stdout=output,
        env={**os.environ, **env} if env else None,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + timeout
        while True:
            try:
                http_get(url + "/healthz", timeout=1.0)
                break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                _stop(proc)
                err = proc.stderr.read().decode() if proc.stderr else "(its output went to a file)"
                raise AssertionError(f"{what} did not start: {err}")
            time.sleep(0.05)
        yield Running(url, proc)
    finally:
        _stop(proc)
        if proc.stderr:
            proc.stderr.close()


@contextlib.contextmanager
def exporter(args: Sequence[str], port: int | None = None) -> Iterator[str]:
    """Runs accel-exporter on 127.0.0.1 and yields its base URL."""
    with _serve("accel-exporter", ["exporter.cli", *args], port) as running:
        yield running.url


@contextlib.contextmanager
def autoscaler(
    args: Sequence[str],
    port: int | None = None,
    output: IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Running]:
    """Runs ``accel-autoscaler run ARGS`` on 127.0.0.1; ``output`` takes its stdout
    and stderr (a log file), ``env`` is added to the environment."""
    with _serve("accel-autoscaler", ["autoscaler.cli", "run", *args], port, output, env) as r:
        yield r


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is missing: `make test` installs it from Debian")
    return path


@contextlib.contextmanager
def _run_prometheus(
    tmp: Path, config: Path, data: Path, port: int, args: Sequence[str] = ()
) -> Iterator[str]:
    """Starts Debian's Prometheus on 127.0.0.1:port, waits until it is ready, yields
    its URL and always stops it."""
    proc = subprocess.Popen(
        [
            require("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HOME": str(tmp)},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/-/ready", timeout=30)
        yield url
    finally:
        _stop(proc)
        if proc.stderr:
            proc.stderr.close()


@contextlib.contextmanager
def prometheus(
    tmp: Path,
    scrape_targets: Sequence[str],
    interval: str = "1s",
    labels: dict[str, str] | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """Runs Debian's Prometheus scraping the given host:port targets (with extra
    target labels, e.g. the node name relabeling would add); yields its URL."""
    port = port or free_port()
    targets = ", ".join(f"'{t}'" for t in scrape_targets)
    extra = ", ".join(f"{k}: '{v}'" for k, v in (labels or {}).items())
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        "  - job_name: accel\n"
        f"    static_configs: [{{targets: [{targets}], labels: {{{extra}}}}}]\n"
    )
    data = tmp / "prom-data"
    data.mkdir()
    with _run_prometheus(tmp, config, data, port) as url:
        yield url


@contextlib.contextmanager
def alertmanager(
    tmp: Path, webhook_url: str, token: str | None = None, repeat_interval: str = "1h"
) -> Iterator[str]:
    """Runs Debian's Alertmanager routing every alert to ``webhook_url`` at once, with
    resolved notifications, re-sending firing ones every ``repeat_interval``; yields
    its base URL."""
    port, cluster_port = free_port(), free_port()
    auth = f"\n        http_config: {{authorization: {{credentials: '{token}'}}}}" if token else ""
    config = tmp / "alertmanager.yml"
    config.write_text(
        "route:\n"
        "  receiver: accel\n"
        "  group_by: ['...']\n"
        "  group_wait: 0s\n"
        "  group_interval: 1s\n"
        f"  repeat_interval: {repeat_interval}\n"
        "receivers:\n"
        "  - name: accel\n"
        "    webhook_configs:\n"
        f"      - url: '{webhook_url}'\n"
        f"        send_resolved: true{auth}\n"
    )
    data = tmp / "am-data"
    data.mkdir()
    proc = subprocess.Popen(
        [
            require("prometheus-alertmanager"),
            f"--config.file={config}",
            f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--cluster.listen-address=127.0.0.1:{cluster_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/-/ready", timeout=30)
        yield url
    finally:
        _stop(proc)
        if proc.stderr:
            proc.stderr.close()


@contextlib.contextmanager
def prometheus_tsdb(tmp: Path, data: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """Runs Debian's Prometheus over an existing data directory (for example blocks
    written by ``promtool tsdb create-blocks-from``), scraping nothing; yields its URL."""
    config = tmp / "prometheus-tsdb.yml"
    config.write_text("global:\n  evaluation_interval: 1m\n")
    with _run_prometheus(tmp, config, data, free_port(), args) as url:
        yield url


def promtool_path() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package")
    return path
