"""Rule files: the loader reports every problem as ``file:line:col``, merges files,
builds the typed model, and the watcher reloads without ever trading good rules for
bad ones."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import promql_parser
import pytest
import yaml

from autoscaler.commands.check import check
from autoscaler.ruleset.errors import Problem, RuleSetError
from autoscaler.ruleset.labels import missing_labels, output_labels
from autoscaler.ruleset.loader import load_ruleset, rule_files
from autoscaler.ruleset.model import Action, Limits, Position, Recover, RuleLimits
from autoscaler.ruleset.watch import RuleWatcher
from tests.support.clock import FakeClock
from tests.support.paths import FIXTURES, REPO

RULES = FIXTURES / "rules"
SHIPPED = REPO / "rules" / "remediation.yaml"

HEADER = "apiVersion: accel-fleet/v1\nkind: RuleSet\nspec:\n"

GOOD_RULE = """\
    - name: device-lost
      expr: accel_up == 0
      for: 3m
      target: device
      action: {type: taint}
"""


def cli_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(tmp_path: Path, text: str, source: str = "prometheus") -> list[str]:
    """Every problem in a rule file, with the file name shortened to ``f.yaml``."""
    path = write(tmp_path / "f.yaml", text)
    with pytest.raises(RuleSetError) as info:
        load_ruleset([path], source=source)
    return [str(p).replace(str(path), "f.yaml") for p in info.value.problems]


def rules_file(rules: str, spec: str = "") -> str:
    """A rule file with the given spec lines (2-space indented) and rules (list
    items at 4 spaces)."""
    return HEADER + spec + "  rules:\n" + rules


# --- `accel-autoscaler check` reports every problem with its position -----------------


def test_check_prints_all_five_mistakes_with_positions_and_exits_1() -> None:
    path = RULES / "five_mistakes.yaml"
    proc = cli_check(str(path.relative_to(REPO)))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    where = "tests/fixtures/rules/five_mistakes.yaml"
    expected = [
        (f"{where}:11:7:", "unknown key 'cooldwn' in a rule; did you mean 'cooldown'?"),
        (f"{where}:14:12:", "for: invalid duration '3 minutes'"),
        (f"{where}:18:26:", "expr: invalid PromQL at '(': unclosed left parenthesis"),
        (f"{where}:24:22:", "unknown action type 'requeue_jobs'; did you mean 'requeue_job'?"),
        (f"{where}:26:13:", "can never carry the 'node' label that names a node target"),
    ]
    assert len(lines) == 5, proc.stderr
    for line, (prefix, needle) in zip(lines, expected, strict=True):
        assert line.startswith(prefix + " "), line
        assert needle in line, line


@pytest.mark.parametrize("source", ["prometheus", "scrape"])
def test_check_passes_the_shipped_rules(source: str) -> None:
    proc = cli_check("--source", source, "rules/remediation.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == "rules/remediation.yaml: 16 rules OK\n"


def test_check_a_directory_skips_its_tests_subdirectory() -> None:
    proc = cli_check("rules/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "rules/: 16 rules OK\n"


def test_check_reports_a_missing_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert check([SHIPPED, "no/such/rules.yaml"]) == 1
    err = capsys.readouterr().err
    assert err == "no/such/rules.yaml: no such file or directory\n"


def test_check_summary_is_singular_for_one_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "one.yaml", rules_file(GOOD_RULE))
    assert check([path]) == 0
    assert capsys.readouterr().out == f"{path}: 1 rule OK\n"


# --- the typed model ----------------------------------------------------------------------


def test_a_full_rule_becomes_the_typed_model(tmp_path: Path) -> None:
    path = write(
        tmp_path / "full.yaml",
        """\
        apiVersion: accel-fleet/v1
        kind: RuleSet
        spec:
          evaluationInterval: 30s
          limits:
            maxUnhealthyNodes: "12.5%"
            maxConcurrentDrains: 2
            maxActionsPerHour: 40
            breakerReset: manual
            breakerWindow: 1h30m
            scaleUpGrace: 5m
          rules:
            - name: fatal-device-fault
              description: move jobs off a dead device
              expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
              for: 1m
              target: device
              action: {type: migrate_jobs, deviceOnly: true, drainTimeout: 20m}
              cooldown: 30m
              limits: {maxConcurrent: 2, maxActionsPerHour: 5}
              recover: {expr: accel_up == 1, for: 10m}
            - name: from-alertmanager
              alertname: GPUFatalFault
              target: node
              action: {type: cordon}
        """,
    )
    rs = load_ruleset([path])
    assert rs.evaluation_interval == 30.0
    assert rs.files == (str(path),)
    assert rs.limits == Limits(
        max_unhealthy_nodes=None,
        max_unhealthy_ratio=0.125,
        max_concurrent_drains=2,
        max_actions_per_hour=40,
        breaker_reset="manual",
        breaker_window=5400.0,
        scale_up_grace=300.0,
    )
    fatal = rs.rule("fatal-device-fault")
    assert fatal.description == "move jobs off a dead device"
    assert fatal.expr == 'increase(accel_fault_events_total{severity="fatal"}[5m]) > 0'
    assert fatal.alertname is None
    assert fatal.target == "device"
    assert fatal.for_ == 60.0
    assert fatal.cooldown == 1800.0
    assert fatal.action == Action(
        "migrate_jobs",
        {
            "taint": "accel-fleet.io/faulty=true:NoSchedule",
            "drainTimeout": 1200.0,
            "deviceOnly": True,
        },
    )
    assert fatal.limits == RuleLimits(max_concurrent=2, max_actions_per_hour=5)
    assert fatal.recover == Recover("accel_up == 1", 600.0)
    assert fatal.position == Position(str(path), 13, 7)
    alert = rs.rule("from-alertmanager")
    assert (alert.expr, alert.alertname) == (None, "GPUFatalFault")
    assert (alert.for_, alert.cooldown, alert.recover) == (0.0, 0.0, None)
    assert alert.limits == RuleLimits()


def test_defaults_when_spec_sets_nothing(tmp_path: Path) -> None:
    rs = load_ruleset([write(tmp_path / "r.yaml", rules_file(GOOD_RULE))])
    assert rs.evaluation_interval == 15.0
    assert rs.limits == Limits()
    assert rs.rules[0].action.params == {"taint": "accel-fleet.io/faulty=true:NoSchedule"}


def test_shipped_rules_load_with_the_documented_shape() -> None:
    rs = load_ruleset([SHIPPED], source="scrape")
    assert [r.name for r in rs.rules] == [
        "fatal-device-fault",
        "remap-pending",
        "application-fault",
        "uncorrected-ecc-burst",
        "device-lost",
        "recoverable-fault-storm",
        "stalled-gang",
        "stalled-pod",
        "stalled-job",
        "hung-collective",
        "lost-node",
        "stalled-progress",
        "job-timeout",
        "hot-node",
        "pool-scale-up",
        "pool-scale-down",
    ]
    assert all(r.description and r.expr and r.cooldown > 0 for r in rs.rules)
    assert {r.name: r.target for r in rs.rules if r.action.type == "requeue_job"} == {
        "stalled-gang": "pod",
        "stalled-pod": "pod",
        "stalled-job": "pod",
        "hung-collective": "pod",
        "lost-node": "pod",
        "stalled-progress": "pod",
        "job-timeout": "pod",
        "application-fault": "pod",
    }
    assert {
        (r.name, r.action.params["direction"])
        for r in rs.rules
        if r.action.type == "scale_node_pool"
    } == {("pool-scale-up", "up"), ("pool-scale-down", "down")}


def test_every_shipped_rule_has_unit_tests_that_fire_and_that_do_not() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in sorted((REPO / "rules" / "tests").glob("*_test.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["ruleFiles"] == ["../remediation.yaml"], path
        for test in doc["tests"]:
            rules_seen = {d["rule"] for e in test["expect"] for d in e["decisions"]}
            fired |= rules_seen
            if not rules_seen:
                # A test that expects nothing at all is a "does not fire" test for the
                # rules its input series are about; its name says which.
                silent.add(f"{path.name}: {test['name']}")
    names = {r.name for r in load_ruleset([SHIPPED]).rules}
    assert fired == names
    assert len(silent) >= len(names)


# --- every kind of problem, table-driven ------------------------------------------------


CASES: list[tuple[str, str, str, list[str]]] = [
    # (description, file text, source, expected problems: "line:col: needle")
    (
        "YAML syntax error with its mark",
        HEADER + "  rules:\n    - name: x\n     target: node\n",
        "prometheus",
        [
            "6:6: invalid YAML: while parsing a block collection: "
            "did not find expected '-' indicator"
        ],
    ),
    (
        "wrong apiVersion and kind",
        "apiVersion: v1\nkind: ConfigMap\nspec: {rules: []}\n",
        "prometheus",
        [
            "1:13: apiVersion must be 'accel-fleet/v1', got 'v1'",
            "2:7: kind must be 'RuleSet', got 'ConfigMap'",
        ],
    ),
    (
        "a file that is not a mapping",
        "- name: x\n",
        "prometheus",
        ["1:1: a rule file must be a mapping, got a list"],
    ),
    (
        "missing spec and an unknown top-level key",
        "apiVersion: accel-fleet/v1\nkind: RuleSet\nspecs: {}\n",
        "prometheus",
        [
            "1:1: a rule file: missing required key 'spec'",
            "3:1: unknown key 'specs' in a rule file; did you mean 'spec'?",
        ],
    ),
    (
        "unknown keys in spec, limits, rule limits and recover, with suggestions",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "      limits: {maxConcurent: 1}\n"
            "      recover: {expr: accel_up == 1, fro: 5m}\n",
            spec="  evaluationIntreval: 15s\n  limits: {maxUnhealthyNode: 3}\n",
        ),
        "prometheus",
        [
            "4:3: unknown key 'evaluationIntreval' in spec; did you mean 'evaluationInterval'?",
            "5:12: unknown key 'maxUnhealthyNode' in limits; did you mean 'maxUnhealthyNodes'?",
            "11:16: unknown key 'maxConcurent' in rule limits; did you mean 'maxConcurrent'?",
            "12:38: unknown key 'fro' in recover; did you mean 'for'?",
        ],
    ),
    (
        "YAML tags that safe YAML cannot construct are reported once each",
        rules_file(
            "    - name: x\n"
            "      expr: !promql accel_up == 0\n"
            "      target: device\n"
            "      action: {type: taint, taint: !!python/object:os.system x}\n"
        ),
        "prometheus",
        [
            "6:13: invalid YAML value: could not determine a constructor for the tag '!promql'",
            "8:36: invalid YAML value: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object:os.system'",
        ],
    ),
    (
        "a duplicate key in one mapping",
        rules_file(GOOD_RULE + "      for: 5m\n"),
        "prometheus",
        ["10:7: duplicate key 'for' in a rule (first at line 7)"],
    ),
    (
        "bad durations: no unit, a fraction, not a duration, negative, zero interval",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      for: 5\n"
            "      cooldown: -10m\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "      recover: {expr: accel_up == 1, for: soon}\n",
            spec="  evaluationInterval: 0s\n  limits: {breakerWindow: 1.5h, scaleUpGrace: -1}\n",
        ),
        "prometheus",
        [
            "4:23: evaluationInterval must be from 1s to 1h, got '0s'",
            "5:27: breakerWindow: invalid duration '1.5h': durations take whole numbers, "
            "write 1h30m (use whole numbers with units y, w, d, h, m, s, ms, largest first, "
            "e.g. 30s, 5m, 1h30m)",
            "5:47: scaleUpGrace: must not be negative, got -1",
            "9:12: for: 5 has no unit (use e.g. 5s or 5m)",
            "10:17: cooldown: must not be negative, got '-10m'",
            "13:43: for: invalid duration 'soon'",
        ],
    ),
    (
        "maxUnhealthyNodes neither a count nor a percentage",
        HEADER + '  limits: {maxUnhealthyNodes: "110%"}\n  rules: []\n',
        "prometheus",
        [
            "4:31: maxUnhealthyNodes must be a whole number of nodes from 0 to 100000 "
            "or a percentage"
        ],
    ),
    (
        "maxUnhealthyNodes negative, other limits ill-typed",
        HEADER
        + "  limits: {maxUnhealthyNodes: -1, maxConcurrentDrains: two, breakerReset: auto}\n"
        + "  rules: []\n",
        "prometheus",
        [
            "4:31: maxUnhealthyNodes must be a whole number of nodes from 0 to 100000",
            "4:56: maxConcurrentDrains must be a whole number from 0 to 10000, got 'two'",
            "4:75: breakerReset must be manual or window, got 'auto'",
        ],
    ),
    (
        "missing required keys of a rule and of its action",
        rules_file("    - description: nothing else\n      action: {drainTimeout: 1m}\n"),
        "prometheus",
        [
            "5:7: a rule: missing required key 'expr' (or 'alertname')",
            "5:7: a rule: missing required key 'name'",
            "5:7: a rule: missing required key 'target'",
            "6:15: action: missing required key 'type'",
        ],
    ),
    (
        "expr and alertname together; recover without expr",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      alertname: GPULost\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "      recover: {for: 5m}\n"
        ),
        "prometheus",
        [
            "7:18: a rule has expr or alertname, not both",
            "10:16: recover: missing required key 'expr'",
        ],
    ),
    (
        "an invalid rule name, and a target that does not exist",
        rules_file(
            "    - name: Fatal_Fault\n"
            "      expr: accel_up == 0\n"
            "      target: gpu\n"
            "      action: {type: cordon}\n"
        ),
        "prometheus",
        [
            "5:13: rule name 'Fatal_Fault' must be at most 63 lowercase letters",
            "7:15: target must be one of node, device, pod, pool, got 'gpu'",
        ],
    ),
    (
        "PromQL parse error, at the unclosed bracket, with the parser's message",
        rules_file(
            "    - name: x\n"
            "      expr: sum(rate(accel_fault_events_total[5m]) by (node)\n"
            "      target: node\n"
            "      action: {type: cordon}\n"
        ),
        "prometheus",
        ["6:16: expr: invalid PromQL at '(': unclosed left parenthesis"],
    ),
    (
        "PromQL that parses but names no target: a scalar, a range vector",
        rules_file(
            "    - name: x\n"
            "      expr: time() > bool 0\n"
            "      target: node\n"
            "      action: {type: cordon}\n"
            "      recover: {expr: 'accel_up[5m]'}\n"
        ),
        "prometheus",
        [
            "6:13: expr can never carry the 'node' label",
            "6:13: expr must return an instant vector (one sample per target), "
            "but returns a scalar",
            "9:23: recover expr must return an instant vector (one sample per target), "
            "but returns a matrix",
        ],
    ),
    (
        "a target label the expression can never produce",
        rules_file(
            "    - name: by-pool\n"
            "      expr: sum by (pool) (accel_pool_pending_device_requests) > 0\n"
            "      target: node\n"
            "      action: {type: cordon}\n"
            "    - name: without-device\n"
            "      expr: max without (device) (accel_up) == 0\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "    - name: on-drops-pod\n"
            "      expr: accel_job_age_seconds > on (node) accel_job_timeout_seconds\n"
            "      target: pod\n"
            "      action: {type: requeue_job}\n"
            "    - name: recover-too\n"
            "      expr: accel_up == 0\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "      recover: {expr: count by (node) (accel_up == 1) > 0}\n"
        ),
        "prometheus",
        [
            "6:13: expr can never carry the 'node' label that names a node target",
            "10:13: expr can never carry the 'device' label that names a device target",
            "14:13: expr can never carry the 'namespace', 'pod' labels that name a pod target",
            "21:23: recover expr can never carry the 'device' label that names a device target",
        ],
    ),
    (
        "unknown action type, with a suggestion",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      target: device\n"
            "      action: {type: cordonn}\n"
        ),
        "prometheus",
        ["8:22: unknown action type 'cordonn'; did you mean 'cordon'?"],
    ),
    (
        "unknown and ill-typed action parameters, each at its own place",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      target: device\n"
            "      action:\n"
            "        type: migrate_jobs\n"
            "        drainTimout: 5m\n"
            "        deviceOnly: yes please\n"
            "        taint: accel-fleet.io/faulty=true:NoSchedul\n"
        ),
        "prometheus",
        [
            "10:9: drainTimout: unknown parameter for migrate_jobs; did you mean 'drainTimeout'?",
            "11:21: deviceOnly: must be true or false, got 'yes please'",
            "12:16: taint: 'accel-fleet.io/faulty=true:NoSchedul': effect must be NoSchedule, "
            "PreferNoSchedule, NoExecute, got 'NoSchedul'; did you mean 'NoSchedule'?",
        ],
    ),
    (
        "an action that does not accept the rule's target",
        rules_file(
            "    - name: requeue-a-node\n"
            "      expr: accel_up == 0\n"
            "      target: node\n"
            "      action: {type: requeue_job}\n"
            "    - name: scale-a-device\n"
            "      expr: accel_up == 0\n"
            "      target: device\n"
            "      action: {type: scale_node_pool, direction: up}\n"
        ),
        "prometheus",
        [
            "8:22: action requeue_job acts on target pod, not 'node'",
            "12:22: action scale_node_pool acts on target pool, not 'device'",
        ],
    ),
    (
        "deviceOnly needs a device target",
        rules_file(
            "    - name: x\n"
            "      expr: accel_up == 0\n"
            "      target: node\n"
            "      action: {type: migrate_jobs, deviceOnly: true}\n"
        ),
        "prometheus",
        ["8:48: deviceOnly: needs target device; this rule's target is node"],
    ),
    (
        "recover on an action that cannot be undone",
        rules_file(
            "    - name: x\n"
            "      expr: accel_job_age_seconds > on (namespace, pod) accel_job_timeout_seconds\n"
            "      target: pod\n"
            "      action: {type: requeue_job}\n"
            "      recover: {expr: accel_job_age_seconds < 60}\n"
        ),
        "prometheus",
        ["9:7: recover: requeue_job cannot be undone, so a rule with it has no recover"],
    ),
    (
        "rule limits must be whole numbers >= 0",
        rules_file(GOOD_RULE + "      limits: {maxConcurrent: -1, maxActionsPerHour: 1.5}\n"),
        "prometheus",
        [
            "10:31: maxConcurrent must be a whole number from 0 to 10000, got -1",
            "10:54: maxActionsPerHour must be a whole number from 0 to 100000, got 1.5",
        ],
    ),
    (
        "duplicate rule names in one file point at each other",
        rules_file(GOOD_RULE + GOOD_RULE),
        "prometheus",
        [
            "5:13: duplicate rule name 'device-lost' (also at f.yaml:10:13)",
            "10:13: duplicate rule name 'device-lost' (also at f.yaml:5:13)",
        ],
    ),
    (
        "a misspelt metric of our own catalogue",
        rules_file(
            "    - name: x\n"
            "      expr: max_over_time(accel_utilisation_ratio[30m]) == 0\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
        ),
        "prometheus",
        ["6:13: expr: unknown metric 'accel_utilisation_ratio'; did you mean "],
    ),
    (
        "scrape: PromQL outside the built-in evaluator's subset, naming the construct",
        rules_file(
            "    - name: x\n"
            "      expr: accel_temperature_celsius @ -60 > 90\n"
            "      target: device\n"
            "      action: {type: cordon}\n"
            "      recover:\n"
            '        expr: rate(accel_energy_joules_total{device=~"\\\\p{L}"}[1m]) < 300\n'
        ),
        "scrape",
        [
            "6:13: expr: not supported by the built-in evaluator (--source scrape): "
            "a negative @ time is not supported",
            "10:15: recover expr: not supported by the built-in evaluator (--source scrape): "
            "regular expression",
        ],
    ),
]


@pytest.mark.parametrize(
    ("text", "source", "expected"),
    [pytest.param(text, source, expected, id=desc) for desc, text, source, expected in CASES],
)
def test_every_problem_is_reported_at_its_position(
    tmp_path: Path, text: str, source: str, expected: list[str]
) -> None:
    got = problems_of(tmp_path, text, source)
    assert len(got) == len(expected), "\n".join(got)
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(f"f.yaml:{want.split(' ', 1)[0]} "), (line, want)
        assert want.split(" ", 1)[1] in line, (line, want)


def test_what_scrape_refuses_prometheus_accepts(tmp_path: Path) -> None:
    text = rules_file(
        "    - name: x\n"
        "      expr: accel_temperature_celsius @ -60 > 90\n"
        "      target: device\n"
        "      action: {type: cordon}\n"
    )
    path = write(tmp_path / "f.yaml", text)
    assert len(load_ruleset([path], source="prometheus").rules) == 1


def test_unknown_source_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown source 'thanos'"):
        load_ruleset([SHIPPED], source="thanos")


def test_problems_of_several_files_are_all_reported_sorted(tmp_path: Path) -> None:
    write(tmp_path / "b.yaml", rules_file(GOOD_RULE.replace("3m", "3 m")))
    write(tmp_path / "a.yaml", "apiVersion: accel-fleet/v1\nkind: [\n")
    write(tmp_path / "c.yaml", "")
    with pytest.raises(RuleSetError) as info:
        load_ruleset([tmp_path, tmp_path / "missing.yaml"])
    lines = str(info.value).replace(f"{tmp_path}/", "").splitlines()
    assert lines == [
        "a.yaml:3:1: invalid YAML: while parsing a flow node: did not find expected node content",
        "b.yaml:7:12: for: invalid duration '3 m' (use whole numbers with units y, w, d, h, "
        "m, s, ms, largest first, e.g. 30s, 5m, 1h30m)",
        "c.yaml: empty file: expected apiVersion: accel-fleet/v1, kind: RuleSet and a spec",
        "missing.yaml: no such file or directory",
    ]
    assert all(isinstance(p, Problem) for p in info.value.problems)


def test_a_directory_without_rule_files_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    files, problems = rule_files([tmp_path])
    assert files == []
    assert [str(p) for p in problems] == [f"{tmp_path}: no rule files (*.yaml, *.yml) in directory"]


# --- several files --------------------------------------------------------------------------


def test_a_directory_loads_yaml_and_yml_but_not_tests_or_other_files() -> None:
    files, problems = rule_files([RULES / "dir"])
    assert problems == []
    assert [Path(f).name for f in files] == ["base.yaml", "extra.yml"]
    rs = load_ruleset([RULES / "dir"])
    assert [r.name for r in rs.rules] == ["device-lost", "gpu-fault-alert"]
    # Limits merge key by key; the same value in two files is no conflict.
    assert rs.limits == Limits(
        max_unhealthy_ratio=0.2, max_concurrent_drains=1, max_actions_per_hour=12
    )
    assert rs.evaluation_interval == 30.0
    assert rs.rule("gpu-fault-alert").action.params == {
        "drainTimeout": 900.0,
        "gracePeriodSeconds": None,
        "podSelector": "accel-fleet.io/device-job",
        "forceDeleteAfterTimeout": False,
    }


def test_a_file_named_twice_is_read_once() -> None:
    rs = load_ruleset([RULES / "dir", RULES / "dir" / "base.yaml"])
    assert len(rs.rules) == 2


def test_spec_conflicts_between_files_point_at_the_second_file() -> None:
    with pytest.raises(RuleSetError) as info:
        load_ruleset([RULES / "conflict" / "a.yaml", RULES / "conflict" / "b.yaml"])
    a = str(RULES / "conflict" / "a.yaml")
    b = str(RULES / "conflict" / "b.yaml")
    assert [str(p) for p in info.value.problems] == [
        f"{a}:7:13: duplicate rule name 'device-lost' (also at {b}:7:13)",
        f"{b}:4:23: evaluationInterval: '30s' conflicts with '15s' set at {a}:4:23 "
        "(files that set it must agree)",
        f"{b}:5:31: limits.maxUnhealthyNodes: '10%' conflicts with '3' set at {a}:5:31 "
        "(files that set it must agree)",
        f"{b}:7:13: duplicate rule name 'device-lost' (also at {a}:7:13)",
    ]


# --- the watcher ----------------------------------------------------------------------------


def touch(path: Path, text: str, mtime: float) -> None:
    """Rewrites a file with an explicit mtime, so a test never depends on the file
    system's timestamp granularity."""
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_watcher_reloads_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    touch(path, rules_file(GOOD_RULE), 1_000_000)
    clock = FakeClock()
    w = RuleWatcher([tmp_path], "prometheus", clock)
    assert w.current.rule("device-lost").for_ == 180.0
    assert (w.reload_success, w.last_problems, w.loaded_at) == (True, [], 1000.0)
    assert w.check() is False

    clock.set(1015.0)
    touch(path, rules_file(GOOD_RULE.replace("3m", "5m")), 1_000_100)
    assert w.check() is True
    assert w.current.rule("device-lost").for_ == 300.0
    assert (w.reload_success, w.loaded_at, w.checked_at) == (True, 1015.0, 1015.0)
    assert w.check() is False


def test_watcher_keeps_the_last_good_rules_when_a_change_is_bad(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rules.yaml"
    touch(path, rules_file(GOOD_RULE), 1_000_000)
    w = RuleWatcher([path], "prometheus", FakeClock())
    good = w.current

    bad = GOOD_RULE.replace("3m", "3 minutes").replace("type: taint", "type: tant")
    touch(path, rules_file(bad), 1_000_100)
    with caplog.at_level(logging.ERROR, logger="accel_autoscaler.rules"):
        assert w.check() is False
    assert w.current is good
    assert w.reload_success is False
    assert [p.position.line for p in w.last_problems] == [7, 9]
    logged = [r.getMessage() for r in caplog.records if r.name == "accel_autoscaler.rules"]
    assert "keeping the 1 rules in force" in logged[0]
    assert logged[1:] == [str(p) for p in w.last_problems]

    # Nothing changed since: no new attempt, the failure stands.
    assert w.check() is False
    assert w.reload_success is False

    touch(path, rules_file(GOOD_RULE.replace("3m", "4m")), 1_000_200)
    assert w.check() is True
    assert (w.reload_success, w.last_problems) == (True, [])
    assert w.current.rule("device-lost").for_ == 240.0


def test_watcher_sees_files_added_and_removed(tmp_path: Path) -> None:
    touch(tmp_path / "a.yaml", rules_file(GOOD_RULE), 1_000_000)
    w = RuleWatcher([tmp_path], "prometheus", FakeClock())
    other = GOOD_RULE.replace("device-lost", "device-lost-too")
    touch(tmp_path / "b.yaml", rules_file(other), 1_000_000)
    assert w.check() is True
    assert [r.name for r in w.current.rules] == ["device-lost", "device-lost-too"]
    (tmp_path / "b.yaml").unlink()
    assert w.check() is True
    assert [r.name for r in w.current.rules] == ["device-lost"]


def test_reload_is_forced_and_reports_whether_the_rules_changed(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    touch(path, rules_file(GOOD_RULE), 1_000_000)
    w = RuleWatcher([path], "prometheus", FakeClock())
    assert w.reload() is False  # same rules: nothing new took effect
    assert w.reload_success is True

    # Same size and mtime, different content: only a forced reload sees it.
    touch(path, rules_file(GOOD_RULE.replace("3m", "4m")), 1_000_000)
    assert w.check() is False
    assert w.reload() is True
    assert w.current.rule("device-lost").for_ == 240.0

    touch(path, rules_file(GOOD_RULE.replace("3m", "4x")), 1_000_000)
    assert w.reload() is False
    assert w.reload_success is False
    assert w.current.rule("device-lost").for_ == 240.0


def test_watcher_refuses_to_start_on_bad_rules(tmp_path: Path) -> None:
    path = write(tmp_path / "rules.yaml", rules_file(GOOD_RULE.replace("taint", "taunt")))
    with pytest.raises(RuleSetError, match=re.escape(f"{path}:9:22: unknown action type")):
        RuleWatcher([path])


def test_watcher_checks_scrape_support(tmp_path: Path) -> None:
    rule = GOOD_RULE.replace("accel_up == 0", "accel_up @ -60 == 0")
    path = write(tmp_path / "rules.yaml", rules_file(rule))
    assert len(RuleWatcher([path], "prometheus").current.rules) == 1
    with pytest.raises(RuleSetError, match="negative @ time is not supported"):
        RuleWatcher([path], "scrape")


# --- which labels an expression can carry -------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "labels"),
    [
        ("accel_up", None),
        ("rate(accel_energy_joules_total[5m]) > 0", None),
        ("sum by (node, device) (accel_up)", {"node", "device"}),
        ("sum(accel_up)", set()),
        ("sum without (uuid) (accel_up)", None),
        ("count_values without (node) ('v', accel_up)", None),
        ("count_values by (pool) ('version', accel_up)", {"pool", "version"}),
        ("topk(1, max by (node) (accel_up))", {"node"}),
        (
            "accel_job_age_seconds > on (namespace, pod) accel_job_timeout_seconds",
            {"namespace", "pod"},
        ),
        ("sum by (a) (x) > ignoring (a) sum by (a, b) (y)", set()),
        ("sum by (a) (x) * on (a) group_left (b) y", {"a", "b"}),
        ("x * on (a) group_right (b) sum by (a) (y)", {"a", "b"}),
        ("sum by (a) (x) or sum by (b) (y)", {"a", "b"}),
        ("sum by (a) (x) and on (c) y", {"a"}),
        ("sum by (a) (x) unless y", {"a"}),
        ('absent(accel_up{node="n1", device=~"nv.*"})', {"node"}),
        ("time()", set()),
        ("vector(1)", set()),
        ("2 * sum by (pool) (x)", {"pool"}),
        ("-sum by (pool) (x)", {"pool"}),
        ("(sum by (pool) (x))", {"pool"}),
        ("max_over_time(sum by (pool) (x)[10m:1m])", {"pool"}),
        ('label_replace(sum by (a) (x), "node", "$1", "a", "(.*)")', {"a", "node"}),
        ("histogram_quantile(0.9, sum by (le, pool) (rate(x[5m])))", {"pool"}),
        ("clamp(sum by (pool) (x), 0, 1)", {"pool"}),
    ],
)
def test_output_labels(expr: str, labels: set[str] | None) -> None:
    got = output_labels(promql_parser.parse(expr))
    assert got == (None if labels is None else frozenset(labels))


@pytest.mark.parametrize(
    ("expr", "required", "missing"),
    [
        ("accel_up == 0", ("node", "device"), []),
        ("sum without (device) (accel_up)", ("node", "device"), ["device"]),
        ("sum without (device) (accel_up) > on (node) group_left (device) y", ("device",), []),
        ("sum by (pool) (x)", ("namespace", "pod"), ["namespace", "pod"]),
        ("sum without (node) (x) or sum without (pool) (y)", ("node",), []),
        ("sum without (node) (x) or sum without (node) (y)", ("node",), ["node"]),
        ("sum without (node) (x) > on (node, pod) y", ("node", "pod"), ["node"]),
    ],
)
def test_missing_labels_is_conservative(
    expr: str, required: tuple[str, ...], missing: list[str]
) -> None:
    assert missing_labels(promql_parser.parse(expr), required) == missing
