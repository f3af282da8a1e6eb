"""Smoke test of ``bench/evaluator.py``: a small fleet, end to end, beside Debian's
Prometheus.

The figures of a 40-node run mean little; what is checked is that the benchmark
runs, that Prometheus saw the same series and evaluated every rule without a
failure, and that every figure the benchmark promises is reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.procs import require

# Slow (runs the evaluator benchmark beside Debian's Prometheus): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

BENCH = REPO / "bench" / "evaluator.py"


@pytest.mark.timeout(240)
def test_small_run_reports_both_sides(tmp_path: Path) -> None:
    require("prometheus")
    require("promtool")
    out = tmp_path / "bench.json"
    argv = [sys.executable, str(BENCH), "--nodes", "40", "--minutes", "40"]
    argv += ["--prometheus-nodes", "20", "--json", str(out)]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ours/Prometheus" in proc.stdout
    r = json.loads(out.read_text())
    assert r["ours"]["series"] == 40 * 8 * 11 + 40 * 5
    assert len(r["ours"]["cycle_seconds"]) == 5
    side = r["side_by_side"]
    assert side["series"] == 20 * 8 * 11 + 20 * 5
    assert len(side["prometheus_group_seconds"]) == 5
    assert all(d > 0 for d in side["prometheus_group_seconds"])
    assert side["ratio_ours_over_prometheus"] > 0
