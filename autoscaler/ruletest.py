"""``accel-autoscaler test``: unit tests for remediation rules, promtool-style.

A rule that drains nodes deserves the same care as code, and the only way to see
what a rule set *decides* is to run it: its PromQL over a series history, then the
engine's ``for``, cooldowns, limits and breaker over the results. So a test file
gives input series in promtool's expanding notation (and Alertmanager alerts for
``alertname`` rules) and the decisions expected at given times; the runner fills
the built-in evaluator's store, evaluates every rule at every evaluation time from
0 to the last expected time with a fresh ``EngineState``, exactly as the controller
does each cycle, and compares. Decisions are compared as a set per time: rule,
kind, action and target.

Format::

    ruleFiles: [../remediation.yaml]       # relative to the test file
    evaluationInterval: 15s                 # default: the rule set's
    tests:
      - name: fatal fault on one device migrates its jobs
        interval: 15s                       # spacing of input samples (default 1m)
        inputSeries:
          - series: 'accel_fault_events_total{node="n1",device="nvidia0"}'
            values: '0x20 1x20'             # a+bxN, a-bxN, axN, _, _xN, stale
        alerts:                             # for alertname rules
          - {alertname: GPUFault, labels: {node: n1}, startsAt: 1m, endsAt: 5m}
        cluster: {nodes: [n1, n2], recentlyAdded: {n2: 0s}}
        expect:
          - at: 5m30s
            decisions:
              - {rule: fatal-device-fault, action: migrate_jobs, target: {node: n1}}

``action`` defaults to the rule's action type and ``kind`` to ``act``. Without
``cluster``, the cluster is every ``node`` label value in the input series and
alerts, none of them recently added. An alert is firing from ``startsAt``
(default 0s) until ``endsAt`` (default: forever).

Exit status: 0 when every test passed ("N tests passed"); 1 when a test failed
(a diff of expected and got decisions, per time); 2 when a test file or its rule
files cannot be run at all (every problem, as ``file:line:col: message``), whether
or not other files' tests failed.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import promql_parser as pp
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autoscaler.engine.decision import Decision
from autoscaler.engine.evaluate import TARGET_LABELS, evaluate, format_duration
from autoscaler.engine.state import ClusterInfo, EngineState
from autoscaler.promql.evaluator import EvalError, Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import Position, Rule, RuleSet
from autoscaler.types import Labels, Matrix, QueryResult, Sample, Unknown, Vector, labels_of

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2

# The built-in evaluator's (and Prometheus's) default lookback for instant selectors.
LOOKBACK_DELTA = 300.0

_NULL = "tag:yaml.org,2002:null"


class _Stale:
    """A staleness marker in an input series (promtool's ``stale``)."""

    def __repr__(self) -> str:
        return "stale"


STALE = _Stale()
Point = float | _Stale | None  # None: no sample at that step


@dataclass(frozen=True)
class InputSeries:
    labels: Labels  # with __name__
    values: tuple[Point, ...]
    position: Position


@dataclass(frozen=True)
class InputAlert:
    labels: Labels  # with alertname
    starts_ms: int
    ends_ms: int | None


@dataclass(frozen=True)
class ExpectedDecision:
    rule: str
    kind: Literal["act", "recover"]
    action: str | None  # None: the rule's action type
    target: Labels
    position: Position


@dataclass(frozen=True)
class Expectation:
    at_ms: int
    decisions: tuple[ExpectedDecision, ...]
    position: Position


@dataclass(frozen=True)
class RuleTest:
    name: str
    position: Position
    interval_ms: int
    series: tuple[InputSeries, ...]
    alerts: tuple[InputAlert, ...]
    cluster: ClusterInfo | None
    expect: tuple[Expectation, ...]


@dataclass(frozen=True)
class RuleTestFile:
    path: Path
    rule_files: tuple[Path, ...]
    evaluation_interval_ms: int | None
    tests: tuple[RuleTest, ...]


# -- the command --------------------------------------------------------------------


def main(paths: Sequence[str]) -> int:
    """Run the test files named by ``paths`` (files, or directories searched for
    ``*.yaml``/``*.yml``); print failures and the summary on stdout, problems on
    stderr; return the exit status."""
    out, err = sys.stdout, sys.stderr
    files, problems = find_test_files(paths)
    passed = failed = 0
    broken = bool(problems)
    for problem in problems:
        print(problem, file=err)
    for path in files:
        result = run_file(path)
        for problem in result.problems:
            print(problem, file=err)
        broken = broken or bool(result.problems)
        for failure in result.failures:
            print(failure, file=out)
        passed += result.passed
        failed += len(result.failures)
    summary = f"{passed} {'test' if passed == 1 else 'tests'} passed"
    if failed:
        summary += f", {failed} failed"
    if broken:
        summary += "; some test files could not be run (see above)"
    print(summary, file=out)
    if broken:
        return EXIT_ERROR
    return EXIT_FAILED if failed else EXIT_OK


def find_test_files(paths: Sequence[str]) -> tuple[list[Path], list[str]]:
    files: list[Path] = []
    problems: list[str] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
            if not found:
                problems.append(f"{name}: no test files (*.yaml, *.yml) in this directory")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            problems.append(f"{name}: no such file or directory")
    return files, problems


@dataclass(frozen=True)
class FileResult:
    passed: int
    failures: tuple[str, ...]
    problems: tuple[str, ...]


def run_file(path: Path) -> FileResult:
    """Parse, load the rule files, check the expectations against the rule set, and
    run every test of one file."""
    parsed = parse_test_file(path)
    if isinstance(parsed, list):
        return FileResult(0, (), tuple(parsed))
    try:
        ruleset = load_ruleset([str(p) for p in parsed.rule_files], source="scrape")
    except RuleSetError as e:
        return FileResult(0, (), (f"{path}: the rule files do not load:\n{e}",))
    problems = check_against(parsed, ruleset)
    if problems:
        return FileResult(0, (), tuple(problems))
    interval_ms = parsed.evaluation_interval_ms or round(ruleset.evaluation_interval * 1000)
    passed = 0
    failures = []
    for test in parsed.tests:
        failure = run_test(test, ruleset, interval_ms)
        if failure is None:
            passed += 1
        else:
            failures.append(failure)
    return FileResult(passed, tuple(failures), ())


# -- running one test ---------------------------------------------------------------


def run_test(test: RuleTest, ruleset: RuleSet, interval_ms: int) -> str | None:
    """None when every expectation of the test holds; else the readable diff."""
    store = _store(test)
    evaluator = Evaluator(store, lookback_delta=LOOKBACK_DELTA)
    cluster = test.cluster if test.cluster is not None else _cluster_from_inputs(test)
    state = EngineState()
    expectations = {e.at_ms: e for e in test.expect}
    last = max(expectations)
    sections: list[str] = []
    for step in range(last // interval_ms + 1):
        at_ms = step * interval_ms
        now = at_ms / 1000
        results: dict[str, QueryResult] = {}
        recover: dict[str, QueryResult] = {}
        for rule in ruleset.rules:
            if rule.alertname is not None:
                results[rule.name] = _alerts(test.alerts, rule.alertname, at_ms)
            else:
                assert rule.expr is not None
                results[rule.name] = _query(evaluator, rule.expr, now)
            if rule.recover is not None:
                recover[rule.name] = _query(evaluator, rule.recover.expr, now)
        decisions = evaluate(ruleset, results, state, now, recover_results=recover, cluster=cluster)
        state.record(decisions)
        expectation = expectations.get(at_ms)
        if expectation is not None:
            diff = _compare(expectation, decisions, ruleset, state)
            if diff is not None:
                sections.append(diff)
    if not sections:
        return None
    return "\n".join([f"FAILED {test.position.file}:{test.position.line}: {test.name}", *sections])


def _store(test: RuleTest) -> SeriesStore:
    # All of a test's samples go in first and every evaluation time reads the past
    # of its own time, so nothing may be trimmed.
    store = SeriesStore(retention=math.inf)
    for series in test.series:
        labels = dict(series.labels)
        for i, point in enumerate(series.values):
            t = i * test.interval_ms / 1000
            if point is STALE:
                store.add_stale(labels, t)
            elif isinstance(point, float):
                store.add(labels, t, point)
    return store


def _query(evaluator: Evaluator, expr: str, now: float) -> QueryResult:
    """What a healthy source returns: failures are Unknown, an empty vector is kept."""
    try:
        result = evaluator.instant(expr, now)
    except EvalError as e:
        return Unknown(f"evaluation failed: {e}")
    if isinstance(result, Matrix):
        return Unknown("the expression returns a range vector")
    return result


def _alerts(alerts: Iterable[InputAlert], alertname: str, at_ms: int) -> QueryResult:
    """What the Alertmanager receiver returns: the firing alerts of one name."""
    samples = tuple(
        Sample(a.labels, 1.0, at_ms / 1000)
        for a in alerts
        if dict(a.labels).get("alertname") == alertname
        and a.starts_ms <= at_ms
        and (a.ends_ms is None or at_ms < a.ends_ms)
    )
    return Vector(samples)


def _cluster_from_inputs(test: RuleTest) -> ClusterInfo:
    nodes = {v for s in test.series for k, v in s.labels if k == "node"}
    nodes |= {v for a in test.alerts for k, v in a.labels if k == "node"}
    return ClusterInfo(frozenset(nodes))


# -- comparing ----------------------------------------------------------------------

Key = tuple[str, str, str, Labels]  # rule, kind, action, target


def _compare(
    expectation: Expectation,
    decisions: Sequence[Decision],
    ruleset: RuleSet,
    state: EngineState,
) -> str | None:
    expected: Counter[Key] = Counter(
        (e.rule, e.kind, e.action or ruleset.rule(e.rule).action.type, e.target)
        for e in expectation.decisions
    )
    got: Counter[Key] = Counter(_key(d) for d in decisions)
    if expected == got:
        return None
    keys = sorted(set(expected) | set(got), key=_sort_key(ruleset))
    lines = [
        f"  at {format_duration(expectation.at_ms / 1000)} ({expectation.position}): "
        "decisions differ (- expected, + got)"
    ]
    for key in keys:
        both = min(expected[key], got[key])
        lines += [f"      {_show(key)}"] * both
        lines += [f"    - {_show(key)}"] * (expected[key] - both)
        lines += [f"    + {_show(key)}"] * (got[key] - both)
    missing = [k for k in keys if expected[k] > got[k]]
    why = _why(missing, ruleset, state)
    if why:
        lines.append("    engine notes at this time:")
        lines += [f"      {line}" for line in why]
    return "\n".join(lines)


def _key(d: Decision) -> Key:
    return (d.rule, d.kind, d.action, labels_of(d.target))


def _sort_key(ruleset: RuleSet) -> Callable[[Key], tuple[int, str, str, str, list[str]]]:
    """Rule order, then kind and action, then the target's values (node first)."""
    order = {r.name: i for i, r in enumerate(ruleset.rules)}

    def key(k: Key) -> tuple[int, str, str, str, list[str]]:
        values = [v for _, v in sorted(k[3], key=lambda kv: (_rank(kv[0]), kv[0]))]
        return (order.get(k[0], len(order)), k[0], k[1], k[2], values)

    return key


_LABEL_ORDER = ("node", "device", "namespace", "pod", "pool")


def _show(key: Key) -> str:
    rule, kind, action, target = key
    return f"{kind} {rule} {action} {_braces(target)}"


def _rank(name: str) -> int:
    return _LABEL_ORDER.index(name) if name in _LABEL_ORDER else len(_LABEL_ORDER)


def _why(missing: Sequence[Key], ruleset: RuleSet, state: EngineState) -> list[str]:
    """What the engine knew about an expected decision that did not come: the
    target is still pending, it was held, the rule's result was unknown, or the
    breaker moved."""
    wanted = {(k[0], k[3]) for k in missing}
    rules = {k[0] for k in missing}
    lines = []
    for rule, target in sorted(wanted):
        since = state.pending.get((rule, target))
        if since is not None:
            lines.append(
                f"{rule} {_braces(target)}: pending since {format_duration(since)} "
                f"(for: {format_duration(ruleset.rule(rule).for_)})"
            )
        if (rule, target) in state.active:
            active = state.active[(rule, target)]
            lines.append(
                f"{rule} {_braces(target)}: already under remediation since "
                f"{format_duration(active.since)}"
            )
    for n in state.notes:
        relevant = (
            n.kind == "breaker"
            or (n.rule in rules and n.kind == "unknown")
            or (n.rule, n.labels) in wanted
        )
        if relevant:
            where = f"{n.rule} {_braces(n.labels)}" if n.labels else n.rule or "engine"
            lines.append(f"{where}: {n.kind}: {n.reason}")
    return lines


def _braces(labels: Labels) -> str:
    names = sorted(dict(labels), key=lambda n: (_rank(n), n))
    values = dict(labels)
    return "{" + ", ".join(f'{n}="{values[n]}"' for n in names) + "}"


def check_against(parsed: RuleTestFile, ruleset: RuleSet) -> list[str]:
    """Problems that need the rule set: rule names, and times that are not
    evaluation times."""
    problems = []
    names = [r.name for r in ruleset.rules]
    interval_ms = parsed.evaluation_interval_ms or round(ruleset.evaluation_interval * 1000)
    for test in parsed.tests:
        for e in test.expect:
            if e.at_ms % interval_ms:
                problems.append(
                    f"{e.position}: at {format_duration(e.at_ms / 1000)} is not a multiple of "
                    f"the evaluation interval {format_duration(interval_ms / 1000)}; rules are "
                    "only evaluated at those times"
                )
            for d in e.decisions:
                if d.rule not in names:
                    problems.append(
                        f"{d.position}: no rule named '{d.rule}'; {_suggest(d.rule, names)}"
                    )
                    continue
                rule = ruleset.rule(d.rule)
                problems += _target_problems(d, rule)
                if d.kind == "recover" and rule.recover is None:
                    problems.append(
                        f"{d.position}: rule '{d.rule}' has no recover, so it never "
                        "makes a recover decision"
                    )
    return problems


def _target_problems(d: ExpectedDecision, rule: Rule) -> list[str]:
    want = TARGET_LABELS[rule.target]
    have = sorted(dict(d.target), key=lambda n: (_rank(n), n))
    if set(want) == set(have):
        return []
    return [
        f"{d.position}: rule '{rule.name}' has target {rule.target}, named by "
        f"{', '.join(want)}; this target has {', '.join(have) or 'no labels'}"
    ]


# -- parsing ------------------------------------------------------------------------

_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_UNITS_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)

_UNSIGNED = r"(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[Ii]nf|NaN|nan)"
_NUMBER = rf"[-+]?{_UNSIGNED}"
_EXPANDING = re.compile(rf"^(?P<a>{_NUMBER})(?:(?P<op>[-+])(?P<b>{_UNSIGNED}))?x(?P<n>\d+)$")
_SINGLE = re.compile(rf"^{_NUMBER}$")


def parse_duration_ms(text: str) -> int | None:
    """A Prometheus duration (``0``, ``15s``, ``5m30s``, ``1h``, ``100ms``) in
    milliseconds; None when it is not one."""
    if text == "0":
        return 0
    m = _DURATION.match(text)
    if not text or m is None:
        return None
    return sum(int(g) * size for g, size in zip(m.groups(), _UNITS_MS, strict=True) if g)


def expand_values(text: str) -> list[Point]:
    """promtool's expanding notation; raises ValueError naming the bad token.

    ``a+bxN`` is a, a+b, ..., a+N·b (N+1 values); ``axN`` is a, N+1 times; ``_`` is
    no sample, ``_xN`` N of them; ``stale`` is a staleness marker."""
    out: list[Point] = []
    for token in text.split():
        if token == "_":
            out.append(None)
        elif token.startswith("_x") and token[2:].isdigit():
            out += [None] * int(token[2:])
        elif token == "stale":
            out.append(STALE)
        elif _SINGLE.match(token):
            out.append(float(token))
        elif m := _EXPANDING.match(token):
            a = float(m["a"])
            b = float(m["b"]) if m["b"] else 0.0
            if m["op"] == "-":
                b = -b
            out += [a + i * b for i in range(int(m["n"]) + 1)]
        else:
            raise ValueError(
                f"bad value {token!r}: expected a number, 'a+bxN', 'a-bxN', 'axN', '_', "
                "'_xN' or 'stale'"
            )
    return out


def parse_series(text: str) -> Labels:
    """``metric{a="b"}`` into its labels (``__name__`` included); raises ValueError."""
    try:
        expr = pp.parse(text)
    except Exception as e:
        raise ValueError(f"not a series {text!r}: {e}") from e
    if not isinstance(expr, pp.VectorSelector) or expr.offset is not None or expr.at is not None:
        raise ValueError(f'not a series {text!r}: write metric{{label="value",...}}')
    labels: dict[str, str] = {}
    if expr.name:
        labels["__name__"] = expr.name
    if expr.matchers.or_matchers:
        raise ValueError(f"not a series {text!r}: 'or' is for selectors")
    for m in expr.matchers.matchers:
        if m.op != pp.MatchOp.Equal:
            raise ValueError(f"not a series {text!r}: label {m.name} must be set with '='")
        labels[m.name] = m.value
    if not labels.get("__name__"):
        raise ValueError(f"not a series {text!r}: it has no metric name")
    return labels_of({k: v for k, v in labels.items() if v})


def _suggest(word: str, choices: Iterable[str]) -> str:
    options = list(choices)
    close = difflib.get_close_matches(word, options, n=1)
    return f"did you mean '{close[0]}'?" if close else f"expected one of {', '.join(options)}"


_Fields = dict[str, tuple[ScalarNode, Node]]
_T = TypeVar("_T")


class _Reader:
    """Walks the composed YAML, collecting every problem with its position."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # (line, column, message): reported sorted by position.
        self.problems: list[tuple[int, int, str]] = []

    def pos(self, node: Node) -> Position:
        mark = node.start_mark
        return Position(str(self.path), mark.line + 1, mark.column + 1)

    def problem(self, node: Node, message: str) -> None:
        self.at(self.pos(node), message)

    def at(self, position: Position, message: str) -> None:
        self.problems.append((position.line, position.col, f"{position}: {message}"))

    def mapping(
        self, node: Node, where: str, allowed: Sequence[str], required: Sequence[str] = ()
    ) -> _Fields | None:
        if not isinstance(node, MappingNode):
            self.problem(node, f"{where} must be a mapping of {', '.join(allowed)}")
            return None
        out: _Fields = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode):
                self.problem(key, f"{where}: a key must be a plain string")
                continue
            if key.value not in allowed:
                self.problem(
                    key, f"unknown key '{key.value}' in {where}; {_suggest(key.value, allowed)}"
                )
                continue
            if key.value in out:
                first = out[key.value][0].start_mark.line + 1
                self.problem(key, f"{where}: '{key.value}' is set twice (first on line {first})")
                continue
            out[key.value] = (key, value)
        for name in required:
            if name not in out:
                self.problem(node, f"{where} needs '{name}'")
        return out

    def sequence(self, node: Node, where: str) -> list[Node] | None:
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return []
        if not isinstance(node, SequenceNode):
            self.problem(node, f"{where} must be a list")
            return None
        return list(node.value)

    def string(self, node: Node, where: str) -> str | None:
        if not isinstance(node, ScalarNode) or node.tag == _NULL or node.value == "":
            self.problem(node, f"{where} must be a non-empty string")
            return None
        return str(node.value)

    def duration(self, node: Node, where: str, *, positive: bool = False) -> int | None:
        text = self.string(node, where)
        if text is None:
            return None
        ms = parse_duration_ms(text)
        if ms is None:
            self.problem(node, f"{where}: '{text}' is not a duration (like 0s, 15s, 5m30s, 1h)")
            return None
        if positive and ms == 0:
            self.problem(node, f"{where} must be more than 0s")
            return None
        return ms

    def labels(self, node: Node, where: str) -> dict[str, str] | None:
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return {}
        if not isinstance(node, MappingNode):
            self.problem(node, f"{where} must be a mapping of label names to values")
            return None
        out: dict[str, str] = {}
        for key, value in node.value:
            name = self.string(key, f"{where}: a label name")
            text = self.string(value, f"{where}.{name}") if name else None
            if name is not None and text is not None:
                out[name] = text
        return out

    # -- the document ---------------------------------------------------------------

    def file(self, root: Node | None) -> RuleTestFile | None:
        if root is None:
            self.problems.append((0, 0, f"{self.path}: empty file; expected ruleFiles and tests"))
            return None
        fields = self.mapping(
            root,
            "the test file",
            ("ruleFiles", "evaluationInterval", "tests"),
            ("ruleFiles", "tests"),
        )
        if fields is None:
            return None
        rule_files: list[Path] = []
        if "ruleFiles" in fields:
            files_node = fields["ruleFiles"][1]
            files = self.sequence(files_node, "ruleFiles")
            if files == []:
                self.problem(files_node, "ruleFiles names no rule file")
            for item in files or []:
                name = self.string(item, "a rule file")
                if name is not None:
                    rule_files.append(self.path.parent / name)
        interval = None
        if "evaluationInterval" in fields:
            interval = self.duration(
                fields["evaluationInterval"][1], "evaluationInterval", positive=True
            )
        tests: list[RuleTest] = []
        if "tests" in fields:
            entries = self.sequence(fields["tests"][1], "tests")
            if entries == []:
                self.problem(fields["tests"][1], "tests lists no test")
            for item in entries or []:
                test = self.test(item)
                if test is not None:
                    tests.append(test)
        if self.problems:
            return None
        return RuleTestFile(self.path, tuple(rule_files), interval, tuple(tests))

    def test(self, node: Node) -> RuleTest | None:
        fields = self.mapping(
            node,
            "a test",
            ("name", "interval", "inputSeries", "alerts", "cluster", "expect"),
            ("name", "expect"),
        )
        if fields is None:
            return None
        before = len(self.problems)
        name = self.string(fields["name"][1], "name") if "name" in fields else None
        interval = 60_000
        if "interval" in fields:
            interval = self.duration(fields["interval"][1], "interval", positive=True) or 60_000
        series = self.each(fields, "inputSeries", self.series)
        alerts = self.each(fields, "alerts", self.alert)
        cluster = self.cluster(fields["cluster"][1]) if "cluster" in fields else None
        expect = self.each(fields, "expect", self.expectation)
        if "expect" in fields and not expect and len(self.problems) == before:
            self.problem(fields["expect"][1], "expect lists no time to check")
        seen: dict[Labels, InputSeries] = {}
        for s in series:
            if s.labels in seen:
                self.at(
                    s.position,
                    f"the series {_series_text(s.labels)} is already given on line "
                    f"{seen[s.labels].position.line}",
                )
            seen.setdefault(s.labels, s)
        times: dict[int, Expectation] = {}
        for e in expect:
            if e.at_ms in times:
                self.at(
                    e.position,
                    f"at {format_duration(e.at_ms / 1000)} is already expected on line "
                    f"{times[e.at_ms].position.line}; list all its decisions once",
                )
            times[e.at_ms] = e
        if name is None or len(self.problems) > before:
            return None
        return RuleTest(
            name, self.pos(node), interval, tuple(series), tuple(alerts), cluster, tuple(expect)
        )

    def each(self, fields: _Fields, key: str, read: Callable[[Node], _T | None]) -> list[_T]:
        if key not in fields:
            return []
        out: list[_T] = []
        for item in self.sequence(fields[key][1], key) or []:
            value = read(item)
            if value is not None:
                out.append(value)
        return out

    def series(self, node: Node) -> InputSeries | None:
        fields = self.mapping(node, "an input series", ("series", "values"), ("series", "values"))
        if fields is None or "series" not in fields or "values" not in fields:
            return None
        text = self.string(fields["series"][1], "series")
        values_node = fields["values"][1]
        values = self.string(values_node, "values")
        labels: Labels | None = None
        if text is not None:
            try:
                labels = parse_series(text)
            except ValueError as e:
                self.problem(fields["series"][1], str(e))
        points: list[Point] | None = None
        if values is not None:
            try:
                points = expand_values(values)
            except ValueError as e:
                self.problem(values_node, str(e))
        if labels is None or points is None:
            return None
        return InputSeries(labels, tuple(points), self.pos(node))

    def alert(self, node: Node) -> InputAlert | None:
        fields = self.mapping(
            node, "an alert", ("alertname", "labels", "startsAt", "endsAt"), ("alertname",)
        )
        if fields is None or "alertname" not in fields:
            return None
        name = self.string(fields["alertname"][1], "alertname")
        labels = self.labels(fields["labels"][1], "labels") if "labels" in fields else {}
        starts = self.duration(fields["startsAt"][1], "startsAt") if "startsAt" in fields else 0
        ends = self.duration(fields["endsAt"][1], "endsAt") if "endsAt" in fields else None
        if name is None or labels is None or starts is None:
            return None
        if "alertname" in labels and labels["alertname"] != name:
            self.problem(fields["labels"][1], f"labels.alertname differs from alertname '{name}'")
            return None
        if ends is not None and ends <= starts:
            self.problem(fields["endsAt"][1], "endsAt must be after startsAt")
            return None
        return InputAlert(labels_of({**labels, "alertname": name}), starts, ends)

    def cluster(self, node: Node) -> ClusterInfo | None:
        fields = self.mapping(node, "cluster", ("nodes", "recentlyAdded"), ("nodes",))
        if fields is None or "nodes" not in fields:
            return None
        nodes: set[str] = set()
        for item in self.sequence(fields["nodes"][1], "cluster.nodes") or []:
            name = self.string(item, "a node name")
            if name is not None:
                nodes.add(name)
        added: dict[str, float] = {}
        if "recentlyAdded" in fields:
            value = fields["recentlyAdded"][1]
            if not isinstance(value, MappingNode):
                self.problem(value, "cluster.recentlyAdded must map node names to times (like 0s)")
                return None
            for key, when in value.value:
                name = self.string(key, "a node name")
                ms = self.duration(when, f"recentlyAdded.{name}")
                if name is None or ms is None:
                    continue
                if name not in nodes:
                    self.problem(
                        key, f"'{name}' is not in cluster.nodes; {_suggest(name, sorted(nodes))}"
                    )
                added[name] = ms / 1000
        return ClusterInfo(frozenset(nodes), added)

    def expectation(self, node: Node) -> Expectation | None:
        fields = self.mapping(node, "an expectation", ("at", "decisions"), ("at", "decisions"))
        if fields is None or "at" not in fields or "decisions" not in fields:
            return None
        at = self.duration(fields["at"][1], "at")
        decisions: list[ExpectedDecision] = []
        for item in self.sequence(fields["decisions"][1], "decisions") or []:
            d = self.decision(item)
            if d is not None:
                decisions.append(d)
        if at is None:
            return None
        return Expectation(at, tuple(decisions), self.pos(fields["at"][1]))

    def decision(self, node: Node) -> ExpectedDecision | None:
        fields = self.mapping(
            node, "an expected decision", ("rule", "action", "target", "kind"), ("rule", "target")
        )
        if fields is None or "rule" not in fields or "target" not in fields:
            return None
        rule = self.string(fields["rule"][1], "rule")
        action = self.string(fields["action"][1], "action") if "action" in fields else None
        target = self.labels(fields["target"][1], "target")
        kind: Literal["act", "recover"] = "act"
        if "kind" in fields:
            text = self.string(fields["kind"][1], "kind")
            if text == "recover":
                kind = "recover"
            elif text is not None and text != "act":
                self.problem(
                    fields["kind"][1],
                    f"unknown kind '{text}'; {_suggest(text, ('act', 'recover'))}",
                )
                return None
        if rule is None or target is None or ("action" in fields and action is None):
            return None
        if not target:
            self.problem(fields["target"][1], "target names no label")
            return None
        return ExpectedDecision(rule, kind, action, labels_of(target), self.pos(node))


def _series_text(labels: Labels) -> str:
    values = dict(labels)
    name = values.pop("__name__", "")
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(values.items())) + "}"


def parse_test_file(path: Path) -> RuleTestFile | list[str]:
    """The parsed file, or every problem in it."""
    try:
        text = path.read_text()
    except OSError as e:
        return [f"{path}: cannot read: {e.strerror or e}"]
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        return [f"{where}: not YAML: {e.problem}"]
    except yaml.YAMLError as e:
        return [f"{path}: not YAML: {e}"]
    reader = _Reader(path)
    parsed = reader.file(root)
    if parsed is None or reader.problems:
        return [text for _, _, text in sorted(reader.problems)] or [f"{path}: unreadable"]
    return parsed


__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "expand_values",
    "find_test_files",
    "main",
    "parse_duration_ms",
    "parse_series",
    "parse_test_file",
    "run_file",
    "run_test",
]
