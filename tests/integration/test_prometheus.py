"""A real Prometheus from Debian scrapes the exporter (with gzip, as it always
asks) and a PromQL query returns every catalogue metric the sim backend emits."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from exporter import schema
from tests.support.exposition import names
from tests.support.procs import exporter, free_port, http_get, prometheus
from tests.support.waits import wait


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(http_get(url))
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_prometheus_scrapes_every_sim_metric(tmp_path: Path) -> None:
    port = free_port()
    args = [
        "--backends",
        "sim",
        "--sim-devices",
        "nvidia:2,amd:2,oneapi:1",
        "--poll-interval",
        "1s",
    ]
    with exporter(args, port=port) as url, prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prom:
        wait(
            lambda: query(prom, 'up{job="accel"} == 1'),
            30,
            "Prometheus scraping the exporter",
            every=0.25,
        )
        emitted = names(http_get(url + "/metrics").decode())
        assert emitted <= set(schema.BY_NAME), emitted - set(schema.BY_NAME)
        device_metrics = {n for n in emitted if schema.BY_NAME[n].per_device}
        assert len(device_metrics) >= 18
        for name in sorted(emitted):
            rows = query(prom, name)
            assert rows, f"Prometheus has no samples of {name}"
            if name in device_metrics:
                for row in rows:
                    assert {"device", "vendor", "uuid"} <= row["metric"].keys(), row
        # The counters a rule reads with increase() are there at 0 for every device
        # (one per action class that a fatal fault of its vendor can have).
        fatal = query(prom, 'accel_fault_events_total{severity="fatal"}')
        assert fatal and all(row["value"][1] == "0" for row in fatal), fatal
        assert {row["metric"]["device"] for row in fatal} == {
            "nvidia0", "nvidia1", "amd0", "amd1", "oneapi0"
        }  # fmt: skip
        # Prometheus saw no scrape problems (sample limits, parse errors, duplicates).
        assert query(prom, 'scrape_samples_scraped{job="accel"} > 0')
        assert not query(prom, "prometheus_target_scrapes_sample_duplicate_timestamp_total > 0")
