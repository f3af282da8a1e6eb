"""``accel-autoscaler check -v`` describes each rule by its condition, and the line
that docs/rules.md quotes from it is the line it prints.

Why: ``stalled-pod``'s expression opens with PromQL comments, and ``check -v``
quoted the first comment as the condition ("acts once when `# Only pods that
declare ...`"). And the docs quoted ``rules/remediation.yaml:79:7`` for a rule
that had long moved to another line; nothing held the quote true.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from autoscaler.commands.check import without_comments
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def verbose_lines() -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", "-v", "rules/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_rule_is_described_by_its_expression_not_its_comments(
    verbose_lines: list[str],
) -> None:
    [stalled] = [ln for ln in verbose_lines if ": stalled-pod: " in ln]
    assert "acts once when `accel_job_rhythm_pauses * 0 + on (namespace, pod)" in stalled
    for line in verbose_lines:
        quoted = re.search(r"acts once when `([^`]*)`", line)
        assert quoted is None or "#" not in quoted.group(1), line


def test_the_docs_quote_what_check_v_prints(verbose_lines: list[str]) -> None:
    page = (REPO / "docs" / "rules.md").read_text()
    block = re.search(r"\$ accel-autoscaler check -v rules/\n(.*?)^```", page, re.M | re.S)
    assert block is not None, "docs/rules.md no longer shows check -v"
    quoted = [ln for ln in block.group(1).splitlines() if ln.startswith("rules/")]
    assert quoted
    for line in quoted:
        assert line in verbose_lines, (
            f"docs/rules.md quotes a line check -v does not print:\n{line}"
        )


@pytest.mark.parametrize(
    ("expr", "code"),
    [
        ("up # a comment\n== 0", "up \n== 0"),
        ("# only a comment", ""),
        ('x{a="#1"} # why', 'x{a="#1"} '),
        ("x{a='it\\'s #2'}", "x{a='it\\'s #2'}"),
        ('x{a="\\"#"} > 1', 'x{a="\\"#"} > 1'),
        ("x{a=`\\`} # c", "x{a=`\\`} "),
    ],
)
def test_without_comments(expr: str, code: str) -> None:
    assert without_comments(expr) == code
