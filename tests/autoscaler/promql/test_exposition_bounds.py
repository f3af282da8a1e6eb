"""The exposition and OpenMetrics readers on hostile input (issue 15): any text or
bytes give a result or the reader's own error (``LineError``, ``ExpositionError``,
``OpenMetricsError``), never another exception, with numbers read as Prometheus
reads them and every line bounded. ``tests/fuzz/`` throws random input at the same
readers; these are the cases worth naming."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autoscaler.commands import query as query_command
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.openmetrics import OpenMetricsError, load, parse_into
from autoscaler.promql.store import ExpositionError, SeriesStore
from autoscaler.promql.textformat import (
    MAX_LABEL_NAME_LENGTH,
    MAX_LABEL_VALUE_LENGTH,
    MAX_LABELS,
    MAX_LINE_LENGTH,
    LineError,
    parse_series,
    parse_timestamp_ms,
    parse_value,
    split_series,
)
from autoscaler.types import Vector


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("-1.5e3", -1500.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("+Inf", math.inf),
        ("-inf", -math.inf),
        ("Infinity", math.inf),
        ("1e-400", 0.0),
    ],
)
def test_values_go_accepts(text: str, value: float) -> None:
    assert parse_value(text) == value


def test_nan_is_a_value() -> None:
    assert math.isnan(parse_value("NaN")) and math.isnan(parse_value("nan"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e400", "out of the float64 range"),
        ("-1e400", "out of the float64 range"),
        ("9" * 400, "out of the float64 range"),
        ("1_000", "invalid sample value"),
        ("\u0661\u0662", "invalid sample value"),  # Arabic-Indic digits: float() reads 12
        ("0x10", "invalid sample value"),
        ("0x1p4", "invalid sample value"),
        ("+NaN", "NaN takes no sign"),
        ("infinit", "invalid sample value"),
        ("", "invalid sample value"),
    ],
)
def test_values_go_refuses(text: str, message: str) -> None:
    with pytest.raises(LineError, match=message):
        parse_value(text)


def test_timestamps_are_int64_milliseconds() -> None:
    assert parse_timestamp_ms("-9223372036854775808") == -(2**63)
    for bad in ("9223372036854775808", "1.5", "1_0", "9" * 5000, "\u0661", ""):
        with pytest.raises(LineError):
            parse_timestamp_ms(bad)


def test_lines_and_labels_are_bounded() -> None:
    with pytest.raises(LineError, match="at most"):
        split_series("x " + "1" * MAX_LINE_LENGTH)
    many = "x{" + ",".join(f'l{i}="v"' for i in range(MAX_LABELS + 1)) + "}"
    with pytest.raises(LineError, match=f"more than {MAX_LABELS} labels"):
        parse_series(many)
    with pytest.raises(LineError, match="label name of"):
        parse_series("x{" + "a" * (MAX_LABEL_NAME_LENGTH + 1) + '="v"}')
    with pytest.raises(LineError, match="characters") as e:
        parse_series('x{a="' + "v" * (MAX_LABEL_VALUE_LENGTH + 1) + '"}')
    assert len(str(e.value)) < 300  # a message quotes a hostile line only in part


@pytest.mark.parametrize(
    "body",
    [
        "x 1 99999999999999999999999\n",  # once an OverflowError from the store
        "x 1 1_000\n",
        "x 1e400\n",
        'x{a="1",a="2"} 1\n',
        'x{a="\\' + "\\" * 1000 + "} 1\n",
    ],
)
def test_a_bad_scrape_body_is_an_exposition_error(body: str) -> None:
    store = SeriesStore()
    with pytest.raises(ExpositionError, match="line 1"):
        store.ingest_text(body, 1000.0, {"node": "n"}, target="n")
    assert store.series_count == 0 or store.sample_count == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x 1 1e300\n# EOF\n", "<input>:1: invalid timestamp"),
        ("x 1 -Inf\n# EOF\n", "<input>:1: invalid timestamp"),
        ("x 1e400 1\n# EOF\n", "<input>:1: sample value '1e400' is out of the float64 range"),
        ("x 1 1\n# EOF\n\n", "<input>:3: data after # EOF"),
    ],
)
def test_openmetrics_refuses_what_promtool_would(text: str, message: str) -> None:
    with pytest.raises(OpenMetricsError) as e:
        parse_into(text, SeriesStore(retention=math.inf))
    assert str(e.value).startswith(message), str(e.value)


def test_a_series_file_that_is_not_utf8_or_too_large_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.om"
    bad.write_bytes(b'x{a="1"} 1 1\nx{a="\xff"} 2 2\n# EOF\n')
    with pytest.raises(OpenMetricsError, match=r"bad\.om:2:6: byte 0xff is not UTF-8"):
        load(bad)
    assert query_command.query("x", str(bad), "2") == 2
    assert "byte 0xff is not UTF-8" in capsys.readouterr().err
    big = tmp_path / "big.om"
    big.write_text("x 1 1\n# EOF\n")
    assert load(big, limit=12).newest == 1.0
    with pytest.raises(OpenMetricsError, match=r"larger than 11 bytes .*--series\.size-limit"):
        load(big, limit=11)
    assert query_command.query("x", str(big), "2", size_limit=11) == 2
    assert "--series.size-limit" in capsys.readouterr().err


def test_a_scrape_from_the_future_cannot_trim_other_targets_history() -> None:
    # One target with a timestamp far ahead used to move the store's newest time,
    # and the next trim dropped every other target's history.
    store = SeriesStore()
    for step in range(40):
        store.ingest_text("a 1\n", 1000.0 + 15 * step, {"node": "n1"}, target="n1")
    with pytest.raises(ExpositionError, match="after the scrape time"):
        store.ingest_text("b 1 9000000000000\n", 1600.0, {"node": "n2"}, target="n2")
    store.ingest_text("a 1\n", 1600.0, {"node": "n1"}, target="n1")
    got = Evaluator(store).instant("count_over_time(a[5m])", 1600.0)
    assert isinstance(got, Vector)
    assert [s.value for s in got.samples] == [21.0]  # 1300 s to 1600 s, both ends
    # A timestamp a little ahead (a clock a minute fast) is still taken.
    store.ingest_text("b 1 1660000\n", 1600.0, {"node": "n2"}, target="n2")
