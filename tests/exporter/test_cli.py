"""The command line: bad input exits 2 with one line naming the problem, and
``--once`` prints exposition that promtool accepts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.exposition import CORE_METRICS, parse, total, value
from tests.support.paths import REPO

# Slow (starts an exporter process per test): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--poll-interval", "5x"], "--poll-interval: invalid duration value: '5x'"),
        (["--poll-interval", "0s"], "duration must be positive"),
        (["--backends", "nvidia,cuda"], "unknown backend 'cuda'"),
        (["--web.listen-address", "localhost"], "--web.listen-address: invalid listen address"),
        (["--web.listen-address", ":99999"], "invalid listen address ':99999'"),
        (["--web.telemetry-path", "metrics"], "must start with '/'"),
        # A path the server answers itself is refused at start, not a crash.
        (["--web.telemetry-path", "/healthz"], "/healthz is served by the exporter itself"),
        (["--web.telemetry-path", "/metrics?x=1"], "is not a plain URL path"),
        (["--web.telemetry-path", "/a b"], "is not a plain URL path"),
        (["--sim-devices", "nvidia:x"], "bad device count in 'nvidia:x'"),
        (["--backends", "sim"], "the sim backend needs --sim-devices"),
        (["--backends", "cpu", "--sim-devices", "nvidia:1"], "'sim' is not in --backends"),
        (["--log.level", "loud"], "invalid choice: 'loud'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--web.config.file", "/nonexistent/web.yml"], "/nonexistent/web.yml"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], needle: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert lines[0].startswith("accel-exporter: error: ")


def test_bad_web_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    proc = run("--web.config.file", str(cfg), "--backends", "cpu")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "web.yml:2:" in lines[0] and "cert_file" in lines[0] and "missing.crt" in lines[0]


def test_bad_web_config_key_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_user:\n  alice: x\n")
    proc = run("--web.config.file", str(cfg))
    assert proc.returncode == 2
    assert "basic_auth_user" in proc.stderr and "basic_auth_users" in proc.stderr


def test_bad_sim_script_exits_2(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("- {at: 1s, device: gpu7, fault: 79}\n")
    proc = run("--backends", "sim", "--sim-devices", "nvidia:2", "--sim-script", str(script))
    assert proc.returncode == 2
    assert f"{script}:1:20: no simulated device 'gpu7'" in proc.stderr


def test_help_teaches() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for flag in (
        "--web.listen-address",
        "--web.telemetry-path",
        "--web.config.file",
        "--backends",
        "--poll-interval",
        "--path.sysfs",
        "--path.procfs",
        "--sim-devices",
        "--sim-script",
        "--log.level",
        "--log.format",
        "--once",
    ):
        assert flag in proc.stdout
    assert "examples:" in proc.stdout


def test_once_prints_checked_exposition(promtool_check: Callable[[str], None]) -> None:
    proc = run("--backends", "sim", "--sim-devices", "nvidia:8,amd:4,oneapi:2", "--once")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    promtool_check(text)
    samples = parse(text)
    devices = (
        [f"nvidia{i}" for i in range(8)] + [f"amd{i}" for i in range(4)] + ["oneapi0", "oneapi1"]
    )
    for name in CORE_METRICS:
        rows = [lb for n, lb, _ in samples if n == name]
        assert rows, name
        assert all({"device", "vendor", "uuid"} <= lb.keys() for lb in rows), name
        assert {lb["device"] for lb in rows} == set(devices), name
    for d in devices:
        for sev in ("fatal", "recoverable", "info"):
            assert total(text, "accel_fault_events_total", device=d, severity=sev) == 0


def test_once_with_missing_vendor_library_reports_backend_down() -> None:
    proc = run("--backends", "nvidia", "--once")
    assert proc.returncode == 0, proc.stderr
    assert value(proc.stdout, "accel_exporter_backend_up", backend="nvidia") == 0
    assert proc.stderr.count("backend nvidia is down") == 1


def test_json_logs(tmp_path: Path) -> None:
    proc = run("--backends", "nvidia", "--once", "--log.format", "json")
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("{") and '"level": "info"' in line and "nvidia" in line


def test_sim_devices_alone_poll_only_the_sim_backend() -> None:
    """--sim-devices without --backends means the sim backend alone: no hardware
    backend is probed, so no "backend ... is down" line for each vendor this host
    lacks (issue 29)."""
    proc = run("--sim-devices", "nvidia:1", "--once")
    assert proc.returncode == 0, proc.stderr
    backends = {
        lb["backend"] for n, lb, _ in parse(proc.stdout) if n == "accel_exporter_backend_up"
    }
    assert backends == {"sim"}
    assert value(proc.stdout, "accel_exporter_backend_up", backend="sim") == 1
    assert "is down" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--sim-claims", "--sim-sharing"])
def test_sim_claims_and_sharing_need_pods(flag: str) -> None:
    proc = run("--sim-devices", "nvidia:2", flag)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert flag in line and "need --sim-pods" in line
