"""The writer of the Prometheus text format (0.0.4) for the exporter's snapshot
(rendered once per poll and cached) and for the cluster-state series the
controller feeds its built-in evaluator each cycle. The controller's and the node
agent's own ``/metrics`` go through ``prometheus-client`` instead
(``accel_common/ownmetrics.py``); ``tests/exporter/test_exposition_compat.py``
holds this writer to the same bytes as that client's, apart from the order of
labels within a sample and the spelling of a value.

It exists once because each copy that existed drifted: the controller wrote its
values with ``{value:g}``, six significant digits, so a Unix timestamp came out
as ``1.79612e+09`` (up to ±5,000 s off) and a counter above 10^6 stopped moving.

Values are written at full precision. Prometheus's Go client uses
``strconv.FormatFloat(v, 'g', -1, 64)``: the shortest digits that parse back to the
same float64. Python's ``repr`` gives the same shortest digits, laid out without
an exponent up to 10^16 (``1796123456.789`` where Go writes
``1.796123456789e+09``); both parse to the same float64, and the plain layout is
what a person reading ``curl`` output expects of a timestamp. Whole numbers that
a float64 holds exactly one by one (below 2^53) are written as integers, so a
counter reads ``1000001`` rather than ``1000001.0``; NaN and the infinities are
spelt ``NaN``, ``+Inf`` and ``-Inf`` as the format requires.

The writer keeps families in the order they are declared, writes each once with
its HELP and TYPE, and leaves out a family that has no sample (as the Go client's
registry does), so that callers can declare a whole catalogue up front. Sample
lines may be formatted elsewhere (the exporter formats a device's lines in its
backend's poll thread) and handed over with ``extend``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# The metric types of the 0.0.4 text format.
TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

# Below 2^53 a float64 holds every integer, so an integral value is exact as one.
_EXACT_INTEGERS = float(2**53)

Labels = str | Mapping[str, str] | Iterable[tuple[str, str]]


def escape(value: str) -> str:
    """A label value as the text format writes it: backslash, newline and double
    quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    """A HELP text as the text format writes it: backslash and newline escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value at full precision (module docstring): integers as they are,
    integral floats below 2^53 without a fraction, NaN and ±Inf spelt as Prometheus
    spells them, anything else as the shortest digits that round-trip."""
    if isinstance(value, int):
        # int(), so that a bool is written 1/0 and not True/False.
        return str(int(value))
    v = float(value)  # a numpy float's repr is "np.float64(...)"; a float's is digits
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < _EXACT_INTEGERS:
        # int() drops the sign of zero, and -0.0 is a float64 of its own (Go: "-0").
        return "-0" if v == 0 and math.copysign(1.0, v) < 0 else str(int(v))
    return repr(v)


def label_text(labels: Labels) -> str:
    """``k="v",...`` (no braces) from pairs or a mapping, values escaped, in the
    order given; a string is taken as already written."""
    if isinstance(labels, str):
        return labels
    pairs = labels.items() if isinstance(labels, Mapping) else labels
    return ",".join(f'{k}="{escape(v)}"' for k, v in pairs)


def sample(name: str, labels: Labels, value: float) -> str:
    """One sample line, without its newline; no braces when there is no label."""
    # Written out rather than through label_text: the exporter formats every sample
    # of every device here, each poll.
    text = labels if isinstance(labels, str) else label_text(labels)
    if text:
        return f"{name}{{{text}}} {format_value(value)}"
    return f"{name} {format_value(value)}"


class Exposition:
    """Families with their samples, written out as one exposition (module
    docstring): declared order, HELP and TYPE once each, empty families left out."""

    def __init__(self) -> None:
        self._heads: dict[str, tuple[str, str]] = {}
        self._samples: dict[str, list[str]] = {}

    def family(self, name: str, type_: str, help_: str) -> None:
        """Declares a family, or gives a declared one a new HELP text (its place in
        the order stays where it was first declared)."""
        if type_ not in TYPES:
            raise ValueError(f"{name}: unknown metric type {type_!r} (one of {sorted(TYPES)})")
        self._heads[name] = (type_, help_)
        self._samples.setdefault(name, [])

    def add(self, name: str, labels: Labels, value: float) -> None:
        """One sample of a declared family."""
        self._lines(name).append(sample(name, labels, value))

    def extend(self, name: str, lines: Iterable[str]) -> None:
        """Sample lines of a declared family, already written by ``sample``."""
        self._lines(name).extend(lines)

    def _lines(self, name: str) -> list[str]:
        try:
            return self._samples[name]
        except KeyError:
            raise KeyError(f"{name}: a sample of an undeclared family") from None

    def text(self) -> str:
        out: list[str] = []
        for name, (type_, help_) in self._heads.items():
            lines = self._samples[name]
            if not lines:
                continue
            out.append(f"# HELP {name} {escape_help(help_)}")
            out.append(f"# TYPE {name} {type_}")
            out.extend(lines)
        return "\n".join(out) + "\n" if out else ""


__all__ = [
    "TYPES",
    "Exposition",
    "Labels",
    "escape",
    "escape_help",
    "format_value",
    "label_text",
    "sample",
]
