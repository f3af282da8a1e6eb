"""The fuzz suite's session: the hypothesis profile (through ``harness``), a
pytest-timeout that fits the profile, and the number of cases each target ran,
printed at the end (and written as JSON to ``$ACCEL_FUZZ_COUNTS`` when set), for
the closing note of a change that touches a reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fuzz.harness import COUNTS, MEMORY_MIB, PROFILE, SECONDS, TEST_TIMEOUT


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.fuzz)
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not COUNTS:
        return
    tr = terminalreporter
    tr.section(
        f"fuzz cases per target (profile {PROFILE}, {SECONDS:g} s CPU and {MEMORY_MIB} MiB each)"
    )
    for target, n in sorted(COUNTS.items()):
        tr.write_line(f"{target:<40} {n:>8}")
    tr.write_line(f"{'total':<40} {sum(COUNTS.values()):>8}")
    out = os.environ.get("ACCEL_FUZZ_COUNTS")
    if out:
        Path(out).write_text(json.dumps(dict(sorted(COUNTS.items())), indent=2) + "\n")
