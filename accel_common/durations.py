"""The one duration grammar of this project: Prometheus's, exactly.

Operators write durations in rule files (``for: 5m``), rule unit tests
(``at: 1h30m``), scenarios, sim scripts, action parameters, annotations and flags,
and they write the same ones in their Prometheus rules. So every parser in the
repository calls this module, and it accepts what Prometheus's
``model.ParseDuration`` accepts and nothing else:

* one or more parts, each a whole number and a unit, units from largest to
  smallest, each at most once: ``y`` (365d), ``w`` (7d), ``d``, ``h``, ``m``,
  ``s``, ``ms``. ``1h30m``, ``500ms``, ``1w2d``;
* ``0`` on its own;
* **no fractions**: ``1.5m`` is refused, as promtool refuses it; the message says
  to write ``1m30s``. A fraction is also what a typo like ``1,5m`` or ``1..5m``
  looks like, and a rule that silently waits the wrong time is worse than a refusal;
* no signs, spaces or empty text;
* at most ``MAX_MS``, Go's ``time.Duration`` range (about 292 years): a longer
  one is out of range, as in Prometheus, and every duration here is finite
  (``1e400s`` is not a duration; a 5,000-digit one is refused before Python
  converts its digits).

``duration_seconds`` applies the grammar to a YAML value: a string is parsed, the
number 0 means 0s, and any other number is refused because its unit would be a
guess.
"""

from __future__ import annotations

import re

# (unit, milliseconds), in the only order the grammar accepts them.
UNITS: tuple[tuple[str, int], ...] = (
    ("y", 365 * 86_400_000),
    ("w", 7 * 86_400_000),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
)
_GRAMMAR = re.compile("^" + "".join(rf"(?:(\d+){unit})?" for unit, _ in UNITS) + "$")
# Something that looks like a duration with a fraction in it: "1.5m", "0.5s".
_FRACTION = re.compile(r"^(\d*\.\d+|\d+\.\d*)(y|w|d|h|ms|m|s)$")

# The longest duration: int64 nanoseconds, in milliseconds (292y171d23h47m16s854ms).
MAX_MS = (2**63 - 1) // 1_000_000
_MAX_DIGITS = len(str(MAX_MS))

ACCEPTED = "whole numbers with units y, w, d, h, m, s, ms, largest first, e.g. 30s, 5m, 1h30m"


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text``; raises ValueError saying what is accepted."""
    if text == "0":
        return 0
    m = _GRAMMAR.match(text)
    if not text or m is None:
        raise ValueError(_invalid(text))
    parts = [(g.lstrip("0"), size) for g, (_, size) in zip(m.groups(), UNITS, strict=True) if g]
    if any(len(digits) > _MAX_DIGITS for digits, _ in parts):
        raise ValueError(_out_of_range(text))
    ms = sum(int(digits or "0") * size for digits, size in parts)
    if ms > MAX_MS:
        raise ValueError(_out_of_range(text))
    return ms


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raises ValueError saying what is accepted."""
    return parse_duration_ms(text) / 1000


def duration_seconds(value: object) -> float:
    """A duration written in YAML (a string in the grammar, or the number 0) in
    seconds; raises ValueError saying what is accepted."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r} (use {ACCEPTED})")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"must not be negative, got {value!r}")
        if value == 0:
            return 0.0
        if isinstance(value, int):
            raise ValueError(f"{value!r} has no unit (use e.g. {value}s or {value}m)")
        raise ValueError(f"{value!r} has no unit (use {ACCEPTED})")
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r} (use {ACCEPTED})")
    if value.startswith("-"):
        raise ValueError(f"must not be negative, got {value!r}")
    return parse_duration(value)


def format_whole(ms: int) -> str:
    """``ms`` in the grammar, largest units first (``90000`` -> ``1m30s``)."""
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in UNITS:
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)")


def _out_of_range(text: str) -> str:
    return f"duration {_shown(text)} is out of range (at most {format_whole(MAX_MS)})"


def _invalid(text: str) -> str:
    fraction = _FRACTION.match(text)
    if fraction:
        size = dict(UNITS)[fraction.group(2)]
        whole = float(fraction.group(1)) * size
        if 0 < whole <= MAX_MS and round(whole) > 0:
            return (
                f"invalid duration {text!r}: durations take whole numbers, "
                f"write {format_whole(round(whole))} (use {ACCEPTED})"
            )
    return f"invalid duration {_shown(text)} (use {ACCEPTED})"


__all__ = [
    "ACCEPTED",
    "MAX_MS",
    "UNITS",
    "duration_seconds",
    "format_whole",
    "parse_duration",
    "parse_duration_ms",
]
