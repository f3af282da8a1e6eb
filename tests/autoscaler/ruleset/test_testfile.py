"""The rule unit-test format's notations: promtool's expanding notation for input
values, series written as selectors, and the durations a test file uses (the one
grammar of accel_common.durations)."""

from __future__ import annotations

import pytest

from accel_common.durations import parse_duration_ms
from autoscaler.ruleset.testfile import STALE, Point, expand_values, parse_series


@pytest.mark.parametrize(
    ("text", "points"),
    [
        ("1 2 3", [1.0, 2.0, 3.0]),
        ("-2+4x3", [-2.0, 2.0, 6.0, 10.0]),
        ("1-2x4", [1.0, -1.0, -3.0, -5.0, -7.0]),
        ("1x4", [1.0] * 5),
        ("0x2 1x1", [0.0, 0.0, 0.0, 1.0, 1.0]),
        ("1 _x3 stale", [1.0, None, None, None, STALE]),
        ("_ 1.5e3 -Inf", [None, 1500.0, float("-inf")]),
        ("0.5+0.25x2", [0.5, 0.75, 1.0]),
        ("", []),
    ],
)
def test_expanding_notation(text: str, points: list[Point]) -> None:
    assert expand_values(text) == points


@pytest.mark.parametrize("text", ["1x", "x3", "1+x3", "stalex2", "abc", "1++2x3"])
def test_expanding_notation_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="bad value"):
        expand_values(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("0s", 0),
        ("15s", 15_000),
        ("5m30s", 330_000),
        ("1h", 3_600_000),
        ("100ms", 100),
        ("1d", 86_400_000),
        ("", None),
        ("5", None),
        ("1m5h", None),
        ("-1m", None),
    ],
)
def test_durations(text: str, ms: int | None) -> None:
    if ms is None:
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration_ms(text)
    else:
        assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('x{a=~"b"}', "label a must be set with '='"),
        ('{a="b"}', "it has no metric name"),
        ("rate(x[5m])", 'write metric{label="value",...}'),
        ("x offset 5m", 'write metric{label="value",...}'),
    ],
)
def test_series_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="not a series") as e:
        parse_series(text)
    assert problem in str(e.value)


def test_series_labels() -> None:
    assert parse_series('up{job="a",instance=""}') == (("__name__", "up"), ("job", "a"))
