"""Smoke tests of ``bench/scrape.py`` (a short run against Debian's node_exporter)
and ``bench/auth.py`` (a short run with and without a password-guessing flood).

The figures of 40 scrapes on a shared machine mean little; what is checked is that
the benchmark runs end to end, stops what it starts, and reports every figure it
promises, for both sides.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

# Slow (runs bench/scrape.py against Debian's node_exporter): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

BENCH = REPO / "bench" / "scrape.py"
SCRAPES = 40
DEVICES = "nvidia:4,amd:2,oneapi:2"


@pytest.mark.timeout(150)
def test_short_run_reports_both_sides(tmp_path: Path) -> None:
    if shutil.which("prometheus-node-exporter") is None:
        pytest.fail("prometheus-node-exporter is missing: `make test` installs Debian's package")
    out = tmp_path / "bench.json"
    # What this test checks is the report, not the figures: few scrapes of a small
    # node, since node_exporter parses the textfile on every scrape (a quarter of a
    # CPU second each at the default 64 devices).
    argv = [str(BENCH), "--scrapes", str(SCRAPES), "--devices", DEVICES, "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ours/theirs" in proc.stdout

    r = json.loads(out.read_text())
    for side in ("ours", "node_exporter"):
        s = r[side]
        assert s["scrapes"] == SCRAPES
        assert 0 < s["p50_seconds"] <= s["p99_seconds"] <= s["max_seconds"]
        assert s["series"] > 64
    assert abs(r["ours"]["series"] - r["node_exporter"]["series"]) <= 10
    assert r["ratio"]["p50"] == pytest.approx(
        r["ours"]["p50_seconds"] / r["node_exporter"]["p50_seconds"]
    )
    assert r["ratio"]["p99"] == pytest.approx(
        r["ours"]["p99_seconds"] / r["node_exporter"]["p99_seconds"]
    )

    rss = r["rss"]
    assert rss["after_warmup_mib"] > 0
    assert rss["after_scrapes_mib"] > 0
    assert rss["growth_mib"] == pytest.approx(rss["after_scrapes_mib"] - rss["after_warmup_mib"])
    assert rss["scrapes"] == SCRAPES

    poll = r["poll_duration_seconds"]
    assert poll["samples"], "no poll after the discovery poll was seen"
    assert 0 < poll["median"] < 5

    assert r["machine"]["nproc"] >= 1
    assert r["machine"]["python"]


def test_missing_node_exporter_says_how_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--scrapes", "1"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode != 0
    assert "install Debian's prometheus-node-exporter, or run `make bench`" in proc.stderr


@pytest.mark.timeout(150)
def test_auth_bench_reports_both_sides(tmp_path: Path) -> None:
    """``python -m bench.auth``, short: correct scrapes with and without 60 clients
    guessing passwords. The 2x acceptance ratio is the full run's (docs/performance.md);
    here a loose bound keeps the regression it guards against (seconds per scrape
    while bcrypt was queued in front of valid checks) out."""
    out = tmp_path / "auth.json"
    short = ("--scrapes", "200", "--rounds", "2", "--json", str(out))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.auth", *short],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "attack/none" in proc.stdout and "acceptance" in proc.stdout

    r = json.loads(out.read_text())
    for side in ("no_attack", "attack"):
        s = r[side]
        assert s["scrapes"] == 200
        assert 0 < s["p50_seconds"] <= s["p99_seconds"] <= s["max_seconds"]
    assert r["ratio"]["p99"] == pytest.approx(
        r["attack"]["p99_seconds"] / r["no_attack"]["p99_seconds"]
    )
    assert r["settings"]["attackers"] == 60 and r["settings"]["bcrypt_cost"] == 10
    guesses = r["guesses"]
    assert set(guesses["statuses"]) == {"401"} and guesses["statuses"]["401"] > 60
    assert r["attack"]["p99_seconds"] < 0.5
    # A credential first seen during the attack waits its turn for bcrypt (behind
    # one guess of the attacking address), and gets in.
    assert r["new_credential"]["status"] == 200
