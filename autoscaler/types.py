"""Query results shared by the sources, the built-in evaluator and the engine.

``Unknown`` is a first-class result, not an exception and never an empty vector
read as zero: a failed query, a timeout or an empty answer is "we do not know",
and the engine neither acts nor undoes an action on it (KEDA #3065 read an empty
result as 0 and scaled on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """The canonical, hashable form of a label set: sorted (name, value) pairs."""
    return tuple(sorted(mapping.items()))


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector. ``labels`` includes ``__name__`` when the
    series still has a metric name (PromQL drops it after most functions)."""

    labels: Labels
    value: float
    timestamp: float

    def get(self, name: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == name:
                return v
        return default

    def as_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class Vector:
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Scalar:
    value: float
    timestamp: float


@dataclass(frozen=True)
class Series:
    """A range-vector element: one series and its (timestamp, value) points."""

    labels: Labels
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Matrix:
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Unknown:
    """No trustworthy answer this cycle, and why (shown in logs and the API)."""

    reason: str


QueryResult = Vector | Scalar | Unknown
