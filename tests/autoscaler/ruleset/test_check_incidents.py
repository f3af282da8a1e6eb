"""``accel-autoscaler check`` on incidents: ``-v`` says per rule when it acts and
when it may act again, and a destructive action without ``recover`` is warned
about (exit 0). The loader's side: ``repeat`` only where an action cannot be undone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoscaler.commands.check import check
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from tests.support.paths import REPO

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  rules:
    - name: gpu-fault-alert
      alertname: GPUFault
      target: node
      action: {type: cordon}
    - name: device-lost
      expr: accel_up == 0
      for: 3m
      target: device
      action: {type: taint}
      cooldown: 30m
      recover: {expr: accel_up == 1, for: 5m}
    - name: grow
      expr: sum by (pool) (accel_pool_pending_device_requests) > 0
      target: pool
      action: {type: scale_node_pool, direction: up}
      cooldown: 10m
      repeat: 10m
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_verbose_explains_each_rule_and_warns_about_no_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, RULES)
    assert check([path], verbose=True) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{path}:5:7: gpu-fault-alert: acts once per GPUFault alert firing for a node (node); "
        "a new incident is a new alert (another fingerprint or startsAt) after this one "
        "resolves, with no cooldown",
        f"{path}:9:7: device-lost: acts once when `accel_up == 0` starts holding for a device "
        "(node, device) and has held for 3m; a new incident after it stops holding for one "
        "evaluation (or its recover holds for 5m, which undoes the taint, and then the "
        "condition must stop holding first), at least 30m after the last act",
        f"{path}:16:7: grow: acts once when `sum by (pool) (accel_pool_pending_device_requests) "
        "> 0` starts holding for a pool (pool); a new incident after it stops holding for one "
        "evaluation, at least 10m after the last act; while one incident lasts it acts again "
        "every 10m",
        f"{path}: 3 rules OK",
    ]
    assert err == (
        f"{path}:5:7: warning: gpu-fault-alert: cordon is destructive and the rule has no "
        "recover: what it does stays until a person undoes it (add recover to undo it when "
        "the target is well)\n"
    )


def test_the_warning_comes_without_verbose_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, RULES)
    assert check([path]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: 3 rules OK\n"
    assert "warning: gpu-fault-alert: cordon is destructive" in err


def test_cli_verbose_flag(tmp_path: Path) -> None:
    path = write(tmp_path, RULES)
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", "-v", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 4
    assert proc.stdout.count("acts once") == 3
    assert proc.stderr.count("warning:") == 1


def test_shipped_rules_have_no_warning() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", "--verbose", "rules/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.count("acts once") == 16


def test_repeat_is_read_and_refused_for_actions_that_can_be_undone(tmp_path: Path) -> None:
    ruleset = load_ruleset([write(tmp_path, RULES)])
    assert [(r.name, r.repeat) for r in ruleset.rules] == [
        ("gpu-fault-alert", 0.0),
        ("device-lost", 0.0),
        ("grow", 600.0),
    ]
    bad = RULES.replace(
        "      action: {type: cordon}\n", "      action: {type: cordon}\n      repeat: 5m\n"
    )
    bad = bad.replace("      repeat: 10m\n", "      repeat: 0s\n")
    with pytest.raises(RuleSetError) as info:
        load_ruleset([write(tmp_path, bad)])
    assert [str(p).split(": ", 1)[1] for p in info.value.problems] == [
        "repeat: cordon acts once per incident (its recover undoes it); repeat is for "
        "actions that cannot be undone, such as scale_node_pool",
        "repeat must be more than 0s",
    ]
