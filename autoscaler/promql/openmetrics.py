"""Load series from OpenMetrics text with timestamps into a ``SeriesStore``.

This is the file ``promtool tsdb create-blocks-from openmetrics`` reads, so one
file can be backfilled into Prometheus and loaded into the built-in evaluator,
and the two can be asked the same question (``accel-autoscaler query``, the
differential test). The reading follows promtool's: every sample needs a
timestamp in seconds, which becomes ``int64(ts * 1000)`` milliseconds (truncated,
as Go converts it); the file ends with ``# EOF``; samples of one series must be in
time order. ``# TYPE``, ``# HELP`` and ``# UNIT`` are accepted and not needed.
Errors name the line: ``FILE:LINE: what is wrong``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from autoscaler.promql.store import SeriesStore
from autoscaler.promql.textformat import (
    LineError,
    parse_series,
    parse_value,
    split_series,
    split_value,
)

_DIRECTIVES = ("TYPE", "HELP", "UNIT")


class OpenMetricsError(ValueError):
    """Input that is not OpenMetrics with timestamps; the message has the line."""


def load(path: str | Path, retention: float = math.inf) -> SeriesStore:
    """A new store holding every sample of the file at ``path``."""
    store = SeriesStore(retention=retention)
    text = Path(path).read_text(encoding="utf-8")
    parse_into(text, store, source=str(path))
    return store


def parse_into(text: str, store: SeriesStore, source: str = "<input>") -> int:
    """Adds the samples in ``text`` to ``store``; returns how many."""
    refs: dict[str, int] = {}
    samples: list[tuple[int, int, float, int]] = []
    last: dict[int, tuple[int, int]] = {}
    eof_line = 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, start=1):
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
                raise LineError(f"sample of {series} has no timestamp")
            ts_seconds = parse_value(ts_text)
            if math.isnan(ts_seconds) or math.isinf(ts_seconds):
                raise LineError(f"invalid timestamp {ts_text!r}")
        except (LineError, ValueError) as e:
            raise OpenMetricsError(f"{source}:{lineno}: {e}") from None
        ts = int(ts_seconds * 1000)
        previous = last.get(ref)
        if previous is not None and previous[0] >= ts:
            raise OpenMetricsError(
                f"{source}:{lineno}: sample of {series} at {ts_text} is not after the one "
                f"on line {previous[1]}: samples of a series must be in time order"
            )
        last[ref] = (ts, lineno)
        samples.append((ts, ref, value, lineno))
    if not eof_line:
        raise OpenMetricsError(f"{source}:{len(lines) + 1}: missing '# EOF' at the end")
    samples.sort(key=lambda s: s[0])
    stored = 0
    start = 0
    while start < len(samples):
        ts = samples[start][0]
        end = start
        while end < len(samples) and samples[end][0] == ts:
            end += 1
        batch = samples[start:end]
        refs_arr = np.fromiter((s[1] for s in batch), dtype=np.int64, count=len(batch))
        values = np.fromiter((s[2] for s in batch), dtype=np.float64, count=len(batch))
        stored += store.append_ms(refs_arr, ts, values)
        start = end
    return stored
