"""A service's own metrics (the controller's, the node agent's) through
``prometheus-client``: catalogue entries, the families they become, and a collector
that renders one status snapshot.

Why this shape:

* **A catalogue, not names spelled at the point of use.** Each service declares
  its series once (``Metric``: name, type, HELP, labels, in the order its code
  gives label values); the collector, the rule checker, the docs tests and the
  ``promtool`` tests read the same entries. An entry that breaks the conventions
  the exporter's catalogue keeps (a counter without ``_total``, a name or label
  that is not ``[a-zA-Z_:][a-zA-Z0-9_:]*``, an empty HELP) is refused when the
  module that declares it is imported, with ``CatalogueError`` saying which entry
  and what to write instead: a typo never reaches a scrape.
* **A snapshot, then families.** client_python's custom collectors yield
  ``GaugeMetricFamily``/``CounterMetricFamily`` from data they already hold; here
  that data is a frozen snapshot that the service copies from its state in one
  go (``read``), so a scrape sees one instant and changes nothing: no alert is
  expired, no counter is reset, however often ``/metrics`` is read.
* **Empty families are left out**, as before and as the Go client's registry does,
  so a catalogue can be declared whole while a controller without informers says
  nothing about watches. ``describe`` yields the catalogue without calling
  ``read``, so registering the collector never touches the service's state.
* The text is ``prometheus_client.generate_latest``'s: the text format 0.0.4 with
  labels in name order and values as the Go client spells them (shortest digits
  that read back to the same float64; ``1.796123456789e+09``). The exporter keeps
  its own cached writer (``accel_common/exposition.py``: rendered once per poll,
  off the event loop); ``tests/exporter/test_exposition_compat.py`` holds the two
  to the same bytes apart from label order and the spelling of a value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import Metric as Family

MetricType = Literal["counter", "gauge"]

# What /metrics answers with: the text format 0.0.4, which generate_latest writes.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Sample names client_python files under a family of their own (OpenMetrics'
# _created, gauge histograms' _gsum/_gcount): a gauge so named would be split.
_RESERVED_SUFFIXES = ("_created", "_gsum", "_gcount")


class CatalogueError(ValueError):
    """A catalogue entry, or a sample handed to the collector, that breaks the
    rules in the module docstring; the message names the metric and the fix."""


@dataclass(frozen=True)
class Metric:
    """One series family of a service's catalogue. ``labels`` is the order in
    which the code gives label values (the text lists them by name)."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise CatalogueError(f"metric {self.name!r}: " + "; ".join(problems))


def _problems(m: Metric) -> list[str]:
    out: list[str] = []
    if not _NAME.match(m.name):
        out.append("the name must match [a-zA-Z_:][a-zA-Z0-9_:]* (snake_case, base units)")
    if m.type not in ("counter", "gauge"):
        out.append(f"type {m.type!r} is not counter or gauge")
    if m.type == "counter" and not m.name.endswith("_total"):
        out.append("a counter's name ends in _total (promtool and client_python expect it)")
    if m.type == "gauge" and m.name.endswith(_RESERVED_SUFFIXES):
        out.append(f"a gauge's name may not end in {' or '.join(_RESERVED_SUFFIXES)}")
    if not m.help.strip():
        out.append("HELP is empty: say what the series counts or measures")
    for label in m.labels:
        if not _LABEL.match(label) or label.startswith("__"):
            out.append(f"label {label!r} must match [a-zA-Z_][a-zA-Z0-9_]* without a leading __")
    if len(set(m.labels)) != len(m.labels):
        out.append(f"labels {list(m.labels)} name one label twice")
    return out


def check_catalogue(catalogue: Sequence[Metric]) -> tuple[Metric, ...]:
    """The catalogue as a tuple, refused (``CatalogueError``) when two entries share
    a name: the second would shadow the first on every scrape."""
    seen: set[str] = set()
    for m in catalogue:
        if m.name in seen:
            raise CatalogueError(f"metric {m.name!r} is declared twice in one catalogue")
        seen.add(m.name)
    return tuple(catalogue)


# A sample: its label values in the metric's label order, and its value.
Sample = tuple[Sequence[str], float]


def family(metric: Metric, samples: Iterable[Sample] = ()) -> Family:
    """The prometheus-client family of ``metric`` with ``samples``."""
    fam: GaugeMetricFamily | CounterMetricFamily
    if metric.type == "counter":
        fam = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
    else:
        fam = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
    for values, value in samples:
        if len(values) != len(metric.labels):
            # add_metric would pair them short without a word.
            raise CatalogueError(
                f"metric {metric.name!r}: {len(values)} label values {list(values)} for "
                f"{len(metric.labels)} labels {list(metric.labels)}"
            )
        fam.add_metric(list(values), float(value))
    return fam


S = TypeVar("S")
Families = Iterable[tuple[Metric, Iterable[Sample]]]


class SnapshotCollector(Generic[S]):
    """A prometheus-client collector (module docstring): each ``collect`` calls
    ``read`` once for a snapshot, and ``samples(snapshot)`` says which samples each
    catalogue metric has; families come out in catalogue order, empty ones left
    out."""

    def __init__(
        self,
        catalogue: Sequence[Metric],
        read: Callable[[], S],
        samples: Callable[[S], Families],
    ) -> None:
        self.catalogue = check_catalogue(catalogue)
        self.read = read
        self.samples = samples
        self._known = {m.name: m for m in self.catalogue}

    def describe(self) -> Iterator[Family]:
        """The catalogue's families without samples: what registering reads, so it
        never calls ``read``."""
        for m in self.catalogue:
            yield family(m)

    def collect(self) -> Iterator[Family]:
        held: dict[str, list[Sample]] = {}
        for metric, rows in self.samples(self.read()):
            if self._known.get(metric.name) != metric:
                raise CatalogueError(
                    f"metric {metric.name!r} is not in this collector's catalogue: declare it "
                    "there, where its name, type and HELP live"
                )
            held.setdefault(metric.name, []).extend(rows)
        for m in self.catalogue:
            found = held.get(m.name)
            if found:
                yield family(m, found)


def registry_of(collector: SnapshotCollector[S]) -> CollectorRegistry:
    """A registry of its own holding ``collector`` (not client_python's global one:
    two controllers in one test process must not see each other's series)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry's exposition, as ``/metrics`` serves it."""
    return generate_latest(registry)


def render_snapshot(
    catalogue: Sequence[Metric], snapshot: S, samples: Callable[[S], Families]
) -> str:
    """One snapshot's exposition as text: a collector over it, in a registry of its
    own, rendered once."""
    collector = SnapshotCollector(catalogue, lambda: snapshot, samples)
    return render(registry_of(collector)).decode("utf-8")


__all__ = [
    "CONTENT_TYPE",
    "CatalogueError",
    "Families",
    "Metric",
    "MetricType",
    "Sample",
    "SnapshotCollector",
    "check_catalogue",
    "family",
    "registry_of",
    "render",
    "render_snapshot",
]
