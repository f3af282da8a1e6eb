"""The ``accel-autoscaler query`` examples in the README and the docs run as written,
from the repository's root, against the sample file the repository ships
(``docs/examples/samples.om``): a reader who copies the line gets an answer, not
"cannot read samples.om"."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

SAMPLES = REPO / "docs" / "examples" / "samples.om"


def query_examples() -> list[tuple[str, str]]:
    """(page, command line) for every ``accel-autoscaler query`` line in a shell block."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", page.read_text(), re.M | re.S):
            for line in block.splitlines():
                command = line.split("  #", 1)[0].strip()
                if re.match(r"^(\S*/)?accel-autoscaler query ", command):
                    found.append((page.relative_to(REPO).as_posix(), command))
    return found


def test_there_is_an_example_and_it_names_the_shipped_file() -> None:
    examples = query_examples()
    assert examples
    for _, command in examples:
        assert "--series docs/examples/samples.om" in command


@pytest.mark.parametrize(("page", "command"), query_examples())
def test_the_example_runs_as_written(page: str, command: str) -> None:
    argv = shlex.split(command)
    # The installed console script is this interpreter's; its arguments are as written.
    argv = [sys.executable, "-m", "autoscaler.cli", *argv[1:]]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{page}: {command}\n{proc.stderr}"
    answer = json.loads(proc.stdout)
    assert answer["resultType"] == "vector" and answer["result"], proc.stdout


def test_the_sample_file_shows_the_fatal_fault() -> None:
    """What the page says the file holds: nvidia1's fatal fault, seen by the rule's
    expression at the example's time."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "query",
            'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0',
            "--series",
            str(SAMPLES.relative_to(REPO)),
            "--time",
            "1700000600",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    [series] = json.loads(proc.stdout)["result"]
    assert series["metric"]["device"] == "nvidia1"
    assert Path(SAMPLES).read_text().endswith("# EOF\n")
