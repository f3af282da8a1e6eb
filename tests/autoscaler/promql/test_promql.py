"""Unit tests of the built-in evaluator: store, staleness, scrapes, the subset
check, OpenMetrics loading, the query CLI and the errors Prometheus raises.

Agreement with Prometheus itself is ``test_promql_differential.py``; here each
rule is pinned down on a few hand-made samples, and the vectorised range
functions are checked against a plain, one-series-at-a-time transcription of
Prometheus's ``functions.go`` on random data.
"""

from __future__ import annotations

import json
import math
import random
from itertools import pairwise, product
from pathlib import Path

import numpy as np
import pytest

from autoscaler.commands import query as query_command
from autoscaler.promql import query
from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.evaluator import Evaluator, prometheus_time_ms
from autoscaler.promql.family import is_stale
from autoscaler.promql.matchers import (
    Matcher,
    MatchType,
    RegexError,
    compile_go_regex,
    literal_alternatives,
)
from autoscaler.promql.openmetrics import OpenMetricsError, load, parse_into
from autoscaler.promql.store import ExpositionError, SeriesStore
from autoscaler.promql.support import parse_error, required_retention, unsupported
from autoscaler.types import Matrix, Scalar, Vector


def values(result: Vector | Scalar | Matrix) -> dict[tuple[tuple[str, str], ...], float]:
    assert isinstance(result, Vector)
    return {s.labels: s.value for s in result.samples}


def one(result: Vector | Scalar | Matrix) -> float:
    v = values(result)
    assert len(v) == 1, v
    return next(iter(v.values()))


X = {"__name__": "x", "node": "a"}
XL = (("__name__", "x"), ("node", "a"))


# -- store ---------------------------------------------------------------------


def test_lookback_is_five_minutes_both_ends_included() -> None:
    s = SeriesStore()
    s.add(X, 1000, 1.0)
    ev = Evaluator(s)
    assert values(ev.instant("x", 1000)) == {XL: 1.0}
    assert values(ev.instant("x", 1300)) == {XL: 1.0}
    assert values(ev.instant("x", 1300.001)) == {}
    assert values(ev.instant("x", 999.999)) == {}
    assert values(Evaluator(s, lookback_delta=60).instant("x", 1100)) == {}


def test_out_of_order_and_duplicate_samples_are_ignored() -> None:
    s = SeriesStore()
    assert s.add(X, 100, 1.0)
    assert not s.add(X, 100, 2.0)
    assert not s.add(X, 50, 3.0)
    assert s.add(X, 101, 4.0)
    assert s.sample_count == 2


def test_stale_marker_ends_the_series_now() -> None:
    s = SeriesStore()
    for i in range(5):
        s.add(X, 100 + 15 * i, float(i))
    assert s.add_stale(X, 175)
    ev = Evaluator(s)
    assert values(ev.instant("x", 174)) == {XL: 4.0}
    assert values(ev.instant("x", 175)) == {}
    assert values(ev.instant("x", 200)) == {}
    # Range selectors skip the marker and keep the points before it.
    assert one(ev.instant("count_over_time(x[2m])", 200)) == 5
    assert one(ev.instant("changes(x[2m])", 200)) == 4
    # The series comes back with its next sample.
    s.add(X, 190, 9.0)
    ev = Evaluator(s)
    assert values(ev.instant("x", 190)) == {XL: 9.0}
    assert one(ev.instant("count_over_time(x[2m])", 190)) == 6
    assert one(ev.instant("resets(x[2m])", 190)) == 0
    assert one(ev.instant("last_over_time(x[1m])", 200)) == 9.0


def test_retention_trims_and_drops_empty_series() -> None:
    s = SeriesStore(retention=60)
    gone = {"__name__": "gone", "node": "a"}
    ref_gone = s.ref(gone)
    s.append([ref_gone], 0, [1.0])
    for i in range(200):
        s.add(X, 10 * i, float(i))
    # Trimming is lazy (full buffers, every quarter retention) but bounded.
    assert s.sample_count <= 60 // 10 + 40
    assert s.series_count == 1
    with pytest.raises(KeyError):
        s.append([ref_gone], 2000, [1.0])
    ev = Evaluator(s)
    assert one(ev.instant("x", 1990)) == 199
    assert one(ev.instant("count_over_time(x[50s])", 1990)) == 6
    s.drop_before(1985)
    assert s.sample_count == 1
    s.drop_before(5000)
    assert s.series_count == 0
    assert values(Evaluator(s).instant("x", 1990)) == {}


def test_a_ref_taken_before_its_first_sample_survives_maintenance() -> None:
    s = SeriesStore(retention=40)
    early = s.ref({"__name__": "later"})
    for i in range(100):
        s.add(X, 10 * i, 1.0)
    assert s.append([early], 1000, [5.0]) == 1
    assert one(Evaluator(s).instant("later", 1000)) == 5.0


def test_buffers_grow_and_keep_every_sample_within_retention() -> None:
    s = SeriesStore(retention=math.inf)
    refs = s.refs({"__name__": "g", "i": str(i)} for i in range(50))
    for step in range(700):
        s.append(refs, step, np.arange(50) + step)
    assert s.sample_count == 50 * 700
    m = Evaluator(s).instant('g{i="7"}[10m]', 699)
    assert isinstance(m, Matrix)
    assert [p for p in m.series[0].points][:2] == [(99.0, 106.0), (100.0, 107.0)]
    assert len(m.series[0].points) == 601


def test_vectorised_append_dedupes_and_reports() -> None:
    s = SeriesStore()
    refs = s.refs([X, {"__name__": "x", "node": "b"}])
    assert s.append([refs[0], refs[1], refs[0]], 10, [1.0, 2.0, 3.0]) == 2
    assert values(Evaluator(s).instant("x", 10))[XL] == 1.0
    with pytest.raises(KeyError):
        s.append([99], 11, [1.0])
    with pytest.raises(ValueError):
        s.ref({"node": "a"})


def test_empty_label_values_are_absent_labels() -> None:
    s = SeriesStore()
    s.add({"__name__": "x", "node": "a", "pod": ""}, 10, 1.0)
    ev = Evaluator(s)
    assert values(ev.instant('x{pod=""}', 10)) == {XL: 1.0}
    assert values(ev.instant('x{pod!=""}', 10)) == {}
    assert values(ev.instant('x{pod=~"|p"}', 10)) == {XL: 1.0}
    assert values(ev.instant('x{pod!~"p.*"}', 10)) == {XL: 1.0}


def test_regex_matchers_are_anchored_and_see_new_values() -> None:
    s = SeriesStore()
    for node in ("gpu-1", "gpu-12", "xgpu-1"):
        s.add({"__name__": "x", "node": node}, 10, 1.0)
    ev = Evaluator(s)
    got = {dict(k)["node"] for k in values(ev.instant('x{node=~"gpu-1|gpu-2"}', 10))}
    assert got == {"gpu-1"}
    s.add({"__name__": "x", "node": "gpu-2"}, 10, 1.0)
    ev = Evaluator(s)
    got = {dict(k)["node"] for k in values(ev.instant('x{node=~"gpu-1|gpu-2"}', 10))}
    assert got == {"gpu-1", "gpu-2"}
    got = {dict(k)["node"] for k in values(ev.instant('x{node!~"gpu-.*"}', 10))}
    assert got == {"xgpu-1"}
    assert len(values(ev.instant('{__name__=~"x|y", node=~"[[:alpha:]]+-\\\\d"}', 10))) == 3


def test_an_alternation_of_plain_strings_selects_by_code_as_the_regex_would() -> None:
    """The store's shortcut for ``node=~"n1|n2|..."`` (a membership test of the
    strings' codes) agrees with running the expression, for random alternations
    over values with regex punctuation in them, absent values and the empty one."""
    rng = random.Random(7)
    alphabet = ["a", "b", "-", ".", "|", "*", "\\", "1", "é"]
    symbols = SeriesStore().symbols
    values = ["".join(rng.choices(alphabet, k=rng.randint(0, 4))) for _ in range(60)]
    codes = np.array([symbols.intern(v) for v in values], dtype=np.int64)
    for _ in range(300):
        chosen = rng.sample(values, rng.randint(1, 5)) + ["zz"][: rng.randint(0, 1)]
        # Escape the punctuation (as the rhythm learner does); a plain "." now
        # and then keeps some patterns regular expressions.
        pattern = "|".join(
            "".join("\\" + c if c in ".|*\\" and rng.random() < 0.9 else c for c in v)
            for v in chosen
        )
        for kind in (MatchType.RE, MatchType.NRE):
            try:
                m = Matcher.make("node", kind, pattern)
            except RegexError:  # an unescaped "*" where nothing repeats
                continue
            if m.literals is None:
                assert literal_alternatives(pattern) is None
                continue
            compiled = compile_go_regex(pattern)
            expected = np.array(
                [(compiled.fullmatch(v) is not None) == (kind is MatchType.RE) for v in values]
            )
            assert (symbols.match(m, codes) == expected).all(), pattern
            assert [m.matches(v) for v in values] == expected.tolist(), pattern
    assert literal_alternatives("gpu-1|gpu\\.2|") == frozenset({"gpu-1", "gpu.2", ""})
    for regex in ("a.b", "(?i)a", "a\\d", "[ab]", "a\\"):
        assert literal_alternatives(regex) is None


def test_go_regex_translation() -> None:
    assert compile_go_regex(r"a\z").fullmatch("a")
    assert compile_go_regex("[[:digit:]]+").fullmatch("123")
    assert not compile_go_regex(r"\d").fullmatch("٣")  # RE2's \d is ASCII
    assert compile_go_regex("(?i)GPU").fullmatch("gpu")
    for bad in (r"\p{Greek}", r"\Qa.b\E", "(?U)a+", "[[:^alpha:]]"):
        with pytest.raises(RegexError):
            compile_go_regex(bad)


# -- scrapes -----------------------------------------------------------------------

EXPOSITION = """\
# HELP accel_up Whether the device answers.
# TYPE accel_up gauge
accel_up{device="nvidia0"} 1
accel_up{device="nvidia1"} 1
accel_info{device="nvidia0",node="exporter-node",model="H100 \\"SXM\\"\\\\x"} 1
"""


def test_ingest_text_adds_target_labels_and_renames_conflicts() -> None:
    s = SeriesStore()
    assert s.ingest_text(EXPOSITION, 100, {"node": "n1"}, target="n1:9400") == 3
    got = values(Evaluator(s).instant("accel_info", 100))
    assert list(got) == [
        (
            ("__name__", "accel_info"),
            ("device", "nvidia0"),
            ("exported_node", "exporter-node"),
            ("model", 'H100 "SXM"\\x'),
            ("node", "n1"),
        )
    ]


def test_ingest_text_marks_vanished_series_stale() -> None:
    s = SeriesStore()
    s.ingest_text(EXPOSITION, 100, {"node": "n1"}, target="t")
    s.ingest_text('accel_up{device="nvidia0"} 1\n', 115, {"node": "n1"}, target="t")
    ev = Evaluator(s)
    assert len(values(ev.instant("accel_up", 110))) == 2
    assert [dict(k)["device"] for k in values(ev.instant("accel_up", 115))] == ["nvidia0"]
    assert values(ev.instant("accel_info", 115)) == {}
    # Without a target there is nothing to compare with: no stale markers.
    s2 = SeriesStore()
    s2.ingest_text(EXPOSITION, 100)
    s2.ingest_text('accel_up{device="nvidia0"} 1\n', 115)
    assert len(values(Evaluator(s2).instant("accel_up", 115))) == 2


def test_failed_scrape_and_end_target_mark_everything_stale() -> None:
    s = SeriesStore()
    s.ingest_text(EXPOSITION, 100, target="t")
    with pytest.raises(ExpositionError, match="line 2: invalid sample value"):
        s.ingest_text('accel_up 1\naccel_up{device="x"} one\n', 115, target="t")
    assert values(Evaluator(s).instant("accel_up", 115)) == {}
    s.ingest_text(EXPOSITION, 130, target="t")
    assert len(values(Evaluator(s).instant("accel_up", 130))) == 2
    s.end_target("t", 145)
    assert values(Evaluator(s).instant("accel_up", 145)) == {}


def test_ingest_text_keeps_explicit_timestamps_and_first_duplicate() -> None:
    s = SeriesStore()
    s.ingest_text("x 1 50000\ny 3\ny 4\n", 100, target="t")
    ev = Evaluator(s)
    assert one(ev.instant("y", 100)) == 3
    assert one(ev.instant("x", 60)) == 1
    assert values(ev.instant("x", 49)) == {}
    # A timestamped series is not tracked for staleness (as in Prometheus).
    s.ingest_text("y 5\n", 115, target="t")
    assert one(Evaluator(s).instant("x", 115)) == 1


# -- evaluation ------------------------------------------------------------------


def fleet() -> SeriesStore:
    s = SeriesStore()
    for t in (0, 15, 30):
        for node, dev, util in (("a", "d0", 0.1), ("a", "d1", 0.5), ("b", "d0", 0.9)):
            s.add({"__name__": "util", "node": node, "device": dev}, t, util)
            s.add({"__name__": "mem", "node": node, "device": dev}, t, 2 * util)
        s.add({"__name__": "info", "node": "a", "pool": "p1"}, t, 1)
        s.add({"__name__": "info", "node": "b", "pool": "p2"}, t, 1)
    return s


def test_result_types() -> None:
    ev = Evaluator(fleet())
    assert ev.instant("1 + 1", 30) == Scalar(2.0, 30.0)
    assert isinstance(ev.instant("util[1m]", 30), Matrix)
    r = ev.instant("util > 0.4", 30)
    assert isinstance(r, Vector)
    assert all(s.timestamp == 30.0 and s.get("__name__") == "util" for s in r.samples)
    assert {s.get("__name__") for s in ev.instant("util > bool 0.4", 30).samples} == {""}  # type: ignore[union-attr]


def test_group_left_copies_labels_from_the_one_side() -> None:
    ev = Evaluator(fleet())
    got = values(ev.instant("util * on(node) group_left(pool) info", 30))
    assert got[(("device", "d1"), ("node", "a"), ("pool", "p1"))] == 0.5
    assert len(got) == 3


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "util + on(node) info * on(node) group_left util",
            'found duplicate series for the match group {node="a"} on the right hand-side',
        ),
        ("info * on() group_right util", "on the left hand-side"),
        ("mem + on(node) info", "many-to-one matching must be explicit"),
        ('{__name__=~"util|mem"} * on(node, device) group_left util', "grouping labels"),
        # A copied label that the one side lacks is removed from the many side's
        # rows, and one it has overwrites theirs: node a's two devices collide.
        ("util * on(node) group_left(device) info", "grouping labels"),
        (
            'util * on(node) group_left(device) label_replace(info, "device", "x", "", "")',
            "grouping labels",
        ),
        ('abs({__name__=~"util|mem"})', "vector cannot contain metrics with the same labelset"),
        ('rate({__name__=~"util|mem"}[1m])', "same labelset"),
        ('-{__name__=~"util|mem"}', "same labelset"),
        ('{__name__=~"util|mem"} + 1', "same labelset"),
    ],
)
def test_eval_errors_prometheus_raises(expr: str, message: str) -> None:
    with pytest.raises(EvalError, match=message.replace("(", r"\(").replace("{", r"\{")):
        Evaluator(fleet()).instant(expr, 30)


def test_expression_errors() -> None:
    ev = Evaluator(fleet())
    with pytest.raises(ExprError, match="parse error"):
        ev.instant("sum(", 30)
    with pytest.raises(ExprError, match="'or' between label matchers is not supported"):
        ev.instant('util{node="a" or node="b"}', 30)
    with pytest.raises(ExprError, match="negative @ time"):
        ev.instant("util @ -100", 30)
    with pytest.raises(ExprError, match="parse error: bad duration '600'"):
        ev.instant("rate(util[600])", 30)
    with pytest.raises(ExprError, match=r"not in PromQL 2\.42"):
        ev.instant("double_exponential_smoothing(util[5m], 0.5, 0.5)", 30)


def test_absent_labels_come_from_equality_matchers() -> None:
    ev = Evaluator(fleet())
    assert values(ev.instant('absent(util{node="z", device=~"d.*", pool="p"})', 30)) == {
        (("node", "z"), ("pool", "p")): 1.0
    }
    assert values(ev.instant("absent(util)", 30)) == {}


def test_prometheus_time_ms_rounds_like_the_http_api() -> None:
    assert prometheus_time_ms(1700000000.123) == 1700000000123
    assert prometheus_time_ms(2.0006) == 2001
    assert prometheus_time_ms(2.0004) == 2000
    assert prometheus_time_ms(0.0004) == 0
    assert prometheus_time_ms(-1.5) == -1500


# -- range functions against a transcription of functions.go ------------------------


def _reference(
    name: str, points: list[tuple[int, float]], start: int, end: int, rng: int
) -> float | None:
    if name in ("rate", "increase", "delta"):
        if len(points) < 2:
            return None
        counter = name != "delta"
        result = points[-1][1] - points[0][1]
        if counter:
            last = 0.0
            for _, v in points:
                if v < last:
                    result += last
                last = v
        to_start = (points[0][0] - start) / 1000
        to_end = (end - points[-1][0]) / 1000
        sampled = (points[-1][0] - points[0][0]) / 1000
        average = sampled / (len(points) - 1)
        if counter and result > 0 and points[0][1] >= 0:
            to_zero = sampled * (points[0][1] / result)
            to_start = min(to_start, to_zero)
        threshold = average * 1.1
        interval = sampled
        interval += to_start if to_start < threshold else average / 2
        interval += to_end if to_end < threshold else average / 2
        result *= interval / sampled
        return result / (rng / 1000) if name == "rate" else result
    vals = [v for _, v in points]
    if name == "changes":
        return float(sum(1 for a, b in pairwise(vals) if a != b))
    if name == "resets":
        return float(sum(1 for a, b in pairwise(vals) if b < a))
    if name == "sum_over_time":
        return sum(vals)
    if name == "avg_over_time":
        return sum(vals) / len(vals)
    if name == "min_over_time":
        return min(vals)
    if name == "max_over_time":
        return max(vals)
    if name == "count_over_time":
        return float(len(vals))
    return vals[-1]


@pytest.mark.parametrize("aligned", [True, False])
def test_range_functions_match_a_per_series_transcription(aligned: bool) -> None:
    rand = random.Random(5)
    s = SeriesStore(retention=math.inf)
    truth: dict[str, list[tuple[int, float | None]]] = {}
    for i in range(300):
        labels = {"__name__": "c", "i": str(i)}
        offset = 0 if aligned else rand.randrange(0, 15000)
        value = rand.random() * 100
        pts: list[tuple[int, float | None]] = []
        for step in range(80):
            if not aligned and rand.random() < 0.1:
                continue
            t = 1_000_000 + step * 15000 + offset
            if i % 50 == 3 and step % 17 == 5:
                s.add_stale(labels, t / 1000)
                pts.append((t, None))
                continue
            value = value + rand.random() * 10 if rand.random() > 0.05 else rand.random()
            s.add(labels, t / 1000, value)
            pts.append((t, value))
        truth[str(i)] = pts
    ev = Evaluator(s)
    t_eval = 1_000_000 + 60 * 15000 + 7000
    names = [
        "rate", "increase", "delta", "changes", "resets", "sum_over_time", "avg_over_time",
        "min_over_time", "max_over_time", "count_over_time", "last_over_time",
    ]  # fmt: skip
    for name in names:
        for rng in (60_000, 300_000):
            got = {
                dict(k)["i"]: v
                for k, v in values(ev.instant(f"{name}(c[{rng // 1000}s])", t_eval / 1000)).items()
            }
            for key, pts in truth.items():
                window = [(t, v) for t, v in pts if v is not None and t_eval - rng <= t <= t_eval]
                expected = _reference(name, window, t_eval - rng, t_eval, rng) if window else None
                if expected is None:
                    assert key not in got, (name, rng, key)
                else:
                    assert got[key] == pytest.approx(expected, rel=1e-12), (name, rng, key)


# -- support -----------------------------------------------------------------------


def test_unsupported_names_each_construct() -> None:
    assert unsupported('increase(x{severity="fatal"}[5m]) > 0 and on(node) y') == []
    # PromQL 2.42's instant queries are all in the subset now.
    for expr in (
        "histogram_quantile(0.9, sum by (le) (rate(x[5m])))",
        "topk(3, rate(x[5m:1m])) + x @ 100",
        'label_replace(x, "a", "$1", "b", "(.*)")',
        'count_values("v", x)',
        "x atan2 y",
        "scalar(x) * 2",
        "holt_winters(x[5m], 0.5, 0.5)",
        'x{a=~"((?i)abc).*"}',
    ):
        assert unsupported(expr) == [], expr
    assert unsupported('x{a="b" or c="d"}') == ["'or' between label matchers is not supported"]
    assert unsupported('x{a=~"\\\\p{Greek}"}')[0].startswith("regular expression")
    assert unsupported("sum(")[0].startswith("parse error: ")
    assert unsupported("x @ -1") == ["a negative @ time is not supported by the built-in evaluator"]
    assert unsupported("x[600]")[0].startswith("parse error: bad duration '600'")
    assert unsupported('sort_by_label(x, "a")')[0].startswith("parse error: unknown function")


def test_parse_error_and_required_retention() -> None:
    assert parse_error("rate(x[5m])") is None
    assert parse_error("rate(x)") == "expected type matrix in call to function 'rate', got vector"
    assert required_retention("x") == 300
    assert required_retention("rate(x[5m] offset 10m) > y offset 1m") == 1200
    assert required_retention("avg_over_time(x[30m]) and y") == 2100
    assert required_retention("x", lookback_delta=60) == 60


# -- OpenMetrics -----------------------------------------------------------------------


def test_openmetrics_loads_like_promtool(tmp_path: Path) -> None:
    path = tmp_path / "s.om"
    path.write_text(
        "# HELP x_total Things.\n# TYPE x counter\n"
        'x_total{a="1"} 1 1.001\nx_total{a="1"} 3 61\n'
        "# TYPE g gauge\ng NaN 61\n# EOF\n"
    )
    s = load(path)
    m = Evaluator(s).instant("x_total[2m]", 61)
    assert isinstance(m, Matrix)
    # int(1.001 * 1000) is 1000 in float64, as promtool reads it.
    assert m.series[0].points == ((1.0, 1.0), (61.0, 3.0))
    assert math.isnan(one(Evaluator(s).instant("g", 61)))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x 1 1\n", "<input>:2: missing '# EOF'"),
        ("x 1 1\n# EOF\nx 2 2\n", "<input>:3: data after # EOF"),
        ("x 1\n# EOF\n", "<input>:1: sample of x has no timestamp"),
        ("x 1 2\nx 2 1\n# EOF\n", "<input>:2: sample of x at 1 is not after the one on line 1"),
        ('x{a="1} 1 1\n# EOF\n', "<input>:1:"),
        ("x{a=1} 1 1\n# EOF\n", "<input>:1: invalid label"),
        ("x one 1\n# EOF\n", "<input>:1: invalid sample value 'one'"),
        ("# COMMENT x\n# EOF\n", "<input>:1: expected '# TYPE'"),
        ("x 1 1\n\n# EOF\n", "<input>:2: empty line"),
        ("x 1 NaN\n# EOF\n", "<input>:1: invalid timestamp"),
    ],
)
def test_openmetrics_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(OpenMetricsError) as e:
        parse_into(text, SeriesStore(retention=math.inf))
    assert str(e.value).startswith(message), str(e.value)


# -- query CLI ----------------------------------------------------------------------------


@pytest.fixture
def series_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.om"
    path.write_text(
        "# TYPE up gauge\n"
        'up{node="a"} 1 100\nup{node="a"} 0 115.5\nup{node="b"} 1 115\n'
        "# TYPE tiny gauge\ntiny 1e-7 115\n# EOF\n"
    )
    return path


def test_query_prints_the_api_data_object(
    series_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert query_command.query("up", str(series_file), "120.25") == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        '{"resultType":"vector","result":['
        '{"metric":{"__name__":"up","node":"a"},"value":[120.250,"0"]},'
        '{"metric":{"__name__":"up","node":"b"},"value":[120.250,"1"]}]}'
    )
    assert query_command.query("tiny * 2", str(series_file), "120") == 0
    assert json.loads(capsys.readouterr().out)["result"][0]["value"] == [120, "2e-07"]
    assert query_command.query("1 / 3", str(series_file), "120.5") == 0
    assert capsys.readouterr().out.strip() == (
        '{"resultType":"scalar","result":[120.5,"0.3333333333333333"]}'
    )
    assert query_command.query('up{node="a"}[1m]', str(series_file), "120") == 0
    assert json.loads(capsys.readouterr().out) == {
        "resultType": "matrix",
        "result": [
            {"metric": {"__name__": "up", "node": "a"}, "values": [[100, "1"], [115.5, "0"]]}
        ],
    }


@pytest.mark.parametrize(
    ("expr", "time", "status", "message"),
    [
        ("up", "soon", 2, "--time must be unix seconds"),
        ("up", "nan", 2, "--time must be unix seconds"),
        ("sum(", "120", 2, "parse error"),
        ("up{node='a' or node='b'}", "120", 2, "'or' between label matchers is not supported"),
        ("up + on() group_left up", "120", 1, "many-to-many matching not allowed"),
    ],
)
def test_query_errors_exit_with_one_line(
    series_file: Path,
    capsys: pytest.CaptureFixture[str],
    expr: str,
    time: str,
    status: int,
    message: str,
) -> None:
    assert query_command.query(expr, str(series_file), time) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_query_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert query_command.query("up", str(tmp_path / "missing.om"), "1") == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.om"
    bad.write_text("up 1 1\n")
    assert query_command.query("up", str(bad), "1") == 2
    assert f"{bad}:2: missing '# EOF'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (0.1, "0.1"),
        (1e-6, "0.000001"),
        (9.5e-7, "9.5e-07"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (123456789012345678.0, "123456789012345680"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_format_value_like_prometheus(value: float, text: str) -> None:
    assert query.format_value(value) == text


def test_format_timestamp_like_prometheus() -> None:
    assert query.format_timestamp(1700000000.0) == "1700000000"
    assert query.format_timestamp(1700000000.5) == "1700000000.500"
    assert query.format_timestamp(1700000000.007) == "1700000000.007"


def test_a_search_of_a_few_rows_answers_as_the_whole_familys() -> None:
    """``Family.search_rows`` (a selector naming a few of a large family's rows
    searches only theirs) against a per-row binary search, on rows of unequal
    lengths and times, with and without the whole family's search kept."""
    rng = np.random.default_rng(11)
    s = SeriesStore(retention=math.inf)
    for i in range(120):
        t = int(rng.integers(0, 50))
        for _ in range(int(rng.integers(0, 40))):
            t += int(rng.integers(1, 30))
            s.add({"__name__": "x", "node": f"n{i}"}, t, float(t))
    fam = s.families["x"]
    times = [fam.row_times(r) for r in range(fam.n)]
    for _ in range(200):
        rows = np.sort(rng.choice(fam.n, size=int(rng.integers(1, 14)), replace=False))
        target = int(rng.integers(-5, 1300)) * 1000 + int(rng.integers(0, 2)) * 500
        right = bool(rng.integers(0, 2))
        if rng.random() < 0.3:
            fam.search(target, right)
        else:
            fam._searches.clear()
        want = [np.searchsorted(times[r], target, "right" if right else "left") for r in rows]
        assert fam.search_rows(rows.astype(np.int64), target, right).tolist() == want


def test_selecting_by_a_labels_index_finds_the_rows_a_scan_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large family selects by a label's index (from the second ask on) for
    ``=`` and plain-string ``=~`` matchers; random matcher sets find the same rows
    as the scan of every row, also after rows are added and emptied rows dropped
    (the index is rebuilt)."""
    from autoscaler.promql import family as family_module

    rng = random.Random(5)
    s = SeriesStore(retention=math.inf)
    nodes = [f"n{i}" for i in range(40)]

    def grow(count: int, t: float) -> None:
        for _ in range(count):
            labels = {"__name__": "x", "node": rng.choice(nodes), "dev": str(rng.randint(0, 60))}
            if rng.random() < 0.2:
                labels["pool"] = rng.choice(["a", "b"])
            s.add(labels, t, 1.0)

    grow(3000, 10)
    fam = s.families["x"]
    ops = [MatchType.EQ, MatchType.RE, MatchType.NE, MatchType.NRE]

    def random_matchers() -> list[Matcher]:
        out = []
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(["node", "dev", "pool", "nope"])
            kind = rng.choice(ops)
            values = [rng.choice([*nodes, "", "7", "a", "zz"]) for _ in range(rng.randint(1, 4))]
            value = "|".join(values) if kind in (MatchType.RE, MatchType.NRE) else values[0]
            if rng.random() < 0.1:
                value = "n1.*"
            out.append(Matcher.make(name, kind, value))
        return out

    for step in range(400):
        if step in (150, 300):
            grow(200, 20 + step)
            if step == 300:  # half the rows go quiet, age out and are dropped
                for _ in range(2):  # the second ask builds the index
                    fam.select([Matcher.make("node", MatchType.EQ, "n1")])
                for labels in fam.labels[::2]:
                    s.add(dict(labels), 9_500, 1.0)
                s.retention = 2_000.0
                s.add({"__name__": "y"}, 10_000, 1.0)
                assert s.families["x"] is fam and fam.n < 1700
        matchers = random_matchers()
        indexed = fam.select(matchers)
        monkeypatch.setattr(family_module, "_INDEXED_ROWS", 1 << 40)
        scanned = fam.select(matchers)
        monkeypatch.setattr(family_module, "_INDEXED_ROWS", 1024)
        assert indexed.tolist() == scanned.tolist(), [str(m) for m in matchers]
    assert fam._index, "the index was never used"


def test_an_instant_lookup_reads_the_newest_value_as_a_search_of_the_samples_would() -> None:
    """``Family.instant`` at or after every row's newest sample reads the per-row
    newest value; it must answer what the search over the sample matrix answers,
    with stale markers, NaN values, emptied rows and trimmed windows about."""
    rng = np.random.default_rng(17)
    s = SeriesStore(retention=600.0)
    for t in range(0, 3000, 15):
        for i in range(60):
            if rng.random() < 0.15:
                continue
            labels = {"__name__": "x", "i": str(i)}
            if i >= 30 and rng.random() < 0.05:  # only the last 30 series go stale
                s.add_stale(labels, t)
            else:
                s.add(labels, t, float("nan") if rng.random() < 0.05 else float(rng.normal()))
        fam = s.families.get("x")
        if fam is None or t % 45:
            continue
        clean = fam.select([Matcher.make("i", MatchType.RE, "|".join(map(str, range(30))))])
        for rows, ref in product(
            (np.arange(fam.n, dtype=np.int64), clean), (t * 1000, t * 1000 + 7_000)
        ):
            got_rows, got = fam.instant(rows, ref, 300_000)
            idx = fam.search(ref, True)[rows] - 1
            tt = fam.times_at(rows, np.maximum(idx, 0))
            vv = fam.values_at(rows, np.maximum(idx, 0))
            keep = (idx >= 0) & (tt >= ref - 300_000) & ~is_stale(vv)
            assert got_rows.tolist() == rows[keep].tolist()
            np.testing.assert_array_equal(got.view(np.uint64), vv[keep].view(np.uint64))


def test_a_window_ending_at_the_newest_samples_holds_the_points_a_slice_holds() -> None:
    """``Family.window`` ending at or after every row's newest sample reads its
    ends from the per-row arrays (no time search, no gather where a row has one
    point); against each row's own slice of the sample matrix, for windows of one
    point and of many, rows with stale markers, NaN values and unequal lengths."""
    rng = np.random.default_rng(23)
    s = SeriesStore(retention=math.inf)
    for t in range(0, 1800, 60):
        for i in range(40):
            if i % 7 == 3 and rng.random() < 0.3:
                continue  # a few rows miss scrapes
            labels = {"__name__": "x", "i": str(i)}
            if i >= 35 and rng.random() < 0.1:
                s.add_stale(labels, t)
            else:
                s.add(labels, t, float("nan") if rng.random() < 0.03 else float(rng.normal()))
    fam = s.families["x"]
    clean = fam.select([Matcher.make("i", MatchType.RE, "|".join(map(str, range(35))))])
    for rows, width, end in product(
        (clean, np.arange(fam.n, dtype=np.int64)), (60, 59, 300, 1800), (1740, 1750, 1800)
    ):
        maxt, mint = end * 1000, (end - width) * 1000
        w = fam.window(rows, mint, maxt, need_values=True)
        got = {}
        for k, row in enumerate(w.rows.tolist()):
            if w.parts is not None:
                continue
            assert w.values is not None
            n = int(w.count[k])
            vals = w.values[k, :n]
            got[row] = (n, int(w.first_t[k]), int(w.last_t[k]), vals.view(np.uint64).tolist())
            assert w.first_v[k].view(np.uint64) == vals[0].view(np.uint64)
            assert w.last_v[k].view(np.uint64) == vals[-1].view(np.uint64)
        want = {}
        for row in rows.tolist():
            ts = fam.row_times(row)
            vs = fam.row_values(row)
            keep = (ts >= mint) & (ts <= maxt) & ~is_stale(vs)
            if keep.any():
                points = vs[keep].view(np.uint64).tolist()
                want[row] = (int(keep.sum()), int(ts[keep][0]), int(ts[keep][-1]), points)
        if w.parts is None:
            assert got == want, (width, end)
        else:
            assert set(w.rows.tolist()) == set(want)


def test_a_labels_index_answers_rows_in_order_for_few_values_and_for_most() -> None:
    """``LabelIndex.rows`` gives the ascending rows whose code is one of the asked,
    whether they are a few rows (sorted) or much of the family (marked in a mask):
    the fault rules' ``action=~"reset|reboot|isolate"`` selects most counters."""
    from autoscaler.promql.lookup import LabelIndex

    rng = np.random.default_rng(3)
    column = rng.integers(0, 12, size=5_000).astype(np.int64)
    for codes in ([3], [3, 7], [0, 1, 2, 4, 5, 6, 8, 9, 10, 11], [99], [2, 99, 2]):
        index = LabelIndex()
        assert index.rows("node", column, codes) is None  # the first ask scans
        got = index.rows("node", column, codes)
        assert got is not None
        assert got.tolist() == np.flatnonzero(np.isin(column, codes)).tolist(), codes
