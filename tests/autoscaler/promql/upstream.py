"""Prometheus's newest PromQL test files (``promql/promqltest/testdata``) read and
run, each case sorted into what it needs.

Why: the evaluator is held to PromQL 2.42 (``conformance.py`` runs that suite),
but the newest upstream files say where the language went since. Running them
answers "what of today's suite do we pass, and what do we not run because it is
newer than 2.42", which a bare pass/fail could not: most of these cases use
something 2.42 does not have, and failing on them would say nothing.

The format grew since 2.42 (``promqltest/test.go``): ``eval instant at T EXPR``
and ``eval range from A to B step S EXPR``, with ``expect fail``, ``expect
ordered``, ``expect warn``/``info`` (annotations, not values: not compared),
``expect range vector ...`` and ``expect string ...`` lines before the expected
samples, and ``load_with_nhcb`` (classic histograms also loaded as native ones).
A range case runs as one instant query per step, which is what a range query is.

Each case ends in one kind (``KINDS``):

* ``agree``/``disagree``: run and compared (``conformance.compare``'s rules: a
  relative error of 1e-6, NaN equal to NaN). A disagreement is most often a
  change of behaviour after 2.42 (3.0 made range selectors left-open, for one).
* ``refused``: the evaluator refuses the expression at load with a reason.
* ``syntax``: 2.42's parser refuses it (functions, modifiers, duration
  arithmetic, ... added later).
* ``native``: native histograms (in the data or the expected answer).
* ``format``: a test-format feature this reader does not run (range-vector or
  string expectations, series notation newer than 2.42's, ``@ start()`` in a
  range case, which instants cannot stand for).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from accel_common.durations import parse_duration_ms
from autoscaler.promql.errors import EvalError, ExprError, UnsupportedError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.ruleset.testfile import expand_values
from autoscaler.types import Labels, Scalar, Vector
from tests.autoscaler.promql.conformance import (
    Eval,
    Load,
    almost_equal,
    outcome,
    parse_number,
    split_series,
    store_of,
)

KINDS = ("agree", "disagree", "refused", "syntax", "native", "format")
PAST_2_42 = frozenset({"syntax", "native", "format"})
"""The kinds that use something newer than 2.42."""

_EVAL = re.compile(r"^eval(?:_(fail|warn|info|ordered))?\s+(instant|range)\s+(.+)$")
_INSTANT = re.compile(r"^at\s+(\S+)\s+(.+)$")
_RANGE = re.compile(r"^from\s+(\S+)\s+to\s+(\S+)\s+step\s+(\S+)\s+(.+)$")


@dataclass
class Case:
    """One ``eval`` of the newer format."""

    file: str
    line: int
    expr: str
    start_ms: int = 0
    end_ms: int = 0
    step_ms: int = 0
    fail: bool = False
    ordered: bool = False
    is_range: bool = False
    scalar: float | None = None
    expected: list[tuple[Labels, list[float | object | None]]] = field(default_factory=list)
    kind: str | None = None
    """Set where the case is decided before it runs (``native``, ``format``)."""
    why: str = ""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Context:
    """The loads a case runs over, and what they hold that 2.42 lacks."""

    loads: list[Load] = field(default_factory=list)
    past: str | None = None
    """Why no case here can run (series notation newer than 2.42)."""
    native: set[str] = field(default_factory=set)
    """Metric names with native histograms: the cases that name one are ``native``."""


def _lines(path: Path) -> list[str]:
    return [
        "" if ln.strip().startswith("#") else ln.strip()
        for ln in path.read_text(encoding="utf-8").split("\n")
    ]


def _read_load(block: list[str], step: str, ctx: Context, nhcb: bool) -> None:
    try:
        load = Load(parse_duration_ms(step), [])
        for ln in block:
            labels, rest = split_series(ln)
            name = dict(labels).get("__name__", "")
            if "{{" in rest:
                ctx.native.add(name)
                continue
            if nhcb and name.endswith("_bucket"):
                # Also loaded as a native histogram under the base name.
                ctx.native.add(name.removesuffix("_bucket"))
            load.series.append((labels, list(expand_values(rest))))
    except (ValueError, IndexError) as e:
        ctx.past = f"series notation newer than 2.42: {e}"
        return
    ctx.loads.append(load)


def _names_native(expr: str, ctx: Context) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", expr) for n in ctx.native if n)


def _read_eval(path: Path, n: int, head: str, block: list[str]) -> Case:
    m = _EVAL.match(head)
    if m is None:
        return Case(path.name, n, head, kind="format", why="eval line not understood")
    suffix, mode, rest = m.groups()
    case = Case(path.name, n, rest, fail=suffix == "fail", ordered=suffix == "ordered")
    try:
        if mode == "instant":
            im = _INSTANT.match(rest)
            assert im is not None, "instant without at"
            case.start_ms = case.end_ms = parse_duration_ms(im.group(1))
            case.expr = im.group(2)
        else:
            rm = _RANGE.match(rest)
            assert rm is not None, "range without from/to/step"
            case.start_ms, case.end_ms, case.step_ms = (
                parse_duration_ms(rm.group(i)) for i in (1, 2, 3)
            )
            case.expr, case.is_range = rm.group(4), True
            if re.search(r"@\s*(start|end)\s*\(", case.expr):
                # A range query's start() is the range's; run as instants, each
                # step would be its own start.
                case.kind, case.why = "format", "@ start()/end() in a range query"
        for ln in block:
            _read_expected(case, ln)
    except (AssertionError, ValueError, IndexError) as e:
        case.kind, case.why = "format", f"not read: {e}"
    return case


def _read_expected(case: Case, ln: str) -> None:
    if ln.startswith("expect "):
        words = ln.split()
        if words[1] == "fail":
            case.fail = True
        elif words[1] == "ordered":
            case.ordered = True
        elif words[1] in ("range", "string"):
            case.kind, case.why = "format", f"expect {words[1]} (not run by this reader)"
        # warn/no_warn/info/no_info are annotations, not values.
        return
    if "{{" in ln:
        case.kind, case.why = "native", "native histograms in the expected answer"
        return
    try:
        case.scalar = parse_number(ln)
        return
    except ValueError:
        pass
    labels, rest = split_series(ln)
    case.expected.append((labels, list(expand_values(rest))))


def _is_command(line: str) -> bool:
    word = line.split()[0].lower()
    return word in ("clear", "load", "load_with_nhcb") or word.startswith("eval")


def read_cases(path: Path) -> Iterator[tuple[Case, Context]]:
    """Every eval of ``path`` with the loads it runs over."""
    lines = _lines(path)
    ctx = Context()
    i = 0
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        head, start = lines[i], i
        i += 1
        block: list[str] = []
        # Newer files put commands on adjacent lines ("clear" then "load 5m").
        while i < len(lines) and lines[i] and not _is_command(lines[i]):
            block.append(lines[i])
            i += 1
        word = head.split()[0].lower()
        if word == "clear":
            ctx = Context()
        elif word in ("load", "load_with_nhcb"):
            # Cases read the loads as they are when they run, so a new load
            # starts a new context that keeps the earlier ones.
            ctx = Context(list(ctx.loads), ctx.past, set(ctx.native))
            _read_load(block, head.split(maxsplit=1)[1], ctx, word == "load_with_nhcb")
        elif word.startswith("eval"):
            yield _read_eval(path, start + 1, head, block), ctx
        else:
            yield Case(path.name, start + 1, head, kind="format", why=f"command {word}"), ctx


def run_file(path: Path) -> Iterator[tuple[Case, str, str]]:
    """Every case of ``path`` with its kind and why."""
    current: tuple[Context, Evaluator] | None = None
    for case, ctx in read_cases(path):
        if case.kind is not None:
            yield case, case.kind, case.why
            continue
        if ctx.past is not None:
            yield case, "format", ctx.past
            continue
        if _names_native(case.expr, ctx):
            yield case, "native", "reads a native histogram"
            continue
        if current is None or current[0] is not ctx:
            current = ctx, Evaluator(store_of(ctx.loads)[0])
        kind, why = _run(case, current[1])
        yield case, kind, why


def _run(case: Case, evaluator: Evaluator) -> tuple[str, str]:
    try:
        evaluator.check(case.expr)
    except UnsupportedError as e:
        return "refused", str(e)
    except ExprError as e:
        return ("agree", "") if case.fail else ("syntax", str(e))
    if not case.is_range:
        old = Eval(case.file, case.line, case.expr, case.start_ms, case.fail, case.ordered)
        old.scalar = case.scalar
        for labels, values in case.expected:
            if len(values) != 1 or not isinstance(values[0], float):
                return "format", "expected sample not a single number"
            old.expected.append((labels, values[0]))
        return outcome(old, evaluator)
    return _run_range(case, evaluator)


def _run_range(case: Case, evaluator: Evaluator) -> tuple[str, str]:
    steps = range(case.start_ms, case.end_ms + 1, max(case.step_ms, 1))
    ours: dict[Labels, list[float | None]] = {}
    try:
        for n, t in enumerate(steps):
            result = evaluator.instant(case.expr, t / 1000)
            samples = (
                [((), result.value)]
                if isinstance(result, Scalar)
                else [(s.labels, s.value) for s in result.samples]
                if isinstance(result, Vector)
                else None
            )
            if samples is None:
                return "disagree", "range query of a range vector"
            for labels, value in samples:
                ours.setdefault(labels, [None] * len(steps))[n] = value
    except EvalError as e:
        return ("agree", "") if case.fail else ("disagree", f"error {e}")
    if case.fail:
        return "disagree", "expected an error"
    theirs = {labels: values for labels, values in case.expected}
    if case.scalar is not None:
        theirs = {(): [case.scalar] * len(steps)}
    if theirs.keys() != ours.keys():
        missing = theirs.keys() ^ ours.keys()
        return "disagree", f"other series: {sorted(missing)[:2]}"
    for labels, want in theirs.items():
        got = ours[labels]
        for a, b in zip(want + [None] * (len(got) - len(want)), got, strict=True):
            if (a is None) != (b is None):
                return "disagree", f"{labels}: {got}, expected {want}"
            if isinstance(a, float) and b is not None and not almost_equal(a, b):
                return "disagree", f"{labels}: {got}, expected {want}"
    return "agree", ""
