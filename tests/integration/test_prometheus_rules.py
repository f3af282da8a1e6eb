"""The Prometheus alerting and recording rules in rules/prometheus/: Debian's
promtool checks them and runs their unit tests, and every required alert is there
with a firing and a quiet case under test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.support.paths import REPO
from tests.support.procs import promtool_path

RULES_DIR = REPO / "rules" / "prometheus"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yaml"))

# One alert for each case operators page on: a device down, a fatal fault, an ECC
# burst, the exporter backend down, the breaker open, the source down.
REQUIRED_ALERTS = {
    "AccelDeviceDown",
    "AccelDeviceFatalFault",
    "AccelEccUncorrectedBurst",
    "AccelExporterBackendDown",
    "AccelAutoscalerBreakerOpen",
    "AccelAutoscalerSourceDown",
}


def promtool(*args: str) -> str:
    proc = subprocess.run(
        [promtool_path(), *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    return out


def alert_rules() -> list[dict[str, object]]:
    rules: list[dict[str, object]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend(r for r in group["rules"] if "alert" in r)
    return rules


def test_promtool_check_rules() -> None:
    assert RULE_FILES, f"no rule files in {RULES_DIR}"
    out = promtool("check", "rules", *map(str, RULE_FILES))
    assert "SUCCESS" in out


def test_promtool_test_rules() -> None:
    assert TEST_FILES, f"no promtool unit tests in {RULES_DIR / 'tests'}"
    out = promtool("test", "rules", *map(str, TEST_FILES))
    assert out.count("SUCCESS") == len(TEST_FILES), out


def test_every_required_alert_exists_with_a_runbook() -> None:
    rules = alert_rules()
    names = {str(r["alert"]) for r in rules}
    assert names >= REQUIRED_ALERTS, f"missing alerts: {sorted(REQUIRED_ALERTS - names)}"
    for r in rules:
        annotations = r.get("annotations")
        assert isinstance(annotations, dict)
        missing = {"summary", "description", "runbook"} - set(annotations)
        assert not missing, f"alert {r['alert']} lacks annotations {sorted(missing)}"
        labels = r.get("labels")
        assert isinstance(labels, dict) and labels.get("severity") in {"warning", "critical"}


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """A unit test that only ever expects silence cannot tell a rule that never fires
    from a correct one; each alert needs both kinds of case."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {str(r["alert"]) for r in alert_rules()}
    assert names <= firing, f"no firing case for {sorted(names - firing)}"
    assert names <= quiet, f"no quiet case for {sorted(names - quiet)}"


def test_a_broken_threshold_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: the same tests against rules with the ECC threshold
    moved from 3 to 4 errors report the missing alert."""
    (tmp_path / "tests").mkdir()
    for path in RULE_FILES:
        text = path.read_text()
        assert ">= 3" in text
        (tmp_path / path.name).write_text(text.replace(">= 3", ">= 4"))
    for path in TEST_FILES:
        (tmp_path / "tests" / path.name).write_text(path.read_text())
    proc = subprocess.run(
        [promtool_path(), "test", "rules", *map(str, sorted((tmp_path / "tests").glob("*")))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "AccelEccUncorrectedBurst" in proc.stdout + proc.stderr
