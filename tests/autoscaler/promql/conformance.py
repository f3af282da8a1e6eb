"""Prometheus's own PromQL test files (``promql/testdata/*.test``) read and run.

Why it exists: Prometheus 2.42 specifies its query language by these files
(``promql/test.go`` reads them), so running them through the built-in evaluator
is the most complete statement of where the two agree. This module reads the
format and runs one case; ``test_conformance.py`` runs them all and holds the
counts.

The format (``promql/test.go`` at v2.42.0): ``load <step>`` then one series a
line (``metric{l="v"} 0+10x10``, promtool's expanding notation, ``_`` for no
sample, ``stale`` for a staleness marker); ``clear`` empties the storage;
``eval[_fail|_ordered] instant at <duration> <expr>`` then the expected samples,
one a line, or one number for a scalar. Values compare with a relative error of
1e-6 (``almostEqual``), NaN equal to NaN.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from accel_common.durations import parse_duration_ms
from autoscaler.promql.errors import EvalError, ExprError, UnsupportedError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.testfile import STALE, expand_values
from autoscaler.types import Labels, Matrix, Scalar, Vector

_LOAD = re.compile(r"^load\s+(.+?)$")
_EVAL = re.compile(r"^eval(?:_(fail|ordered))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_EPSILON = 1e-6
_MIN_NORMAL = 2.2250738585072014e-308

NATIVE_HISTOGRAM = "native histograms are out of scope (experimental in 2.42)"


@dataclass
class Load:
    step_ms: int
    series: list[tuple[Labels, list[float | object | None]]]


@dataclass
class Clear:
    pass


@dataclass
class Eval:
    file: str
    line: int
    expr: str
    at_ms: int
    fail: bool
    ordered: bool
    scalar: float | None = None
    expected: list[tuple[Labels, float]] = field(default_factory=list)
    skip: str | None = None
    """Why the case cannot be run here (only ``NATIVE_HISTOGRAM``)."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


Command = Load | Clear | Eval


def split_series(line: str) -> tuple[Labels, str]:
    """``metric{l="v",...} rest`` into its labels and the rest (``ParseSeriesDesc``)."""
    m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
    labels: dict[str, str] = {}
    pos = 0
    if m:
        labels["__name__"] = m.group(0)
        pos = m.end()
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            while pos < len(line) and line[pos] in " \t":
                pos += 1
            if line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                raise ValueError(f"bad labels in {line!r}")
            labels[lm.group(1)] = json.loads('"' + lm.group(2) + '"')
            pos = lm.end()
    out = tuple(sorted((k, v) for k, v in labels.items() if v))
    return out, line[pos:].strip()


def parse_number(text: str) -> float:
    """A value as ``strconv.ParseFloat`` (and the lexer) reads it."""
    t = text.strip()
    if t.lower().lstrip("+-") in ("inf", "nan"):
        return float(t)
    if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", t):
        return float(int(t, 16))
    return float(t)


def read_file(path: Path) -> list[Command]:
    """The commands of one ``.test`` file."""
    lines = [
        "" if ln.strip().startswith("#") else ln.strip()
        for ln in path.read_text(encoding="utf-8").split("\n")
    ]
    out: list[Command] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln:
            i += 1
            continue
        word = ln.split()[0].lower()
        if word == "clear":
            out.append(Clear())
            i += 1
        elif word == "load":
            m = _LOAD.match(ln)
            assert m, f"{path.name}:{i + 1}: bad load"
            load = Load(parse_duration_ms(m.group(1)), [])
            i += 1
            while i < len(lines) and lines[i]:
                labels, rest = split_series(lines[i])
                load.series.append((labels, _values(rest)))
                i += 1
            out.append(load)
        elif word.startswith("eval"):
            m = _EVAL.match(ln)
            assert m, f"{path.name}:{i + 1}: bad eval"
            case = Eval(
                path.name,
                i + 1,
                m.group(3),
                parse_duration_ms(m.group(2) or "0s"),
                m.group(1) == "fail",
                m.group(1) == "ordered",
            )
            i += 1
            while i < len(lines) and lines[i]:
                try:
                    case.scalar = parse_number(lines[i])
                    i += 1
                    break
                except ValueError:
                    pass
                labels, rest = split_series(lines[i])
                if "{{" in rest:
                    case.skip = NATIVE_HISTOGRAM
                else:
                    (value,) = _values(rest)
                    assert isinstance(value, float)
                    case.expected.append((labels, value))
                i += 1
            out.append(case)
        else:
            raise AssertionError(f"{path.name}:{i + 1}: unknown command {ln!r}")
    return out


def _values(text: str) -> list[float | object | None]:
    if "{{" in text:
        return [NATIVE_HISTOGRAM]
    return list(expand_values(text))


def store_of(loads: list[Load]) -> tuple[SeriesStore, bool]:
    """A store with every loaded series; the flag says a native histogram was
    among them (cases that read it are skipped)."""
    store = SeriesStore(retention=math.inf)
    native = False
    points: dict[Labels, list[tuple[int, float | object]]] = {}
    for load in loads:
        # Within one load, a series defined twice keeps its last definition
        # (``loadCmd.set``); loads add to what earlier ones stored.
        defined: dict[Labels, list[tuple[int, float | object]]] = {}
        for labels, values in load.series:
            defined[labels] = []
            for n, v in enumerate(values):
                if v is NATIVE_HISTOGRAM:
                    native = True
                elif v is not None:
                    defined[labels].append((n * load.step_ms, v))
        for labels, pts in defined.items():
            points.setdefault(labels, []).extend(pts)
    for labels, pts in points.items():
        for t, v in sorted(pts, key=lambda p: p[0]):
            if v is STALE:
                store.add_stale(dict(labels), t / 1000)
            else:
                assert isinstance(v, float)
                store.add(dict(labels), t / 1000, v)
    return store, native


def almost_equal(a: float, b: float) -> bool:
    """``almostEqual`` of ``promql/test.go``."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    diff = abs(a - b)
    if a == 0 or b == 0 or diff < _MIN_NORMAL:
        return diff < _EPSILON * _MIN_NORMAL
    return diff / (abs(a) + abs(b)) < _EPSILON


def outcome(case: Eval, evaluator: Evaluator) -> tuple[str, str]:
    """``("agree" | "disagree" | "refused", why)`` for one case."""
    try:
        result = evaluator.instant(case.expr, case.at_ms / 1000)
    except UnsupportedError as e:
        return "refused", str(e)
    except (EvalError, ExprError) as e:
        if case.fail:
            return "agree", ""
        return "disagree", f"error {e}"
    if case.fail:
        return "disagree", "expected an error"
    return compare(case, result)


def compare(case: Eval, result: Vector | Scalar | Matrix) -> tuple[str, str]:
    """``compareResult`` of ``promql/test.go``."""
    if isinstance(result, Matrix):
        return "disagree", "range result on instant evaluation"
    if isinstance(result, Scalar):
        if case.scalar is None or not almost_equal(case.scalar, result.value):
            return "disagree", f"scalar {result.value}, expected {case.scalar}"
        return "agree", ""
    if case.scalar is not None:
        return "disagree", f"vector {result}, expected scalar {case.scalar}"
    expected = {labels: (pos + 1, v) for pos, (labels, v) in enumerate(case.expected)}
    seen: set[Labels] = set()
    for pos, s in enumerate(result.samples):
        exp = expected.get(s.labels)
        if exp is None:
            return "disagree", f"unexpected {s.labels} {s.value}"
        if case.ordered and exp[0] != pos + 1:
            return "disagree", f"{s.labels} at {pos + 1}, expected at {exp[0]}"
        if not almost_equal(exp[1], s.value):
            return "disagree", f"{s.labels}: {s.value}, expected {exp[1]}"
        seen.add(s.labels)
    missing = [k for k in expected if k not in seen]
    if missing:
        return "disagree", f"missing {missing[0]}"
    return "agree", ""


def run_file(path: Path) -> Iterator[tuple[Eval, str, str]]:
    """Every eval case of ``path`` with its outcome (``skipped`` and the reason
    for the cases that cannot run here)."""
    loads: list[Load] = []
    evaluator: Evaluator | None = None
    native = False
    for cmd in read_file(path):
        if isinstance(cmd, Clear):
            loads, evaluator = [], None
        elif isinstance(cmd, Load):
            loads.append(cmd)
            evaluator = None
        else:
            if evaluator is None:
                store, native = store_of(loads)
                evaluator = Evaluator(store)
            if cmd.skip is not None:
                yield cmd, "skipped", cmd.skip
            elif native and "histogram" in cmd.expr:
                yield cmd, "skipped", NATIVE_HISTOGRAM
            else:
                kind, why = outcome(cmd, evaluator)
                yield cmd, kind, why
