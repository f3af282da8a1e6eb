"""Unit tests of the parts added for PromQL 2.42's full instant-query language:
the 2.42 dialect, Go's regexp template expansion, Go's float formatting, the
subquery step grid, and the retention subqueries need.

Whole-language agreement is ``test_conformance.py`` (Prometheus's own test files)
and the differential test against a real Prometheus; these pin down the edges.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from autoscaler.promql.aggregations import format_float, incremental_mean
from autoscaler.promql.dialect import NegativeAtError, rewrite
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.instant_functions import date_function, expand
from autoscaler.promql.plans import Num, Subquery
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.subquery import steps
from autoscaler.promql.support import required_retention
from autoscaler.promql.vectors import groups_of
from autoscaler.types import Scalar, Vector


def test_dialect_is_2_42() -> None:
    assert rewrite("holt_winters(x[5m], 0.1, 0.2)") == (
        "double_exponential_smoothing(x[5m], 0.1, 0.2)"
    )
    # Inside a string, a label value or a comment nothing is rewritten or refused.
    assert rewrite('x{a="holt_winters(x[600])"}') == 'x{a="holt_winters(x[600])"}'
    with pytest.raises(ValueError, match="bad duration '600'"):
        rewrite("rate(x[600])")
    with pytest.raises(ValueError, match="bad duration '60'"):
        rewrite("max_over_time(x[5m:60])")
    with pytest.raises(ValueError, match="not in PromQL 2"):
        rewrite("double_exponential_smoothing(x[5m], 0.1, 0.2)")
    with pytest.raises(ValueError, match="not in PromQL 2"):
        rewrite("limitk(2, x)")
    with pytest.raises(NegativeAtError):
        rewrite("x @ -5")
    assert rewrite("x @ 5 - 3") == "x @ 5 - 3"


def test_go_template_expansion() -> None:
    m = re.fullmatch(r"(?P<a>[a-z]+)-(\d+)", "node-42")
    assert m is not None
    assert expand("$1/$2", m) == "node/42"
    assert expand("${a}x", m) == "nodex"
    assert expand("$ax", m) == ""  # "$ax" names a group "ax", which does not exist
    assert expand("$$1", m) == "$1"
    assert expand("$9", m) == ""


def test_go_float_formatting_and_running_mean() -> None:
    assert [format_float(x) for x in (1.0, 0.1, 1e21, -2.5, math.inf, -math.inf)] == [
        "1",
        "0.1",
        "1000000000000000000000",
        "-2.5",
        "+Inf",
        "-Inf",
    ]
    assert format_float(math.nan) == "NaN"
    big = 9.988465674311579e307
    assert incremental_mean([big] * 4) == pytest.approx(big)
    assert incremental_mean([math.inf, 1.0, 2.0]) == math.inf


def test_date_functions_are_utc_calendar_fields() -> None:
    t = np.array([1_700_000_000.0])  # 2023-11-14 22:13:20 UTC, a Tuesday
    fields = {
        name: date_function(name, t)[0]
        for name in (
            "minute",
            "hour",
            "day_of_week",
            "day_of_month",
            "day_of_year",
            "days_in_month",
            "month",
            "year",
        )
    }
    assert fields == {
        "minute": 13,
        "hour": 22,
        "day_of_week": 2,
        "day_of_month": 14,
        "day_of_year": 318,
        "days_in_month": 30,
        "month": 11,
        "year": 2023,
    }


def test_subquery_steps_are_aligned_to_the_step() -> None:
    sq = Subquery(Num(1.0), range=300_000, step=60_000, offset=0, at=None)
    assert steps(sq, 1_000_030_000, 0) == [999_780_000 + 60_000 * i for i in range(5)]
    # The range's start is included when it falls on the grid.
    assert steps(sq, 600_000, 0)[0] == 300_000
    # Before 1970 Go's division truncates towards zero.
    assert steps(sq, -30_000, 0) == [-300_000, -240_000, -180_000, -120_000, -60_000]


def test_retention_counts_a_subquery_and_what_it_contains() -> None:
    assert required_retention("max_over_time(rate(x[1m])[10m:30s] offset 5m)") == (
        60 + 600 + 300 + 300
    )


def test_at_modifier_and_subquery_end_to_end() -> None:
    store = SeriesStore(retention=math.inf)
    for i in range(0, 61):
        store.add({"__name__": "x", "a": "1"}, i * 60, float(i))
    ev = Evaluator(store)
    at = ev.instant("x @ 600", 3000)
    assert isinstance(at, Vector) and at.samples[0].value == 10.0
    end = ev.instant("x @ end()", 1800)
    assert isinstance(end, Vector) and end.samples[0].value == 30.0
    sub = ev.instant("sum_over_time(x[5m:1m])", 600)
    assert isinstance(sub, Vector) and sub.samples[0].value == 5 + 6 + 7 + 8 + 9 + 10
    s = ev.instant('scalar(label_replace(x @ 120, "b", "$1", "a", "(.*)"))', 0)
    assert isinstance(s, Scalar) and s.value == 2.0


def test_groups_of_is_np_unique() -> None:
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(1, 300))
        low = -5 if trial % 3 == 0 else 0
        key = rng.integers(low, int(rng.integers(1, 5000)), n).astype(np.int64)
        first, group = groups_of(key)
        _, index, inverse = np.unique(key, return_index=True, return_inverse=True)
        assert (first == index).all() and (group == inverse.reshape(-1)).all()
