"""The duration grammar (Prometheus's, whole numbers only) and the one
did-you-mean; tests/autoscaler/ruleset/test_duration_agreement.py holds every file
format to the same grammar."""

from __future__ import annotations

import pytest

from accel_common.durations import (
    MAX_MS,
    duration_seconds,
    format_whole,
    parse_duration,
    parse_duration_ms,
)
from accel_common.suggest import did_you_mean


def test_a_refusal_says_what_is_accepted() -> None:
    with pytest.raises(ValueError) as e:
        parse_duration("3 minutes")
    assert "units y, w, d, h, m, s, ms, largest first" in str(e.value)
    with pytest.raises(ValueError, match="durations take whole numbers, write 1m30s"):
        parse_duration("1.5m")
    with pytest.raises(ValueError, match="write 500ms"):
        parse_duration("0.5s")


@pytest.mark.parametrize(("value", "seconds"), [(0, 0.0), (0.0, 0.0), ("0", 0.0), ("2h", 7200.0)])
def test_yaml_values(value: object, seconds: float) -> None:
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [(5, "5 has no unit"), (1.5, "1.5 has no unit"), (False, "invalid duration False")],
)
def test_yaml_values_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        duration_seconds(value)


def test_did_you_mean() -> None:
    assert did_you_mean("cooldwn", ["for", "cooldown"]) == "; did you mean 'cooldown'?"
    assert did_you_mean("zzz", ["for", "cooldown"]) == ""
    assert did_you_mean("zzz", ["a", "b"], or_list=True) == "; expected one of a, b"


@pytest.mark.parametrize(("ms", "text"), [(0, "0s"), (90_000, "1m30s"), (500, "500ms")])
def test_format_whole(ms: int, text: str) -> None:
    assert format_whole(ms) == text


@pytest.mark.parametrize(
    "text", ["293y", "9" * 5000 + "s", "1" + "0" * 30 + "ms", "292y24w3d23h47m16s855ms"]
)
def test_a_duration_past_go_s_range_is_out_of_range(text: str) -> None:
    with pytest.raises(ValueError, match=r"is out of range \(at most 292y24w3d23h47m16s854ms\)"):
        parse_duration_ms(text)


def test_the_longest_duration_and_leading_zeros() -> None:
    assert parse_duration_ms("292y24w3d23h47m16s854ms") == MAX_MS
    assert parse_duration_ms("0" * 5000 + "1s") == 1000


def test_a_huge_fraction_is_refused_without_overflow() -> None:
    with pytest.raises(ValueError, match="invalid duration '9999"):
        parse_duration("9" * 5000 + ".5m")
