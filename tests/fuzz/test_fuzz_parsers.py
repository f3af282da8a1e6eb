"""The byte- and line-level parsers, fuzzed with hypothesis: AMD's binary
``gpu_metrics`` table, OpenMetrics with timestamps (``openmetrics``, the file
``accel-autoscaler query`` reads) and the Prometheus text format a scrape stores
(``SeriesStore.ingest_text`` over ``textformat``).

Structure-aware cases start from what the parser accepts: a ``gpu_metrics`` table of
a known revision with fields of any value (the header kept, or its size, revision
or length off by a little), exposition lines built from names, labels (with every
escape), values (NaN, ±Inf, huge exponents) and timestamps, then damaged. The
atheris harnesses in ``atheris_targets`` go further on the same parsers with
coverage guidance.
"""

from __future__ import annotations

import functools
import math
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.promql.openmetrics import OpenMetricsError, load, parse_into
from autoscaler.promql.store import ExpositionError, SeriesStore
from exporter.backends.amd.gpu_metrics import (
    LAYOUTS,
    GpuMetrics,
    GpuMetricsError,
    parse_gpu_metrics,
    residency_throttle,
    xgmi_rates,
)
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import raw_bytes

# -- gpu_metrics ---------------------------------------------------------------


@st.composite
def gpu_metrics_tables(draw: st.DrawFn) -> bytes:
    """A table of a known revision: random or all-ones bytes behind a header that is
    right, or wrong by a little (size, revision, length)."""
    frev, crev = draw(st.sampled_from(sorted(LAYOUTS)))
    size = LAYOUTS[(frev, crev)].size
    fill = draw(st.sampled_from(["ones", "zeros", "random"]))
    if fill == "random":
        body = bytearray(draw(st.binary(min_size=size, max_size=size)))
    else:
        body = bytearray((b"\xff" if fill == "ones" else b"\x00") * size)
        # A few fields set to anything: a counter at its wrap, a width of 0, ...
        for _ in range(draw(st.integers(0, 6))):
            at = draw(st.integers(4, max(4, size - 8)))
            body[at : at + 8] = draw(st.binary(min_size=8, max_size=8))
    header_size = size + draw(st.sampled_from([0, 0, 0, -1, 1, -size, 65535 - size]))
    frev += draw(st.sampled_from([0, 0, 0, 1, 255 - frev]))
    crev += draw(st.sampled_from([0, 0, 0, 1, 255 - crev]))
    struct.pack_into("<HBB", body, 0, header_size & 0xFFFF, frev, crev)
    length = draw(st.sampled_from([size, size, size, size - 1, size + 1, 3, size * 2]))
    data = bytes(body[:length]) + b"\x00" * max(0, length - size)
    return data


def _use(m: GpuMetrics, before: GpuMetrics) -> None:
    """What the backend does with a table: rates and throttle reasons from two."""
    xgmi_rates(before, m)
    residency_throttle(before, m)
    for v in (m.utilization, m.memory_activity, m.power_watts, m.energy_joules):
        assert v is None or math.isfinite(v), v


@budget(400)
@given(data=st.one_of(gpu_metrics_tables(), gpu_metrics_tables(), raw_bytes))
def test_gpu_metrics(data: bytes) -> None:
    def parse() -> GpuMetrics:
        m = parse_gpu_metrics(data)
        _use(m, m)
        return m

    check("gpu_metrics", parse, (GpuMetricsError,))


# -- exposition lines ------------------------------------------------------------

# Drawn from small alphabets and lists: cheap to generate, so that the time goes to
# the parser.
_names = st.one_of(
    st.text(alphabet="ab_:0Z", min_size=1, max_size=6),
    st.sampled_from(["up", "accel_up", "__name__", "0bad", "", "a-b", "x" * 10_000, "é"]),
)
_label_values = st.one_of(
    st.text(alphabet='a\\"n{}#, \t\u00e9\x00', max_size=8),
    st.sampled_from(['\\"', "\\\\", "\\n", "\\", "}", "{", "#", '"', "\n", "x" * 5000]),
)
_values = st.one_of(
    st.floats().map(repr),
    st.sampled_from(
        ["NaN", "+Inf", "-Inf", "1e400", "-1e400", "0x1p3", "1_0", "", "nan", "9" * 5000, "1e"]
    ),
)
_timestamps = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.sampled_from(["9" * 5000, "1e400", "NaN", "x", "-0", "1.5"]),
)


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    name = draw(_names)
    labels = draw(
        st.lists(st.tuples(_names, _label_values), max_size=4).map(
            lambda pairs: ",".join(f'{k}="{v}"' for k, v in pairs)
        )
    )
    series = name + (("{" + labels + "}") if labels or draw(st.booleans()) else "")
    ts = draw(_timestamps)
    line = f"{series} {draw(_values)}" + (f" {ts}" if ts is not None else "")
    if draw(st.integers(0, 9)) == 0:
        line += draw(st.sampled_from([' # {trace_id="a"} 1 2', " extra", "\t", " #"]))
    return line


_comments = st.sampled_from(
    ["# TYPE up gauge", "# HELP up it is up", "# UNIT x seconds", "# EOF", "#", "# x", ""]
)


@st.composite
def expositions(draw: st.DrawFn) -> str:
    lines = draw(st.lists(st.one_of(sample_lines(), sample_lines(), _comments), max_size=8))
    if draw(st.booleans()):
        lines.append("# EOF")
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))
    if draw(st.integers(0, 7)) == 0:
        text = text.replace("\n", draw(st.sampled_from(["\r\n", "\r", "\x00", "\u2028"])))
    return text


def _text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


@budget(200)
@given(data=st.one_of(expositions(), expositions(), expositions(), raw_bytes))
def test_openmetrics_text(data: str | bytes) -> None:
    store = SeriesStore(retention=math.inf)
    n = check("openmetrics", lambda: parse_into(_text(data), store), (OpenMetricsError,))
    if isinstance(n, int):
        assert n >= 0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-parsers")


@budget(100)
@given(data=st.one_of(expositions().map(lambda t: t.encode("utf-8", "surrogatepass")), raw_bytes))
def test_openmetrics_file(workdir: Path, data: bytes) -> None:
    """The file ``accel-autoscaler query`` loads: bytes, so not UTF-8 too."""
    path = workdir / "series.om"
    path.write_bytes(data)
    check("openmetrics file", lambda: load(path), (OpenMetricsError,), names=path.name)


@budget(150)
@given(scrapes=st.lists(st.one_of(expositions(), expositions(), raw_bytes), min_size=1, max_size=3))
def test_exposition_scrapes(scrapes: list[str | bytes]) -> None:
    """Scrapes of one target in a row (its series cache and staleness carry over)."""
    store = SeriesStore(retention=3600.0)

    def scrape(text: str, t: float) -> int:
        return store.ingest_text(text, t, {"node": "n1"}, target="t")

    for i, data in enumerate(scrapes):
        text, t = _text(data), 1000.0 + 15 * i
        n = check(
            "exposition (text format)", functools.partial(scrape, text, t), (ExpositionError,)
        )
        if isinstance(n, int):
            assert n >= 0
