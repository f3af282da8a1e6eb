"""``accel-autoscaler simulate`` without ``--rules`` finds the shipped rules
wherever it runs from: it resolved ``rules/`` against the current directory, so
from anywhere but the repository's root it failed with "cannot read rules/".
Where no rules are to be found it says where it looked and what to pass."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.commands.simulate import SHIPPED_RULES, NoRulesError, default_rules
from tests.autoscaler.simulate.test_simulate import TINY
from tests.support.paths import REPO


def test_runs_from_another_directory_with_the_shipped_rules(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    flags = ["--no-plots", "--baseline", "skip", "--out", "out"]
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "simulate", "tiny.yaml", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"running the shipped rules in {REPO / 'rules'}" in proc.stderr
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["rules"]["actions"].get("migrate_jobs") == 1


def test_the_shipped_rules_are_the_repositorys() -> None:
    assert SHIPPED_RULES == REPO / "rules"
    assert (SHIPPED_RULES / "remediation.yaml").is_file()


def test_rules_here_come_first(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    said = io.StringIO()
    assert default_rules(tmp_path, said) == "rules/"
    assert said.getvalue() == ""


def test_no_rules_anywhere_says_where_it_looked(tmp_path: Path) -> None:
    nowhere = tmp_path / "site-packages" / "rules"
    with pytest.raises(NoRulesError) as raised:
        default_rules(tmp_path, io.StringIO(), shipped=nowhere)
    message = str(raised.value)
    assert str(tmp_path / "rules") in message and str(nowhere) in message
    assert "pass --rules PATH" in message
