"""``accel-autoscaler test``: the rule unit-test runner on the fixture test files in
tests/fixtures/ruletests/ (passing, deliberately failing, malformed), and the
shipped rules' own tests. The notations of the format are tested in
tests/autoscaler/ruleset/test_testfile.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.engine import ruletest
from autoscaler.ruleset.testfile import parse_series
from tests.support.paths import FIXTURES as TREES
from tests.support.paths import REPO

FIXTURES = TREES / "ruletests"


def run(capsys: pytest.CaptureFixture[str], *paths: Path | str) -> tuple[int, str, str]:
    code = ruletest.main([str(p) for p in paths])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_passing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, FIXTURES / "pass")
    assert (code, out, err) == (0, "8 tests passed\n", "")


def test_wrong_expectation_fails_with_a_readable_diff(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "fail" / "wrong_test.yaml"
    code, out, err = run(capsys, path)
    assert code == 1
    assert err == ""
    assert out == (
        f"FAILED {path}:13: expects the wrong device and too early a cordon\n"
        f"  at 15s ({path}:21:13): decisions differ (- expected, + got)\n"
        '    + act fatal-device-fault migrate_jobs {node="n1", device="nvidia0"}\n'
        '    - act fatal-device-fault migrate_jobs {node="n1", device="nvidia1"}\n'
        f"  at 1m ({path}:24:13): decisions differ (- expected, + got)\n"
        '    - act hot-node cordon {node="n2"}\n'
        "    engine notes at this time:\n"
        '      hot-node {node="n2"}: pending since 0s (for: 2m)\n'
        "1 test passed, 1 failed\n"
    )


def test_a_window_compares_every_decision_it_covers(capsys: pytest.CaptureFixture[str]) -> None:
    """``from``/``to``: the decisions of the whole window together, each shown with
    the times it was made, so that "once per incident" is one expectation."""
    path = FIXTURES / "fail" / "window_test.yaml"
    code, out, err = run(capsys, path)
    assert (code, err) == (1, "")
    assert out == (
        f"FAILED {path}:3: expects a decision every cycle of the incident\n"
        f"  from 0s to 1m ({path}:9:15): decisions differ (- expected, + got)\n"
        '      act fatal-device-fault migrate_jobs {node="n1", device="nvidia0"} (made at 15s)\n'
        '    - act fatal-device-fault migrate_jobs {node="n1", device="nvidia0"}\n'
        "    engine notes at this time:\n"
        '      fatal-device-fault {node="n1", device="nvidia0"}: its incident since 15s was '
        "handled at 15s; the rule acts again in the next incident (the condition must stop "
        "holding first)\n"
        '      fatal-device-fault {node="n1", device="nvidia0"}: already under remediation '
        "since 15s\n"
        "0 tests passed, 1 failed\n"
    )


def test_window_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    test = tmp_path / "t.yaml"
    test.write_text(
        f"ruleFiles: [{FIXTURES / 'rules.yaml'}]\n"
        "tests:\n"
        "  - name: windows\n"
        "    expect:\n"
        "      - {at: 1m, from: 0s, to: 2m, decisions: []}\n"
        "      - {from: 2m, to: 1m, decisions: []}\n"
        "      - {from: 2m, decisions: []}\n"
        "      - {decisions: []}\n"
        "      - {from: 0s, to: 5m, decisions: []}\n"
        "      - {from: 0s, to: 5m, decisions: []}\n"
    )
    code, _, err = run(capsys, test)
    assert code == 2
    assert err.splitlines() == [
        f"{test}:5:10: an expectation has at (one evaluation) or from and to (a window), not both",
        f"{test}:6:24: to must be after from (for one time, write at)",
        f"{test}:7:9: an expectation with a window: missing required key 'to'",
        f"{test}:8:9: an expectation: missing required key 'at' (or 'from' and 'to')",
        f"{test}:10:16: from 0s to 5m is already expected on line 9; list all its decisions once",
    ]
    test.write_text(
        f"ruleFiles: [{FIXTURES / 'rules.yaml'}]\n"
        "tests:\n"
        "  - name: off the evaluation times\n"
        "    expect:\n"
        "      - {from: 10s, to: 50s, decisions: []}\n"
    )
    code, _, err = run(capsys, test)
    assert code == 2
    assert err.splitlines() == [
        f"{test}:5:16: from 10s is not a multiple of the evaluation interval 15s; rules are "
        "only evaluated at those times",
        f"{test}:5:16: to 50s is not a multiple of the evaluation interval 15s; rules are "
        "only evaluated at those times",
    ]


def test_malformed_file_lists_every_problem_with_position(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FIXTURES / "bad" / "malformed_test.yaml"
    code, out, err = run(capsys, path)
    assert code == 2
    assert out == "0 tests passed; some test files could not be run (see above)\n"
    assert err.splitlines() == [
        f"{path}:2:1: unknown key 'evaluationIntervall' in the test file; "
        "did you mean 'evaluationInterval'? (expected ruleFiles, evaluationInterval, tests)",
        f"{path}:5:5: unknown key 'intervall' in a test; did you mean 'interval'? "
        "(expected name, interval, inputSeries, alerts, cluster, expect, outcomes)",
        f"{path}:7:17: not a series 'accel_up{{node=\"n1\"': " + _parse_error(),
        f"{path}:8:17: bad value '2x': expected a number, 'a+bxN', 'a-bxN', 'axN', '_', "
        "'_xN' or 'stale'",
        f"{path}:9:9: an input series: missing required key 'values'",
        f"{path}:10:9: unknown key 'vals' in an input series; did you mean 'values'? "
        "(expected series, values)",
        f"{path}:12:13: at: invalid duration '5 minutes' (use whole numbers with units "
        "y, w, d, h, m, s, ms, largest first, e.g. 30s, 5m, 1h30m)",
        f"{path}:14:36: kind must be act or recover, got 'revocer'; did you mean 'recover'?",
    ]


def _parse_error() -> str:
    try:
        parse_series('accel_up{node="n1"')
    except ValueError as e:
        return str(e).split(": ", 1)[1]
    raise AssertionError("expected a parse error")


def test_expectations_are_checked_against_the_rule_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FIXTURES / "bad" / "semantics_test.yaml"
    code, _, err = run(capsys, path)
    assert code == 2
    assert err.splitlines() == [
        f"{path}:5:13: at 20s is not a multiple of the evaluation interval 15s; rules are "
        "only evaluated at those times",
        f"{path}:7:13: no rule named 'hot-nod'; did you mean 'hot-node'?",
        f"{path}:8:13: rule 'fatal-device-fault' has target device, named by node, device; "
        "this target has node",
        f"{path}:9:13: rule 'gpu-alert' has no recover, so it never makes a recover decision",
    ]


def test_broken_and_failing_files_together_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, FIXTURES / "fail", FIXTURES / "bad", FIXTURES / "nowhere")
    assert code == 2
    assert "1 test passed, 2 failed; some test files could not be run" in out
    assert f"{FIXTURES / 'nowhere'}: no such file or directory" in err


def test_rule_files_that_do_not_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rules.yaml").write_text("apiVersion: accel-fleet/v1\nkind: Rulez\nspec: {}\n")
    test = tmp_path / "t.yaml"
    test.write_text(
        "ruleFiles: [rules.yaml]\ntests:\n  - {name: x, expect: [{at: 0s, decisions: []}]}\n"
    )
    code, _, err = run(capsys, test)
    assert code == 2
    assert err.startswith(f"{test}: the rule files do not load:\n{tmp_path / 'rules.yaml'}:2:")


def test_empty_directory_and_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "blank.yaml").write_text("# nothing\n")
    code, _, err = run(capsys, tmp_path / "empty", tmp_path / "blank.yaml")
    assert code == 2
    assert err.splitlines() == [
        f"{tmp_path / 'empty'}: no test files (*.yaml, *.yml) in this directory",
        f"{tmp_path / 'blank.yaml'}: empty file; expected ruleFiles and tests",
    ]


def test_stale_markers_and_missing_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale marker ends a series at once; a missing sample leaves the last one
    visible for the lookback (5m), as in Prometheus."""
    test = tmp_path / "stale_test.yaml"
    test.write_text(
        f"ruleFiles: [{FIXTURES / 'rules.yaml'}]\n"
        "tests:\n"
        "  - name: stale\n"
        "    interval: 1m\n"
        "    inputSeries:\n"
        "      - series: 'accel_temperature_celsius{node=\"n1\"}'\n"
        "        values: '95 stale 95x6'\n"
        "      - series: 'accel_temperature_celsius{node=\"n2\"}'\n"
        "        values: '95 _x3 95x3'\n"
        "    cluster: {nodes: [n1, n2, n3, n4]}\n"
        "    expect:\n"
        "      - {at: 2m, decisions: [{rule: hot-node, target: {node: n2}}]}\n"
        "      - {at: 3m45s, decisions: []}\n"
        "      - {at: 4m, decisions: [{rule: hot-node, target: {node: n1}}]}\n"
    )
    code, out, _ = run(capsys, test)
    assert (code, out) == (0, "1 test passed\n")


def test_cli_test_subcommand() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "test", str(FIXTURES / "pass")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (0, "8 tests passed\n"), proc.stderr


SHIPPED_TESTS = sorted((REPO / "rules" / "tests").glob("*.yaml"))


def test_the_shipped_rule_tests_are_all_run() -> None:
    """The command below runs rules/tests/ file by file (so that parallel workers
    share the files); these are every file the folder holds."""
    names = {p.name for p in SHIPPED_TESTS}
    assert names == {p.name for p in (REPO / "rules" / "tests").iterdir() if p.is_file()}
    assert len(names) >= 4


@pytest.mark.parametrize("path", SHIPPED_TESTS, ids=lambda p: p.name)
def test_shipped_rules_pass_their_tests(path: Path) -> None:
    """``accel-autoscaler test rules/tests/FILE`` exits 0: the shipped rules pass."""
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "test", str(path.relative_to(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("tests passed")


def test_more_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    test = tmp_path / "t.yaml"
    test.write_text(
        f"ruleFiles: [{FIXTURES / 'rules.yaml'}]\n"
        "tests:\n"
        "  - name: dup\n"
        "    inputSeries:\n"
        "      - {series: 'up{node=\"n1\"}', values: '1'}\n"
        "      - {series: 'up{node=\"n1\"}', values: '2'}\n"
        "    alerts:\n"
        "      - {alertname: A, startsAt: 5m, endsAt: 1m}\n"
        "    cluster: {nodes: [n1, n2], recentlyAdded: {n3: 0s}}\n"
        "    expect:\n"
        "      - {at: 1m, decisions: []}\n"
        "      - {at: 1m, decisions: [{rule: hot-node, target: {}}]}\n"
    )
    code, _, err = run(capsys, test)
    assert code == 2
    assert err.splitlines() == [
        f'{test}:6:9: the series up{{node="n1"}} is already given on line 5',
        f"{test}:8:46: endsAt must be after startsAt",
        f"{test}:9:48: 'n3' is not in cluster.nodes; expected one of n1, n2",
        f"{test}:12:14: at 1m is already expected on line 11; list all its decisions once",
        f"{test}:12:55: target names no label",
    ]
