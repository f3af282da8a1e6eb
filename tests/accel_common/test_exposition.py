"""The one exposition writer: values at full precision (a timestamp to the
millisecond, a counter past 10^15 to the unit), families in declared order with
HELP and TYPE once, label values and HELP texts escaped, output that promtool
accepts."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable

import numpy as np
import pytest

from accel_common.exposition import Exposition, format_value, label_text, sample


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1, "1"),
        (-1, "-1"),
        (0.0, "0"),
        (1.0, "1"),
        (0.375, "0.375"),
        (0.1, "0.1"),
        (1e-7, "1e-07"),
        (-2.5, "-2.5"),
        # A Unix timestamp: `{:g}` wrote 1.79612e+09, up to 5,000 s off.
        (1796123456.789, "1796123456.789"),
        (1796123456.0, "1796123456"),
        # Counters: integers as they are, integral floats without a fraction while a
        # float64 still holds every integer (below 2^53).
        (1_000_001, "1000001"),
        (1_000_001.0, "1000001"),
        (10**15 + 1, "1000000000000001"),
        (float(10**15 + 1), "1000000000000001"),
        (float(2**53 - 1), "9007199254740991"),
        (10**20 + 7, "100000000000000000007"),
        (1e16, "1e+16"),
        (1.5e300, "1.5e+300"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (True, "1"),
        (False, "0"),
        (np.float64(0.25), "0.25"),
        (np.float64(3.0), "3"),
    ],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_every_float_round_trips_exactly() -> None:
    """Whatever the bits, the written value parses back to the same float64 (Go's
    ParseFloat and Python's float() both round correctly, so one check serves)."""
    rng = random.Random(13)
    for _ in range(20_000):
        (x,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        text = format_value(x)
        if math.isnan(x):
            assert text == "NaN"
            continue
        assert float(text) == x, (x, text)
    for n in (10**6 + 1, 10**15 + 1, 2**53 - 1, 123_456_789_012_345):
        assert int(format_value(n)) == n
        assert int(format_value(float(n))) == n


def test_counters_past_a_million_and_past_ten_to_the_fifteen_move_by_one() -> None:
    out = Exposition()
    out.family("x_total", "counter", "Things.")
    for n in (10**6, 10**6 + 1, 10**15, 10**15 + 1):
        out.add("x_total", {"n": str(n)}, n)
        out.add("x_total", {"n": f"{n}f"}, float(n))
    lines = out.text().splitlines()[2:]
    assert lines == [
        'x_total{n="1000000"} 1000000',
        'x_total{n="1000000f"} 1000000',
        'x_total{n="1000001"} 1000001',
        'x_total{n="1000001f"} 1000001',
        'x_total{n="1000000000000000"} 1000000000000000',
        'x_total{n="1000000000000000f"} 1000000000000000',
        'x_total{n="1000000000000001"} 1000000000000001',
        'x_total{n="1000000000000001f"} 1000000000000001',
    ]


def test_labels_from_pairs_mappings_or_text() -> None:
    assert label_text([("a", "1"), ("b", 'q"\\\n')]) == 'a="1",b="q\\"\\\\\\n"'
    assert label_text({"b": "2", "a": "1"}) == 'b="2",a="1"'  # order as given
    assert label_text('a="1"') == 'a="1"'
    assert sample("up", "", 1) == "up 1"
    assert sample("up", {}, 0.5) == "up 0.5"
    assert sample("up", {"job": "x"}, 1) == 'up{job="x"} 1'


def test_families_in_declared_order_once_each_empty_ones_left_out(
    promtool_check: Callable[[str], None],
) -> None:
    out = Exposition()
    out.family("b_seconds", "gauge", "Second family.")
    out.family("a_total", "counter", "First\\family\nwith a newline.")
    out.family("c_ratio", "gauge", "Never sampled.")
    out.add("a_total", {"k": "v"}, 3)
    out.add("b_seconds", "", 1.5)
    out.extend("a_total", [sample("a_total", {"k": "w"}, 4)])
    # A new HELP for a declared family keeps its place.
    out.family("b_seconds", "gauge", "Second family, described again.")
    text = out.text()
    assert text == (
        "# HELP b_seconds Second family, described again.\n"
        "# TYPE b_seconds gauge\n"
        "b_seconds 1.5\n"
        "# HELP a_total First\\\\family\\nwith a newline.\n"
        "# TYPE a_total counter\n"
        'a_total{k="v"} 3\n'
        'a_total{k="w"} 4\n'
    )
    promtool_check(text)
    assert Exposition().text() == ""


def test_undeclared_family_and_unknown_type_are_refused() -> None:
    out = Exposition()
    with pytest.raises(KeyError, match="undeclared family"):
        out.add("nope", "", 1)
    with pytest.raises(ValueError, match="unknown metric type 'gauges'"):
        out.family("x", "gauges", "X.")


def test_special_values_pass_promtool(promtool_check: Callable[[str], None]) -> None:
    out = Exposition()
    out.family("v", "gauge", "Values.")
    for i, x in enumerate((math.nan, math.inf, -math.inf, 1e-300, 1.7976931348623157e308, -0.0)):
        out.add("v", {"i": str(i)}, x)
    promtool_check(out.text())
