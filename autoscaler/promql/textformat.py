"""One sample line of the Prometheus text format and of OpenMetrics.

``name{label="value",...} value [timestamp]``. The two formats share the series
part and the escapes in label values (``\\\\``, ``\\"``, ``\\n``, replaced the way
Prometheus's ``textparse`` does: any other backslash stays as it is); they differ
in the timestamp's unit (milliseconds in the text format, seconds in OpenMetrics)
and in what surrounds the samples, which the callers handle.

The series part (everything up to the closing brace) is returned as text too, so
that a scrape can look it up in a cache and skip the label parsing for series it
has seen before, as Prometheus's scrape cache does.

Any text at all gives a result or a ``LineError`` (a ``ValueError``), never another
exception, and bounded work: a scrape body and a series file come from outside.
Numbers follow Go's ``strconv`` as Prometheus calls it, not Python's looser
``float()``/``int()``: no ``_`` digit separators, no non-ASCII digits, no hex
floats, and a value whose magnitude overflows a float64 (``1e400``) is refused, as
Prometheus refuses it, rather than read as infinity. Fixed ceilings bound what one
line can cost, far above anything an exporter writes (Prometheus leaves the
equivalent ``label_limit`` and ``label_*_length_limit`` unset by default; a scrape
body's total size and sample count are the scrape source's flags):
``MAX_LINE_LENGTH`` characters per sample line, ``MAX_LABELS`` labels per series,
``MAX_LABEL_NAME_LENGTH`` and ``MAX_LABEL_VALUE_LENGTH`` characters per label.
"""

from __future__ import annotations

import math
import re

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*')
_ESCAPE = re.compile(r'\\(["\\n])')
# strconv.ParseInt(s, 10, 64): the text format's millisecond timestamps.
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = 1 << 63

MAX_LINE_LENGTH = 1 << 20
MAX_LABELS = 256
MAX_LABEL_NAME_LENGTH = 1024
MAX_LABEL_VALUE_LENGTH = 64 * 1024


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


def _short(text: str, limit: int = 60) -> str:
    """``text`` for a message: a hostile line may be a megabyte long."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


def split_series(line: str) -> tuple[str, str]:
    """``(series text, rest)``: the name and braces, and what follows them."""
    if len(line) > MAX_LINE_LENGTH:
        raise LineError(f"line of {len(line)} characters (at most {MAX_LINE_LENGTH})")
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
        raise LineError(f"invalid metric name in {_short(series)}")
    name = m.group(0)
    pos = m.end()
    pairs: list[tuple[str, str]] = []
    if pos == len(series):
        return name, pairs
    if series[pos] != "{":
        raise LineError(f"unexpected {series[pos]!r} after the metric name in {_short(series)}")
    pos += 1
    while True:
        while pos < len(series) and series[pos] in " \t":
            pos += 1
        if pos < len(series) and series[pos] == "}":
            pos += 1
            break
        lm = _LABEL.match(series, pos)
        if lm is None:
            raise LineError(f"invalid label at column {pos + 1} of {_short(series)}")
        label, value = lm.group(1), _unescape(lm.group(2))
        if len(label) > MAX_LABEL_NAME_LENGTH:
            raise LineError(
                f"label name of {len(label)} characters in {_short(series)} "
                f"(at most {MAX_LABEL_NAME_LENGTH})"
            )
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            raise LineError(
                f"value of label {_short(label, 40)} has {len(value)} characters "
                f"(at most {MAX_LABEL_VALUE_LENGTH})"
            )
        pairs.append((label, value))
        if len(pairs) > MAX_LABELS:
            raise LineError(f"more than {MAX_LABELS} labels in {_short(series)}")
        pos = lm.end()
        if pos < len(series) and series[pos] == ",":
            pos += 1
            continue
        if pos < len(series) and series[pos] == "}":
            pos += 1
            break
        raise LineError(f"expected ',' or '}}' at column {pos + 1} of {_short(series)}")
    if pos != len(series):
        raise LineError(f"unexpected text after the label set in {_short(series)}")
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise LineError(f"label {_short(k, 40)} appears twice in {_short(series)}")
        seen.add(k)
    return name, pairs


def parse_value(text: str) -> float:
    """A sample value: a Go ``ParseFloat`` number, ``NaN``, ``+Inf`` or ``-Inf``;
    a finite number too large for a float64 is refused (Go's ``ErrRange``)."""
    # Python's float() reads a superset of Go's base-10 ParseFloat as Prometheus
    # calls it (which refuses "p", "P" and "_" first): it also takes "_" digit
    # separators, non-ASCII digits, and a sign before NaN. Refusing those three
    # leaves Go's grammar, at the cost of two string checks on the scrape's hot path.
    if not text.isascii() or "_" in text:
        raise LineError(f"invalid sample value {_short(text, 40)}")
    try:
        value = float(text)
    except ValueError:
        raise LineError(f"invalid sample value {_short(text, 40)}") from None
    if math.isfinite(value):
        return value
    if math.isnan(value):
        if text[0] in "+-":
            raise LineError(f"invalid sample value {_short(text, 40)} (NaN takes no sign)")
    elif text.lstrip("+-")[:1] not in ("i", "I"):
        raise LineError(f"sample value {_short(text, 40)} is out of the float64 range")
    return value


def parse_timestamp_ms(text: str) -> int:
    """A text-format timestamp: integer milliseconds within int64 (Go's
    ``ParseInt(s, 10, 64)``)."""
    if _INT.fullmatch(text) is None or len(text) > 20:
        raise LineError(f"invalid timestamp {_short(text, 40)} (integer milliseconds)")
    ts = int(text)
    if not -_INT64 <= ts < _INT64:
        raise LineError(f"timestamp {text} is out of the int64 range")
    return ts


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
        raise LineError(f"unexpected text after the timestamp: {_short(' '.join(parts[2:]))}")
    return parts[0], parts[1] if len(parts) == 2 else None
