"""One sample line of the Prometheus text format and of OpenMetrics.

``name{label="value",...} value [timestamp]``. The two formats share the series
part and the escapes in label values (``\\\\``, ``\\"``, ``\\n``, replaced the way
Prometheus's ``textparse`` does: any other backslash stays as it is); they differ
in the timestamp's unit (milliseconds in the text format, seconds in OpenMetrics)
and in what surrounds the samples, which the callers handle.

The series part (everything up to the closing brace) is returned as text too, so
that a scrape can look it up in a cache and skip the label parsing for series it
has seen before, as Prometheus's scrape cache does.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*')
_ESCAPE = re.compile(r'\\(["\\n])')


class LineError(ValueError):
    """A sample line that does not parse; the message says where."""


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _closing_brace(line: str) -> int:
    """Index of the brace that closes the label set, skipping quoted values (the
    slow path, for lines where an exemplar may follow with braces of its own)."""
    quoted = False
    escaped = False
    for i in range(line.index("{"), len(line)):
        c = line[i]
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = quoted
        elif c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return i
    return -1


def split_series(line: str) -> tuple[str, str]:
    """``(series text, rest)``: the name and braces, and what follows them."""
    if "{" in line:
        end = line.rfind("}") if "#" not in line else _closing_brace(line)
        if end < 0:
            raise LineError("unterminated label set: missing '}'")
        return line[: end + 1], line[end + 1 :]
    parts = line.split(None, 1)
    return parts[0], (" " + parts[1]) if len(parts) > 1 else ""


def parse_series(series: str) -> tuple[str, list[tuple[str, str]]]:
    """``(metric name, [(label, value), ...])`` from ``name{a="b",...}``."""
    m = _NAME.match(series)
    if m is None:
        raise LineError(f"invalid metric name in {series!r}")
    name = m.group(0)
    pos = m.end()
    pairs: list[tuple[str, str]] = []
    if pos == len(series):
        return name, pairs
    if series[pos] != "{":
        raise LineError(f"unexpected {series[pos]!r} after the metric name in {series!r}")
    pos += 1
    while True:
        while pos < len(series) and series[pos] in " \t":
            pos += 1
        if pos < len(series) and series[pos] == "}":
            pos += 1
            break
        lm = _LABEL.match(series, pos)
        if lm is None:
            raise LineError(f"invalid label at column {pos + 1} of {series!r}")
        pairs.append((lm.group(1), _unescape(lm.group(2))))
        pos = lm.end()
        if pos < len(series) and series[pos] == ",":
            pos += 1
            continue
        if pos < len(series) and series[pos] == "}":
            pos += 1
            break
        raise LineError(f"expected ',' or '}}' at column {pos + 1} of {series!r}")
    if pos != len(series):
        raise LineError(f"unexpected text after the label set in {series!r}")
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise LineError(f"label {k!r} appears twice in {series!r}")
        seen.add(k)
    return name, pairs


def parse_value(text: str) -> float:
    """A sample value: a Go ``ParseFloat`` number, ``NaN``, ``+Inf`` or ``-Inf``."""
    try:
        return float(text)
    except ValueError:
        raise LineError(f"invalid sample value {text!r}") from None


def split_value(rest: str) -> tuple[str, str | None]:
    """``(value text, timestamp text or None)`` from what follows the series."""
    parts = rest.split()
    if not parts:
        raise LineError("missing sample value")
    if len(parts) > 2:
        if parts[2] == "#":
            # An OpenMetrics exemplar: ignored, as Prometheus does without the feature flag.
            return parts[0], parts[1]
        if parts[1] == "#":
            return parts[0], None
        raise LineError(f"unexpected text after the timestamp: {' '.join(parts[2:])!r}")
    return parts[0], parts[1] if len(parts) == 2 else None
