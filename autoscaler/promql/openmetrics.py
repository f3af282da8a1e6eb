"""Load series from OpenMetrics text with timestamps into a ``SeriesStore``.

This is the file ``promtool tsdb create-blocks-from openmetrics`` reads, so one
file can be backfilled into Prometheus and loaded into the built-in evaluator,
and the two can be asked the same question (``accel-autoscaler query``, the
differential test). The reading follows promtool's: every sample needs a
timestamp in seconds, which becomes ``int64(ts * 1000)`` milliseconds (truncated,
as Go converts it); the file ends with ``# EOF``; samples of one series must be in
time order. ``# TYPE``, ``# HELP`` and ``# UNIT`` are accepted and not needed.
Errors name the line: ``FILE:LINE: what is wrong``.

The file comes from outside, so any bytes give a store or an ``OpenMetricsError``
and nothing else: a file is read up to ``limit`` bytes (``FILE_LIMIT`` unless the
caller says otherwise) and refused beyond it, bytes that are not UTF-8 are refused
with their line and column, a timestamp must fit int64 milliseconds, and the
per-line ceilings of ``textformat`` apply. Samples are gathered in typed arrays (32
bytes each) and lines are cut one at a time, so memory follows the samples, not a
list of every line.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

from accel_common.readfile import NotUTF8, decode_utf8
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.textformat import (
    LineError,
    parse_series,
    parse_value,
    split_series,
    split_value,
)

_DIRECTIVES = ("TYPE", "HELP", "UNIT")
# What `accel-autoscaler query` reads at most unless --series.size-limit says more.
FILE_LIMIT = 256 * 1024 * 1024
# int64 milliseconds, as Go's int64(ts * 1000) needs to be meaningful.
_MAX_MS = float(1 << 63)


class OpenMetricsError(ValueError):
    """Input that is not OpenMetrics with timestamps; the message has the line."""


def load(path: str | Path, retention: float = math.inf, limit: int = FILE_LIMIT) -> SeriesStore:
    """A new store holding every sample of the file at ``path``. Raises OSError when
    the file cannot be read, OpenMetricsError when it is larger than ``limit`` bytes,
    not UTF-8 or not OpenMetrics."""
    store = SeriesStore(retention=retention)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OpenMetricsError(
            f"{path}: larger than {limit} bytes (raise the limit with --series.size-limit)"
        )
    parse_into(decode(data, str(path)), store, source=str(path))
    return store


def decode(data: bytes, source: str = "<input>") -> str:
    """``data`` as strict UTF-8; OpenMetricsError with the line and column of the
    first byte that is not."""
    try:
        return decode_utf8(data)
    except NotUTF8 as e:
        raise OpenMetricsError(
            f"{source}:{e.line}:{e.column}: byte 0x{e.byte:02x} is not UTF-8 "
            "(OpenMetrics is UTF-8 text)"
        ) from None


def parse_into(text: str, store: SeriesStore, source: str = "<input>") -> int:
    """Adds the samples in ``text`` to ``store``; returns how many."""
    refs: dict[str, int] = {}
    ts_col = array("q")
    ref_col = array("q")
    value_col = array("d")
    last: dict[int, tuple[int, int]] = {}
    eof_line = 0
    lineno = 0
    start = 0
    n = len(text)
    while start < n:
        end = text.find("\n", start)
        if end < 0:
            end = n
        line = text[start:end]
        start = end + 1
        lineno += 1
        if eof_line:
            raise OpenMetricsError(f"{source}:{lineno}: data after # EOF (line {eof_line})")
        if line == "# EOF":
            eof_line = lineno
            continue
        if not line.strip():
            raise OpenMetricsError(f"{source}:{lineno}: empty line (OpenMetrics allows none)")
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[0] != "#" or parts[1] not in _DIRECTIVES:
                raise OpenMetricsError(
                    f"{source}:{lineno}: expected '# TYPE', '# HELP', '# UNIT' or '# EOF', "
                    f"got {line[:40]!r}"
                )
            continue
        try:
            series, rest = split_series(line)
            value_text, ts_text = split_value(rest)
            ref = refs.get(series)
            if ref is None:
                name, pairs = parse_series(series)
                ref = store.ref({**dict(pairs), "__name__": name})
                refs[series] = ref
            value = parse_value(value_text)
            if ts_text is None:
                raise LineError(f"sample of {series[:200]} has no timestamp")
            ts_seconds = parse_value(ts_text)
            if math.isnan(ts_seconds) or not abs(ts_seconds * 1000) < _MAX_MS:
                raise LineError(f"invalid timestamp {ts_text[:40]!r}")
        except (LineError, ValueError) as e:
            raise OpenMetricsError(f"{source}:{lineno}: {e}") from None
        ts = int(ts_seconds * 1000)
        previous = last.get(ref)
        if previous is not None and previous[0] >= ts:
            raise OpenMetricsError(
                f"{source}:{lineno}: sample of {series[:200]} at {ts_text} is not after the "
                f"one on line {previous[1]}: samples of a series must be in time order"
            )
        last[ref] = (ts, lineno)
        ts_col.append(ts)
        ref_col.append(ref)
        value_col.append(value)
    if not eof_line:
        raise OpenMetricsError(f"{source}:{lineno + 1}: missing '# EOF' at the end")
    return _store(store, ts_col, ref_col, value_col)


def _store(
    store: SeriesStore, ts_col: array[int], ref_col: array[int], values: array[float]
) -> int:
    """Appends the samples time by time (the store takes one timestamp per call);
    a stable sort keeps the file's order within one timestamp."""
    if not ts_col:
        return 0
    ts = np.frombuffer(ts_col, dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    refs = np.frombuffer(ref_col, dtype=np.int64)[order]
    vals = np.frombuffer(values, dtype=np.float64)[order]
    bounds = np.flatnonzero(np.diff(ts)) + 1
    stored = 0
    for lo, hi in zip(
        np.concatenate(([0], bounds)), np.concatenate((bounds, [ts.size])), strict=True
    ):
        stored += store.append_ms(refs[lo:hi], int(ts[lo]), vals[lo:hi])
    return stored
