"""The Prometheus text format's small rules, for everything that writes it: the
exporter's rendering, the controller's own ``/metrics`` and the cluster-state
series."""

from __future__ import annotations

import math


def escape(value: str) -> str:
    """A label value as the text format writes it: backslash, newline and double
    quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    """A sample value: whole numbers without a fraction, NaN and ±Inf spelt as
    Prometheus spells them, anything else exactly (``repr``)."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


__all__ = ["escape", "format_value"]
