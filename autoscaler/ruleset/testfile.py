"""The rule unit-test file format (``accel-autoscaler test``), read into data.

A test file belongs with the rules it tests: it names rule files, input series and
the decisions expected of them, and it is read with the same reader and the same
duration grammar as the rule files, so a mistake in it is reported the same way,
``file:line:col: message``, every one at once. Running the tests (the engine over
these inputs) is ``autoscaler/engine/ruletest.py``; this module only says what a
test file means, and so depends on nothing above the rule set.

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
          - from: 5m                          # every evaluation from 5m to 15m,
            to: 15m                           # both included, taken together:
            decisions:                        # one decision for the whole incident
              - {rule: fatal-device-fault, action: migrate_jobs, target: {node: n1}}

Escalation ladders: an expected decision may say ``step: 2`` (the ladder step it
is; default the first step with its ``action``, so the rule's first step), and a
test may report what the executor said of a step's action before an evaluation,
so that "a failed step escalates at once" can be tested::

        outcomes:                             # reported just before the evaluation at
          - {at: 16m, rule: fatal-device-fault, target: {node: n1, device: nvidia0},
             step: 2, status: failed}         # done, partial, skipped, failed,
                                              # unknown or unsupported (the node
                                              # cannot perform the step)

``at`` compares the decisions of one evaluation; ``from``/``to`` compares the
multiset of every decision made at the evaluation times of the window, so "one
decision over the whole firing period" is one entry. ``action`` defaults to the
rule's action type and ``kind`` to ``act``. Without
``cluster``, the cluster is every ``node`` label value in the input series and
alerts, none of them recently added. An alert is firing from ``startsAt``
(default 0s) until ``endsAt`` (default: forever). Series values use promtool's
expanding notation (``expand_values``).

A test file is input too, and ``0+1x100000000`` is 30 characters that ask for a
hundred million samples. So the work a file asks for is counted before anything
is allocated (``count_values`` reads the notation without expanding it) and held
against ``TestLimits``: samples per file and series per test here, evaluations
and series x evaluations per test in ``engine/ruletest.py`` (they need the rule
set's interval). A file over a limit is refused at the value that asks for it,
naming the limit and the flag of ``accel-autoscaler test`` that raises it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import promql_parser as pp
from yaml.nodes import MappingNode, Node, SequenceNode

from accel_common.durations import format_whole
from accel_common.suggest import did_you_mean
from accel_common.yamlread import Entries, Position, Reader, is_null
from autoscaler.promql.errors import ExprError
from autoscaler.promql.guard import parse
from autoscaler.types import Labels, labels_of


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
    step: int | None = None  # ladder step; None: the first with this action


@dataclass(frozen=True)
class InputOutcome:
    """What the executor reported of a ladder step's action, just before the
    evaluation at ``at_ms``."""

    at_ms: int
    rule: str
    target: Labels
    step: int
    status: str
    position: Position


OUTCOME_STATUSES = ("done", "partial", "skipped", "failed", "unknown", "unsupported")


@dataclass(frozen=True)
class Expectation:
    """The decisions expected at one evaluation time (``at``: ``at_ms``, with
    ``to_ms`` None), or made over a window of them (``from``/``to``: every
    evaluation time from ``at_ms`` to ``to_ms``, both included, taken together)."""

    at_ms: int
    decisions: tuple[ExpectedDecision, ...]
    position: Position
    to_ms: int | None = None

    @property
    def last_ms(self) -> int:
        return self.at_ms if self.to_ms is None else self.to_ms

    def covers(self, at_ms: int) -> bool:
        return self.at_ms <= at_ms <= self.last_ms


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster a test names: its nodes, and when a scale-up added some of them
    (seconds from the start of the test)."""

    nodes: frozenset[str]
    recently_added: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleTest:
    name: str
    position: Position
    interval_ms: int
    series: tuple[InputSeries, ...]
    alerts: tuple[InputAlert, ...]
    cluster: ClusterSpec | None
    expect: tuple[Expectation, ...]
    outcomes: tuple[InputOutcome, ...] = ()


@dataclass(frozen=True)
class RuleTestFile:
    path: Path
    rule_files: tuple[Path, ...]
    evaluation_interval_ms: int | None
    tests: tuple[RuleTest, ...]


@dataclass(frozen=True)
class TestLimits:
    """The most work a rule test file may ask for. The shipped file
    (``rules/tests/remediation_test.yaml``) has about 18,000 samples, at most 10
    series in a test, 2,900 evaluations and 11,000 series x evaluations in all;
    these leave ten times that room or more, and keep a file to a few minutes
    and a few hundred MiB."""

    __test__ = False  # not a pytest class, whatever its name

    samples: int = 200_000  # per file: every expanded input value
    series: int = 1_000  # per test: input series and alerts
    evaluations: int = 50_000  # per file: each test's evaluations up to its last time
    series_evaluations: int = 2_000_000  # per file: series x evaluations of each test


TEST_LIMITS = TestLimits()
# The flag of ``accel-autoscaler test`` that raises each limit.
LIMIT_FLAGS = {
    "samples": "--max-samples",
    "series": "--max-series",
    "evaluations": "--max-evaluations",
    "series_evaluations": "--max-series-evaluations",
}


def over_limit(limit: str, asked: str, allowed: int, fix: str) -> str:
    """The message for work over a limit: what is asked, the limit, what to
    change, and the flag that raises it."""
    return (
        f"{asked}; the limit is {allowed:,} ({fix}, or raise it with "
        f"{LIMIT_FLAGS[limit]} on accel-autoscaler test)"
    )


def parse_test_file(path: Path, limits: TestLimits = TEST_LIMITS) -> RuleTestFile | list[str]:
    """The parsed file, or every problem in it, sorted by position."""
    reader = _TestFileReader(path, limits)
    root = reader.load(empty="empty file; expected ruleFiles and tests")
    parsed = reader.document(root) if root is not None else None
    if parsed is None or reader.problems:
        return [str(p) for p in reader.sorted()] or [f"{path}: unreadable"]
    return parsed


# -- promtool's notations --------------------------------------------------------

_UNSIGNED = r"(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[Ii]nf|NaN|nan)"
_NUMBER = rf"[-+]?{_UNSIGNED}"
_EXPANDING = re.compile(rf"^(?P<a>{_NUMBER})(?:(?P<op>[-+])(?P<b>{_UNSIGNED}))?x(?P<n>\d+)$")
_SINGLE = re.compile(rf"^{_NUMBER}$")


# The longest N in ``axN`` counted exactly: more digits than any limit has.
_MAX_COUNT_DIGITS = 15


def count_values(text: str) -> int:
    """How many values ``expand_values(text)`` would give, without making them;
    raises ValueError naming the bad token."""
    total = 0
    for token in text.split():
        if token.startswith("_x") and token[2:].isdigit():
            n, extra = token[2:], 0
        elif m := _EXPANDING.match(token):
            n, extra = m["n"], 1
        elif token in ("_", "stale") or _SINGLE.match(token):
            n, extra = "1", 0
        else:
            raise ValueError(_bad_value(token))
        digits = n.lstrip("0") or "0"
        # A count too long to be meant is larger than every limit; its digits
        # are never converted (Python refuses beyond 4,300 of them).
        total += 10**_MAX_COUNT_DIGITS if len(digits) > _MAX_COUNT_DIGITS else int(digits) + extra
    return total


def _bad_value(token: str) -> str:
    shown = token if len(token) <= 40 else token[:37] + "..."
    return f"bad value {shown!r}: expected a number, 'a+bxN', 'a-bxN', 'axN', '_', '_xN' or 'stale'"


def expand_values(text: str) -> list[Point]:
    """promtool's expanding notation; raises ValueError naming the bad token.

    ``a+bxN`` is a, a+b, ..., a+N·b (N+1 values); ``axN`` is a, N+1 times; ``_`` is
    no sample, ``_xN`` N of them; ``stale`` is a staleness marker. Call
    ``count_values`` first where the text is input: this allocates them all."""
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
            raise ValueError(_bad_value(token))
    return out


def parse_series(text: str) -> Labels:
    """``metric{a="b"}`` into its labels (``__name__`` included); raises ValueError."""
    try:
        expr = parse(text)
    except ExprError as e:
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


def series_text(labels: Labels) -> str:
    """Labels back in the notation a test file writes them in."""
    values = dict(labels)
    name = values.pop("__name__", "")
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(values.items())) + "}"


# -- the reader -------------------------------------------------------------------

_T = TypeVar("_T")
_DEFAULT_INTERVAL_MS = 60_000


class _TestFileReader(Reader):
    """Walks a test file's nodes, collecting every problem with its position."""

    def __init__(self, path: Path, limits: TestLimits = TEST_LIMITS) -> None:
        super().__init__(path)
        self.path = path
        self.limits = limits
        self.samples = 0  # values in the file's input series so far

    def duration_ms(self, node: Node, what: str, *, positive: bool = False) -> int | None:
        seconds = self.duration(node, what, positive=positive)
        return None if seconds is None else round(seconds * 1000)

    def labels(self, node: Node, what: str) -> dict[str, str] | None:
        if is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            self.problem(node, f"{what} must be a mapping of label names to values")
            return None
        out: dict[str, str] = {}
        for key, value in node.value:
            name = self.written(key, f"{what}: a label name")
            text = self.written(value, f"{what}.{name}") if name else None
            if name is not None and text is not None:
                out[name] = text
        return out

    def each(self, fields: Entries, key: str, read: Callable[[Node], _T | None]) -> list[_T]:
        if key not in fields:
            return []
        out: list[_T] = []
        for item in self.sequence(fields[key][1], key) or []:
            value = read(item)
            if value is not None:
                out.append(value)
        return out

    # -- the document -------------------------------------------------------------

    def document(self, root: Node) -> RuleTestFile | None:
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
                name = self.written(item, "a rule file")
                if name is not None:
                    rule_files.append(self.path.parent / name)
        interval = None
        if "evaluationInterval" in fields:
            interval = self.duration_ms(
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
            ("name", "interval", "inputSeries", "alerts", "cluster", "expect", "outcomes"),
            ("name", "expect"),
        )
        if fields is None:
            return None
        before = len(self.problems)
        name = self.written(fields["name"][1], "name") if "name" in fields else None
        interval = _DEFAULT_INTERVAL_MS
        if "interval" in fields:
            written = self.duration_ms(fields["interval"][1], "interval", positive=True)
            interval = written or _DEFAULT_INTERVAL_MS
        if not self.few_enough(fields):
            return None
        series = self.each(fields, "inputSeries", self.series)
        alerts = self.each(fields, "alerts", self.alert)
        cluster = self.cluster(fields["cluster"][1]) if "cluster" in fields else None
        expect = self.each(fields, "expect", self.expectation)
        outcomes = self.each(fields, "outcomes", self.outcome)
        if "expect" in fields and not expect and len(self.problems) == before:
            self.problem(fields["expect"][1], "expect lists no time to check")
        seen: dict[Labels, InputSeries] = {}
        for s in series:
            if s.labels in seen:
                self.at(
                    s.position,
                    f"the series {series_text(s.labels)} is already given on line "
                    f"{seen[s.labels].position.line}",
                )
            seen.setdefault(s.labels, s)
        times: dict[tuple[int, int | None], Expectation] = {}
        for e in expect:
            when = (e.at_ms, e.to_ms)
            if when in times:
                what = (
                    f"at {format_whole(e.at_ms)}"
                    if e.to_ms is None
                    else f"from {format_whole(e.at_ms)} to {format_whole(e.to_ms)}"
                )
                self.at(
                    e.position,
                    f"{what} is already expected on line "
                    f"{times[when].position.line}; list all its decisions once",
                )
            times[when] = e
        if name is None or len(self.problems) > before:
            return None
        return RuleTest(
            name,
            self.pos(node),
            interval,
            tuple(series),
            tuple(alerts),
            cluster,
            tuple(expect),
            tuple(outcomes),
        )

    def few_enough(self, fields: Entries) -> bool:
        """Whether a test's input series and alerts are within the limit; they
        are counted before any of them is read."""
        counts = {
            key: len(fields[key][1].value)
            for key in ("inputSeries", "alerts")
            if key in fields and isinstance(fields[key][1], SequenceNode)
        }
        total = sum(counts.values())
        if total <= self.limits.series:
            return True
        key = max(counts, key=lambda k: counts[k])
        self.problem(
            fields[key][0],
            over_limit(
                "series",
                f"this test has {total:,} input series and alerts",
                self.limits.series,
                "split it into several tests",
            ),
        )
        return False

    def series(self, node: Node) -> InputSeries | None:
        fields = self.mapping(node, "an input series", ("series", "values"), ("series", "values"))
        if fields is None or "series" not in fields or "values" not in fields:
            return None
        text = self.written(fields["series"][1], "series")
        values_node = fields["values"][1]
        values = self.written(values_node, "values")
        labels: Labels | None = None
        if text is not None:
            try:
                labels = parse_series(text)
            except ValueError as e:
                self.problem(fields["series"][1], str(e))
        points: list[Point] | None = None
        if values is not None:
            try:
                count = count_values(values)
            except ValueError as e:
                self.problem(values_node, str(e))
            else:
                points = self.expand(values_node, values, count)
        if labels is None or points is None:
            return None
        return InputSeries(labels, tuple(points), self.pos(node))

    def expand(self, node: Node, values: str, count: int) -> list[Point] | None:
        """The values, unless they take the file over its samples: then the
        problem, once, at the series that does."""
        before, self.samples = self.samples, self.samples + count
        allowed = self.limits.samples
        if self.samples <= allowed:
            return expand_values(values)
        if before <= allowed:
            asked = (
                f"{count:,} samples"
                if count < 10**_MAX_COUNT_DIGITS
                else "an immense number of samples"
            )
            self.problem(
                node,
                over_limit(
                    "samples",
                    f"these values expand to {asked}, taking the file's input series "
                    f"past its limit on samples",
                    allowed,
                    "shorten the series (a larger interval needs fewer samples)",
                ),
            )
        return None

    def alert(self, node: Node) -> InputAlert | None:
        fields = self.mapping(
            node, "an alert", ("alertname", "labels", "startsAt", "endsAt"), ("alertname",)
        )
        if fields is None or "alertname" not in fields:
            return None
        name = self.written(fields["alertname"][1], "alertname")
        labels = self.labels(fields["labels"][1], "labels") if "labels" in fields else {}
        starts = self.duration_ms(fields["startsAt"][1], "startsAt") if "startsAt" in fields else 0
        ends = self.duration_ms(fields["endsAt"][1], "endsAt") if "endsAt" in fields else None
        if name is None or labels is None or starts is None:
            return None
        if "alertname" in labels and labels["alertname"] != name:
            self.problem(fields["labels"][1], f"labels.alertname differs from alertname '{name}'")
            return None
        if ends is not None and ends <= starts:
            self.problem(fields["endsAt"][1], "endsAt must be after startsAt")
            return None
        return InputAlert(labels_of({**labels, "alertname": name}), starts, ends)

    def cluster(self, node: Node) -> ClusterSpec | None:
        fields = self.mapping(node, "cluster", ("nodes", "recentlyAdded"), ("nodes",))
        if fields is None or "nodes" not in fields:
            return None
        nodes: set[str] = set()
        for item in self.sequence(fields["nodes"][1], "cluster.nodes") or []:
            name = self.written(item, "a node name")
            if name is not None:
                nodes.add(name)
        added: dict[str, float] = {}
        if "recentlyAdded" in fields:
            value = fields["recentlyAdded"][1]
            if not isinstance(value, MappingNode):
                self.problem(value, "cluster.recentlyAdded must map node names to times (like 0s)")
                return None
            for key, when in value.value:
                name = self.written(key, "a node name")
                seconds = self.duration(when, f"recentlyAdded.{name}")
                if name is None or seconds is None:
                    continue
                if name not in nodes:
                    self.problem(
                        key,
                        f"'{name}' is not in cluster.nodes"
                        f"{did_you_mean(name, sorted(nodes), or_list=True)}",
                    )
                added[name] = seconds
        return ClusterSpec(frozenset(nodes), added)

    def expectation(self, node: Node) -> Expectation | None:
        fields = self.mapping(
            node, "an expectation", ("at", "from", "to", "decisions"), ("decisions",)
        )
        if fields is None or "decisions" not in fields:
            return None
        decisions: list[ExpectedDecision] = []
        for item in self.sequence(fields["decisions"][1], "decisions") or []:
            d = self.decision(item)
            if d is not None:
                decisions.append(d)
        window = "from" in fields or "to" in fields
        if "at" in fields and window:
            self.problem(
                fields["at"][0],
                "an expectation has at (one evaluation) or from and to (a window), not both",
            )
            return None
        if not window:
            if "at" not in fields:
                self.problem(node, "an expectation: missing required key 'at' (or 'from' and 'to')")
                return None
            at = self.duration_ms(fields["at"][1], "at")
            return (
                None if at is None else Expectation(at, tuple(decisions), self.pos(fields["at"][1]))
            )
        for key in ("from", "to"):
            if key not in fields:
                self.problem(node, f"an expectation with a window: missing required key '{key}'")
        if "from" not in fields or "to" not in fields:
            return None
        start = self.duration_ms(fields["from"][1], "from")
        end = self.duration_ms(fields["to"][1], "to")
        if start is None or end is None:
            return None
        if end <= start:
            self.problem(fields["to"][1], "to must be after from (for one time, write at)")
            return None
        return Expectation(start, tuple(decisions), self.pos(fields["from"][1]), end)

    def outcome(self, node: Node) -> InputOutcome | None:
        keys = ("at", "rule", "target", "step", "status")
        fields = self.mapping(node, "an outcome", keys, keys)
        if fields is None or any(k not in fields for k in keys):
            return None
        at = self.duration_ms(fields["at"][1], "at")
        rule = self.written(fields["rule"][1], "rule")
        target = self.labels(fields["target"][1], "target")
        step = self.integer(fields["step"][1], "step", 1)
        status = self.choice(fields["status"][1], "status", OUTCOME_STATUSES)
        if at is None or rule is None or not target or step is None or status is None:
            return None
        return InputOutcome(at, rule, labels_of(target), step, status, self.pos(node))

    def decision(self, node: Node) -> ExpectedDecision | None:
        fields = self.mapping(
            node,
            "an expected decision",
            ("rule", "action", "target", "kind", "step"),
            ("rule", "target"),
        )
        if fields is None or "rule" not in fields or "target" not in fields:
            return None
        rule = self.written(fields["rule"][1], "rule")
        action = self.written(fields["action"][1], "action") if "action" in fields else None
        target = self.labels(fields["target"][1], "target")
        kind: Literal["act", "recover"] = "act"
        if "kind" in fields:
            chosen = self.choice(fields["kind"][1], "kind", ("act", "recover"))
            if chosen is None:
                return None
            kind = "recover" if chosen == "recover" else "act"
        if rule is None or target is None or ("action" in fields and action is None):
            return None
        if not target:
            self.problem(fields["target"][1], "target names no label")
            return None
        step = self.integer(fields["step"][1], "step", 1) if "step" in fields else None
        if "step" in fields and step is None:
            return None
        return ExpectedDecision(rule, kind, action, labels_of(target), self.pos(node), step)


__all__ = [
    "LIMIT_FLAGS",
    "STALE",
    "TEST_LIMITS",
    "ClusterSpec",
    "Expectation",
    "ExpectedDecision",
    "InputAlert",
    "InputOutcome",
    "InputSeries",
    "Point",
    "RuleTest",
    "RuleTestFile",
    "TestLimits",
    "count_values",
    "expand_values",
    "over_limit",
    "parse_series",
    "parse_test_file",
    "series_text",
]
