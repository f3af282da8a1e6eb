"""The controller's own ``/metrics`` at full precision: ``curl`` of a running
controller shows the last evaluation's timestamp to the second (``{:g}`` once
wrote ``1.79612e+09``, up to 5,000 s off, and the dashboard's "time since last
evaluation" read negative), and counters past 10^6 and 10^15 still move by one."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from autoscaler import clusterstate as cs
from autoscaler.controller import Controller
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import render_metrics
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
from tests.support.procs import autoscaler, exporter, free_port, http_get

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1s
  rules:
    - name: device-lost
      expr: accel_up == 0
      target: device
      action: {type: cordon}
"""

TIMESTAMP = "accel_autoscaler_last_evaluation_timestamp_seconds"


def _sample_text(text: str, series: str) -> str:
    """The value of one series exactly as written, so that its digits are checked
    and not only what a float makes of them."""
    found = re.findall(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert len(found) == 1, f"{series}: {found} in\n{text}"
    return str(found[0])


def test_running_controller_serves_the_evaluation_time_to_the_second(
    tmp_path: Path, promtool_check: Callable[[str], None]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    exp_port = free_port()
    sim = ["--backends", "sim", "--sim-devices", "nvidia:2", "--poll-interval", "500ms"]
    run_args = [
        "--rules",
        str(rules),
        "--source",
        "scrape",
        "--targets",
        f"node-a=http://127.0.0.1:{exp_port}/metrics",
        "--dry-run",
    ]
    with exporter(sim, port=exp_port), autoscaler(run_args) as running:
        deadline = time.monotonic() + 30
        while True:
            text = http_get(running.url + "/metrics").decode()
            now = time.time()
            written = _sample_text(text, TIMESTAMP)
            if float(written) > 0:
                break
            assert time.monotonic() < deadline, "no evaluation within 30 s"
            time.sleep(0.2)
        promtool_check(text)
        # Plain digits to the second and below, no exponent.
        assert re.fullmatch(r"\d{10}(\.\d+)?", written), written
        assert abs(float(written) - now) < 5, (written, now)

        # Evaluated every second, so the written time moves with the clock.
        time.sleep(2.5)
        later = float(_sample_text(http_get(running.url + "/metrics").decode(), TIMESTAMP))
        assert 1 <= later - float(written) <= 10
        assert abs(later - time.time()) < 5


async def test_counters_past_a_million_and_ten_to_the_fifteen_render_exactly(
    tmp_path: Path, promtool_check: Callable[[str], None]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    source = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{free_port()}"))
    c = Controller(RuleWatcher([str(rules)], source="prometheus"), source, AlertReceiver())
    try:
        c.stats.decisions[("device-lost", "cordon", "act", True)] = 10**15 + 1
        c.stats.unknown["device-lost"] = 10**6 + 1
        c.stats.cluster_state_errors = 10**6 + 3
        c.stats.last_timestamp = 1796123456.789
        c.stats.last_duration = 0.012345678
        c.cluster_rows = [
            (cs.JOB_AGE, {"namespace": "ml", "pod": "p", "node": "n", "job": "j"}, 86400.125)
        ]
        text = render_metrics(c)
        promtool_check(text)
        decisions = (
            'accel_autoscaler_decisions_total{rule="device-lost",action="cordon",'
            'kind="act",dry_run="true"}'
        )
        assert _sample_text(text, decisions) == "1000000000000001"
        unknown = 'accel_autoscaler_rule_unknown_total{rule="device-lost"}'
        assert _sample_text(text, unknown) == "1000001"
        assert _sample_text(text, "accel_autoscaler_cluster_state_errors_total") == "1000003"
        assert _sample_text(text, TIMESTAMP) == "1796123456.789"
        duration = "accel_autoscaler_evaluation_duration_seconds"
        assert _sample_text(text, duration) == "0.012345678"
        job_age = 'accel_job_age_seconds{namespace="ml",pod="p",node="n",job="j"}'
        assert _sample_text(text, job_age) == "86400.125"
        # The cluster-state families follow the controller's own, each once.
        assert text.count("# TYPE accel_job_age_seconds gauge\n") == 1
        assert text.index(TIMESTAMP) < text.index("accel_job_age_seconds")
    finally:
        await source.close()
