"""The exporter's HTTP face, end to end against the real process: cached gzip
bodies, health and landing pages, and a device lost plus a backend hung forever
while scrapes keep their latency (acceptance 3)."""

from __future__ import annotations

import gzip
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.exposition import value
from tests.procs import exporter, http_get

SIM = ["--sim-devices", "nvidia:4,amd:2", "--poll-interval", "200ms"]


def test_gzip_when_asked_and_plain_otherwise() -> None:
    with exporter(["--backends", "sim", *SIM]) as url:
        time.sleep(0.5)
        req = urllib.request.Request(url + "/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            zipped = resp.read()
        text = gzip.decompress(zipped).decode()
        assert "accel_up{" in text
        plain = http_get(url + "/metrics").decode()
        assert "accel_up{" in plain
        assert len(zipped) < len(plain) / 4
        assert b"backend sim: up" in http_get(url + "/healthz")
        landing = http_get(url + "/").decode()
        assert 'href="/metrics"' in landing and "sim: up" in landing


def test_custom_telemetry_path() -> None:
    with exporter(["--backends", "sim", *SIM, "--web.telemetry-path", "/accel"]) as url:
        time.sleep(0.3)
        assert b"accel_up" in http_get(url + "/accel")
        try:
            http_get(url + "/metrics")
        except urllib.error.HTTPError as e:
            assert e.code == 404
        else:
            raise AssertionError("/metrics should not be served when the path is /accel")


def test_lost_device_and_hung_backend_do_not_stall_scrapes(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "events:\n"
        "  - {at: 1s, device: nvidia3, fault: 79, lost: true}\n"
        "  - {at: 3s, device: nvidia0, hang: forever}\n"
    )
    args = ["--backends", "sim,cpu", *SIM, "--sim-script", str(script), "--poll-timeout", "500ms"]
    latencies: list[float] = []

    def scrape(url: str) -> str:
        t0 = time.perf_counter()
        body = http_get(url + "/metrics", headers={"Accept-Encoding": "gzip"})
        latencies.append(time.perf_counter() - t0)
        return gzip.decompress(body).decode()

    with exporter(args) as url:
        deadline = time.monotonic() + 10
        text = scrape(url)
        while value(text, "accel_up", device="nvidia3") != 0:
            assert time.monotonic() < deadline, "nvidia3 never went down"
            text = scrape(url)
            time.sleep(0.02)
        assert value(text, "accel_device_info", device="nvidia3") == 1
        assert value(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 1
        assert value(text, "accel_up", device="nvidia1") == 1

        while value(text, "accel_exporter_backend_up", backend="sim") != 0:
            assert time.monotonic() < deadline, "the hung sim backend was never reported down"
            text = scrape(url)
            time.sleep(0.02)
        # The hung backend's devices keep their identity and their fault counters.
        assert value(text, "accel_up", device="nvidia1") == 0
        assert value(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 1

        # The CPU backend keeps polling while the sim backend's thread is stuck.
        first = value(text, "accel_exporter_last_success_timestamp_seconds", backend="cpu")
        assert first is not None
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            text = scrape(url)
            time.sleep(0.01)
        assert value(text, "accel_exporter_backend_up", backend="cpu") == 1
        last = value(text, "accel_exporter_last_success_timestamp_seconds", backend="cpu")
        assert last is not None and last > first
        assert value(text, "accel_up", device="cpu0") == 1
        assert value(text, "accel_exporter_backend_up", backend="sim") == 0

    assert len(latencies) > 50
    p99 = statistics.quantiles(latencies, n=100)[98]
    assert p99 < 0.050, f"p99 scrape latency {p99 * 1000:.1f} ms"
