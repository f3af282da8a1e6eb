"""atheris (coverage-guided) on the byte-level parsers, bounded, from pytest.

Each target of ``atheris_targets`` runs in its own process (``atheris.Fuzz`` never
returns, and a crash ends the process), from a seed corpus of the committed
fixtures: the ``gpu_metrics`` tables of the fixture cards, the golden expositions
(as they are, and as OpenMetrics with timestamps and ``# EOF``), and Alertmanager
webhook bodies. In the ``ci`` profile each target runs a fixed number of inputs
(``-atheris_runs``); in ``long`` (``make fuzz``) it runs for minutes
(``-max_total_time``). libFuzzer's ``-timeout`` and ``-rss_limit_mb`` are the time
and memory bounds per input. A crash fails the test with the input as a Python
literal (paste it into a regression test) and libFuzzer's traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.harness import COUNTS, MEMORY_MIB, PROFILE, SCALE, SECONDS
from tests.fuzz.test_fuzz_bodies import WEBHOOK_SEEDS
from tests.support.paths import FIXTURES, GOLDEN_DIR, REPO

# Inputs per target in the ci profile; the long profile runs each for this long.
RUNS = {"gpu_metrics": 2000, "openmetrics": 1000, "webhook": 1500}
LONG_SECONDS = int(os.environ.get("ACCEL_FUZZ_ATHERIS_SECONDS", str(12 * SCALE)))


def _openmetrics(exposition: str) -> str:
    """A golden exposition as OpenMetrics with timestamps, as ``query`` reads it."""
    lines = []
    for line in exposition.splitlines():
        if line.startswith("# HELP") or line.startswith("# TYPE"):
            lines.append(line)
        elif line and not line.startswith("#"):
            lines.append(f"{line} 1796000000.5")
    return "\n".join([*lines, "# EOF", ""])


def _seeds(target: str) -> dict[str, bytes]:
    if target == "gpu_metrics":
        tables = sorted((FIXTURES / "sys").rglob("gpu_metrics"))
        return {f"table{i}": p.read_bytes() for i, p in enumerate(tables)}
    if target == "openmetrics":
        # The head of each golden file: every line shape is there, and a short input
        # leaves the time to mutations rather than to re-reading 30 KB.
        out = {}
        for p in sorted(GOLDEN_DIR.glob("*.prom")):
            text = "\n".join(p.read_text().splitlines()[:40]) + "\n"
            out[p.stem] = text.encode()
            out[p.stem + ".om"] = _openmetrics(text).encode()
        return out
    return {f"body{i}": json.dumps(seed).encode() for i, seed in enumerate(WEBHOOK_SEEDS)}


@pytest.mark.parametrize("target", sorted(RUNS))
def test_atheris(target: str, tmp_path: Path) -> None:
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    seeds = _seeds(target)
    assert seeds, f"no seed corpus for {target}"
    for name, data in seeds.items():
        (corpus / name).write_bytes(data)
    bound = (
        f"-max_total_time={LONG_SECONDS}"
        if PROFILE == "long"
        else f"-atheris_runs={RUNS[target] * SCALE}"
    )
    command = [
        sys.executable,
        "-m",
        "tests.fuzz.atheris_targets",
        target,
        bound,
        "-seed=1",
        f"-timeout={math.ceil(SECONDS)}",
        "-max_len=8192",
        # The interpreter with numpy and the parsers is about 100 MB to begin with.
        f"-rss_limit_mb={MEMORY_MIB + 256}",
        f"-artifact_prefix={artifacts}/",
        str(corpus),
    ]
    limit = (LONG_SECONDS if PROFILE == "long" else 120) + 60
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=limit, check=False
    )
    output = done.stdout + done.stderr
    ran = re.findall(r"^Done (\d+) (?:runs )?in", output, re.M)
    COUNTS[f"atheris {target}"] += int(ran[-1]) if ran else 0
    crashes = sorted(artifacts.iterdir())
    # libFuzzer's per-input timer is SIGALRM, still armed while the interpreter
    # tears down after "Done": on a loaded machine it can fire there, after every
    # input ran (CI saw "Done 1000 in 3 second(s)", then exit -14). That is no
    # finding; a timed-out input leaves a reproducer and no "Done" line.
    finished = bool(ran) and done.returncode == -signal.SIGALRM
    if (done.returncode != 0 and not finished) or crashes:
        reproducers = "\n".join(f"{p.name}: {p.read_bytes()!r}"[:4000] for p in crashes)
        pytest.fail(
            f"atheris {target} exited {done.returncode}\n"
            f"reproducers:\n{reproducers or '(none written)'}\n"
            f"output (tail):\n{output[-6000:]}"
        )
    assert ran, f"atheris {target} did not report its runs:\n{output[-3000:]}"
