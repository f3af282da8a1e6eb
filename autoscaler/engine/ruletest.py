"""``accel-autoscaler test``: the runner of rule unit tests, promtool-style.

A rule that drains nodes deserves the same care as code, and the only way to see
what a rule set *decides* is to run it: its PromQL over a series history, then the
engine's ``for``, cooldowns, limits and breaker over the results. The test-file
format (input series in promtool's expanding notation, Alertmanager alerts for
``alertname`` rules, the decisions expected at given times) is
``autoscaler/ruleset/testfile.py``; this module runs it. It fills the built-in
evaluator's store and runs the production evaluation cycle (``engine/cycle.py``,
the function the controller and the simulator run) at every evaluation time from
0 to the last expected time with a fresh ``EngineState``, and compares. Decisions are compared as
a multiset (rule, kind, action and target) per expectation: those of one evaluation
for ``at``, and all those made at the evaluation times of a ``from``/``to`` window
together, so that "one decision over the whole incident" is one expectation. An
act decision of a rule with an escalation ladder is compared with its step too
(``step:``, by default the first step with the expected action), and a test's
``outcomes`` are reported to the engine (``EngineState.report``, what the
executor does in the controller) just before the evaluation at their time.

The work a file asks for is held against ``TestLimits`` before any test runs:
samples and series while the file is read (``ruleset/testfile.py``), and here,
once the rule set's interval is known, the evaluations its tests need (every
interval up to each one's last expected time) and their series x evaluations,
in all. A file over
a limit is a problem at the time or test that asks for it, naming the limit and
the flag that raises it (``--max-evaluations``, ...).

Exit status: 0 when every test passed ("N tests passed"); 1 when a test failed
(a diff of expected and got decisions, per time); 2 when a test file or its rule
files cannot be run at all (every problem, as ``file:line:col: message``), whether
or not other files' tests failed.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from accel_common.suggest import did_you_mean
from autoscaler.decision import Decision
from autoscaler.engine.cycle import run_cycle
from autoscaler.engine.evaluate import format_duration
from autoscaler.engine.state import ClusterInfo, EngineState
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import LOOKBACK_DELTA
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import TARGET_LABELS, Rule, RuleSet
from autoscaler.ruleset.testfile import (
    STALE,
    TEST_LIMITS,
    Expectation,
    ExpectedDecision,
    InputAlert,
    InputOutcome,
    RuleTest,
    RuleTestFile,
    TestLimits,
    over_limit,
    parse_test_file,
)
from autoscaler.sources.alertmanager import INCIDENT_LABEL
from autoscaler.sources.store import StoreSource
from autoscaler.types import Labels, QueryResult, Sample, Vector, labels_of

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


# -- the command --------------------------------------------------------------------


def main(paths: Sequence[str], limits: TestLimits = TEST_LIMITS) -> int:
    """Run the test files named by ``paths`` (files, or directories searched for
    ``*.yaml``/``*.yml``) within ``limits``; print failures and the summary on
    stdout, problems on stderr; return the exit status."""
    out, err = sys.stdout, sys.stderr
    files, problems = find_test_files(paths)
    passed = failed = 0
    broken = bool(problems)
    for problem in problems:
        print(problem, file=err)
    for path in files:
        try:
            result = run_file(path, limits)
        except Exception as e:  # a bug in the runner must not be a traceback
            result = FileResult(
                0,
                (),
                (
                    f"{path}: cannot run these tests: {type(e).__name__}: {e} (this is a bug "
                    "in accel-autoscaler: please report it with the file)",
                ),
            )
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
        try:
            if path.is_dir():
                found = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
                if not found:
                    problems.append(f"{name}: no test files (*.yaml, *.yml) in this directory")
                files.extend(found)
            elif path.exists():
                files.append(path)
            else:
                problems.append(f"{name}: no such file or directory")
        except (OSError, ValueError) as e:
            # A name too long for the system, a NUL byte, an unreadable directory.
            reason = (e.strerror if isinstance(e, OSError) else None) or str(e)
            problems.append(f"{name}: cannot read: {reason}")
    return files, problems


@dataclass(frozen=True)
class FileResult:
    passed: int
    failures: tuple[str, ...]
    problems: tuple[str, ...]


def run_file(path: Path, limits: TestLimits = TEST_LIMITS) -> FileResult:
    """Parse, load the rule files, check the expectations against the rule set and
    the work against ``limits``, and run every test of one file."""
    parsed = parse_test_file(path, limits)
    if isinstance(parsed, list):
        return FileResult(0, (), tuple(parsed))
    try:
        ruleset = load_ruleset([str(p) for p in parsed.rule_files], source="scrape")
    except RuleSetError as e:
        return FileResult(0, (), (f"{path}: the rule files do not load:\n{e}",))
    problems = check_against(parsed, ruleset) + check_work(parsed, ruleset, limits)
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
    return asyncio.run(_run_test(test, ruleset, interval_ms))


async def _run_test(test: RuleTest, ruleset: RuleSet, interval_ms: int) -> str | None:
    # Every evaluation is the production cycle (``engine/cycle.py``) over the
    # test's series, its alerts and its cluster, with a fresh state per test.
    source = StoreSource(_store(test), lookback_delta=LOOKBACK_DELTA)
    alerts = InputAlerts(test.alerts)
    cluster = _cluster(test)

    async def view(now: float) -> ClusterInfo:
        return cluster

    state = EngineState()
    last = max(e.last_ms for e in test.expect)
    made: list[tuple[int, Decision]] = []
    sections: list[str] = []
    # Expectations by their last time, in the order they are written: each step
    # looks up its own rather than walking them all.
    due: dict[int, list[Expectation]] = {}
    for e in test.expect:
        due.setdefault(e.last_ms, []).append(e)
    reports: dict[int, list[InputOutcome]] = {}
    for o in test.outcomes:
        reports.setdefault(o.at_ms, []).append(o)
    explicit = {(o.rule, o.target, o.step) for o in test.outcomes}
    for step in range(last // interval_ms + 1):
        at_ms = step * interval_ms
        for o in reports.get(at_ms, ()):
            state.report(o.rule, dict(o.target), o.step, o.status)
        result = await run_cycle(ruleset, source, alerts, state, at_ms / 1000, cluster=view)
        made += [(at_ms, d) for d in result.decisions]
        # A step the test reports no outcome for did what it was asked at once, as
        # an action that answers "done" does in the controller.
        for d in result.decisions:
            rung = d.extra.get("step")
            if (
                d.kind == "act"
                and isinstance(rung, int)
                and (d.rule, labels_of(d.target), rung) not in explicit
            ):
                state.report(d.rule, d.target, rung, "done")
        # Expectations are checked as soon as their last time is evaluated, in the
        # order they are written, so the engine's notes are those of that time.
        for expectation in due.get(at_ms, ()):
            got = [(t, d) for t, d in made if expectation.covers(t)]
            diff = _compare(expectation, got, ruleset, state)
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


class InputAlerts:
    """What the Alertmanager receiver answers, from a test file's alerts: the firing
    alerts of one name, each firing from ``startsAt`` until ``endsAt``, and each
    with its identity in ``__incident__`` as the receiver gives it (its labels and
    ``startsAt`` stand for Alertmanager's fingerprint): the same labels firing again
    from a later ``startsAt`` are a new incident."""

    def __init__(self, alerts: Iterable[InputAlert]) -> None:
        self.alerts = tuple(alerts)

    def vector(self, alertname: str, now: float) -> QueryResult:
        at_ms = round(now * 1000)
        return Vector(
            tuple(
                Sample(_with_identity(a), 1.0, now)
                for a in self.alerts
                if dict(a.labels).get("alertname") == alertname
                and a.starts_ms <= at_ms
                and (a.ends_ms is None or at_ms < a.ends_ms)
            )
        )


def _with_identity(alert: InputAlert) -> Labels:
    identity = f"{_braces(alert.labels)}@{format_duration(alert.starts_ms / 1000)}"
    return labels_of({**dict(alert.labels), INCIDENT_LABEL: identity})


def _cluster(test: RuleTest) -> ClusterInfo:
    """The test's cluster; without one, every node its inputs name."""
    if test.cluster is not None:
        return ClusterInfo(test.cluster.nodes, dict(test.cluster.recently_added))
    nodes = {v for s in test.series for k, v in s.labels if k == "node"}
    nodes |= {v for a in test.alerts for k, v in a.labels if k == "node"}
    return ClusterInfo(frozenset(nodes))


# -- comparing ----------------------------------------------------------------------

Key = tuple[str, str, str, Labels, int | None]  # rule, kind, action, target, ladder step


def _compare(
    expectation: Expectation,
    decisions: Sequence[tuple[int, Decision]],
    ruleset: RuleSet,
    state: EngineState,
) -> str | None:
    """The readable diff of one expectation against the decisions made at the
    times it covers, each with its time; None when they agree."""
    expected: Counter[Key] = Counter(
        _expected(e, ruleset.rule(e.rule)) for e in expectation.decisions
    )
    got: Counter[Key] = Counter(_key(d) for _, d in decisions)
    if expected == got:
        return None
    keys = sorted(set(expected) | set(got), key=_sort_key(ruleset))
    if expectation.to_ms is None:
        when = f"at {format_duration(expectation.at_ms / 1000)}"
        times: dict[Key, list[str]] = {}
    else:
        when = (
            f"from {format_duration(expectation.at_ms / 1000)} to "
            f"{format_duration(expectation.to_ms / 1000)}"
        )
        times = {}
        for t, d in decisions:
            times.setdefault(_key(d), []).append(format_duration(t / 1000))
    lines = [f"  {when} ({expectation.position}): decisions differ (- expected, + got)"]
    for key in keys:
        both = min(expected[key], got[key])
        marks = ["  "] * both + ["- "] * (expected[key] - both) + ["+ "] * (got[key] - both)
        for i, mark in enumerate(marks):
            # Over a window, the first line of a decision says when it was made.
            made_at = f" (made at {', '.join(times[key])})" if i == 0 and key in times else ""
            lines.append(f"    {mark}{_show(key)}{made_at}")
    missing = [k for k in keys if expected[k] > got[k]]
    why = _why(missing, ruleset, state)
    if why:
        lines.append("    engine notes at this time:")
        lines += [f"      {line}" for line in why]
    return "\n".join(lines)


def _key(d: Decision) -> Key:
    step = d.extra.get("step") if d.kind == "act" else None
    return (d.rule, d.kind, d.action, labels_of(d.target), step if isinstance(step, int) else None)


def _expected(e: ExpectedDecision, rule: Rule) -> Key:
    """An expected decision as a Key: the action defaults to the rule's (first)
    action, and an act of a ladder's rule to the first step with that action."""
    action = e.action or rule.action.type
    step = e.step
    if step is None and rule.escalate and e.kind == "act":
        types = [s.action.type for s in rule.escalate]
        step = types.index(action) + 1 if action in types else None
    return (e.rule, e.kind, action, e.target, step)


def _sort_key(ruleset: RuleSet) -> Callable[[Key], tuple[int, str, str, str, list[str]]]:
    """Rule order, then kind and action, then the target's values (node first)."""
    order = {r.name: i for i, r in enumerate(ruleset.rules)}

    def key(k: Key) -> tuple[int, str, str, str, list[str]]:
        values = [v for _, v in sorted(k[3], key=lambda kv: (_rank(kv[0]), kv[0]))]
        return (order.get(k[0], len(order)), k[0], k[1], k[2], values)

    return key


_LABEL_ORDER = ("node", "device", "namespace", "pod", "pool")


def _show(key: Key) -> str:
    rule, kind, action, target, step = key
    return f"{kind} {rule} {action} {_braces(target)}" + (f" step {step}" if step else "")


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
        incident = state.incidents.get((rule, target))
        if incident is not None and incident.handled is None:
            lines.append(
                f"{rule} {_braces(target)}: pending since {format_duration(incident.since)} "
                f"(for: {format_duration(ruleset.rule(rule).for_)})"
            )
        elif incident is not None:
            lines.append(
                f"{rule} {_braces(target)}: its incident since "
                f"{format_duration(incident.since)} was handled at "
                f"{format_duration(incident.handled or 0.0)}; the rule acts again in "
                "the next incident (the condition must stop holding first)"
            )
        if (rule, target) in state.active:
            active = state.active[(rule, target)]
            lines.append(
                f"{rule} {_braces(target)}: already under remediation since "
                f"{format_duration(active.since)}"
            )
        ladder = state.ladders.get((rule, target))
        if ladder is not None:
            lines.append(
                f"{rule} {_braces(target)}: on ladder step {ladder.step} since "
                f"{format_duration(ladder.since)} (outcome {ladder.outcome or 'not reported'})"
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
            for key, ms in (
                (("at", e.at_ms),)
                if e.to_ms is None
                else (
                    ("from", e.at_ms),
                    ("to", e.to_ms),
                )
            ):
                if ms % interval_ms:
                    problems.append(
                        f"{e.position}: {key} {format_duration(ms / 1000)} is not a multiple "
                        f"of the evaluation interval {format_duration(interval_ms / 1000)}; "
                        "rules are only evaluated at those times"
                    )
            for d in e.decisions:
                if d.rule not in names:
                    problems.append(
                        f"{d.position}: no rule named '{d.rule}'"
                        f"{did_you_mean(d.rule, names, or_list=True)}"
                    )
                    continue
                rule = ruleset.rule(d.rule)
                problems += _target_problems(d, rule)
                if d.kind == "recover" and rule.recover is None and not rule.escalate:
                    problems.append(
                        f"{d.position}: rule '{d.rule}' has no recover, so it never "
                        "makes a recover decision"
                    )
                problems += _step_problems(d.position, d.step, d.kind, rule)
        for o in test.outcomes:
            if o.at_ms % interval_ms:
                problems.append(
                    f"{o.position}: at {format_duration(o.at_ms / 1000)} is not a multiple of "
                    f"the evaluation interval {format_duration(interval_ms / 1000)}"
                )
            if o.rule not in names:
                problems.append(
                    f"{o.position}: no rule named '{o.rule}'"
                    f"{did_you_mean(o.rule, names, or_list=True)}"
                )
            else:
                problems += _step_problems(o.position, o.step, "act", ruleset.rule(o.rule))
    return problems


def _step_problems(position: object, step: int | None, kind: str, rule: Rule) -> list[str]:
    """A ``step`` that the rule's decisions can never carry."""
    if step is None:
        return []
    if kind != "act":
        return [f"{position}: step is for act decisions (a recover ends the ladder)"]
    if not rule.escalate:
        return [f"{position}: rule '{rule.name}' has no escalate ladder, so it has no steps"]
    if step > len(rule.escalate):
        return [f"{position}: rule '{rule.name}' has {len(rule.escalate)} steps, not {step}"]
    return []


def check_work(parsed: RuleTestFile, ruleset: RuleSet, limits: TestLimits) -> list[str]:
    """Problems with the work a file's tests ask for, counted before any runs:
    their evaluations (every interval up to each test's last expected time) and
    their series x evaluations, in all. Each limit is reported once, at the test
    that takes the file past it."""
    problems = []
    interval_ms = parsed.evaluation_interval_ms or round(ruleset.evaluation_interval * 1000)
    interval = format_duration(interval_ms / 1000)
    steps_in_all = series_steps_in_all = 0
    for test in parsed.tests:
        if not test.expect:
            continue
        latest = max(test.expect, key=lambda e: e.last_ms)
        steps = latest.last_ms // interval_ms + 1
        series = len(test.series) + len(test.alerts)
        before, steps_in_all = steps_in_all, steps_in_all + steps
        if before <= limits.evaluations < steps_in_all:
            problems.append(
                f"{latest.position}: "
                + over_limit(
                    "evaluations",
                    f"checking {format_duration(latest.last_ms / 1000)} needs {steps:,} "
                    f"evaluations at the interval {interval} ({steps_in_all:,} in the file "
                    "so far)",
                    limits.evaluations,
                    "expect an earlier time, or set a longer evaluationInterval",
                )
            )
        before, series_steps_in_all = series_steps_in_all, series_steps_in_all + steps * series
        if before <= limits.series_evaluations < series_steps_in_all:
            problems.append(
                f"{test.position}: "
                + over_limit(
                    "series_evaluations",
                    f"test '{test.name}' evaluates {series:,} series and alerts {steps:,} "
                    f"times ({series_steps_in_all:,} in the file so far)",
                    limits.series_evaluations,
                    "use fewer series or an earlier last expected time",
                )
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


__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "check_against",
    "check_work",
    "find_test_files",
    "main",
    "run_file",
    "run_test",
]
