"""Parse exposition text in tests, with Prometheus's own parser rules kept simple:
one sample per line, labels in braces."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]

# The core device metrics every simulated device exports, whatever its vendor.
CORE_METRICS: tuple[str, ...] = (
    "accel_device_info",
    "accel_up",
    "accel_utilization_ratio",
    "accel_memory_used_bytes",
    "accel_memory_total_bytes",
    "accel_memory_bandwidth_utilization_ratio",
    "accel_ecc_errors_total",
    "accel_fault_events_total",
    "accel_temperature_celsius",
    "accel_power_watts",
)


def parse(text: str) -> list[Sample]:
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None if absent."""
    found = [v for n, lb, v in parse(text) if n == name and labels.items() <= lb.items()]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
    return found[0] if found else None


def total(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels``; None if
    there is none. For a family whose series split further than the test asks, as
    the fault counters do by action class."""
    found = [v for n, lb, v in parse(text) if n == name and labels.items() <= lb.items()]
    return sum(found) if found else None


def names(text: str) -> set[str]:
    return {n for n, _, _ in parse(text)}


def stable(text: str) -> str:
    """The exposition without the poll duration, which no clock injection can fix."""
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if "accel_exporter_poll_duration_seconds" not in line
    )


def masked(text: str) -> str:
    """The exposition with the poll duration's value masked (``<duration>``): for the
    golden files that show the series is there, which ``stable`` leaves out."""
    return re.sub(
        r"^(accel_exporter_poll_duration_seconds\{[^}]*\}) \S+$",
        r"\1 <duration>",
        text,
        flags=re.M,
    )
