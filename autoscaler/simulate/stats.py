"""Intervals over seeds: the mean of a figure across seeds with a 95% interval,
and the paired difference of two arms run on the same seeds.

The interval is Student's t on the per-seed values: ``mean ± t(0.975, n-1) * s /
sqrt(n)``, with ``s`` the sample standard deviation. Seeds are independent draws
of the same scenario (arrivals, jobs and faults are each seeded from the seed), so
the per-seed figures are independent; n is small (8 to 32 seeds) and the
variance unknown, which is the case Student's t is for. A paired comparison takes
the per-seed differences ``B - A`` (same seed: same workload, same faults) and
puts the same interval on their mean, which is narrower than comparing two
unpaired means whenever the two arms move together across seeds.

The t quantile is computed here (the regularized incomplete beta function by its
continued fraction, inverted by bisection) rather than taken from scipy, which
the project does not otherwise need.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95

# Summary keys whose nested counts are 0 where a run has none (a fault kind, an
# action, a restart count that one seed never saw); the table in results.py
# reads them the same way. Other nested figures (a kind's time to remediate)
# are absent where there was nothing to measure, and an absent figure is left
# out of that seed's values rather than counted as 0.
COUNT_KEYS = frozenset(
    {
        "actions",
        "actions_by_outcome",
        "restarts_per_job",
        "faults_closed_by",
        "faults_closed_by_vendor",
    }
)
# The machine's time, not the simulated fleet's: it differs between two runs of
# the same rules on the same seed, so it is kept per run but not aggregated.
NOT_AGGREGATED = frozenset({"wall_seconds"})


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function
    (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``p`` in
    (0.5, 1)), to about 1e-12."""
    if not 0.5 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, not p={p}, df={df}")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-13 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its two-sided interval at ``CONFIDENCE``
    (``half`` is None with one seed: one value has no spread to measure)."""

    mean: float
    half: float | None
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        return None if self.half is None else self.mean + self.half

    @property
    def significant(self) -> bool:
        """The interval excludes 0 (for a difference: the arms differ)."""
        return self.half is not None and (self.mean - self.half > 0 or self.mean + self.half < 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "mean": _round(self.mean),
            "low": None if self.low is None else _round(self.low),
            "high": None if self.high is None else _round(self.high),
            "n": self.n,
        }


def _round(v: float) -> float:
    return float(f"{v:.6g}")


def interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` with its Student t interval."""
    n = len(values)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, None, 1)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile(0.5 + CONFIDENCE / 2.0, n - 1) * math.sqrt(var / n)
    return Interval(mean, half, n)


def figures(section: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """A summary section's numeric figures, nested ones by dotted name
    (``queue_wait_seconds.p50``), bar the ``NOT_AGGREGATED`` ones."""
    out: dict[str, float] = {}
    for key, value in section.items():
        name = f"{prefix}{key}"
        if not prefix and key in NOT_AGGREGATED:
            continue
        if isinstance(value, Mapping):
            out.update(figures(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def names_of(runs: Sequence[Mapping[str, float]]) -> list[str]:
    """Every figure any run has, in first-seen order (the summary's order)."""
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(run))
    return list(seen)


def _value(run: Mapping[str, float], name: str) -> float | None:
    if name in run:
        return run[name]
    return 0.0 if name.split(".", 1)[0] in COUNT_KEYS else None


def across(
    runs: Sequence[Mapping[str, float]], names: Sequence[str] | None = None
) -> dict[str, Interval]:
    """Each figure's interval over the runs (one per seed) that have it: of
    ``names`` where given (a count no run had is 0 throughout), else of every
    figure the runs have."""
    out: dict[str, Interval] = {}
    for name in names_of(runs) if names is None else names:
        values = [v for run in runs if (v := _value(run, name)) is not None]
        if values:
            out[name] = interval(values)
    return out


def paired(
    a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]]
) -> dict[str, Interval]:
    """Each figure's ``B - A`` over the seeds (``a[i]`` and ``b[i]`` ran the same
    seed) where both arms have it."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need as many of A as of B, not {len(a)} and {len(b)}")
    out: dict[str, Interval] = {}
    for name in names_of([*a, *b]):
        diffs = [
            vb - va
            for ra, rb in zip(a, b, strict=True)
            if (va := _value(ra, name)) is not None and (vb := _value(rb, name)) is not None
        ]
        if diffs:
            out[name] = interval(diffs)
    return out


__all__ = [
    "CONFIDENCE",
    "Interval",
    "across",
    "figures",
    "interval",
    "names_of",
    "paired",
    "t_cdf",
    "t_quantile",
]
